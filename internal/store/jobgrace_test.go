package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// TestGraceLeasesMovesDeadlines: after a start, a running job whose
// deadline passed while the control plane was down is given the grace too,
// so that the agent's retried result (the job finished in time) lands
// before the job could be failed timed_out; past the grace it fails.
func TestGraceLeasesMovesDeadlines(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		t0 := time.Now().Truncate(time.Millisecond)
		srv := mustCreateServer(t, s, "web-1")
		j := mustInsertQueuedJob(t, s, srv, t0, t0.Add(time.Hour)) // 60 s timeout, 30 s lease
		mustClaim(t, s, srv, j.ID, t0)
		if err := s.AckJob(ctx, srv, j.ID, t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		// The control plane starts again 61 s after the claim: past the
		// deadline, with a grace of 30 s.
		start := t0.Add(61 * time.Second)
		n, err := s.GraceLeases(ctx, start.Add(30*time.Second))
		if err != nil || n != 1 {
			t.Fatalf("GraceLeases: %d, %v; want 1 job moved", n, err)
		}
		if expired, _, err := s.ExpireJobs(ctx, start.Add(29*time.Second), jobs.MaxRequeues); err != nil || len(expired) != 0 {
			t.Fatalf("expired within the grace: %+v, %v", expired, err)
		}
		expired, _, err := s.ExpireJobs(ctx, start.Add(31*time.Second), jobs.MaxRequeues)
		if err != nil || len(expired) != 1 || expired[0].ID != j.ID {
			t.Fatalf("expired after the grace: %+v, %v; want the job", expired, err)
		}
	})
}
