package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// svcBuildScript is the service application's build: it writes the
// launcher of the committed program with the commit's version.
const svcBuildScript = `set -e
echo "building version $(cat VERSION) as $(id -un)"
printf '#!/bin/sh\nexec ./svcweb -version %s\n' "$(cat VERSION)" > run.sh
chmod 755 run.sh
`

// TestServiceApplicationOnSystemdHost runs a service application through
// the API on a real systemd host: the agent installed by the installer,
// the commit fetched from the git host stand-in and built on the host as
// its build account, run under a sandboxed unit per release slot behind
// a real Caddy. It is redeployed under load without a failed request, a
// failing and a timed-out build fail with their output while the old
// release serves, a rollback starts a kept release, the journal is read,
// app_down opens when the live slot stops answering its health path, the
// detail shows the slots, and deleting the application removes its units
// and releases.
func TestServiceApplicationOnSystemdHost(t *testing.T) {
	t.Parallel()
	requireNspawnHost(t)
	root := debianRootfs(t)
	gh := testlab.StartGitHost(t)
	agentDir := t.TempDir()
	buildAgent(t, filepath.Join(agentDir, "capstan-agent"), "svcapps")
	opts := gitHostOptions(store.SQLite, gh)
	opts.Args = append(opts.Args, "--agent-dir", agentDir)
	f := newFleet(t, opts)
	caddy := testlab.StartCaddy(t)
	e := f.createEnrollment(t, "svc-host")

	h := testlab.BootHost(t, root, testlab.HostOptions{BindsRO: []string{gh.CAFile + ":/etc/capstan-test-ca.pem"},
		Binds: []string{caddy.AdminBind()}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("capstan-agent journal:\n%s", h.Exec(t, "journalctl -u capstan-agent -u 'capstan-app-*' --no-pager -n 120").Stdout)
		}
	})
	h.InstallPackages(t, "git")
	if res := h.RunInstaller(t, f.URL+"/agent/install.sh", "--token", e.Token); res.ExitCode != 0 {
		t.Fatalf("installer: exit %d\n%s", res.ExitCode, res.Stderr)
	}
	// The host shares this machine's network: its agent drives the test's
	// Caddy on free ports instead of one on 80 and 443, and its git
	// trusts the stand-in's CA as an operator would set it.
	h.MustExec(t, fmt.Sprintf(`set -e
systemctl disable --now caddy-api.service >/dev/null 2>&1 || true
mkdir -p /etc/systemd/system/capstan-agent.service.d
cat > /etc/systemd/system/capstan-agent.service.d/test.conf <<EOF
[Service]
Environment="CAPSTAN_CADDY_ADMIN=%s" CAPSTAN_PROXY_HTTP_PORT=%d CAPSTAN_PROXY_HTTPS_PORT=%d
Environment=CAPSTAN_PROXY_LISTEN_HOST=127.0.0.1 GIT_SSL_CAINFO=/etc/capstan-test-ca.pem
Environment=CAPSTAN_AGENT_HEALTH_PROBE_INTERVAL=1s
EOF
systemctl daemon-reload
systemctl restart capstan-agent.service`, caddy.AdminURL, caddy.HTTPPort, caddy.HTTPSPort))
	testlab.Eventually(t, startTimeout, "the agent is online", func() bool { return f.server(t, e.Server.ID).Status == "online" })

	s := &appStack{appRig: &appRig{Fleet: f, serverID: e.Server.ID}, Caddy: caddy}
	repo := gh.AddGitRepo(t, "acme", "svc", true)
	inst := connectGitHost(t, f.ControlPlane, gh, f.Token, "acme")
	web := testlab.GoProgram(t, "../internal/agent/deploy/testdata/svcweb")
	push := func(version string) string {
		return gh.Push(t, repo, "main", map[string][]byte{"svcweb": web, "VERSION": []byte(version + "\n"),
			"build.sh": []byte(svcBuildScript)}, "Release "+version)
	}
	push("v1")

	const greeting = `hello "there" $HOME`
	app := s.createApp(t, map[string]any{
		"name": "svc", "kind": "service", "health_path": "/health", "memory_limit": "64m",
		"source":        map[string]any{"type": "git", "installation_id": inst, "repo_id": repo.ID, "branch": "main"},
		"build_command": "sh build.sh", "start_command": "./run.sh", "build_timeout_seconds": 120,
		"env": []map[string]string{{"key": "GREETING", "value": greeting}},
	})
	if app.Kind != "service" || app.Latest == nil {
		t.Fatalf("created application: %+v", app)
	}
	d1, _ := s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	sv := d1.Result.Service
	if sv == nil || !sv.Built || sv.Release != d1.ID || sv.Unit != fmt.Sprintf("capstan-app-svc@%d.service", sv.Port) {
		t.Fatalf("first deployment's result: %+v", d1.Result)
	}
	if _, ok := findEvent(d1.Events, "building version v1 as capstan-build"); !ok {
		t.Fatalf("no build output in the events:\n%s", eventsText(d1.Events))
	}
	// The unit's sandbox, as specified.
	props := h.Show(t, sv.Unit, "DynamicUser", "ProtectSystem", "PrivateTmp", "NoNewPrivileges", "MemoryMax", "ActiveState")
	for k, want := range map[string]string{"DynamicUser": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
		"NoNewPrivileges": "yes", "MemoryMax": strconv.Itoa(64 << 20), "ActiveState": "active"} {
		if props[k] != want {
			t.Errorf("%s of %s is %q, want %q", k, sv.Unit, props[k], want)
		}
	}

	// The detail shows the slot, once the host's inventory lists it.
	testlab.EventuallyReport(t, 2*time.Minute, "the detail shows the live slot running", func() (bool, string) {
		r := s.Get(t, "/api/v1/applications/"+app.ID, f.Token)
		expectStatus(t, r, http.StatusOK)
		var detail struct {
			Slots *struct {
				CollectedAt *time.Time `json:"collected_at"`
				Slots       []struct {
					Unit    string `json:"unit"`
					Port    int    `json:"port"`
					Release string `json:"release"`
					State   string `json:"state"`
					Status  string `json:"status"`
					Live    bool   `json:"live"`
				} `json:"slots"`
			} `json:"slots"`
		}
		if err := json.Unmarshal(r.Body, &detail); err != nil {
			t.Fatal(err)
		}
		sl := detail.Slots
		return sl != nil && sl.CollectedAt != nil && len(sl.Slots) == 1 && sl.Slots[0].Unit == sv.Unit && sl.Slots[0].Port == sv.Port &&
				sl.Slots[0].Release == d1.ID && sl.Slots[0].State == "running" && sl.Slots[0].Status == "active (running)" && sl.Slots[0].Live,
			string(r.Body)
	})

	const hostname = "svc.test"
	resp := s.Post(t, "/api/v1/domains", f.Token, map[string]any{"hostname": hostname, "application_id": app.ID, "tls_mode": "internal"})
	var dom domainChange
	expectJSON(t, resp, http.StatusCreated, &dom)
	s.waitJob(t, dom.JobID, "succeeded", jobTimeout)
	hc := s.Client(t)
	url := caddy.URL("https", hostname, "/")
	want := func(v string) string { return "version=" + v + " greeting=" + greeting }
	s.waitSite(t, hc, url, want("v1"), time.Minute)

	// Redeploys under load: no request fails.
	n := 3
	if v, err := strconv.Atoi(os.Getenv("CAPSTAN_SVC_REDEPLOYS")); err == nil && v > 0 {
		n = v
	}
	load := startLoad(t, hc, url, 4, 0, func(b string) bool { return strings.HasPrefix(b, "version=v") })
	var took []time.Duration
	var last AppDeployment
	var redeploys []AppDeployment
	for i := range n {
		version := fmt.Sprintf("v2.%d", i)
		push(version)
		id := s.deploy(t, app.ID, nil)
		last, _ = s.waitDeployment(t, id, "succeeded", pollInterval, deployTimeout)
		redeploys = append(redeploys, last)
		if last.StartedAt != nil && last.FinishedAt != nil {
			took = append(took, last.FinishedAt.Sub(*last.StartedAt))
		}
		load.waitAnswer(t, want(version), time.Minute)
	}
	counts := load.Take()
	load.Stop()
	t.Logf("%d redeploys of the service application under load: %v; %s", n, took, counts)
	if counts.Failures != 0 || counts.Requests() == 0 {
		t.Errorf("requests failed during the redeploys: %s", counts)
	}
	serving := want(fmt.Sprintf("v2.%d", n-1))

	// A failing and a timed-out build: failed deployments with their
	// output, the old release serving.
	push("v3")
	for _, tc := range []struct{ cmd, want, tail string }{
		{"echo about to fail; exit 3", "the build command failed", "about to fail"},
		{"echo sleeping; sleep 600", "exceeded its time limit of 2s", "sleeping"},
	} {
		r := s.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/applications/" + app.ID, Token: f.Token,
			JSON: map[string]any{"build_command": tc.cmd, "build_timeout_seconds": 2}})
		expectStatus(t, r, http.StatusOK)
		d, _ := s.waitDeployment(t, s.deploy(t, app.ID, nil), "failed", pollInterval, deployTimeout)
		if msg := deref(d.Error); !strings.Contains(msg, tc.want) || !strings.Contains(msg, tc.tail) {
			t.Errorf("build %q: error %q, want %q with the output tail %q", tc.cmd, msg, tc.want, tc.tail)
		}
		if a, err := fetch(hc, url); err != nil || a.Body != serving {
			t.Errorf("after the failed build %q: %+v %v, want %q", tc.cmd, a, err, serving)
		}
	}

	// A rollback starts a kept release again, without a build: the first
	// one, unless it fell out of the last five.
	target, version := d1, "v1"
	if n >= 5 {
		r := s.Post(t, "/api/v1/deployments/"+d1.ID+"/rollback", f.Token, nil)
		expectStatus(t, r, http.StatusConflict)
		if !strings.Contains(string(r.Body), "release-gone") {
			t.Errorf("rollback to a release no longer kept: %s", r.Body)
		}
		target, version = redeploys[n-2], fmt.Sprintf("v2.%d", n-2)
	}
	r := s.Post(t, "/api/v1/deployments/"+target.ID+"/rollback", f.Token, nil)
	var rb deployAccepted
	expectJSON(t, r, http.StatusAccepted, &rb)
	drb, _ := s.waitDeployment(t, rb.DeploymentID, "succeeded", pollInterval, deployTimeout)
	if drb.Result.Service == nil || drb.Result.Service.Built || drb.Result.Service.Release != target.ID {
		t.Errorf("rollback result: %+v", drb.Result.Service)
	}
	s.waitSite(t, hc, url, want(version), time.Minute)

	// The journal of the live slot, and the slots' state.
	var lj struct {
		JobID string `json:"job_id"`
	}
	expectJSON(t, s.Post(t, "/api/v1/applications/"+app.ID+"/logs", f.Token, map[string]any{"lines": 50}), http.StatusAccepted, &lj)
	var logs struct {
		Status string               `json:"status"`
		Lines  []agentproto.LogLine `json:"lines"`
		Unit   string               `json:"unit"`
		State  string               `json:"state"`
		Slots  []agentproto.ServiceSlot
	}
	testlab.EventuallyReport(t, jobTimeout, "the log read ends", func() (bool, string) {
		r := s.Get(t, "/api/v1/applications/"+app.ID+"/logs/"+lj.JobID, f.Token)
		expectStatus(t, r, http.StatusOK)
		if err := json.Unmarshal(r.Body, &logs); err != nil {
			t.Fatal(err)
		}
		return logs.Status == "succeeded" || logs.Status == "failed", string(r.Body)
	})
	started := false
	for _, l := range logs.Lines {
		started = started || strings.HasPrefix(l.Message, "svcweb "+version+" starting on 127.0.0.1:")
	}
	if !started || logs.State != "running" || !strings.HasPrefix(logs.Unit, "capstan-app-svc@") || len(logs.Slots) != 1 || !logs.Slots[0].Live {
		t.Errorf("logs: status %s unit %s state %s slots %+v, lines %+v", logs.Status, logs.Unit, logs.State, logs.Slots, logs.Lines)
	}

	// The live slot is probed on its loopback port: app_down opens when
	// it stops answering, and resolves when it answers again.
	down := f.createRule(t, map[string]any{"kind": "app_down", "duration": 2, "scope": "application", "scope_id": app.ID})
	if _, open := f.alertOf(t, down.ID, "open"); open {
		t.Fatalf("app_down open for the serving slot")
	}
	h.MustExec(t, "systemctl stop "+logs.Unit)
	a := f.waitAlert(t, time.Minute, down.ID, "open")
	if a.Subject.ID != app.ID || a.Subject.Type != "application" {
		t.Errorf("app_down of the stopped slot: %+v", a)
	}
	h.MustExec(t, "systemctl start "+logs.Unit)
	f.waitAlert(t, time.Minute, down.ID, "resolved")

	// Deleting the application removes its units and releases.
	r = s.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/applications/" + app.ID, Token: f.Token})
	expectStatus(t, r, http.StatusAccepted)
	testlab.Eventually(t, jobTimeout, "the application is deleted", func() bool {
		return s.Get(t, "/api/v1/applications/"+app.ID, f.Token).Status == http.StatusNotFound
	})
	if out := h.Exec(t, "ls /etc/systemd/system/capstan-app-svc@* /var/lib/capstan-apps/svc /etc/capstan-apps/svc 2>/dev/null").Stdout; out != "" {
		t.Errorf("left on the host after the deletion:\n%s", out)
	}
}
