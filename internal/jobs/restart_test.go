package jobs_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// replicas returns n job services on one store, as n control planes
// sharing a database run them, without a bus between them.
func replicas(st *store.Store, c *testlab.Clock, n int) []*jobs.Service {
	return replicasOn(st, c, n, nil)
}

// replicasOn is replicas with the bus they share; a localBus carries
// their messages.
func replicasOn(st *store.Store, c *testlab.Clock, n int, bus jobs.Bus) []*jobs.Service {
	key := secrets.GenerateKey()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	out := make([]*jobs.Service, n)
	for i := range out {
		out[i] = jobs.NewService(jobs.Deps{Store: st, Key: key, Now: c.Now, Log: log, Bus: bus})
	}
	return out
}

func mustClaim(t *testing.T, js *jobs.Service, serverID string) jobs.Job {
	t.Helper()
	j, ok, err := js.Claim(context.Background(), serverID, time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	return j
}

// pingSpec is agent.ping's spec in these tests: the timeout the servers
// capability gives it, with hook (nil: none).
func pingSpec(hook jobs.CompletionHook) jobs.Spec {
	return jobs.Spec{Timeout: 30 * time.Second, OnComplete: hook}
}

func mustEnqueue(t *testing.T, js *jobs.Service, serverID string) jobs.Job {
	t.Helper()
	return mustEnqueueWork(t, js, serverID, jobs.Of(agentproto.AgentPing, agentproto.PingPayload{}))
}

func mustEnqueueWork(t *testing.T, js *jobs.Service, serverID string, w jobs.Work) jobs.Job {
	t.Helper()
	j, _, err := js.Enqueue(context.Background(), jobs.NewJob{ServerID: serverID, Work: w})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

var succeeded = agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Data: json.RawMessage(`{"ok":true}`)}

// TestHookPendingSeenByEveryReplica: while one control plane runs a job's
// completion hook, every control plane shows the job still running, and
// all show it finished once the hook ran.
func TestHookPendingSeenByEveryReplica(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(time.Now().UTC())
		rs := replicas(st, c, 2)
		a, b := rs[0], rs[1]
		entered, release := make(chan struct{}), make(chan struct{})
		a.Register(agentproto.AgentPing, pingSpec(func(ctx context.Context, j jobs.Job) error {
			close(entered)
			<-release
			return nil
		}))
		b.Register(agentproto.AgentPing, pingSpec(nil))
		j := mustEnqueue(t, a, "srv_1")
		mustClaim(t, a, "srv_1")
		done := make(chan error, 1)
		go func() {
			_, err := a.Complete(ctx, "srv_1", j.ID, succeeded)
			done <- err
		}()
		<-entered
		for name, r := range map[string]*jobs.Service{"the replica running the hook": a, "another replica": b} {
			got, _, err := r.Read(ctx, j.ID, jobs.AdminReader)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != jobs.Running || got.Data != nil {
				t.Errorf("%s reads the job as %s (data %s) while its hook runs, want running", name, got.Status, got.Data)
			}
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if got, _, err := r.Read(ctx, j.ID, jobs.AdminReader); err != nil || got.Status != jobs.Succeeded {
				t.Fatalf("after the hook: %s %v, want succeeded", got.Status, err)
			}
		}
	})
}

// TestStaleHookRunsOnce: a control plane that ended a job and died before
// its hook ran leaves the hook pending; the reapers of the others run it
// once, after StaleHookAfter.
func TestStaleHookRunsOnce(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(time.Now().UTC())
		rs := replicas(st, c, 3)
		var ran atomic.Int32
		for _, r := range rs {
			r.Register(agentproto.AgentPing, pingSpec(func(ctx context.Context, j jobs.Job) error {
				if j.Status != jobs.Succeeded {
					t.Errorf("hook got status %s, want succeeded", j.Status)
				}
				ran.Add(1)
				return nil
			}))
		}
		j := mustEnqueue(t, rs[0], "srv_1")
		mustClaim(t, rs[0], "srv_1")
		// The job ends in the store; the process that ended it dies.
		if ok, err := st.FinishJob(ctx, j.ID, jobs.Succeeded, nil, json.RawMessage(`{}`), nil, c.Now()); err != nil || !ok {
			t.Fatalf("finish: %v %v", ok, err)
		}
		if got, _, _ := rs[1].Read(ctx, j.ID, jobs.AdminReader); got.Status != jobs.Running {
			t.Fatalf("job with its hook pending reads %s, want running", got.Status)
		}
		for _, r := range rs {
			if _, err := r.Expire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := ran.Load(); n != 0 {
			t.Fatalf("hook ran %d times before it was stale", n)
		}
		c.Advance(jobs.StaleHookAfter + time.Second)
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Go(func() {
				if _, err := r.Expire(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got, want := ran.Load(), int32(1); got != want {
			t.Fatalf("stale hook ran %d times, want %d", got, want)
		}
		if got, _, _ := rs[2].Read(ctx, j.ID, jobs.AdminReader); got.Status != jobs.Succeeded {
			t.Fatalf("after the stale hook ran: %s, want succeeded", got.Status)
		}
	})
}

// TestRestartGraceAndLateResult: a control plane that was down longer
// than a lease gives running jobs a grace period when it starts, so their
// agents can come back; a result that comes after a job was failed for a
// lost lease anyway is recorded as its late result, and the job type's
// reconcile step runs once with it.
func TestRestartGraceAndLateResult(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(time.Now().UTC())
		js := replicas(st, c, 1)[0]
		var hooks, reconciles atomic.Int32
		late := make(chan jobs.Job, 4)
		js.Register(agentproto.AppDeploy, jobs.Spec{Timeout: 15 * time.Minute,
			OnComplete: func(ctx context.Context, j jobs.Job) error { hooks.Add(1); return nil },
			OnLateResult: func(ctx context.Context, j jobs.Job) error {
				reconciles.Add(1)
				late <- j
				return nil
			}})

		// Down for five minutes (longer than a lease, shorter than the timeout), then started: the job gets its grace.
		j := mustEnqueueWork(t, js, "srv_1", jobs.Of(agentproto.AppDeploy, agentproto.DeployPayload{}))
		mustClaim(t, js, "srv_1")
		c.Advance(5 * time.Minute)
		if n, err := js.Grace(ctx, time.Minute); err != nil || n != 1 {
			t.Fatalf("grace: moved %d leases (%v), want 1", n, err)
		}
		if n, err := js.Expire(ctx); err != nil || n != 0 {
			t.Fatalf("expired %d jobs within the grace (%v), want 0", n, err)
		}
		// The agent comes back in time and completes the job.
		c.Advance(50 * time.Second)
		if got, err := js.Complete(ctx, "srv_1", j.ID, succeeded); err != nil || got.Status != jobs.Succeeded {
			t.Fatalf("completion within the grace: %s %v, want succeeded", got.Status, err)
		}

		// An agent that had the job (its heartbeat named it) and does not
		// come back within the grace loses it.
		j = mustEnqueueWork(t, js, "srv_1", jobs.Of(agentproto.AppDeploy, agentproto.DeployPayload{}))
		mustClaim(t, js, "srv_1")
		if err := js.Heartbeat(ctx, "srv_1", []string{j.ID}); err != nil {
			t.Fatal(err)
		}
		c.Advance(5 * time.Minute)
		if _, err := js.Grace(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Minute + time.Second)
		if n, err := js.Expire(ctx); err != nil || n != 1 {
			t.Fatalf("expired %d jobs after the grace (%v), want 1", n, err)
		}
		hooksBefore := hooks.Load()
		// Its result comes later: recorded, reconciled once, the job stays failed.
		got, err := js.Complete(ctx, "srv_1", j.ID, succeeded)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != jobs.Failed || got.LateResult == nil || got.LateResult.Status != jobs.Succeeded {
			t.Fatalf("late completion answered %s with late result %+v, want failed with a succeeded late result", got.Status, got.LateResult)
		}
		if _, err := js.Complete(ctx, "srv_1", j.ID, agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: "again"}); err != nil {
			t.Fatal(err)
		}
		if got, want := reconciles.Load(), int32(1); got != want {
			t.Fatalf("reconcile ran %d times, want %d", got, want)
		}
		if r := <-late; r.ID != j.ID || r.LateResult == nil || string(r.LateResult.Data) != `{"ok":true}` {
			t.Fatalf("reconcile got job %s with late result %+v", r.ID, r.LateResult)
		}
		if hooks.Load() != hooksBefore {
			t.Fatalf("the completion hook ran again for a late result")
		}
		read, _, err := js.Read(ctx, j.ID, jobs.AdminReader)
		if err != nil {
			t.Fatal(err)
		}
		if read.Status != jobs.Failed || *read.Error != jobs.ErrAgentLost || read.LateResult == nil || read.LateResult.Status != jobs.Succeeded {
			t.Fatalf("read after the late result: %s %v %+v", read.Status, read.Error, read.LateResult)
		}
		member, _, _ := js.Read(ctx, j.ID, jobs.MemberReader)
		if member.LateResult == nil || member.LateResult.Data != nil {
			t.Fatalf("a member reads the late result %+v, want it without data", member.LateResult)
		}
	})
}
