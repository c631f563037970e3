package agentapi

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestLimiterBucket(t *testing.T) {
	clock := testlab.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var limits [numReports]Limit
	for r := range limits {
		limits[r] = Limit{Burst: 10, PerSecond: 2}
	}
	l := newLimiter(limits, clock.Now)
	if err := l.take("srv_a", ReportMetrics, 10); err != nil {
		t.Fatalf("a full bucket refused 10: %v", err)
	}
	err := l.take("srv_a", ReportMetrics, 3)
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.TooManyRequests || fe.Code != "agent-rate-limited" {
		t.Fatalf("an empty bucket answered %v, want too-many-requests", err)
	}
	if got, want := fe.RetryAfter, 1500*time.Millisecond; got != want {
		t.Fatalf("Retry-After %s, want %s (3 items at 2 a second)", got, want)
	}
	// Other kinds and other servers have buckets of their own.
	if err := l.take("srv_a", ReportEvents, 10); err != nil {
		t.Fatalf("events refused after metrics emptied their bucket: %v", err)
	}
	if err := l.take("srv_b", ReportMetrics, 10); err != nil {
		t.Fatalf("another server refused: %v", err)
	}
	// A refused take took nothing: after the wait it passes.
	clock.Advance(1500 * time.Millisecond)
	if err := l.take("srv_a", ReportMetrics, 3); err != nil {
		t.Fatalf("after Retry-After: %v", err)
	}
	// A report larger than the bucket costs the whole bucket, so it can
	// pass once the bucket is full.
	clock.Advance(time.Hour)
	if err := l.take("srv_a", ReportMetrics, 1000); err != nil {
		t.Fatalf("an oversized report on a full bucket: %v", err)
	}
	// Empty reports cost one.
	clock.Advance(time.Hour)
	for i := range 10 {
		if err := l.take("srv_a", ReportInventory, 0); err != nil {
			t.Fatalf("empty report %d: %v", i, err)
		}
	}
	if err := l.take("srv_a", ReportInventory, 0); err == nil {
		t.Fatal("the 11th empty report passed a bucket of 10")
	}
	// Buckets that filled up again are forgotten.
	clock.Advance(time.Hour)
	_ = l.take("srv_c", ReportMetrics, 1)
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d servers' buckets kept after an hour, want only the one just used", n)
	}
}

// Parallel takes never hand out more than the bucket holds.
func TestLimiterParallel(t *testing.T) {
	clock := testlab.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newLimiter(DefaultLimits, clock.Now)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.take("srv_a", ReportEvents, 100) == nil {
				ok.Add(100)
			}
		}()
	}
	wg.Wait()
	if got, want := ok.Load(), int64(DefaultLimits[ReportEvents].Burst); got != want {
		t.Fatalf("%d events let through at once, want the burst, %d", got, want)
	}
}
