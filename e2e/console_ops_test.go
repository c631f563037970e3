package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestConsoleMonitoring drives the monitoring screens in headless
// Chromium (web/e2e/monitoring.mjs) against a real control plane whose
// server reports its metrics through the agent protocol: a real CPU
// alert is open when the browser arrives; it acknowledges it, sees a
// memory alert open live (opened here when the script waits for it),
// creates a rule scoped to the server (after a refused threshold shows
// its field error), edits and disables it, and deletes another rule after
// confirming. The API then shows what the browser did. A member sees the
// same screens without any control to change them.
func TestConsoleMonitoring(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "busy-1")
	fd := feeder{f: f, token: f.enrollHTTP(t, e.Token).AgentToken}
	cpu := f.createRule(t, map[string]any{"kind": "cpu_high", "name": "busy cpu", "threshold": 80, "duration": 0, "scope": "server",
		"scope_id": e.Server.ID})
	memory := f.createRule(t, map[string]any{"kind": "memory_high", "name": "busy memory", "threshold": 80, "duration": 0,
		"scope": "server", "scope_id": e.Server.ID})
	old := f.createRule(t, map[string]any{"kind": "cpu_high", "name": "old cpu", "threshold": 99, "scope": "tag", "scope_id": "nothing"})
	fd.report(t, 95, 10, 0)
	alert := f.waitAlert(t, time.Minute, cpu.ID, "open")

	steps := runConsoleScript(t, f, "monitoring.mjs", []string{"CAPSTAN_ALERT=" + alert.ID, "CAPSTAN_SERVER=busy-1"},
		func(line string, fields []string) {
			if fields[0] == "waiting-live" {
				fd.report(t, 95, 95, 0)
				f.waitAlert(t, time.Minute, memory.ID, "open")
			}
		}, nil)
	want := "acknowledged waiting-live alert-live rule-created rule-saved rule-deleted done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("monitoring.mjs steps %v, want %s", steps, want)
	}

	// The alert is acknowledged, by the browser's user.
	acked, ok := f.alertOf(t, cpu.ID, "open")
	if !ok || acked.AcknowledgedBy == nil || *acked.AcknowledgedBy == f.Admin.ID || acked.AcknowledgedAt == nil {
		t.Fatalf("the alert after the browser acknowledged it: %+v", acked)
	}
	entries := auditEntries(t, f.ControlPlane, f.Token, "monitoring.alert.acknowledged")
	if len(entries) != 1 || entries[0].Actor.Email != "browser-monitoring@example.com" || entries[0].Target.ID != alert.ID {
		t.Fatalf("acknowledgements audited: %+v", entries)
	}

	// The rule made in the browser, edited and disabled; the other deleted.
	var made *RuleInfo
	for _, r := range f.rules(t) {
		if r.ID == old.ID {
			t.Fatalf("the rule deleted in the browser is still there: %+v", r)
		}
		if r.Name == "browser disk" {
			made = &r
		}
	}
	if made == nil || made.Kind != "disk_high" || made.Threshold != 75 || made.Enabled || made.Scope != "server" || made.ScopeID != e.Server.ID {
		t.Fatalf("the rule made in the browser: %+v", made)
	}
	expectProblem(t, f.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/monitoring/rules/" + old.ID, Token: f.Token}),
		http.StatusNotFound, "not-found")

	// A member reads the same screens, and is offered nothing to change.
	steps = runConsoleScriptAs(t, f, "ops-member.mjs", false, []string{"CAPSTAN_PAGES=monitoring", "CAPSTAN_ALERT=" + alert.ID}, nil, nil)
	if strings.Join(steps, " ") != "monitoring-read-only done" {
		t.Fatalf("ops-member.mjs steps %v", steps)
	}
}

// TestConsoleBackups drives the backup screens in headless Chromium
// (web/e2e/backups.mjs) against a real control plane, a real agent, a
// real PostgreSQL database and an S3 stand-in: the browser saves the
// storage settings (the key pair write-only) and tests the storage from
// the server, enables the instance's policy with verification, backs the
// database up and watches the run succeed and be verified live, restores
// it into a new database, is asked before replacing one, and deletes the
// backup. The API and the restored database then show what it did. A
// member sees a backup's screens without any control to change them.
func TestConsoleBackups(t *testing.T) {
	t.Parallel()
	r := newRestoreRig(t)
	pg, database := r.registerPostgres(t, "pg-orders", "CREATE TABLE orders (id int PRIMARY KEY, item text)",
		"INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, 500) g")
	sums := map[string]string{"orders": `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.id)) FROM orders t`}
	source := r.checksums(t, pg.ID, database, sums)
	copyDB := database + "_copy"
	testlab.DropPostgresDatabaseAtCleanup(t, copyDB)

	env := []string{"CAPSTAN_SERVER=db-host", "CAPSTAN_INSTANCE=pg-orders", "CAPSTAN_DATABASE=" + database,
		"CAPSTAN_S3_ENDPOINT=" + r.s3.Endpoint, "CAPSTAN_S3_REGION=" + r.s3.Region, "CAPSTAN_S3_BUCKET=" + r.s3.Bucket,
		"CAPSTAN_S3_KEY=" + r.s3.AccessKeyID, "CAPSTAN_S3_SECRET=" + r.s3.SecretAccessKey, "CAPSTAN_S3_CA=" + r.s3.CA.PEM}
	var runID string
	steps := runConsoleScript(t, r.Fleet, "backups.mjs", env, func(line string, fields []string) {
		switch fields[0] {
		case "run-succeeded":
			runID = fields[1]
			run := r.run(t, runID)
			rows := map[string]int64{}
			for _, tb := range run.Manifest.Tables {
				rows[tb.Name] = tb.Rows
			}
			if run.Status != "succeeded" || run.Trigger != "manual" || run.InstanceID != pg.ID || rows["public.orders"] != 500 {
				t.Errorf("the run the console showed succeeded: %+v", run)
			}
		case "verified":
			var v struct {
				OK bool `json:"ok"`
			}
			if err := json.Unmarshal(r.run(t, fields[1]).Verified, &v); err != nil || !v.OK {
				t.Errorf("the run the console showed verified: %s (%v)", r.run(t, fields[1]).Verified, err)
			}
		case "restored":
			for table, sum := range r.checksums(t, pg.ID, fields[1], sums) {
				if sum != source[table] {
					t.Errorf("%s restored into %s: checksum %s, at backup time %s", table, fields[1], sum, source[table])
				}
			}
		}
	}, func() string { return "agent log:\n" + r.agent.Logs() })
	want := "settings-saved storage-tested policy-saved run-succeeded verified restored deleted done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("backups.mjs steps %v, want %s", steps, want)
	}

	s := r.settings(t)
	if !s.Configured || s.Provider != "s3" || s.Endpoint != r.s3.Endpoint || !s.PathStyle || !s.AccessKeyIDSet || !s.SecretAccessKeySet ||
		s.Prefix != "console/" {
		t.Fatalf("settings saved in the browser: %+v", s)
	}
	p := r.policy(t, pg.ID)
	if !p.Enabled || p.EveryHours != 24 || p.Keep != 3 || !p.Verify {
		t.Fatalf("policy saved in the browser: %+v", p)
	}
	expectProblem(t, r.Get(t, "/api/v1/backups/"+runID, r.Token), http.StatusNotFound, "not-found")
	for action, n := range map[string]int{"backup.settings.updated": 1, "backup.settings.tested": 1, "backup.policy.updated": 1,
		"backup.run.queued": 1, "backup.restore.queued": 1, "backup.delete.queued": 1} {
		entries := auditEntries(t, r.ControlPlane, r.Token, action)
		if len(entries) != n || entries[0].Actor.Email != "browser-backups@example.com" {
			t.Errorf("%s audited: %+v; want %d by the browser's user", action, entries, n)
		}
	}

	// A member reads the screens of a backup, and is offered nothing to
	// change; the storage's secret is not in the page.
	kept, _ := r.backup(t, pg.ID, "")
	steps = runConsoleScriptAs(t, r.Fleet, "ops-member.mjs", false, []string{"CAPSTAN_PAGES=backups", "CAPSTAN_RUN=" + kept.ID,
		"CAPSTAN_S3_SECRET=" + r.s3.SecretAccessKey}, nil, func() string { return "agent log:\n" + r.agent.Logs() })
	if strings.Join(steps, " ") != "backups-read-only done" {
		t.Fatalf("ops-member.mjs steps %v", steps)
	}
}
