package auth

import (
	"math"
	"sync"
	"time"
)

// throttle holds a token bucket per key: an attempt takes a token before it
// is evaluated, tokens come back at a steady rate, and a key with no token
// left is refused until one comes back. A successful attempt gives its token
// back, so only failures cost anything. Taking is atomic: N parallel
// attempts on a key with a burst of B let at most B through.
type throttle struct {
	burst float64
	every time.Duration // one token comes back per every

	mu      sync.Mutex // guards buckets
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxThrottleKeys bounds memory; full buckets are dropped first.
const maxThrottleKeys = 100_000

func newThrottle(burst int, every time.Duration) *throttle {
	return &throttle{burst: float64(burst), every: every, buckets: map[string]*bucket{}}
}

func (t *throttle) refill(b *bucket, now time.Time) {
	if now.After(b.last) {
		b.tokens = math.Min(t.burst, b.tokens+float64(now.Sub(b.last))/float64(t.every))
		b.last = now
	}
}

// take takes one token for key. It returns 0 when it did, or how long key
// must wait for its next token when there is none (and takes nothing).
func (t *throttle) take(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.buckets[key]
	if !ok {
		if len(t.buckets) >= maxThrottleKeys {
			t.sweep(now)
		}
		b = &bucket{tokens: t.burst, last: now}
		t.buckets[key] = b
	}
	t.refill(b, now)
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(t.every))
	}
	b.tokens--
	return 0
}

// giveBack returns a token taken by take, for an attempt that succeeded or
// was never evaluated.
func (t *throttle) giveBack(key string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.buckets[key]
	if !ok {
		return // swept: the bucket was full anyway
	}
	t.refill(b, now)
	b.tokens = math.Min(t.burst, b.tokens+1)
}

// sweep drops buckets that have refilled; called with mu held.
func (t *throttle) sweep(now time.Time) {
	for k, b := range t.buckets {
		t.refill(b, now)
		if b.tokens >= t.burst {
			delete(t.buckets, k)
		}
	}
}
