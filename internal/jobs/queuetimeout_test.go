package jobs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// onlineServer stores a server whose agent was last heard from at seen.
func onlineServer(t *testing.T, st *store.Store, name string, seen time.Time) string {
	t.Helper()
	ctx := context.Background()
	srv := servers.Server{ID: ids.New(ids.Server), Name: name, Tags: []string{}, Status: servers.Pending, CreatedAt: seen, UpdatedAt: seen}
	if err := st.CreateServer(ctx, srv, ids.Hash(ids.New("ept")), seen.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.TouchServer(ctx, srv.ID, "1.0.0", nil, seen); err != nil {
		t.Fatal(err)
	}
	return srv.ID
}

// TestQueuedJobsEndWithoutAnAgent: a claim made just before the server's
// agent froze is queued again when its lease lapses, and once the server
// has been offline for longer than the lease, the reapers of several
// control planes (racing each other) fail it with server_offline: once,
// with its completion hook run once, and the readers waiting for it woken.
// The frozen agent, when it wakes up, is refused the job's secrets. A job
// queued for a server whose agent never claims it fails with
// queue_timed_out after its type's queue timeout, hook included.
func TestQueuedJobsEndWithoutAnAgent(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(time.Now().UTC())
		bus := &localBus{}
		rs := replicasOn(st, c, 3, bus)
		bus.rs = rs
		var hooks atomic.Int32
		for _, r := range rs {
			r.Register(agentproto.AgentPing, pingSpec(func(ctx context.Context, j jobs.Job) error {
				if j.Status != jobs.Failed || j.Error == nil {
					t.Errorf("hook of job %s: %s %v, want failed", j.ID, j.Status, j.Error)
				}
				hooks.Add(1)
				return nil
			}))
		}
		expire := func() int {
			t.Helper()
			var wg sync.WaitGroup
			var n atomic.Int32
			for _, r := range []*jobs.Service{rs[0], rs[1], rs[2], rs[1]} {
				wg.Go(func() {
					k, err := r.Expire(ctx)
					if err != nil {
						t.Error(err)
					}
					n.Add(int32(k))
				})
			}
			wg.Wait()
			return int(n.Load())
		}

		frozen := onlineServer(t, st, "frozen", c.Now())
		j := mustEnqueue(t, rs[0], frozen)
		mustClaim(t, rs[0], frozen)
		waited := make(chan jobs.Job, 1)
		go func() {
			got, _, err := rs[2].Wait(ctx, j.ID, jobs.MaxWait, jobs.AdminReader)
			if err != nil {
				t.Error(err)
			}
			waited <- got
		}()
		c.Advance(jobs.DefaultLease + time.Second)
		if n := expire(); n != 0 {
			t.Fatalf("%d jobs failed when the lease lapsed; the claim never acknowledged should be queued again", n)
		}
		if got, _, _ := rs[1].Read(ctx, j.ID, jobs.AdminReader); got.Status != jobs.Queued || got.Requeues != 1 {
			t.Fatalf("after the lease lapsed: %s, %d requeues; want queued again", got.Status, got.Requeues)
		}
		c.Advance(jobs.OfflineAfter)
		if n := expire(); n != 1 {
			t.Fatalf("%d jobs failed once the server was offline past the lease, want 1", n)
		}
		if n := hooks.Load(); n != 1 {
			t.Fatalf("completion hook ran %d times, want once", n)
		}
		select {
		case got := <-waited:
			if got.Status != jobs.Failed || got.ErrorClass == nil || *got.ErrorClass != jobs.ErrServerOffline {
				t.Fatalf("the waiting reader got %s %v, want failed as %s", got.Status, got.ErrorClass, jobs.ErrServerOffline)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the reader waiting for the job was not woken when it failed")
		}
		if _, err := rs[0].Secrets(ctx, frozen, j.ID); !fault.Is(err, fault.Forbidden) {
			t.Fatalf("secrets of the failed job for the agent that wakes up: %v, want forbidden", err)
		}
		if _, ok, err := rs[0].Claim(ctx, frozen, time.Millisecond); err != nil || ok {
			t.Fatalf("a failed job was handed out again: %v %v", ok, err)
		}

		silent := onlineServer(t, st, "silent", c.Now())
		q := mustEnqueue(t, rs[1], silent)
		spec, _ := rs[1].Spec(agentproto.JobAgentPing)
		c.Advance(spec.QueueTimeout() - time.Second)
		if n := expire(); n != 0 {
			t.Fatalf("%d jobs failed before the queue timeout", n)
		}
		c.Advance(2 * time.Second)
		if n := expire(); n != 1 {
			t.Fatalf("%d jobs failed past the queue timeout, want 1", n)
		}
		if got, _, _ := rs[2].Read(ctx, q.ID, jobs.AdminReader); got.Status != jobs.Failed || *got.Error != jobs.ErrQueueTimedOut {
			t.Fatalf("job past its queue timeout: %s %v, want failed %s", got.Status, got.Error, jobs.ErrQueueTimedOut)
		}
		if n := hooks.Load(); n != 2 {
			t.Fatalf("completion hooks ran %d times, want 2", n)
		}
	})
}
