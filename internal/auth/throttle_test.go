package auth

import (
	"testing"
	"time"
)

func TestThrottleBurstThenRate(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(5, time.Minute)
	if got, want := th.wait("k", t0), time.Duration(0); got != want {
		t.Fatalf("unknown key: got %v, want %v", got, want)
	}
	for i := 1; i <= 4; i++ {
		th.fail("k", t0)
		if got, want := th.wait("k", t0), time.Duration(0); got != want {
			t.Fatalf("after %d failures: got %v, want %v", i, got, want)
		}
	}
	th.fail("k", t0)
	for _, c := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{0, time.Minute},
		{15 * time.Second, 45 * time.Second},
		{30 * time.Second, 30 * time.Second},
		{time.Minute, 0},
		{time.Hour, 0},
	} {
		if got, want := th.wait("k", t0.Add(c.after)), c.want; got != want {
			t.Fatalf("wait %v after the fifth failure: got %v, want %v", c.after, got, want)
		}
	}
	// Other keys are independent.
	if got, want := th.wait("other", t0), time.Duration(0); got != want {
		t.Fatalf("other key: got %v, want %v", got, want)
	}
}

func TestThrottleRefillIsCapped(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(3, time.Minute)
	for range 3 {
		th.fail("k", t0)
	}
	// A day later the bucket holds 3 tokens again, not 1440.
	later := t0.Add(24 * time.Hour)
	for range 3 {
		th.fail("k", later)
	}
	if got, want := th.wait("k", later), time.Minute; got != want {
		t.Fatalf("after a refilled burst: got %v, want %v", got, want)
	}
	// One token back, one failure takes it again.
	th.fail("k", later.Add(time.Minute))
	if got, want := th.wait("k", later.Add(time.Minute)), time.Minute; got != want {
		t.Fatalf("after failing on the refilled token: got %v, want %v", got, want)
	}
}

func TestThrottleClockGoingBackwards(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(1, time.Minute)
	th.fail("k", t0)
	if got, want := th.wait("k", t0.Add(-time.Hour)), time.Minute; got != want {
		t.Fatalf("earlier time: got %v, want %v", got, want)
	}
	if got, want := th.wait("k", t0.Add(20*time.Second)), 40*time.Second; got != want {
		t.Fatalf("later time: got %v, want %v", got, want)
	}
}

func TestThrottleSweepDropsFullBuckets(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(5, time.Minute)
	th.fail("old", t0)
	th.fail("recent", t0.Add(5*time.Minute))
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
