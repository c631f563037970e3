package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// TestWait: a reader waiting for a job is woken by its end (completed,
// cancelled, expired, or ended with its server), not by a deadline; a
// job that does not end is answered at the deadline with its state then.
func TestWait(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.SQLite)
	p := planetest.New(t, st, planetest.Options{Now: func() time.Time { return time.Now().UTC() }})
	js := p.Jobs
	serverID := p.Enroll("web-1", agentproto.Facts{})
	enqueue := func() jobs.Job {
		t.Helper()
		j, _, err := js.Enqueue(ctx, jobs.NewJob{ServerID: serverID, Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// wait starts a 30 s wait once a reader is subscribed, ends the job,
	// and checks that the wait answers with its final status well before
	// the 30 s are up.
	wait := func(name string, end func(j jobs.Job), want jobs.Status) {
		t.Run(name, func(t *testing.T) {
			j := enqueue()
			type answer struct {
				j   jobs.Job
				err error
			}
			done := make(chan answer, 1)
			go func() {
				j, _, err := js.Wait(ctx, j.ID, jobs.MaxWait, jobs.AdminReader)
				done <- answer{j, err}
			}()
			testlab.Eventually(t, 20*time.Second, "a reader waits for the job", func() bool { return jobs.EndWaiters(js, j.ID) == 1 })
			end(j)
			select {
			case a := <-done:
				if a.err != nil || a.j.Status != want {
					t.Fatalf("wait: status %s (%v), want %s", a.j.Status, a.err, want)
				}
			case <-time.After(jobs.MaxWait - 5*time.Second):
				t.Fatal("the wait did not answer when the job ended")
			}
			if n := jobs.EndWaiters(js, j.ID); n != 0 {
				t.Fatalf("readers left subscribed: %d", n)
			}
		})
	}
	claim := func(j jobs.Job) {
		t.Helper()
		got, ok, err := js.Claim(ctx, serverID, 0)
		if err != nil || !ok || got.ID != j.ID {
			t.Fatalf("claim: %v %v %s, want %s", err, ok, got.ID, j.ID)
		}
	}
	wait("completed", func(j jobs.Job) {
		claim(j)
		if _, err := js.Complete(ctx, serverID, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}, jobs.Succeeded)
	wait("cancelled", func(j jobs.Job) {
		if _, err := js.Cancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}, jobs.Cancelled)

	// A deadline with nothing ending answers with the state then.
	j := enqueue()
	start := time.Now()
	got, _, err := js.Wait(ctx, j.ID, 300*time.Millisecond, jobs.MemberReader)
	if err != nil || got.Status != jobs.Queued || !got.Redacted {
		t.Fatalf("wait to the deadline: %+v, %v", got, err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("wait to the deadline answered after %s, before it", el)
	}
	if _, _, err := js.Wait(ctx, "job_none", time.Second, jobs.AdminReader); err == nil {
		t.Fatal("waiting on an unknown job: no error")
	}
	if _, err := js.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}

	wait("ended with its server", func(jobs.Job) {
		if err := js.EndServerJobs(ctx, serverID); err != nil {
			t.Fatal(err)
		}
	}, jobs.Cancelled)
}

// TestFinishedOnlyAfterHook: a job an agent completed reads as running
// until its completion hook has run, so a reader that sees it finished
// also sees what the hook changed; a reader waiting for it is answered
// after the hook.
func TestFinishedOnlyAfterHook(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.SQLite)
	p := planetest.New(t, st, planetest.Options{Now: func() time.Time { return time.Now().UTC() }})
	js := p.Jobs
	serverID := p.Enroll("web-1", agentproto.Facts{})
	// A job type of this test's own, whose hook it holds.
	hooked := agentproto.JobType[agentproto.PingPayload, agentproto.PingResult]{Name: "test.hooked"}
	inHook, release := make(chan struct{}), make(chan struct{})
	js.Register(hooked, pingSpec(func(context.Context, jobs.Job) error {
		close(inHook)
		<-release
		return nil
	}))
	j, _, err := js.Enqueue(ctx, jobs.NewJob{ServerID: serverID, Work: jobs.Of(hooked, agentproto.PingPayload{})})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, err := js.Claim(ctx, serverID, 0); err != nil || !ok || got.ID != j.ID {
		t.Fatalf("claim: %v %v %s", err, ok, got.ID)
	}
	waited := make(chan jobs.Job, 1)
	go func() {
		w, _, _ := js.Wait(ctx, j.ID, jobs.MaxWait, jobs.AdminReader)
		waited <- w
	}()
	completed := make(chan error, 1)
	go func() {
		_, err := js.Complete(ctx, serverID, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded})
		completed <- err
	}()
	<-inHook
	// The store says succeeded; readers must not, yet.
	got, _, err := js.Read(ctx, j.ID, jobs.AdminReader)
	if err != nil || got.Status != jobs.Running || got.FinishedAt != nil || got.Data != nil {
		t.Fatalf("read while the hook runs: %+v, %v; want running", got, err)
	}
	list, err := js.List(ctx, jobs.ListFilter{ServerID: serverID}, 10, jobs.AdminReader)
	if err != nil || len(list) != 1 || list[0].Status != jobs.Running {
		t.Fatalf("list while the hook runs: %+v, %v; want running", list, err)
	}
	select {
	case w := <-waited:
		t.Fatalf("the wait answered %s before the hook ran", w.Status)
	default:
	}
	close(release)
	if err := <-completed; err != nil {
		t.Fatal(err)
	}
	if w := <-waited; w.Status != jobs.Succeeded {
		t.Fatalf("wait: %s, want succeeded", w.Status)
	}
	if got, _, err := js.Read(ctx, j.ID, jobs.AdminReader); err != nil || got.Status != jobs.Succeeded || got.FinishedAt == nil {
		t.Fatalf("read after the hook: %+v, %v", got, err)
	}
}
