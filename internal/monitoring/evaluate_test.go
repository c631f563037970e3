package monitoring

import (
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/servers"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

// world is a fleet and the state evaluation keeps between rounds, with
// ApplyEvaluation's rules played in memory.
type world struct {
	f     *fleet
	rules []Rule
	conds map[[2]string]Condition
	open  map[[2]string]Alert
	n     int
}

func newWorld(rules ...Rule) *world {
	w := &world{rules: rules, conds: map[[2]string]Condition{}, open: map[[2]string]Alert{},
		f: &fleet{now: t0, servers: map[string]servers.Server{}, samples: map[string]ServerSample{}}}
	seen := t0
	w.f.servers["srv_1"] = servers.Server{ID: "srv_1", Name: "web-1", Status: servers.Online, Tags: []string{"web"}, LastSeenAt: &seen}
	w.f.servers["srv_2"] = servers.Server{ID: "srv_2", Name: "db-1", Status: servers.Online, Tags: []string{"db"}, LastSeenAt: &seen}
	return w
}

func rule(kind Kind, threshold float64, duration time.Duration) Rule {
	sp, _ := SpecOf(kind)
	return Rule{ID: "rul_" + string(kind), Kind: kind, Scope: ScopeAll, Threshold: threshold, Duration: int(duration / time.Second),
		Severity: Warning, Enabled: true, Unit: sp.Unit}
}

func (w *world) cpu(server string, v float64) {
	w.f.samples[server] = ServerSample{ServerID: server, At: w.f.now, CPUPercent: v}
}

// step advances the clock and evaluates, returning "+key" per alert
// opened and "-key" per alert resolved.
func (w *world) step(d time.Duration) []string {
	w.f.now = w.f.now.Add(d)
	var conds []Condition
	for _, c := range w.conds {
		conds = append(conds, c)
	}
	var open []Alert
	for _, a := range w.open {
		open = append(open, a)
	}
	c := plan(w.f, w.rules, conds, open, func() string { w.n++; return fmt.Sprintf("alr_%d", w.n) })
	var out []string
	for _, d := range c.Drop {
		delete(w.conds, [2]string{d.RuleID, d.Key})
	}
	for _, s := range c.Start {
		w.conds[[2]string{s.RuleID, s.Key}] = s
	}
	for _, a := range c.Open {
		k := [2]string{a.RuleID, a.Key}
		if _, ok := w.open[k]; ok {
			panic("two open alerts for " + a.Key)
		}
		w.open[k] = a
		out = append(out, "+"+a.Key)
	}
	for _, id := range c.Resolve {
		for k, a := range w.open {
			if a.ID == id {
				delete(w.open, k)
				out = append(out, "-"+a.Key)
			}
		}
	}
	return out
}

func want(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestAlertOpensOnlyAfterDurationAndResolvesWithHysteresis(t *testing.T) {
	w := newWorld(rule(CPUHigh, 90, 2*time.Minute))
	w.cpu("srv_1", 95)
	want(t, "first high sample", w.step(0))
	w.cpu("srv_1", 96)
	want(t, "high for 1 minute", w.step(time.Minute))
	w.cpu("srv_1", 97)
	want(t, "high for 2 minutes", w.step(time.Minute), "+srv_1")
	// Around the threshold and down to within the hysteresis: stays open.
	for _, v := range []float64{89, 91, 86, 90, 85.5} {
		w.cpu("srv_1", v)
		want(t, fmt.Sprintf("at %g", v), w.step(30*time.Second))
	}
	w.cpu("srv_1", 85)
	want(t, "5 points below", w.step(30*time.Second), "-srv_1")
	// Flapping around the threshold never holds for the duration.
	for i := range 10 {
		w.cpu("srv_1", []float64{91, 89}[i%2])
		want(t, "flapping", w.step(30*time.Second))
	}
}

func TestStaleOrMissingDataChangesNothing(t *testing.T) {
	w := newWorld(rule(CPUHigh, 90, 0), rule(DiskHigh, 90, 0))
	w.f.samples["srv_1"] = ServerSample{ServerID: "srv_1", At: t0, CPUPercent: 99,
		Filesystems: []agentproto.FilesystemSample{{Mount: "/", BytesTotal: 100, BytesUsed: 95}, {Mount: "/data", BytesTotal: 100, BytesUsed: 10}}}
	want(t, "high", w.step(0), "+srv_1", "+srv_1:/")
	// The agent goes quiet: samples age, the server goes offline.
	want(t, "stale", w.step(10*time.Minute))
	srv := w.f.servers["srv_1"]
	srv.Status = servers.Offline
	w.f.servers["srv_1"] = srv
	want(t, "offline", w.step(time.Minute))
	// Back, with / emptied and /data unmounted.
	srv.Status = servers.Online
	w.f.servers["srv_1"] = srv
	w.f.samples["srv_1"] = ServerSample{ServerID: "srv_1", At: w.f.now.Add(time.Minute), CPUPercent: 10,
		Filesystems: []agentproto.FilesystemSample{{Mount: "/", BytesTotal: 100, BytesUsed: 50}}}
	want(t, "back and low", w.step(time.Minute), "-srv_1", "-srv_1:/")
}

func TestDiskAlertsArePerFilesystem(t *testing.T) {
	w := newWorld(rule(DiskHigh, 80, 0), rule(InodeHigh, 80, 0))
	w.f.samples["srv_1"] = ServerSample{ServerID: "srv_1", At: t0, Filesystems: []agentproto.FilesystemSample{
		{Mount: "/", BytesTotal: 100, BytesUsed: 81, InodesTotal: 100, InodesUsed: 1},
		{Mount: "/data", BytesTotal: 100, BytesUsed: 90, InodesTotal: 0},
		{Mount: "/small", BytesTotal: 100, BytesUsed: 5, InodesTotal: 10, InodesUsed: 9}}}
	got := w.step(0)
	if len(got) != 3 {
		t.Fatalf("opened: %v, want /, /data (bytes) and /small (inodes)", got)
	}
	for k, a := range w.open {
		if a.Subject.Type != "filesystem" || a.Subject.ID != "srv_1" || "srv_1:"+a.Subject.Detail != k[1] {
			t.Fatalf("alert %v: subject %+v", k, a.Subject)
		}
	}
}

func TestScopesAndDisabledRules(t *testing.T) {
	tagged := rule(CPUHigh, 90, 0)
	tagged.Scope, tagged.ScopeID = ScopeTag, "db"
	one := rule(MemoryHigh, 90, 0)
	one.Scope, one.ScopeID = ScopeServer, "srv_1"
	w := newWorld(tagged, one)
	high := 99.0
	for _, id := range []string{"srv_1", "srv_2"} {
		w.f.samples[id] = ServerSample{ServerID: id, At: t0, CPUPercent: 99, MemoryUsedPercent: &high}
	}
	got := w.step(0)
	want(t, "scoped", got, "+srv_2", "+srv_1")
	if a := w.open[[2]string{tagged.ID, "srv_2"}]; a.Kind != CPUHigh {
		t.Fatalf("cpu alert on the db server: %+v", a)
	}
	w.rules[0].Enabled = false
	want(t, "rule disabled", w.step(time.Second), "-srv_2")
}

func TestAgentOfflineAndAppDownAndTLS(t *testing.T) {
	w := newWorld(rule(AgentOffline, 5, 0), rule(AppDown, 0, 2*time.Minute), rule(TLSExpiring, 14, 0))
	srv := w.f.servers["srv_1"]
	srv.Status = servers.Offline
	w.f.servers["srv_1"] = srv
	want(t, "offline 1 minute", w.step(time.Minute))
	want(t, "offline 5 minutes", w.step(4*time.Minute), "+srv_1")
	if a := w.open[[2]string{"rul_agent_offline", "srv_1"}]; a.Value != 5 {
		t.Fatalf("minutes offline: got %g, want 5", a.Value)
	}
	srv.Status = servers.Online
	w.f.servers["srv_1"] = srv

	failing := w.f.now.Add(-time.Minute)
	w.f.apps = []AppHealth{{AppID: "app_1", AppName: "web", ServerID: "srv_1", FailingSince: &failing, ProbedAt: w.f.now}}
	want(t, "online again, app failing 1 minute", w.step(0), "-srv_1")
	w.f.apps[0].ProbedAt = w.f.now.Add(time.Minute)
	want(t, "app failing 2 minutes", w.step(time.Minute), "+app_1")
	w.f.apps[0].Healthy, w.f.apps[0].FailingSince, w.f.apps[0].ProbedAt = true, nil, w.f.now.Add(30*time.Second)
	want(t, "app healthy", w.step(30*time.Second), "-app_1")
	w.f.apps = nil

	exp := w.f.now.Add(10 * 24 * time.Hour)
	w.f.domains = []DomainCertificate{{DomainID: "dom_1", Hostname: "a.example", ServerID: "srv_1", TLSMode: "internal", NotAfter: &exp}}
	want(t, "10 days left", w.step(0), "+dom_1")
	exp = w.f.now.Add(14*24*time.Hour + 12*time.Hour)
	w.f.domains[0].NotAfter = &exp
	want(t, "14.5 days left (within a day of the threshold)", w.step(0))
	exp = w.f.now.Add(90 * 24 * time.Hour)
	w.f.domains[0].NotAfter = &exp
	want(t, "renewed", w.step(0), "-dom_1")
}

func TestRuleValidation(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	for _, c := range []struct {
		n     NewRule
		field string
	}{
		{NewRule{Kind: "cpu_hot"}, "kind"},
		{NewRule{Kind: CPUHigh, Threshold: f(150)}, "threshold"},
		{NewRule{Kind: CPUHigh, Threshold: f(0)}, "threshold"},
		{NewRule{Kind: TLSExpiring, Threshold: f(91)}, "threshold"},
		{NewRule{Kind: AgentOffline, Threshold: f(0.5)}, "threshold"},
		{NewRule{Kind: AppDown, Threshold: f(1)}, "threshold"},
		{NewRule{Kind: CPUHigh, Duration: i(-1)}, "duration"},
		{NewRule{Kind: CPUHigh, Duration: i(86401)}, "duration"},
		{NewRule{Kind: CPUHigh, Scope: "galaxy"}, "scope"},
		{NewRule{Kind: CPUHigh, Scope: ScopeApplication, ScopeID: "app_1"}, "scope"},
		{NewRule{Kind: CPUHigh, Scope: ScopeTag}, "scope_id"},
		{NewRule{Kind: CPUHigh, ScopeID: "srv_1"}, "scope_id"},
		{NewRule{Kind: CPUHigh, Severity: "fatal"}, "severity"},
	} {
		_, err := ruleOf(c.n, "rul_x", "", t0)
		fe := fault.As(err)
		if fe == nil || fe.Kind != fault.Invalid || len(fe.Fields) != 1 || fe.Fields[0].Field != c.field {
			t.Errorf("%+v: got %#v, want one invalid field %s", c.n, fe, c.field)
		}
	}
	r, err := ruleOf(NewRule{Kind: DiskHigh}, "rul_x", "usr_1", t0)
	if err != nil || r.Threshold != 90 || r.Duration != 300 || r.Severity != Critical || !r.Enabled || r.Scope != ScopeAll || r.Unit != "percent" {
		t.Fatalf("defaults: %+v %v", r, err)
	}
}
