package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// mustInsertJobWithSecrets queues a job holding sealed secrets.
func mustInsertJobWithSecrets(t *testing.T, s *store.Store, serverID string, at time.Time) jobs.Job {
	t.Helper()
	j := jobs.Job{ID: ids.NewAt(ids.Job, at), ServerID: serverID, Type: agentproto.JobAppDeploy, Status: jobs.Queued,
		Payload: json.RawMessage(`{}`), HasSecrets: true, TimeoutSeconds: 60, LeaseSeconds: 30, CreatedAt: at, UpdatedAt: at}
	if err := s.InsertJob(context.Background(), j, "sealed:"+j.ID); err != nil {
		t.Fatal(err)
	}
	return j
}

// wantNoSecrets checks that a job ended with its secrets erased.
func wantNoSecrets(t *testing.T, s *store.Store, id string, status jobs.Status) {
	t.Helper()
	ctx := context.Background()
	j, err := s.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != status {
		t.Fatalf("job %s: status %s, want %s", id, j.Status, status)
	}
	sealed, err := s.JobSecrets(ctx, id)
	if err != nil || sealed != "" || j.HasSecrets {
		t.Fatalf("job %s (%s) still holds secrets %q (has_secrets %v, err %v)", id, status, sealed, j.HasSecrets, err)
	}
}

// TestJobSecretsErasedWhenJobEnds covers every way a job ends: completed
// (succeeded or failed), cancelled, lease lapsed, timed out, and ended with
// its server.
func TestJobSecretsErasedWhenJobEnds(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		claim := func(at time.Time) jobs.Job {
			t.Helper()
			j, ok, err := s.ClaimJob(ctx, srv, at)
			if err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
			if sealed, _ := s.JobSecrets(ctx, j.ID); sealed != "sealed:"+j.ID || !j.HasSecrets {
				t.Fatalf("running job's secrets: %q (has_secrets %v)", sealed, j.HasSecrets)
			}
			return j
		}

		// Completed by the agent.
		for _, status := range []jobs.Status{jobs.Succeeded, jobs.Failed} {
			mustInsertJobWithSecrets(t, s, srv, t0)
			j := claim(t0)
			if ok, err := s.FinishJob(ctx, j.ID, status, nil, json.RawMessage(`{}`), nil, t0.Add(time.Second)); err != nil || !ok {
				t.Fatalf("finish: %v %v", ok, err)
			}
			wantNoSecrets(t, s, j.ID, status)
		}

		// Cancelled while queued.
		q := mustInsertJobWithSecrets(t, s, srv, t0)
		if _, err := s.CancelJob(ctx, q.ID, t0); err != nil {
			t.Fatal(err)
		}
		wantNoSecrets(t, s, q.ID, jobs.Cancelled)

		// Lease lapsed, then timed out.
		mustInsertJobWithSecrets(t, s, srv, t0)
		lost := claim(t0)
		if err := s.AckJob(ctx, srv, lost.ID, t0); err != nil {
			t.Fatal(err)
		}
		expired, _, err := s.ExpireJobs(ctx, t0.Add(31*time.Second), jobs.MaxRequeues)
		if err != nil || len(expired) != 1 || expired[0].ID != lost.ID || *expired[0].Error != jobs.ErrAgentLost {
			t.Fatalf("expire: %+v %v", expired, err)
		}
		wantNoSecrets(t, s, lost.ID, jobs.Failed)
		mustInsertJobWithSecrets(t, s, srv, t0)
		slow := claim(t0)
		for i := 1; i <= 3; i++ { // the agent keeps the lease alive past the timeout
			if err := s.ExtendLeases(ctx, srv, []string{slow.ID}, t0.Add(time.Duration(i)*25*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		expired, _, err = s.ExpireJobs(ctx, t0.Add(61*time.Second), jobs.MaxRequeues)
		if err != nil || len(expired) != 1 || *expired[0].Error != jobs.ErrTimedOut {
			t.Fatalf("time out: %+v %v", expired, err)
		}
		wantNoSecrets(t, s, slow.ID, jobs.Failed)

		// Ended with the server: the queued one cancelled, the running one failed.
		mustInsertJobWithSecrets(t, s, srv, t0)
		running := claim(t0)
		queued := mustInsertJobWithSecrets(t, s, srv, t0.Add(time.Millisecond))
		if err := s.EndServerJobs(ctx, srv, jobs.ErrServerRevoked, t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		wantNoSecrets(t, s, running.ID, jobs.Failed)
		wantNoSecrets(t, s, queued.ID, jobs.Cancelled)
	})
}

// TestFinishJobOnceUnderRace completes one running job from many
// goroutines at once: exactly one completion wins, and the secrets are gone.
func TestFinishJobOnceUnderRace(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		mustInsertJobWithSecrets(t, s, srv, t0)
		j, ok, err := s.ClaimJob(ctx, srv, t0)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		const n = 16
		var wg sync.WaitGroup
		wins := make(chan jobs.Status, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status := jobs.Succeeded
				if i%2 == 1 {
					status = jobs.Failed
				}
				ok, err := s.FinishJob(ctx, j.ID, status, nil, json.RawMessage(`{}`), nil, t0.Add(time.Second))
				if err != nil {
					t.Errorf("finish: %v", err)
				}
				if ok {
					wins <- status
				}
			}()
		}
		wg.Wait()
		close(wins)
		var won []jobs.Status
		for w := range wins {
			won = append(won, w)
		}
		if len(won) != 1 {
			t.Fatalf("completions that took effect: got %d, want 1", len(won))
		}
		wantNoSecrets(t, s, j.ID, won[0])
	})
}
