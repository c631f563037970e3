package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConsoleMonitoring drives the monitoring screens in headless
// Chromium (web/e2e/monitoring.mjs) against a real control plane whose
// server reports its metrics through the agent protocol: a real CPU
// alert is open when the browser arrives; it acknowledges it, sees a
// memory alert open live (opened here when the script waits for it),
// creates a rule scoped to the server (after a refused threshold shows
// its field error), edits and disables it, and deletes another rule after
// confirming. The API then shows what the browser did.
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
}
