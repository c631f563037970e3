package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func take(t *testing.T, s *store.Store, key string, burst int, at time.Time) time.Duration {
	t.Helper()
	wait, err := s.TakeThrottle(context.Background(), key, burst, time.Minute, at)
	if err != nil {
		t.Fatal(err)
	}
	return wait
}

// TestThrottleBuckets: a burst, then one token per interval; a refused
// take takes nothing; keys are independent; a refill is capped at the
// burst; a clock going backwards refills nothing; given-back tokens never
// exceed the burst; idle buckets are pruned.
func TestThrottleBuckets(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for i := 1; i <= 5; i++ {
			if got := take(t, s, "k", 5, t0); got != 0 {
				t.Fatalf("take %d: got wait %v, want none", i, got)
			}
		}
		for _, c := range []struct{ after, want time.Duration }{
			{0, time.Minute}, {15 * time.Second, 45 * time.Second}, {30 * time.Second, 30 * time.Second},
		} {
			if got := take(t, s, "k", 5, t0.Add(c.after)); got != c.want {
				t.Fatalf("take %v after the fifth: got wait %v, want %v", c.after, got, c.want)
			}
		}
		if got := take(t, s, "k", 5, t0.Add(time.Minute)); got != 0 {
			t.Fatalf("take a minute later: got wait %v, want none", got)
		}
		if got := take(t, s, "other", 5, t0); got != 0 {
			t.Fatalf("other key: got wait %v, want none", got)
		}

		// Capped refill: a day later, 3 tokens, not 1440.
		for range 3 {
			take(t, s, "cap", 3, t0)
		}
		later := t0.Add(24 * time.Hour)
		for range 3 {
			if got := take(t, s, "cap", 3, later); got != 0 {
				t.Fatalf("take after a day: got wait %v", got)
			}
		}
		if got := take(t, s, "cap", 3, later); got != time.Minute {
			t.Fatalf("after a refilled burst: got %v, want a minute", got)
		}

		// A clock going backwards.
		take(t, s, "back", 1, t0)
		if got := take(t, s, "back", 1, t0.Add(-time.Hour)); got != time.Minute {
			t.Fatalf("earlier time: got %v, want a minute", got)
		}
		if got := take(t, s, "back", 1, t0.Add(20*time.Second)); got != 40*time.Second {
			t.Fatalf("later time: got %v, want 40s", got)
		}

		// Giving back: successes cost nothing, and never fill beyond the burst.
		for range 10 {
			if got := take(t, s, "give", 2, t0); got != 0 {
				t.Fatalf("take with give-backs: got wait %v", got)
			}
			if err := s.ReturnThrottle(ctx, "give", 2); err != nil {
				t.Fatal(err)
			}
		}
		for range 5 {
			if err := s.ReturnThrottle(ctx, "give", 2); err != nil {
				t.Fatal(err)
			}
		}
		take(t, s, "give", 2, t0)
		take(t, s, "give", 2, t0)
		if got := take(t, s, "give", 2, t0); got != time.Minute {
			t.Fatalf("take after extra give-backs: got wait %v, want a minute", got)
		}

		// Pruning drops the idle buckets only.
		take(t, s, "recent", 5, t0.Add(2*time.Hour))
		n, err := s.PruneThrottles(ctx, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Fatalf("pruned %d buckets, want the 4 idle since before the cut (k, other, back, give)", n)
		}
		take(t, s, "recent", 5, t0.Add(2*time.Hour))
		for range 3 {
			take(t, s, "recent", 5, t0.Add(2*time.Hour))
		}
		if got := take(t, s, "recent", 5, t0.Add(2*time.Hour)); got != time.Minute {
			t.Fatalf("a recent bucket was pruned: got wait %v after 5 takes, want a minute", got)
		}
	})
}

// TestThrottleSharedAndAtomic: 200 parallel takes on a bucket of 5,
// spread over two store handles on one database (two control planes),
// grant exactly 5.
func TestThrottleSharedAndAtomic(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			url := storetest.DatabaseURL(t, d)
			dir := t.TempDir()
			var handles []*store.Store
			for i := range 2 {
				s, err := store.Open(context.Background(), url, dir)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				if i == 0 {
					if _, err := s.Migrate(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				handles = append(handles, s)
			}
			var granted atomic.Int64
			var wg sync.WaitGroup
			for i := range 200 {
				wg.Go(func() {
					wait, err := handles[i%2].TakeThrottle(context.Background(), "k", 5, time.Minute, t0)
					if err != nil {
						t.Error(err)
					}
					if wait == 0 && err == nil {
						granted.Add(1)
					}
				})
			}
			wg.Wait()
			if got, want := granted.Load(), int64(5); got != want {
				t.Fatalf("parallel takes granted over two control planes: got %d, want %d", got, want)
			}
		})
	}
}
