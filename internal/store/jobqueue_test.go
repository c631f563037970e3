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
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// mustInsertQueuedJob stores a queued job with secrets that fails with
// queue_timed_out if it is still queued at deadline.
func mustInsertQueuedJob(t *testing.T, s *store.Store, serverID string, at, deadline time.Time) jobs.Job {
	t.Helper()
	j := jobs.Job{ID: ids.NewAt(ids.Job, at), ServerID: serverID, Type: agentproto.JobAppDeploy, Status: jobs.Queued,
		Payload: json.RawMessage(`{}`), HasSecrets: true, TimeoutSeconds: 60, LeaseSeconds: 30, CreatedAt: at, UpdatedAt: at,
		QueueDeadlineAt: &deadline}
	if err := s.InsertJob(context.Background(), j, "sealed:"+j.ID); err != nil {
		t.Fatal(err)
	}
	return j
}

// mustOnlineServer creates a server whose agent was last heard from at
// seen.
func mustOnlineServer(t *testing.T, s *store.Store, name string, seen time.Time) string {
	t.Helper()
	id := mustCreateServer(t, s, name)
	if err := s.TouchServer(context.Background(), id, "1.0.0", nil, seen); err != nil {
		t.Fatal(err)
	}
	return id
}

// mustRequeue claims the server's job at at and lets its lease lapse
// unacknowledged, so that it is queued again.
func mustRequeue(t *testing.T, s *store.Store, srv, id string, at time.Time) {
	t.Helper()
	mustClaim(t, s, srv, id, at)
	_, requeued, err := s.ExpireJobs(context.Background(), at.Add(31*time.Second), jobs.MaxRequeues)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range requeued {
		if r.ID == id {
			return
		}
	}
	t.Fatalf("job %s was not queued again: %+v", id, requeued)
}

// hasEvent reports whether the job has a warning with message.
func hasEvent(t *testing.T, s *store.Store, id, message string) bool {
	t.Helper()
	evs, err := s.JobEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Message == message && e.Level == agentproto.LevelWarn {
			return true
		}
	}
	return false
}

// expireQueued runs ExpireQueuedJobs at now, a server counting as offline
// after jobs.OfflineAfter, and returns the ids it failed, by reason.
func expireQueued(t *testing.T, s *store.Store, now time.Time) map[string]string {
	t.Helper()
	failed, err := s.ExpireQueuedJobs(context.Background(), now, now.Add(-jobs.OfflineAfter))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, j := range failed {
		if j.Status != jobs.Failed || j.Error == nil || j.HookPendingAt == nil || j.HasSecrets {
			t.Fatalf("reported job %+v: want failed with an error, its hook pending and its secrets gone", j)
		}
		out[j.ID] = *j.Error
	}
	return out
}

// TestQueuedJobsWaitingInVainFail: a job queued again after a claim never
// acknowledged fails with server_offline once its server has been silent
// for the offline threshold plus the job's lease, not before, and not
// while the server's agent heartbeats; any queued job fails with
// queue_timed_out past its queue deadline. Each gets a warning event, its
// secrets erased and its hook marked pending; a job without a queue
// deadline, or one that is not queued, is left alone.
func TestQueuedJobsWaitingInVainFail(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		dead := mustOnlineServer(t, s, "dead", t0)
		alive := mustOnlineServer(t, s, "alive", t0)
		idle := mustOnlineServer(t, s, "idle", t0)

		lost := mustInsertQueuedJob(t, s, dead, t0, t0.Add(time.Hour))
		mustRequeue(t, s, dead, lost.ID, t0)
		kept := mustInsertQueuedJob(t, s, alive, t0, t0.Add(time.Hour))
		mustRequeue(t, s, alive, kept.ID, t0)
		waiting := mustInsertQueuedJob(t, s, idle, t0, t0.Add(time.Hour))
		unbounded := mustInsertJobWithSecrets(t, s, idle, t0.Add(time.Millisecond))
		running := mustInsertQueuedJob(t, s, alive, t0.Add(2*time.Millisecond), t0.Add(2*time.Hour))

		// Silent for the offline threshold, not yet for the lease past it.
		if got := expireQueued(t, s, t0.Add(jobs.OfflineAfter+30*time.Second)); len(got) != 0 {
			t.Fatalf("before the lease passed: failed %v", got)
		}
		if err := s.TouchServer(ctx, alive, "1.0.0", nil, t0.Add(50*time.Second)); err != nil {
			t.Fatal(err)
		}
		got := expireQueued(t, s, t0.Add(jobs.OfflineAfter+31*time.Second))
		if len(got) != 1 || got[lost.ID] != jobs.ErrServerOffline {
			t.Fatalf("silent past the lease: failed %v, want only %s as %s", got, lost.ID, jobs.ErrServerOffline)
		}
		wantNoSecrets(t, s, lost.ID, jobs.Failed)
		if !hasEvent(t, s, lost.ID, store.ServerOfflineMessage) {
			t.Errorf("no event saying the server stayed offline")
		}
		// The job of the server that came back is claimed again; another
		// one is claimed before its queue deadline and runs on.
		mustClaim(t, s, alive, kept.ID, t0.Add(62*time.Second))
		mustClaim(t, s, alive, running.ID, t0.Add(63*time.Second))
		if got := expireQueued(t, s, t0.Add(time.Hour)); len(got) != 0 {
			t.Fatalf("at the queue deadline, not past it: failed %v", got)
		}
		got = expireQueued(t, s, t0.Add(time.Hour+time.Millisecond))
		if len(got) != 1 || got[waiting.ID] != jobs.ErrQueueTimedOut {
			t.Fatalf("past the queue deadline: failed %v, want only %s as %s", got, waiting.ID, jobs.ErrQueueTimedOut)
		}
		wantNoSecrets(t, s, waiting.ID, jobs.Failed)
		if !hasEvent(t, s, waiting.ID, store.QueueTimedOutMessage) {
			t.Errorf("no event saying the queue timeout passed")
		}
		for id, want := range map[string]jobs.Status{unbounded.ID: jobs.Queued, kept.ID: jobs.Running, running.ID: jobs.Running} {
			j, err := s.Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status != want || j.Error != nil {
				t.Errorf("job %s: %s (error %v), want %s", id, j.Status, j.Error, want)
			}
		}
		// Ending a job again reports nothing.
		if got := expireQueued(t, s, t0.Add(2*time.Hour)); len(got) != 0 {
			t.Fatalf("a second round failed %v again", got)
		}
	})
}

// TestQueueTimeoutRacesClaim fires a claim and the queue's expiry at the
// same time, round after round, at a job past its queue deadline (every
// other one also queued again for a silent server): each job is either
// claimed or failed, never both, and its state says which one won. Then
// each side is caught at its worst moment: a claim committed while the
// expiry waits for the row leaves the job running and unreported, and an
// expiry committed while a claim waits leaves the claim with nothing.
func TestQueueTimeoutRacesClaim(t *testing.T) {
	runWithRaw(t, func(t *testing.T, s *store.Store, raw *sql.DB) {
		ctx := context.Background()
		now := t0.Add(2 * time.Minute)
		claims, expiries := 0, 0
		for i := range 20 {
			srv := mustOnlineServer(t, s, fmt.Sprintf("race-%d", i), t0)
			job := mustInsertQueuedJob(t, s, srv, t0, t0.Add(time.Minute))
			want := jobs.ErrQueueTimedOut
			if i%2 == 1 {
				mustRequeue(t, s, srv, job.ID, t0)
				want = jobs.ErrServerOffline
			}
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				claimed bool
				failed  []jobs.Job
			)
			wg.Go(func() {
				<-start
				j, ok, err := s.ClaimJob(ctx, srv, now)
				if err != nil {
					t.Error(err)
				}
				claimed = ok && j.ID == job.ID
			})
			wg.Go(func() {
				<-start
				var err error
				if failed, err = s.ExpireQueuedJobs(ctx, now, now.Add(-jobs.OfflineAfter)); err != nil {
					t.Error(err)
				}
			})
			close(start)
			wg.Wait()
			reported := ""
			for _, f := range failed {
				if f.ID == job.ID {
					reported = *f.Error
				}
			}
			j, err := s.Job(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case claimed && reported != "":
				t.Errorf("job %s both claimed and failed (%s)", job.ID, reported)
			case claimed:
				claims++
				if j.Status != jobs.Running || j.Error != nil || j.HookPendingAt != nil {
					t.Errorf("claimed job %s: %s, error %v, hook pending %v; want running", job.ID, j.Status, j.Error, j.HookPendingAt)
				}
			case reported != "":
				expiries++
				if reported != want || j.Status != jobs.Failed || j.Error == nil || *j.Error != want || j.HookPendingAt == nil {
					t.Errorf("failed job %s: reported %s, stored %s %v; want failed %s with its hook pending", job.ID, reported, j.Status, j.Error, want)
				}
			default:
				t.Errorf("job %s neither claimed nor failed: %s", job.ID, j.Status)
			}
		}
		t.Logf("%d claims won, %d expiries won", claims, expiries)

		t.Run("claim committed while the expiry waits", func(t *testing.T) {
			srv := mustOnlineServer(t, s, "claim-first", t0)
			job := mustInsertQueuedJob(t, s, srv, t0, t0.Add(time.Minute))
			commit := holdJob(t, raw, job.ID, fmt.Sprintf(`status = 'running', started_at = %d, lease_expires_at = %d, deadline_at = %d`,
				now.UnixMilli(), now.Add(30*time.Second).UnixMilli(), now.Add(time.Minute).UnixMilli()))
			done := make(chan []jobs.Job, 1)
			go func() {
				failed, err := s.ExpireQueuedJobs(ctx, now, now.Add(-jobs.OfflineAfter))
				if err != nil {
					t.Error(err)
				}
				done <- failed
			}()
			waitBlocked(t, s.Dialect(), raw)
			commit()
			for _, f := range <-done {
				if f.ID == job.ID {
					t.Fatalf("the expiry reported the job claimed first (%s)", *f.Error)
				}
			}
			if j, _ := s.Job(ctx, job.ID); j.Status != jobs.Running || j.Error != nil || j.HookPendingAt != nil {
				t.Fatalf("job claimed first: %s, error %v, hook pending %v; want running", j.Status, j.Error, j.HookPendingAt)
			}
		})
		t.Run("expiry committed while the claim waits", func(t *testing.T) {
			srv := mustOnlineServer(t, s, "expiry-first", t0)
			job := mustInsertQueuedJob(t, s, srv, t0, t0.Add(time.Minute))
			commit := holdJob(t, raw, job.ID, fmt.Sprintf(`status = 'failed', error = '%s', finished_at = %d, hook_pending_at = %d, secrets = ''`,
				jobs.ErrQueueTimedOut, now.UnixMilli(), now.UnixMilli()))
			type answer struct {
				j   jobs.Job
				ok  bool
				err error
			}
			done := make(chan answer, 1)
			go func() {
				j, ok, err := s.ClaimJob(ctx, srv, now)
				done <- answer{j, ok, err}
			}()
			waitBlocked(t, s.Dialect(), raw)
			commit()
			if a := <-done; a.err != nil || a.ok {
				t.Fatalf("claim of a job failed meanwhile: got %s (%v, %v), want nothing", a.j.ID, a.ok, a.err)
			}
			if j, _ := s.Job(ctx, job.ID); j.Status != jobs.Failed || j.StartedAt != nil {
				t.Fatalf("job failed first: %s, started %v; want failed, never started", j.Status, j.StartedAt)
			}
		})
	})
}
