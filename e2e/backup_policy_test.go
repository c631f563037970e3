package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// BackupPolicy is a policy as GET /api/v1/backups/policies lists it.
type BackupPolicy struct {
	InstanceID   string     `json:"instance_id"`
	InstanceName string     `json:"instance_name"`
	Enabled      bool       `json:"enabled"`
	EveryHours   int        `json:"every_hours"`
	Keep         int        `json:"keep"`
	Databases    []string   `json:"databases"`
	Verify       bool       `json:"verify"`
	NextDueAt    *time.Time `json:"next_due_at"`
	Stale        []struct {
		Database string `json:"database"`
	} `json:"stale"`
	UpdatedAt *time.Time `json:"updated_at"`
}

func (r *backupRig) policy(t testing.TB, instanceID string) BackupPolicy {
	t.Helper()
	resp := r.Get(t, "/api/v1/backups/policies", r.Token)
	var out struct {
		Policies []BackupPolicy `json:"policies"`
	}
	expectJSON(t, resp, http.StatusOK, &out)
	for _, p := range out.Policies {
		if p.InstanceID == instanceID {
			return p
		}
	}
	t.Fatalf("no policy of %s: %s", instanceID, resp.Body)
	return BackupPolicy{}
}

func (r *backupRig) putPolicy(t testing.TB, instanceID string, body map[string]any) *Response {
	t.Helper()
	return r.Do(t, Req{Method: http.MethodPut, Path: "/api/v1/backups/policies/" + instanceID, Token: r.Token, JSON: body})
}

// schedulerRounds counts the backup scheduler's rounds in a control
// plane's log.
func schedulerRounds(cp *ControlPlane) int {
	n := 0
	for _, l := range cp.LogLines() {
		if l["msg"] == "background task ran" && l["task"] == "backup-scheduler" {
			n++
		}
	}
	return n
}

// TestBackupPolicySchedule runs two control planes on one PostgreSQL
// database, their schedulers ticking every second, with a real agent,
// a real S3 server and a real PostgreSQL: every instance has a policy,
// disabled by default; bad policies are 422 and change nothing; an
// enabled policy's backup is queued once (by the scheduler of one
// control plane), succeeds and is verified; later rounds of both
// schedulers queue no other. A restore into a new database named like
// one the instance has is refused up front.
func TestBackupPolicySchedule(t *testing.T) {
	args := []string{"--backup-schedule-interval=1s", "--backup-schedule-jitter=0s"}
	r := newRestoreRigOn(t, store.Postgres, args...)
	other := startControlPlane(t, Options{Dialect: store.Postgres, DatabaseURL: r.ControlPlane.DatabaseURL,
		DataDir: r.ControlPlane.DataDir, Args: append([]string{"--backup-local-dir", r.localDir}, args...)})
	expectStatus(t, r.putSettings(t, r.storageSettings("sched")), http.StatusOK)
	pg, database := r.registerPostgres(t, "pg", "CREATE TABLE items (id int PRIMARY KEY, name text)",
		"INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 500) g")

	if p := r.policy(t, pg.ID); p.Enabled || p.EveryHours != 24 || p.Keep != 7 || !p.Verify || len(p.Databases) != 0 ||
		p.NextDueAt != nil || p.UpdatedAt != nil || p.InstanceName != "pg" {
		t.Fatalf("default policy: %+v", p)
	}
	for _, body := range []map[string]any{
		{"enabled": true, "every_hours": 0, "keep": 2},
		{"enabled": true, "every_hours": 169, "keep": 2},
		{"enabled": true, "every_hours": 1, "keep": 0},
		{"enabled": true, "every_hours": 1, "keep": 366},
		{"enabled": true, "every_hours": 1, "keep": 2, "databases": []string{"no_such_db"}},
	} {
		expectProblem(t, r.putPolicy(t, pg.ID, body), http.StatusUnprocessableEntity, "validation-failed")
	}
	expectStatus(t, r.putPolicy(t, "db_none", map[string]any{"enabled": true, "every_hours": 1, "keep": 2}), http.StatusNotFound)
	if p := r.policy(t, pg.ID); p.Enabled || p.UpdatedAt != nil {
		t.Fatalf("a refused PUT changed the policy: %+v", p)
	}

	resp := r.putPolicy(t, pg.ID, map[string]any{"enabled": true, "every_hours": 1, "keep": 2, "databases": []string{database}})
	expectStatus(t, resp, http.StatusOK)
	var saved BackupPolicy
	resp.JSON(t, &saved)
	if !saved.Enabled || saved.EveryHours != 1 || !saved.Verify || saved.NextDueAt == nil || len(saved.Databases) != 1 {
		t.Fatalf("saved policy: %s", resp.Body)
	}

	// The scheduled backup succeeds and its verification restores it.
	var run BackupRun
	testlab.Eventually(t, 4*time.Minute, "a scheduled backup, verified", func() bool {
		for _, x := range r.runs(t, "&instance_id="+pg.ID) {
			if x.Trigger == "schedule" && x.Status == "failed" {
				t.Fatalf("scheduled backup failed: %s\nagent log:\n%s", x.Error, r.agent.Logs())
			}
			if x.Trigger == "schedule" && len(x.Verified) > 0 && string(x.Verified) != "null" {
				run = x
				return true
			}
		}
		return false
	})
	if run.Status != "succeeded" || run.Database != database {
		t.Fatalf("scheduled run: %+v", run)
	}
	if v := r.verified(t, run.ID); !v.OK || !v.Details.ChecksumOK {
		t.Fatalf("verification of the scheduled backup: %+v\nagent log:\n%s", v, r.agent.Logs())
	}
	// Later rounds (in whichever control plane holds the lease) queue no
	// other backup: the next is due in an hour.
	rounds := schedulerRounds(r.ControlPlane) + schedulerRounds(other)
	testlab.Eventually(t, time.Minute, "five more scheduler rounds", func() bool {
		return schedulerRounds(r.ControlPlane)+schedulerRounds(other) >= rounds+5
	})
	scheduled := 0
	for _, x := range r.runs(t, "&instance_id="+pg.ID) {
		if x.Trigger == "schedule" {
			scheduled++
		}
	}
	if scheduled != 1 {
		t.Fatalf("%d scheduled backups, want 1", scheduled)
	}
	if a, b := schedulerRounds(r.ControlPlane), schedulerRounds(other); a > 0 && b > 0 {
		t.Logf("both control planes ran scheduler rounds (%d and %d): the lease moved", a, b)
	}
	p := r.policy(t, pg.ID)
	if p.NextDueAt == nil || p.NextDueAt.Sub(*saved.NextDueAt) != time.Hour || len(p.Stale) != 0 {
		t.Fatalf("policy after the scheduled backup: %+v (saved next due %s)", p, saved.NextDueAt)
	}

	// mode new into a database the instance has: refused before any job.
	resp = r.Post(t, "/api/v1/backups/"+run.ID+"/restore", r.Token, map[string]any{"mode": "new", "into": database})
	if pr := expectProblem(t, resp, http.StatusUnprocessableEntity, "validation-failed"); !strings.Contains(string(resp.Body), "mode replace") {
		t.Fatalf("problem: %+v", pr)
	}
	for what, text := range map[string]string{"control plane log": r.ControlPlane.Logs(), "other control plane log": other.Logs(),
		"agent log": r.agent.Logs()} {
		if strings.Contains(text, r.s3.SecretAccessKey) {
			t.Errorf("the %s holds the storage secret", what)
		}
	}
}

// TestBackupDeleteAndPrune, with a real agent, S3 server and PostgreSQL:
// DELETE while the storage refuses leaves the backup delete_pending with
// the storage's error (never verified again) and the scheduler deletes
// it once the storage is back; the scheduler prunes the backups beyond
// the policy's keep, never the newest verified one, locally and in the
// storage.
func TestBackupDeleteAndPrune(t *testing.T) {
	r := newRestoreRigOn(t, store.SQLite, "--backup-schedule-interval=1s", "--backup-schedule-jitter=0s", "--backup-delete-retry=1s",
		"--backup-local-keep", "10")
	expectStatus(t, r.putSettings(t, r.storageSettings("keep")), http.StatusOK)
	pg, _ := r.registerPostgres(t, "pg", "CREATE TABLE items AS SELECT g AS id FROM generate_series(1, 100) g")
	var runs []BackupRun
	for range 4 {
		run, j := r.backup(t, pg.ID, "")
		if run.Status != "succeeded" || run.Locations.Local == "" {
			t.Fatalf("backup: %s %+v", j.Status, run)
		}
		runs = append(runs, run)
	}
	if vj := r.post(t, "/api/v1/backups/"+runs[0].ID+"/verify", nil); vj.Status != "succeeded" {
		t.Fatalf("verify: %s %s", vj.Status, deref(vj.Error))
	}
	object := func(run BackupRun) bool { return r.s3.Object(t, "keep/"+run.Locations.Remote) != nil }
	local := func(run BackupRun) bool { _, err := os.Stat(run.Locations.Local); return err == nil }

	// The storage refuses: the local copy goes, the object stays, the
	// backup stays delete_pending with the storage's error.
	r.s3.SetUnavailable(true)
	resp := r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/backups/" + runs[1].ID, Token: r.Token})
	var a Accepted
	expectJSON(t, resp, http.StatusAccepted, &a)
	j := r.backupJob(t, a.JobID)
	var res struct {
		Local, Remote struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
	}
	if err := json.Unmarshal(j.Data, &res); err != nil || j.Status != "failed" || !res.Local.OK || res.Remote.OK || res.Remote.Error == "" {
		t.Fatalf("delete while the storage refuses: %s %s %s", j.Status, deref(j.Error), j.Data)
	}
	pending := r.run(t, runs[1].ID)
	if !pending.DeletePending || pending.DeleteError == "" || local(runs[1]) || !object(runs[1]) {
		t.Fatalf("run after the refused deletion: %+v (local copy there: %v)", pending, local(runs[1]))
	}
	expectProblem(t, r.Post(t, "/api/v1/backups/"+runs[1].ID+"/verify", r.Token, nil), http.StatusConflict, "backup-deleted")
	expectProblem(t, r.Post(t, "/api/v1/backups/"+runs[1].ID+"/restore", r.Token, map[string]any{"mode": "new", "into": "x_copy"}),
		http.StatusConflict, "backup-deleted")
	r.s3.SetUnavailable(false)
	testlab.Eventually(t, 2*time.Minute, "the deletion retried once the storage is back", func() bool {
		for _, x := range r.runs(t, "&instance_id="+pg.ID) {
			if x.ID == runs[1].ID {
				return false
			}
		}
		return true
	})
	if object(runs[1]) {
		t.Fatal("the deleted backup's object is still in the storage")
	}

	// keep 1 with the agent stopped: the scheduled backup waits, and the
	// round prunes runs[2] only: runs[3] is the newest, runs[0] the
	// newest verified.
	r.agent.Terminate(t)
	expectStatus(t, r.putPolicy(t, pg.ID, map[string]any{"enabled": true, "every_hours": 24, "keep": 1}), http.StatusOK)
	testlab.Eventually(t, time.Minute, "runs[2] pruned", func() bool { return r.run(t, runs[2].ID).DeletePending })
	for _, run := range []BackupRun{runs[0], runs[3]} {
		if r.run(t, run.ID).DeletePending {
			t.Fatalf("%s pruned: it is the newest or the newest verified", run.ID)
		}
	}
	// With the agent back, the scheduled backup succeeds and is verified:
	// it is the newest and the newest verified; every other one goes.
	r.agent = startAgent(t, r.agent.Config)
	var scheduled BackupRun
	testlab.Eventually(t, 4*time.Minute, "only the scheduled backup left", func() bool {
		left := r.runs(t, "&instance_id="+pg.ID)
		if len(left) != 1 || left[0].Trigger != "schedule" {
			return false
		}
		scheduled = left[0]
		return true
	})
	if v := r.verified(t, scheduled.ID); !v.OK {
		t.Fatalf("the scheduled backup is not verified: %+v", v)
	}
	for _, run := range runs {
		if object(run) || local(run) {
			t.Errorf("%s: object there %v, local copy there %v after pruning", run.ID, object(run), local(run))
		}
	}
	if !object(scheduled) || !local(scheduled) {
		t.Fatalf("the kept backup lost its object (%v) or local copy (%v)", object(scheduled), local(scheduled))
	}
	resp = r.Get(t, "/api/v1/audit-logs?limit=200&action=backup.pruned", r.Token)
	expectStatus(t, resp, http.StatusOK)
	for _, run := range []BackupRun{runs[0], runs[2], runs[3]} {
		if !strings.Contains(string(resp.Body), run.ID) {
			t.Errorf("no backup.pruned audit entry of %s", run.ID)
		}
	}
}
