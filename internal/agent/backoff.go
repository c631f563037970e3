package agent

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Default retry delays of every loop.
const (
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = 30 * time.Second
)

// Backoff computes exponential retry delays with full jitter: the n-th
// consecutive failure (from 0) waits a uniformly random duration in
// [0, min(Max, Min·2ⁿ)]. Reset after a success. Not safe for concurrent use;
// each loop owns one.
type Backoff struct {
	Min, Max time.Duration // zero: DefaultBackoffMin, DefaultBackoffMax
	attempt  int
}

// Ceiling returns the upper bound of the next delay.
func (b *Backoff) Ceiling() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi <= 0 {
		hi = DefaultBackoffMax
	}
	if hi < lo {
		hi = lo
	}
	c := lo
	for i := 0; i < b.attempt && c < hi; i++ {
		c *= 2
	}
	return min(c, hi)
}

// Next returns the delay before the next retry and counts a failure.
func (b *Backoff) Next() time.Duration {
	c := b.Ceiling()
	if b.attempt < 64 {
		b.attempt++
	}
	return time.Duration(rand.Int64N(int64(c) + 1))
}

// Attempts is the number of failures since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Reset starts over after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits for d or until ctx is done, and reports whether the full
// duration elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// MaxRetryAfter bounds how long a reply's Retry-After makes a call wait:
// the control plane's longest, for a full hour of metrics into an empty
// rate-limit bucket, is 12 minutes.
const MaxRetryAfter = 15 * time.Minute

// RetryDelay is the delay before retrying after err: the next backoff, but
// at least the server's Retry-After (up to MaxRetryAfter). A retry sooner
// than the control plane asked for would only be refused again: a rate
// limited agent waits as long as it is told, whatever its backoff's
// maximum.
func RetryDelay(b *Backoff, err error) time.Duration {
	d := b.Next()
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > d {
		d = min(ae.RetryAfter, MaxRetryAfter)
	}
	return d
}

// RunLoop calls step until ctx is done. After a success it waits the
// duration step returned and resets the backoff; after an error it waits
// RetryDelay. It returns when ctx is done or step fails with ErrRevoked
// (the agent shuts down then); neither is logged as a failure. Every loop of
// the agent (heartbeat, claim, and later metrics or inventory) uses it.
func RunLoop(ctx context.Context, log *slog.Logger, name string, b *Backoff, step func(context.Context) (time.Duration, error)) {
	for ctx.Err() == nil {
		next, err := step(ctx)
		if ctx.Err() != nil || errors.Is(err, ErrRevoked) {
			return
		}
		if err != nil {
			d := RetryDelay(b, err)
			log.Warn(name+" failed", "loop", name, "err", err, "failures", b.Attempts(), "retry_in", d.Round(time.Millisecond).String())
			next = d
		} else {
			if b.Attempts() > 0 {
				log.Info(name+" recovered", "loop", name, "failures", b.Attempts())
			}
			b.Reset()
		}
		if !Sleep(ctx, next) {
			return
		}
	}
}
