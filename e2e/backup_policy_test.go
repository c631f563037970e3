package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
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
	expectStatus(t, resp, http.StatusOK)
	var out struct {
		Policies []BackupPolicy `json:"policies"`
	}
	resp.JSON(t, &out)
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
	host, port, user, password, database := postgresTarget(t)
	pg := r.register(t, map[string]any{"name": "pg", "engine": "postgres", "host": host, "port": port, "username": user,
		"password": password, "database": database, "tls_mode": "disable"})
	var w struct{}
	for _, sql := range []string{"CREATE TABLE items (id int PRIMARY KEY, name text)",
		"INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 500) g"} {
		r.call(t, pg.ID, "query", map[string]any{"readonly": false, "sql": sql}).result(t, &w)
	}

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
	eventually(t, 4*time.Minute, "a scheduled backup, verified", func() bool {
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
	eventually(t, time.Minute, "five more scheduler rounds", func() bool {
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
