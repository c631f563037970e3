package auth

import (
	"math"
	"sync"
	"time"
)

// throttle counts failures per key in token buckets: each failure takes a
// token, tokens come back at a steady rate, and a key with no token left is
// refused until one comes back. Successes cost nothing.
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

// wait returns how long key must wait before its next attempt; 0 means now.
func (t *throttle) wait(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.buckets[key]
	if !ok {
		return 0
	}
	t.refill(b, now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(t.every))
}

// fail records one failure for key.
func (t *throttle) fail(key string, now time.Time) {
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
	b.tokens = math.Max(0, b.tokens-1)
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
