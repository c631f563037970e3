package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"time"
)

// Throttles keeps sign-in throttle buckets in the store, so that every
// control plane sharing it counts the same attempts: a client that moves
// to another replica finds its bucket as it left it.
type Throttles interface {
	// TakeThrottle atomically takes one token from the bucket key (burst
	// at most, one back per every); it returns 0 when it took one, or the
	// wait for the next token when there is none (taking nothing).
	TakeThrottle(ctx context.Context, key string, burst int, every time.Duration, now time.Time) (time.Duration, error)
	// ReturnThrottle gives a token back, never beyond burst.
	ReturnThrottle(ctx context.Context, key string, burst int) error
	// ResetThrottle deletes the bucket key, which is then full; it
	// reports whether there was one (a failure within ThrottleIdle).
	ResetThrottle(ctx context.Context, key string) (bool, error)
	// PruneThrottles deletes buckets unused since before.
	PruneThrottles(ctx context.Context, before time.Time) (int, error)
}

// ThrottleIdle is how long after its last use every bucket is full again
// (and can be pruned): longer than any throttle's burst takes to refill.
const ThrottleIdle = time.Hour

// throttle is one kind of token bucket (per account and address, or per
// address): an attempt takes a token before it is evaluated, tokens come
// back at a steady rate, and a key with no token left is refused until
// one comes back. A successful attempt gives its token back, so only
// failures cost anything. Taking is atomic in the store: N parallel
// attempts on a key with a burst of B let at most B through, whichever
// control planes they reach.
type throttle struct {
	store Throttles
	kind  string // keeps the kinds' keys apart
	burst int
	every time.Duration // one token comes back per every
}

// key names the bucket of k: a hash, so the store keeps no addresses or
// e-mail addresses for it.
func (t *throttle) key(k string) string {
	h := sha256.Sum256([]byte(t.kind + "\x00" + k))
	return hex.EncodeToString(h[:16])
}

// take takes one token for k. It returns 0 when it did, or how long k
// must wait for its next token when there is none (and takes nothing).
func (t *throttle) take(ctx context.Context, k string, now time.Time) (time.Duration, error) {
	return t.store.TakeThrottle(ctx, t.key(k), t.burst, t.every, now)
}

// giveBack returns a token taken by take, for an attempt that succeeded or
// was never evaluated.
func (t *throttle) giveBack(ctx context.Context, k string) error {
	return t.store.ReturnThrottle(ctx, t.key(k), t.burst)
}

// reset fills k's bucket again; it reports whether k failed within
// ThrottleIdle.
func (t *throttle) reset(ctx context.Context, k string) (bool, error) {
	return t.store.ResetThrottle(ctx, t.key(k))
}

// claim is one token a sign-in attempt takes: from the bucket key of a
// throttle.
type claim struct {
	t   *throttle
	key string
}

// throttledAddress is what the address throttles count an address as: an
// IPv4 address by itself, an IPv6 address by its /64, the block one
// subscriber or machine is usually given whole.
func throttledAddress(ip string) string {
	a := net.ParseIP(ip)
	if a == nil || a.To4() != nil {
		return ip
	}
	return (&net.IPNet{IP: a.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}
