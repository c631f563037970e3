package jobs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// localBus carries the messages of control planes in one process, as
// PostgreSQL's NOTIFY does between processes.
type localBus struct{ rs []*jobs.Service }

func (b *localBus) Notify(_ context.Context, msg string) error {
	for _, r := range b.rs {
		r.Deliver(msg)
	}
	return nil
}

// TestLostClaimRequeued: a control plane commits a claim and dies before
// its agent reads the answer. When the lease lapses, the reapers of the
// other control planes (racing each other) queue the job again — once —
// instead of failing it; the agent's claim waiting on one of them is woken
// (whichever requeued it) and gets it,
// and its result ends the job, whose completion hook runs once. A result
// that comes while the job waits to be claimed again (the agent did have
// it) finishes it too. A claim that the agent acknowledged (it fetched
// the job's secrets) fails as agent_lost when its lease lapses.
func TestLostClaimRequeued(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(time.Now().UTC())
		bus := &localBus{}
		rs := replicasOn(st, c, 3, bus)
		bus.rs = rs
		var hooks atomic.Int32
		for _, r := range rs {
			r.Register(agentproto.AgentPing, pingSpec(func(ctx context.Context, j jobs.Job) error {
				hooks.Add(1)
				return nil
			}))
		}
		dying, a, b := rs[0], rs[1], rs[2]

		j := mustEnqueue(t, dying, "srv_1")
		if got := mustClaim(t, dying, "srv_1"); got.ID != j.ID {
			t.Fatalf("claimed %s, want %s", got.ID, j.ID)
		}
		// The answer is lost; the agent waits on another control plane.
		type claimed struct {
			j   jobs.Job
			ok  bool
			err error
		}
		waiting := make(chan claimed, 1)
		go func() {
			j, ok, err := a.Claim(ctx, "srv_1", 30*time.Second)
			waiting <- claimed{j, ok, err}
		}()
		c.Advance(jobs.DefaultLease + time.Second)
		var wg sync.WaitGroup
		var failed atomic.Int32
		for _, r := range []*jobs.Service{a, b, a, b} {
			wg.Go(func() {
				n, err := r.Expire(ctx)
				if err != nil {
					t.Error(err)
				}
				failed.Add(int32(n))
			})
		}
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Fatalf("%d jobs failed; the claim never acknowledged should be queued again", n)
		}
		got := <-waiting
		if got.err != nil || !got.ok || got.j.ID != j.ID {
			t.Fatalf("the agent's waiting claim: %s %v %v, want job %s", got.j.ID, got.ok, got.err, j.ID)
		}
		read, events, err := b.Read(ctx, j.ID, jobs.AdminReader)
		if err != nil {
			t.Fatal(err)
		}
		requeues := 0
		for _, e := range events {
			if e.Message == store.RequeuedMessage {
				requeues++
			}
		}
		if read.Status != jobs.Running || read.Requeues != 1 || requeues != 1 {
			t.Fatalf("job after the requeue and the new claim: %s, %d requeues, %d requeue events; want running, 1, 1", read.Status, read.Requeues, requeues)
		}
		if done, err := b.Complete(ctx, "srv_1", j.ID, succeeded); err != nil || done.Status != jobs.Succeeded {
			t.Fatalf("completion: %s %v, want succeeded", done.Status, err)
		}
		if n := hooks.Load(); n != 1 {
			t.Fatalf("completion hook ran %d times, want once", n)
		}

		// The agent had the requeued job after all: its result, coming
		// before the job is claimed again, ends it.
		k := mustEnqueue(t, dying, "srv_2")
		mustClaim(t, dying, "srv_2")
		c.Advance(jobs.DefaultLease + time.Second)
		if n, err := a.Expire(ctx); err != nil || n != 0 {
			t.Fatalf("expire: %d failed (%v), want 0", n, err)
		}
		if done, err := b.Complete(ctx, "srv_2", k.ID, succeeded); err != nil || done.Status != jobs.Succeeded {
			t.Fatalf("result of a requeued job: %s %v, want succeeded", done.Status, err)
		}
		if _, ok, err := a.Claim(ctx, "srv_2", time.Millisecond); err != nil || ok {
			t.Fatalf("a finished job was handed out again: %v %v", ok, err)
		}
		if n := hooks.Load(); n != 2 {
			t.Fatalf("completion hooks ran %d times, want 2", n)
		}

		// Acknowledged by a fetch of its secrets: lost, not requeued.
		l := mustEnqueue(t, dying, "srv_3")
		mustClaim(t, dying, "srv_3")
		if _, err := a.Secrets(ctx, "srv_3", l.ID); err != nil {
			t.Fatal(err)
		}
		c.Advance(jobs.DefaultLease + time.Second)
		if n, err := b.Expire(ctx); err != nil || n != 1 {
			t.Fatalf("expire: %d failed (%v), want 1", n, err)
		}
		if got, _, _ := a.Read(ctx, l.ID, jobs.AdminReader); got.Status != jobs.Failed || *got.Error != jobs.ErrAgentLost || got.Requeues != 0 {
			t.Fatalf("acknowledged lost job: %s %v, %d requeues; want failed agent_lost, 0", got.Status, got.Error, got.Requeues)
		}
	})
}
