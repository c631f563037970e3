package auth

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestThrottleBurstThenRate(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(5, time.Minute)
	for i := 1; i <= 5; i++ {
		if got, want := th.take("k", t0), time.Duration(0); got != want {
			t.Fatalf("take %d: got wait %v, want %v", i, got, want)
		}
	}
	for _, c := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{0, time.Minute},
		{15 * time.Second, 45 * time.Second},
		{30 * time.Second, 30 * time.Second},
	} {
		if got, want := th.take("k", t0.Add(c.after)), c.want; got != want {
			t.Fatalf("take %v after the fifth: got wait %v, want %v", c.after, got, want)
		}
	}
	// A refused take takes nothing: a minute later there is a token.
	if got, want := th.take("k", t0.Add(time.Minute)), time.Duration(0); got != want {
		t.Fatalf("take a minute later: got wait %v, want %v", got, want)
	}
	// Other keys are independent.
	if got, want := th.take("other", t0), time.Duration(0); got != want {
		t.Fatalf("other key: got %v, want %v", got, want)
	}
}

func TestThrottleGiveBack(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(2, time.Minute)
	// Successes give their token back: any number of them cost nothing.
	for i := range 10 {
		if got, want := th.take("k", t0), time.Duration(0); got != want {
			t.Fatalf("take %d: got wait %v, want %v", i, got, want)
		}
		th.giveBack("k", t0)
	}
	th.take("k", t0)
	th.take("k", t0)
	if got, want := th.take("k", t0), time.Minute; got != want {
		t.Fatalf("take after two kept tokens: got wait %v, want %v", got, want)
	}
	// Giving back never fills a bucket beyond its burst.
	for range 5 {
		th.giveBack("k", t0)
	}
	th.take("k", t0)
	th.take("k", t0)
	if got, want := th.take("k", t0), time.Minute; got != want {
		t.Fatalf("take after extra give-backs: got wait %v, want %v", got, want)
	}
	th.giveBack("unknown", t0) // nothing to give back to; no bucket appears
	th.mu.Lock()
	_, ok := th.buckets["unknown"]
	th.mu.Unlock()
	if ok {
		t.Fatal("giving back to an unknown key made a bucket")
	}
}

func TestThrottleTakeIsAtomic(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(5, time.Minute)
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if th.take("k", t0) == 0 {
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	if got, want := taken.Load(), int64(5); got != want {
		t.Fatalf("parallel takes granted: got %d, want %d", got, want)
	}
}

func TestThrottleRefillIsCapped(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(3, time.Minute)
	for range 3 {
		th.take("k", t0)
	}
	// A day later the bucket holds 3 tokens again, not 1440.
	later := t0.Add(24 * time.Hour)
	for range 3 {
		if got, want := th.take("k", later), time.Duration(0); got != want {
			t.Fatalf("take after a day: got wait %v, want %v", got, want)
		}
	}
	if got, want := th.take("k", later), time.Minute; got != want {
		t.Fatalf("after a refilled burst: got %v, want %v", got, want)
	}
}

func TestThrottleClockGoingBackwards(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(1, time.Minute)
	th.take("k", t0)
	if got, want := th.take("k", t0.Add(-time.Hour)), time.Minute; got != want {
		t.Fatalf("earlier time: got %v, want %v", got, want)
	}
	if got, want := th.take("k", t0.Add(20*time.Second)), 40*time.Second; got != want {
		t.Fatalf("later time: got %v, want %v", got, want)
	}
}

func TestThrottleSweepDropsFullBuckets(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(5, time.Minute)
	th.take("old", t0)
	th.take("recent", t0.Add(5*time.Minute))
	th.mu.Lock()
	th.sweep(t0.Add(5 * time.Minute))
	n := len(th.buckets)
	_, kept := th.buckets["recent"]
	th.mu.Unlock()
	if got, want := n, 1; got != want {
		t.Fatalf("buckets after sweep: got %d, want %d", got, want)
	}
	if got, want := kept, true; got != want {
		t.Fatalf("recent bucket kept: got %v, want %v", got, want)
	}
}

// TestHashQueueBounded: with every slot busy and the line full, the next
// caller is refused at once with 429 and Retry-After instead of waiting.
func TestHashQueueBounded(t *testing.T) {
	q := newHashQueue(2, 3)
	ctx := context.Background()
	for i := range 2 {
		if err := q.acquire(ctx); err != nil {
			t.Fatalf("acquire slot %d: %v", i, err)
		}
	}
	// Three callers wait in line.
	acquired := make(chan error, 3)
	for range 3 {
		go func() { acquired <- q.acquire(ctx) }()
	}
	testlab.Eventually(t, 10*time.Second, "three callers waiting in line", func() bool { return q.waiting.Load() == 3 })
	err := q.acquire(ctx)
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.TooManyRequests || fe.Code != CodeSignInBusy || fe.RetryAfter <= 0 {
		t.Fatalf("acquire with a full line: got %v, want a too-many-requests %s fault with Retry-After", err, CodeSignInBusy)
	}
	if got, want := q.waiting.Load(), int64(3); got != want {
		t.Fatalf("waiting after a refusal: got %d, want %d", got, want)
	}
	// Each release lets one waiting caller in.
	for i := range 3 {
		q.release()
		if err := <-acquired; err != nil {
			t.Fatalf("waiting caller %d: %v", i, err)
		}
	}
	// A cancelled wait gives up its place.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- q.acquire(cctx) }()
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled acquire: got %v, want %v", err, context.Canceled)
	}
	if got, want := q.waiting.Load(), int64(0); got != want {
		t.Fatalf("waiting after a cancelled wait: got %d, want %d", got, want)
	}
}
