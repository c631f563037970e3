package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// requeueEvents counts the events saying a job was queued again.
func requeueEvents(t *testing.T, s *store.Store, id string) int {
	t.Helper()
	evs, err := s.JobEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Message == store.RequeuedMessage {
			if e.Level != agentproto.LevelWarn {
				t.Errorf("requeue event at level %s, want warn", e.Level)
			}
			n++
		}
	}
	return n
}

func mustClaim(t *testing.T, s *store.Store, srv, want string, at time.Time) jobs.Job {
	t.Helper()
	j, ok, err := s.ClaimJob(context.Background(), srv, at)
	if err != nil || !ok || j.ID != want {
		t.Fatalf("claim at %s: got %s (%v, %v), want %s", at, j.ID, ok, err, want)
	}
	if j.AckedAt != nil {
		t.Fatalf("a fresh claim is acknowledged already (%s)", j.AckedAt)
	}
	return j
}

// TestUnacknowledgedClaimRequeued: a claim that the agent never
// acknowledged is queued again when its lease lapses — not failed — with
// its secrets kept and an event saying so, at most MaxRequeues times; a
// heartbeat naming the job, an event or a fetch of its secrets
// acknowledges the claim, and a lapsed acknowledged claim fails as
// agent_lost. A result that comes for a requeued job finishes it.
func TestUnacknowledgedClaimRequeued(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		other := mustCreateServer(t, s, "web-2")
		expire := func(at time.Time) (expired, requeued []jobs.Job) {
			t.Helper()
			expired, requeued, err := s.ExpireJobs(ctx, at, jobs.MaxRequeues)
			if err != nil {
				t.Fatal(err)
			}
			return expired, requeued
		}

		j := mustInsertJobWithSecrets(t, s, srv, t0)
		mustClaim(t, s, srv, j.ID, t0)
		if expired, requeued := expire(t0.Add(29 * time.Second)); len(expired)+len(requeued) != 0 {
			t.Fatalf("before the lease lapsed: %d expired, %d requeued", len(expired), len(requeued))
		}
		// Another server's agent naming the job acknowledges nothing.
		if err := s.ExtendLeases(ctx, other, []string{j.ID}, t0.Add(20*time.Second)); err != nil {
			t.Fatal(err)
		}
		expired, requeued := expire(t0.Add(31 * time.Second))
		if len(expired) != 0 || len(requeued) != 1 || requeued[0].ID != j.ID || requeued[0].Status != jobs.Queued || requeued[0].Requeues != 1 {
			t.Fatalf("lapsed claim never acknowledged: expired %+v, requeued %+v; want it requeued once", expired, requeued)
		}
		got, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != jobs.Queued || got.StartedAt != nil || got.LeaseExpiresAt != nil || got.DeadlineAt != nil ||
			got.Error != nil || got.HookPendingAt != nil || got.Requeues != 1 || !got.HasSecrets {
			t.Fatalf("requeued job: %+v; want queued, not started, no lease, deadline, error or pending hook, secrets kept, 1 requeue", got)
		}
		if sealed, _ := s.JobSecrets(ctx, j.ID); sealed != "sealed:"+j.ID {
			t.Fatalf("requeued job's secrets: %q", sealed)
		}
		if n := requeueEvents(t, s, j.ID); n != 1 {
			t.Fatalf("requeue events: %d, want 1", n)
		}

		// Claimed again and acknowledged by each way an agent shows it
		// holds a job: a lapsed lease now fails it.
		for i, ack := range []func(srv, id string, at time.Time) error{
			func(srv, id string, at time.Time) error { return s.ExtendLeases(ctx, srv, []string{id}, at) },
			func(_, id string, at time.Time) error {
				return s.AppendJobEvents(ctx, id, []jobs.Event{{At: at, Level: agentproto.LevelInfo, Message: "working"}}, at)
			},
			func(srv, id string, at time.Time) error { return s.AckJob(ctx, srv, id, at) },
		} {
			srv := mustCreateServer(t, s, fmt.Sprintf("ack-%d", i))
			at := t0.Add(time.Duration(i+1) * time.Hour)
			k := mustInsertJobWithSecrets(t, s, srv, at)
			mustClaim(t, s, srv, k.ID, at)
			if err := s.AckJob(ctx, other, k.ID, at); err != nil { // not its server: no acknowledgement
				t.Fatal(err)
			}
			if err := ack(srv, k.ID, at.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			if c, _ := s.Job(ctx, k.ID); c.AckedAt == nil || !c.AckedAt.Equal(at.Add(time.Second)) {
				t.Fatalf("acknowledgement %d: acked_at %v, want %s", i, c.AckedAt, at.Add(time.Second))
			}
			expired, requeued := expire(at.Add(40 * time.Second))
			if len(requeued) != 0 || len(expired) != 1 || expired[0].ID != k.ID || *expired[0].Error != jobs.ErrAgentLost {
				t.Fatalf("acknowledgement %d: expired %+v, requeued %+v; want it failed agent_lost", i, expired, requeued)
			}
			if n := requeueEvents(t, s, k.ID); n != 0 {
				t.Fatalf("acknowledged job has %d requeue events", n)
			}
		}

		// Never acknowledged: queued again MaxRequeues times, then failed.
		srv = mustCreateServer(t, s, "never-acked")
		at := t0.Add(10 * time.Hour)
		lost := mustInsertJobWithSecrets(t, s, srv, at)
		for i := 1; ; i++ {
			mustClaim(t, s, srv, lost.ID, at)
			at = at.Add(31 * time.Second)
			expired, requeued := expire(at)
			if i <= jobs.MaxRequeues {
				if len(expired) != 0 || len(requeued) != 1 || requeued[0].Requeues != i {
					t.Fatalf("claim %d: expired %+v, requeued %+v; want requeue %d", i, expired, requeued, i)
				}
				continue
			}
			if len(requeued) != 0 || len(expired) != 1 || expired[0].ID != lost.ID || *expired[0].Error != jobs.ErrAgentLost {
				t.Fatalf("claim %d, requeues used up: expired %+v, requeued %+v; want it failed agent_lost", i, expired, requeued)
			}
			break
		}
		wantNoSecrets(t, s, lost.ID, jobs.Failed)
		if n := requeueEvents(t, s, lost.ID); n != jobs.MaxRequeues {
			t.Fatalf("requeue events: %d, want %d", n, jobs.MaxRequeues)
		}

		// The agent had the requeued job after all: its result finishes it.
		srv = mustCreateServer(t, s, "late")
		late := mustInsertJobWithSecrets(t, s, srv, t0.Add(20*time.Hour))
		mustClaim(t, s, srv, late.ID, t0.Add(20*time.Hour))
		expire(t0.Add(20*time.Hour + 31*time.Second))
		done := t0.Add(20*time.Hour + 40*time.Second)
		if ok, err := s.FinishJob(ctx, late.ID, jobs.Succeeded, nil, json.RawMessage(`{}`), nil, done); err != nil || !ok {
			t.Fatalf("finishing a requeued job: %v %v", ok, err)
		}
		wantNoSecrets(t, s, late.ID, jobs.Succeeded)
		if c, _ := s.Job(ctx, late.ID); c.StartedAt == nil || c.HookPendingAt == nil {
			t.Fatalf("finished requeued job: started_at %v, hook pending %v; want both set", c.StartedAt, c.HookPendingAt)
		}
		// A job that was never claimed cannot be finished.
		fresh := mustInsertJobWithSecrets(t, s, srv, t0.Add(21*time.Hour))
		if ok, err := s.FinishJob(ctx, fresh.ID, jobs.Succeeded, nil, nil, nil, t0.Add(21*time.Hour)); err != nil || ok {
			t.Fatalf("finishing a job never claimed: %v %v, want false", ok, err)
		}
	})
}

// TestRequeueOnceUnderRace runs the lease reaper of several control planes
// at once over lapsed claims that were never acknowledged: each job is
// queued again exactly once, with one event, and none is failed.
func TestRequeueOnceUnderRace(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		const jobsN, reapers = 6, 8
		var ids []string
		for i := range jobsN {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			j := mustInsertJobWithSecrets(t, s, srv, at)
			mustClaim(t, s, srv, j.ID, at)
			ids = append(ids, j.ID)
		}
		var mu sync.Mutex
		requeuedBy := map[string]int{}
		var wg sync.WaitGroup
		for range reapers {
			wg.Go(func() {
				expired, requeued, err := s.ExpireJobs(ctx, t0.Add(time.Minute), jobs.MaxRequeues)
				if err != nil {
					t.Error(err)
					return
				}
				if len(expired) != 0 {
					t.Errorf("a reaper failed %d unacknowledged jobs", len(expired))
				}
				mu.Lock()
				for _, j := range requeued {
					requeuedBy[j.ID]++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, id := range ids {
			if n := requeuedBy[id]; n != 1 {
				t.Errorf("job %s reported requeued %d times by %d parallel reapers, want once", id, n, reapers)
			}
			got, err := s.Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != jobs.Queued || got.Requeues != 1 {
				t.Errorf("job %s: status %s, %d requeues; want queued, 1", id, got.Status, got.Requeues)
			}
			if n := requeueEvents(t, s, id); n != 1 {
				t.Errorf("job %s: %d requeue events, want 1", id, n)
			}
		}
	})
}

// TestRequeueLosesRacesCleanly: a requeue that loses its race to an
// acknowledgement (a heartbeat that extends the lease) or to a completion
// changes nothing and reports nothing.
func TestRequeueLosesRacesCleanly(t *testing.T) {
	runWithRaw(t, func(t *testing.T, s *store.Store, raw *sql.DB) {
		ctx := context.Background()
		for _, c := range []struct {
			name, set string
			want      jobs.Status
		}{
			{"requeue racing an acknowledgement", fmt.Sprintf(`acked_at = %d, lease_expires_at = %d`,
				t0.Add(29*time.Second).UnixMilli(), t0.Add(59*time.Second).UnixMilli()), jobs.Running},
			{"requeue racing a completion", fmt.Sprintf(`status = 'succeeded', finished_at = %d, lease_expires_at = NULL, data = '{}'`,
				t0.Add(29*time.Second).UnixMilli()), jobs.Succeeded},
		} {
			t.Run(c.name, func(t *testing.T) {
				srv := mustCreateServer(t, s, c.name)
				j := mustInsertJobWithSecrets(t, s, srv, t0)
				mustClaim(t, s, srv, j.ID, t0)
				commit := holdJob(t, raw, j.ID, c.set)
				type answer struct {
					expired, requeued []jobs.Job
					err               error
				}
				done := make(chan answer, 1)
				go func() {
					expired, requeued, err := s.ExpireJobs(ctx, t0.Add(31*time.Second), jobs.MaxRequeues)
					done <- answer{expired, requeued, err}
				}()
				waitBlocked(t, s.Dialect(), raw)
				commit()
				a := <-done
				if a.err != nil {
					t.Fatal(a.err)
				}
				for _, e := range append(a.expired, a.requeued...) {
					if e.ServerID == srv {
						t.Fatalf("the reaper reported the job (%s), want not: it was changed first", e.Status)
					}
				}
				got, err := s.Job(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != c.want || got.Error != nil || got.Requeues != 0 {
					t.Fatalf("job after the lost requeue: status %s, error %v, %d requeues; want %s, none, 0", got.Status, got.Error, got.Requeues, c.want)
				}
				if n := requeueEvents(t, s, j.ID); n != 0 {
					t.Fatalf("requeue events: %d, want 0", n)
				}
			})
		}
	})
}
