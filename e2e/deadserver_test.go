package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestFrozenAgentJobFailsServerOffline: the agent is frozen (SIGSTOP)
// while its claim waits on the control plane, and a storage test is queued:
// the claim takes the job, but the answer is never read. When the lease
// lapses the job is queued again (the answer was most likely lost), and
// once the server has been offline for longer than the lease it fails with
// server_offline — within its queue timeout, instead of staying queued
// for ever. When the agent wakes up (SIGCONT) the job never runs: the
// job's secrets are refused to it, nothing reaches the storage, the job
// stays failed with no late result, and the agent goes on to run new jobs.
func TestFrozenAgentJobFailsServerOffline(t *testing.T) {
	const (
		serverOffline = "server_offline"
		// The queue timeout of backup.storage_test (5 minute timeout):
		// the least one, see docs/api.md.
		queueTimeout = time.Hour
	)
	t.Parallel()
	r := newBackupRig(t, store.SQLite)
	expectStatus(t, r.putSettings(t, r.storageSettings("frozen")), http.StatusOK)
	// The agent works: it runs a storage test, and its claim is back
	// waiting on the control plane the moment it delivered the result.
	if j, _ := r.testStorage(t); j.Status != "succeeded" {
		t.Fatalf("storage test before the freeze: %s %v", j.Status, deref(j.Error))
	}
	puts := r.s3.Requests(http.MethodPut)

	r.agent.Freeze(t)
	frozenAt := time.Now()
	var a Accepted
	expectJSON(t, r.Post(t, "/api/v1/backups/settings/test?server_id="+r.serverID, r.Token, nil), http.StatusAccepted, &a)
	testlab.Eventually(t, 20*time.Second, "the frozen agent's waiting claim takes the job", func() bool {
		return r.job(t, a.JobID).StartedAt != nil
	})

	// Lease lapse, then offline (30 s of silence) past the lease, then a
	// reaper round: well within the job's queue timeout.
	j := r.waitJob(t, a.JobID, "failed", 2*jobs.DefaultLease+3*jobs.HeartbeatInterval+30*time.Second)
	if j.Error == nil || *j.Error != serverOffline {
		t.Fatalf("job of the frozen agent failed with %v, want %s", deref(j.Error), serverOffline)
	}
	if took := j.FinishedAt.Sub(j.CreatedAt); took >= queueTimeout {
		t.Errorf("the job failed %s after it was queued, not within its queue timeout %s", took, queueTimeout)
	}
	var requeued, offline bool
	for _, ev := range j.Events {
		requeued = requeued || ev.Level == "warn" && strings.Contains(ev.Message, "queued again")
		offline = offline || ev.Level == "warn" && strings.Contains(ev.Message, "offline")
	}
	if !requeued || !offline {
		t.Errorf("job events %+v: want a warning that it was queued again and one that the server stayed offline", j.Events)
	}
	if s := r.server(t, r.serverID); s.Status != "offline" {
		t.Errorf("server of the frozen agent is %s, want offline", s.Status)
	}
	var jobsList struct {
		Jobs []struct {
			ID         string  `json:"id"`
			ErrorClass *string `json:"error_class"`
		} `json:"jobs"`
	}
	expectJSON(t, r.Get(t, "/api/v1/jobs?server_id="+r.serverID, r.Token), http.StatusOK, &jobsList)
	for _, l := range jobsList.Jobs {
		if l.ID == a.JobID && (l.ErrorClass == nil || *l.ErrorClass != serverOffline) {
			t.Errorf("error class of the job in the list: %v, want %s", l.ErrorClass, serverOffline)
		}
	}
	t.Logf("failed %s after the freeze", time.Since(frozenAt).Round(time.Second))

	r.agent.Thaw(t)
	testlab.Eventually(t, 30*time.Second, "the thawed agent heartbeats again", func() bool {
		return r.server(t, r.serverID).Status == "online"
	})
	// A new job runs: the agent's claim loop is past the stale answer.
	if next, _ := r.testStorage(t); next.Status != "succeeded" {
		t.Fatalf("storage test after the thaw: %s %v", next.Status, deref(next.Error))
	}
	// Whether the agent read the stale answer (its claim's own deadline
	// passed while it was frozen): if it did, its confirmation (the secrets) was refused
	// and dropped the job without running it.
	if strings.Contains(r.agent.Logs(), a.JobID) {
		t.Logf("the agent read the stale answer to its claim")
		testlab.Eventually(t, 10*time.Second, "the agent drops the failed job", func() bool {
			return strings.Contains(r.agent.Logs(), "job abandoned: the control plane no longer hands it to this agent")
		})
	}
	for _, line := range strings.Split(r.agent.Logs(), "\n") {
		if strings.Contains(line, a.JobID) && (strings.Contains(line, "job finished") || strings.Contains(line, "job result delivered")) {
			t.Errorf("the agent ran the failed job: %s", line)
		}
	}
	// The storage test after the thaw wrote its probe once; the failed
	// one wrote nothing.
	if got := r.s3.Requests(http.MethodPut); got != 2*puts {
		t.Errorf("PUT requests to the storage: %d, want %d (two storage tests, the failed job none)", got, 2*puts)
	}
	after := r.job(t, a.JobID)
	if after.Status != "failed" || after.Error == nil || *after.Error != serverOffline || after.LateResult != nil {
		t.Fatalf("the failed job after the agent woke up: %s %v, late result %+v; want still failed %s, none",
			after.Status, deref(after.Error), after.LateResult, serverOffline)
	}
}
