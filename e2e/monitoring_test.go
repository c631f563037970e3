package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// RuleInfo is an alert rule as the API shows it.
type RuleInfo struct {
	ID        string  `json:"id"`
	Kind      string  `json:"kind"`
	Name      string  `json:"name"`
	Scope     string  `json:"scope"`
	ScopeID   string  `json:"scope_id"`
	Threshold float64 `json:"threshold"`
	Unit      string  `json:"unit"`
	Duration  int     `json:"duration"`
	Severity  string  `json:"severity"`
	Enabled   bool    `json:"enabled"`
}

// AlertInfo is an alert as the API shows it.
type AlertInfo struct {
	ID       string `json:"id"`
	RuleID   string `json:"rule_id"`
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	Subject  struct {
		Type   string `json:"type"`
		ID     string `json:"id"`
		Name   string `json:"name"`
		Detail string `json:"detail"`
	} `json:"subject"`
	Value          float64    `json:"value"`
	Threshold      float64    `json:"threshold"`
	Unit           string     `json:"unit"`
	State          string     `json:"state"`
	OpenedAt       time.Time  `json:"opened_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	AcknowledgedBy *string    `json:"acknowledged_by"`
	AcknowledgedAt *time.Time `json:"acknowledged_at"`
}

// Evaluation is the reply of POST /api/v1/monitoring/evaluate.
type Evaluation struct {
	Opened   []AlertInfo `json:"opened"`
	Resolved []AlertInfo `json:"resolved"`
}

func (f *Fleet) rules(t testing.TB) []RuleInfo {
	t.Helper()
	var out struct {
		Rules []RuleInfo `json:"rules"`
	}
	expectJSON(t, f.Get(t, "/api/v1/monitoring/rules", f.Token), http.StatusOK, &out)
	return out.Rules
}

func (f *Fleet) createRule(t testing.TB, body map[string]any) RuleInfo {
	t.Helper()
	var rule RuleInfo
	expectJSON(t, f.Post(t, "/api/v1/monitoring/rules", f.Token, body), http.StatusCreated, &rule)
	return rule
}

func (f *Fleet) evaluate(t testing.TB) Evaluation {
	t.Helper()
	var e Evaluation
	expectJSON(t, f.Post(t, "/api/v1/monitoring/evaluate", f.Token, nil), http.StatusOK, &e)
	return e
}

func (f *Fleet) alerts(t testing.TB, state string) []AlertInfo {
	t.Helper()
	var out struct {
		Alerts []AlertInfo `json:"alerts"`
	}
	expectJSON(t, f.Get(t, "/api/v1/monitoring/alerts?limit=200&state="+state, f.Token), http.StatusOK, &out)
	return out.Alerts
}

// alertOf returns the alert of a rule in a state, if there is one.
func (f *Fleet) alertOf(t testing.TB, ruleID, state string) (AlertInfo, bool) {
	t.Helper()
	for _, a := range f.alerts(t, state) {
		if a.RuleID == ruleID {
			return a, true
		}
	}
	return AlertInfo{}, false
}

// waitAlert evaluates until the rule's alert is in state, and returns it.
func (f *Fleet) waitAlert(t testing.TB, timeout time.Duration, ruleID, state string) AlertInfo {
	t.Helper()
	var a AlertInfo
	testlab.Eventually(t, timeout, "an alert of "+ruleID+" "+state, func() bool {
		f.evaluate(t)
		var ok bool
		a, ok = f.alertOf(t, ruleID, state)
		return ok
	})
	return a
}

func TestAlertRulesAPI(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		f := newFleet(t, Options{Dialect: d})
		units := map[string]string{}
		for _, r := range f.rules(t) {
			if !r.Enabled || r.Scope != "all" {
				t.Fatalf("default rule %+v: want enabled, scope all", r)
			}
			units[r.Kind] = r.Unit
		}
		want := map[string]string{"agent_offline": "minutes", "cpu_high": "percent", "memory_high": "percent", "disk_high": "percent",
			"inode_high": "percent", "swap_high": "percent", "app_down": "none", "tls_expiring": "days",
			"backup_stale": "hours"}
		if fmt.Sprint(units) != fmt.Sprint(want) {
			t.Fatalf("default rules' kinds and units: got %v, want %v", units, want)
		}
		// The list says what each kind allows, as the console offers it.
		var listed struct {
			Kinds []struct {
				Kind      string   `json:"kind"`
				Unit      string   `json:"unit"`
				Min       float64  `json:"min"`
				Max       float64  `json:"max"`
				Scopes    []string `json:"scopes"`
				Threshold float64  `json:"default_threshold"`
				Duration  int      `json:"default_duration"`
				Severity  string   `json:"default_severity"`
			} `json:"kinds"`
		}
		f.Get(t, "/api/v1/monitoring/rules", f.Token).JSON(t, &listed)
		kindUnits := map[string]string{}
		for _, k := range listed.Kinds {
			kindUnits[k.Kind] = k.Unit
			if k.Kind == "cpu_high" && (k.Min != 1 || k.Max != 100 || k.Threshold != 90 || k.Duration != 300 || k.Severity != "warning" ||
				strings.Join(k.Scopes, ",") != "all,tag,server") {
				t.Fatalf("cpu_high as listed: %+v", k)
			}
			if k.Kind == "backup_stale" && strings.Join(k.Scopes, ",") != "all,instance" {
				t.Fatalf("backup_stale's scopes: %v", k.Scopes)
			}
		}
		if fmt.Sprint(kindUnits) != fmt.Sprint(want) {
			t.Fatalf("listed kinds and units: got %v, want %v", kindUnits, want)
		}

		for _, body := range []map[string]any{
			{"kind": "cpu_high", "threshold": 150},
			{"kind": "cpu_high", "threshold": 0},
			{"kind": "tls_expiring", "threshold": 365},
			{"kind": "backup_stale", "threshold": 0},
			{"kind": "backup_stale", "scope": "server", "scope_id": "srv_x"},
			{"kind": "cpu_hot"},
			{"kind": "cpu_high", "scope": "galaxy", "scope_id": "x"},
			{"kind": "cpu_high", "scope": "domain", "scope_id": "dom_x"},
			{"kind": "cpu_high", "scope": "tag"},
			{"kind": "cpu_high", "duration": -1},
			{"kind": "cpu_high", "severity": "fatal"},
			{"kind": "app_down", "threshold": 3},
		} {
			expectProblem(t, f.Post(t, "/api/v1/monitoring/rules", f.Token, body), http.StatusUnprocessableEntity, "validation-failed")
		}
		if got := len(f.rules(t)); got != len(want) {
			t.Fatalf("rules after refused creations: got %d, want %d", got, len(want))
		}

		r := f.createRule(t, map[string]any{"kind": "disk_high", "scope": "tag", "scope_id": "db"})
		if r.Threshold != 90 || r.Duration != 300 || r.Severity != "critical" || !r.Enabled || r.Unit != "percent" || r.Name != "disk_high" {
			t.Fatalf("created with defaults: %+v", r)
		}
		p := f.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/monitoring/rules/" + r.ID, Token: f.Token,
			JSON: map[string]any{"threshold": 75, "duration": 60, "severity": "warning", "enabled": false}})
		var got RuleInfo
		expectJSON(t, p, http.StatusOK, &got)
		if got.Threshold != 75 || got.Duration != 60 || got.Severity != "warning" || got.Enabled {
			t.Fatalf("patched: %+v", got)
		}
		expectProblem(t, f.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/monitoring/rules/" + r.ID, Token: f.Token,
			JSON: map[string]any{"threshold": 101, "severity": "info"}}), http.StatusUnprocessableEntity, "validation-failed")
		for _, rr := range f.rules(t) {
			if rr.ID == r.ID && (rr.Threshold != 75 || rr.Severity != "warning") {
				t.Fatalf("a refused patch changed the rule: %+v", rr)
			}
		}
		expectStatus(t, f.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/monitoring/rules/" + r.ID, Token: f.Token}), http.StatusNoContent)
		expectProblem(t, f.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/monitoring/rules/" + r.ID, Token: f.Token}), http.StatusNotFound, "not-found")
		for _, action := range []string{"monitoring.rule.created", "monitoring.rule.updated", "monitoring.rule.deleted"} {
			if len(auditEntries(t, f.ControlPlane, f.Token, action)) != 1 {
				t.Fatalf("audit entries of %s: want 1", action)
			}
		}
	})
}

// feeder is an agent speaking the agent protocol from the test, so that
// the test decides what the server's metrics are.
type feeder struct {
	f     *Fleet
	token string
}

func (fd feeder) report(t testing.TB, cpu, memory, swap float64) {
	t.Helper()
	now := time.Now().UTC()
	s := agentproto.MetricSample{At: now, CPUPercent: cpu, MemoryTotal: 1000 << 20, MemoryUsed: uint64(memory*10) << 20,
		MemoryAvailable: uint64(1000-memory*10) << 20, SwapTotal: 1000 << 20, SwapUsed: uint64(swap*10) << 20, UptimeSeconds: 1000,
		Filesystems: []agentproto.FilesystemSample{{Mount: "/", Device: "/dev/vda1", FSType: "ext4", BytesTotal: 100 << 30, BytesUsed: 10 << 30}}}
	expectStatus(t, fd.f.Post(t, "/agent/v1/heartbeat", fd.token, agentproto.HeartbeatRequest{AgentVersion: buildVersion}), http.StatusOK)
	expectStatus(t, fd.f.Post(t, "/agent/v1/metrics", fd.token, agentproto.MetricsRequest{Samples: []agentproto.MetricSample{s}}),
		http.StatusNoContent)
}

// TestHighAlertsOpenAfterDurationResolveWithHysteresis drives a server's
// samples through the agent protocol: a CPU alert opens only after the
// condition held for the rule's duration, stays open while the value
// hovers around the threshold, and resolves 5 points below it;
// acknowledging works on the open alert only.
func TestHighAlertsOpenAfterDurationResolveWithHysteresis(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		f := newFleet(t, Options{Dialect: d})
		e := f.createEnrollment(t, "busy-1")
		fd := feeder{f: f, token: f.enrollHTTP(t, e.Token).AgentToken}
		const hold = 6 * time.Second
		cpu := f.createRule(t, map[string]any{"kind": "cpu_high", "threshold": 80, "duration": int(hold / time.Second), "scope": "server",
			"scope_id": e.Server.ID})
		f.createRule(t, map[string]any{"kind": "memory_high", "threshold": 90, "duration": 0, "scope": "server", "scope_id": e.Server.ID})
		f.createRule(t, map[string]any{"kind": "swap_high", "threshold": 50, "duration": 0, "scope": "server", "scope_id": e.Server.ID,
			"severity": "info"})

		first := time.Now()
		fd.report(t, 95, 95, 60)
		ev := f.evaluate(t)
		kinds := map[string]bool{}
		for _, a := range ev.Opened {
			kinds[a.Kind] = true
		}
		if !kinds["memory_high"] || !kinds["swap_high"] || kinds["cpu_high"] {
			t.Fatalf("first evaluation opened %+v; want memory_high and swap_high (duration 0), not cpu_high", ev.Opened)
		}
		var opened AlertInfo
		testlab.Eventually(t, 60*time.Second, "the cpu alert", func() bool {
			fd.report(t, 95, 95, 60)
			for _, a := range f.evaluate(t).Opened {
				if a.RuleID == cpu.ID {
					opened = a
				}
			}
			return opened.ID != ""
		})
		if held := opened.OpenedAt.Sub(first); held < hold-time.Second {
			t.Fatalf("cpu alert opened %s after the first high sample; want at least %s", held, hold)
		}
		if opened.Value != 95 || opened.Threshold != 80 || opened.Unit != "percent" || opened.Subject.ID != e.Server.ID ||
			opened.Subject.Name != "busy-1" || opened.Severity != "warning" || opened.State != "open" {
			t.Fatalf("cpu alert: %+v", opened)
		}
		// Hovering at the threshold and within 5 points below it: no flapping.
		for _, v := range []float64{79, 81, 76, 80, 75.5} {
			fd.report(t, v, 95, 60)
			if ev := f.evaluate(t); len(ev.Opened)+len(ev.Resolved) != 0 {
				t.Fatalf("at %g%%: evaluation changed %+v", v, ev)
			}
		}
		if got := len(f.alerts(t, "open")); got != 3 {
			t.Fatalf("open alerts: got %d, want 3", got)
		}

		// Acknowledge the open alert; a repeat changes nothing.
		var acked AlertInfo
		expectJSON(t, f.Post(t, "/api/v1/monitoring/alerts/"+opened.ID+"/acknowledge", f.Token, nil), http.StatusOK, &acked)
		if acked.AcknowledgedBy == nil || *acked.AcknowledgedBy != f.Admin.ID || acked.AcknowledgedAt == nil {
			t.Fatalf("acknowledged: %+v", acked)
		}
		expectStatus(t, f.Post(t, "/api/v1/monitoring/alerts/"+opened.ID+"/acknowledge", f.Token, nil), http.StatusOK)

		fd.report(t, 74, 50, 10)
		ev = f.evaluate(t)
		if len(ev.Resolved) != 3 || len(ev.Opened) != 0 {
			t.Fatalf("after the values fell: %+v; want the three alerts resolved", ev)
		}
		resolved, ok := f.alertOf(t, cpu.ID, "resolved")
		if !ok || resolved.ResolvedAt == nil || resolved.AcknowledgedBy == nil {
			t.Fatalf("resolved cpu alert: %+v", resolved)
		}
		expectProblem(t, f.Post(t, "/api/v1/monitoring/alerts/"+opened.ID+"/acknowledge", f.Token, nil), http.StatusConflict, "alert-resolved")
		if len(f.alerts(t, "open")) != 0 || len(f.alerts(t, "all")) != 3 {
			t.Fatalf("alerts: open %d, all %d; want 0 and 3", len(f.alerts(t, "open")), len(f.alerts(t, "all")))
		}
		if got := len(auditEntries(t, f.ControlPlane, f.Token, "monitoring.alert.acknowledged")); got != 1 {
			t.Fatalf("acknowledgements audited: got %d, want 1", got)
		}
		if got := len(f.listEvents(t, "alert.opened")); got != 3 {
			t.Fatalf("alert.opened events: got %d, want 3", got)
		}
		if got := len(f.listEvents(t, "alert.resolved")); got != 3 {
			t.Fatalf("alert.resolved events: got %d, want 3", got)
		}
	})
}

// TestFilesystemAndOfflineAlertsFromARealAgent fills a real loop-mounted
// filesystem that a real agent reports: disk_high and inode_high open for
// that filesystem and resolve when it is emptied. Then the agent is
// killed and agent_offline opens, from the control plane's own evaluation
// loop, and resolves when the agent is back.
func TestFilesystemAndOfflineAlertsFromARealAgent(t *testing.T) {
	t.Parallel()
	mnt := testlab.LoopFilesystem(t, 16, 64)
	f := newFleet(t, Options{Dialect: store.SQLite, Args: []string{"--alert-evaluation-interval=1s"}})
	e, config := f.enrollServer(t, "disk-1")
	agent := startAgent(t, config)
	disk := f.createRule(t, map[string]any{"kind": "disk_high", "threshold": 50, "duration": 0, "scope": "server", "scope_id": e.Server.ID})
	inode := f.createRule(t, map[string]any{"kind": "inode_high", "threshold": 50, "duration": 0, "scope": "server", "scope_id": e.Server.ID})
	offline := f.createRule(t, map[string]any{"kind": "agent_offline", "threshold": 1, "scope": "server", "scope_id": e.Server.ID})

	big := filepath.Join(mnt, "big")
	if err := os.WriteFile(big, make([]byte, 12<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, rule := range []RuleInfo{disk, inode} {
		a := f.waitAlert(t, 90*time.Second, rule.ID, "open")
		if a.Subject.Type != "filesystem" || a.Subject.Detail != mnt || a.Subject.ID != e.Server.ID || a.Value < 50 {
			t.Fatalf("%s alert: %+v; want the filesystem at %s", rule.Kind, a, mnt)
		}
		if others := f.alerts(t, "open"); len(others) > 2 {
			t.Fatalf("open alerts: %+v; want only the loop filesystem's", others)
		}
	}
	entries, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "f") || en.Name() == "big" {
			if err := os.Remove(filepath.Join(mnt, en.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.waitAlert(t, 90*time.Second, disk.ID, "resolved")
	f.waitAlert(t, 90*time.Second, inode.ID, "resolved")

	agent.Kill(t)
	var a AlertInfo
	testlab.Eventually(t, 3*time.Minute, "agent_offline opened by the evaluation loop", func() bool {
		var ok bool
		a, ok = f.alertOf(t, offline.ID, "open")
		return ok
	})
	if a.Value < 1 || a.Unit != "minutes" || a.Subject.Type != "server" {
		t.Fatalf("agent_offline alert: %+v", a)
	}
	startAgent(t, config)
	testlab.Eventually(t, 60*time.Second, "agent_offline resolved", func() bool {
		_, ok := f.alertOf(t, offline.ID, "resolved")
		return ok
	})
}
