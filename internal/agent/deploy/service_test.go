package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// The service application tests run the agent's app.* executors inside a
// real systemd host (systemd-nspawn) as the agent's unprivileged account,
// with the root helper as the installer sets it up, a real git host
// stand-in, and a real Caddy on the machine in front of the slots.

// The installer's pieces (internal/agentapi/install.sh.tmpl), with the
// helper unit running the test program instead of capstan-agent.
const (
	svcPolkitRule = `polkit.addRule(function(action, subject) {
    if (action.id == "org.freedesktop.systemd1.manage-units" &&
        subject.user == "capstan") {
        var verb = action.lookup("verb");
        var unit = action.lookup("unit");
        if ((verb == "start" || verb == "stop" || verb == "restart") &&
            unit && unit.match(/\.service$/)) {
            return polkit.Result.YES;
        }
    }
});
`
	svcHelperUnit = `[Unit]
Description=Capstan agent helper for service application %i
StartLimitIntervalSec=0

[Service]
Type=oneshot
ExecStart=/opt/capstan-test/svcappjob helper %i
TimeoutStartSec=infinity
`
	// svcBuild writes the launcher of the committed program with the
	// version of the commit, as the build account.
	svcBuild = `set -e
echo "building version $(cat VERSION) as $(id -un)"
printf '#!/bin/sh\nexec ./svcweb -version %s\n' "$(cat VERSION)" > run.sh
chmod 755 run.sh
echo built
`
)

type svcAppHost struct {
	*testlab.Host
	caddy *testlab.Caddy
	git   *testlab.GitHost
	repo  *testlab.HostedRepo
	token string
	web   []byte
}

func startSvcAppHost(t *testing.T) *svcAppHost {
	testlab.RequireNspawn(t)
	root := testlab.DebianRootfs(t)
	g := testlab.StartGitHost(t)
	c := testlab.StartCaddy(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"svcappjob":                   testlab.GoProgram(t, "./testdata/svcappjob"),
		"ca.pem":                      mustRead(t, g.CAFile),
		"50-capstan-agent.rules":      []byte(svcPolkitRule),
		"capstan-app-helper@.service": []byte(svcHelperUnit),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := testlab.BootHost(t, root, testlab.HostOptions{BindsRO: []string{
		dir + ":/opt/capstan-test",
		filepath.Join(dir, "50-capstan-agent.rules") + ":/etc/polkit-1/rules.d/50-capstan-agent.rules",
	}, Binds: []string{c.AdminBind()}})
	h.InstallPackages(t, "git")
	h.MustExec(t, `set -e
useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin capstan
useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin capstan-build
usermod -a -G systemd-journal capstan
install -d -o capstan -g capstan -m 0700 /var/lib/capstan-agent
install -d -m 0755 /var/lib/capstan-apps
install -d -m 0700 /etc/capstan-apps
cp /opt/capstan-test/capstan-app-helper@.service /etc/systemd/system/
systemctl daemon-reload`)
	repo := g.AddGitRepo(t, "acme", "svc", true)
	return &svcAppHost{Host: h, caddy: c, git: g, repo: repo, token: g.TokenFor(t, repo),
		web: testlab.GoProgram(t, "./testdata/svcweb")}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// push commits a version of the application: the program, its version
// and the build script.
func (h *svcAppHost) push(t *testing.T, version string) string {
	t.Helper()
	return h.git.Push(t, h.repo, "main", map[string][]byte{
		"svcweb": h.web, "VERSION": []byte(version + "\n"), "build.sh": []byte(svcBuild),
	}, "version "+version)
}

type svcOutcome struct {
	Data   json.RawMessage `json:"data"`
	Error  string          `json:"error"`
	Events []struct {
		Level   string          `json:"level"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"events"`
}

func (o svcOutcome) messages() string {
	var b strings.Builder
	for _, e := range o.Events {
		b.WriteString(e.Level + ": " + e.Message + "\n")
	}
	return b.String()
}

const (
	svcAppID   = "app_svc1"
	svcAppName = "svc"
	svcHost    = "svc.capstan.test"
	svcGreet   = `he said "hi" $HOME \ 'x' %n`
)

// job runs one job as the agent's account.
func (h *svcAppHost) job(t *testing.T, typ string, payload any, secrets map[string]string) svcOutcome {
	t.Helper()
	p, _ := json.Marshal(payload)
	j, _ := json.Marshal(agentproto.Job{ID: "job-" + typ, Type: typ, Payload: p})
	s, _ := json.Marshal(secrets)
	ps, _ := json.Marshal(proxy.Settings{AdminURL: h.caddy.AdminURL, HTTPPort: h.caddy.HTTPPort, HTTPSPort: h.caddy.HTTPSPort,
		ListenHost: "127.0.0.1", AccessLog: h.caddy.AccessLog})
	res := h.Run(t, "env", "GIT_SSL_CAINFO=/opt/capstan-test/ca.pem", "setpriv", "--reuid=capstan", "--regid=capstan", "--init-groups",
		"/opt/capstan-test/svcappjob", "job", string(j), string(s), string(ps))
	if res.ExitCode != 0 {
		t.Fatalf("svcappjob %s: exit %d\n%s%s", typ, res.ExitCode, res.Stdout, res.Stderr)
	}
	var o svcOutcome
	if err := json.Unmarshal([]byte(res.Stdout), &o); err != nil {
		t.Fatalf("svcappjob printed %q: %v", res.Stdout, err)
	}
	return o
}

// deploy releases deployment dep: a build of commit, or (commit "") the
// kept release of rollbackTo.
func (h *svcAppHost) deploy(t *testing.T, dep, commit string, spec agentproto.ServiceSpec) svcOutcome {
	t.Helper()
	p := agentproto.DeployPayload{AppID: svcAppID, AppName: svcAppName, DeploymentID: dep, HealthPath: "/health",
		HealthTimeoutSeconds: 30, EnvKeys: []string{"GREETING"}, MemoryLimitBytes: 64 << 20,
		Proxy:   agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: svcHost, AppID: svcAppID, TLSMode: agentproto.TLSOff}}},
		Service: &spec}
	secrets := map[string]string{"GREETING": svcGreet}
	if commit != "" {
		p.Build = &agentproto.BuildSpec{CloneURL: h.git.URL + "/acme/svc.git", Repository: "acme/svc", Commit: commit}
		secrets[agentproto.SecretGitToken] = h.token
	}
	return h.job(t, agentproto.JobAppDeploy, p, secrets)
}

func (h *svcAppHost) mustDeploy(t *testing.T, dep, commit string, spec agentproto.ServiceSpec) agentproto.DeployResult {
	t.Helper()
	o := h.deploy(t, dep, commit, spec)
	if o.Error != "" {
		t.Fatalf("deploy %s: %s\n%s", dep, o.Error, o.messages())
	}
	var res agentproto.DeployResult
	if err := json.Unmarshal(o.Data, &res); err != nil || res.Service == nil {
		t.Fatalf("deploy %s: result %s: %v", dep, o.Data, err)
	}
	return res
}

// get fetches path through Caddy.
func (h *svcAppHost) get(path string) (int, string, error) {
	res, err := h.caddy.Client(nil).Get(h.caddy.URL("http", svcHost, path))
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func (h *svcAppHost) wantServing(t *testing.T, version string) {
	t.Helper()
	code, body, err := h.get("/")
	if want := "version=" + version + " greeting=" + svcGreet; err != nil || code != 200 || body != want {
		t.Fatalf("GET / through Caddy: %d %q %v; want 200 %q", code, body, err, want)
	}
}

// load sends requests through Caddy until stop is called, which returns
// the requests sent and those that failed (with the first failures).
func (h *svcAppHost) load(t *testing.T, workers int) (stop func() (sent, failed int64, first []string)) {
	var sent, failed atomic.Int64
	var mu sync.Mutex
	var firsts []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	hc := h.caddy.Client(nil)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				sent.Add(1)
				res, err := hc.Get(h.caddy.URL("http", svcHost, "/"))
				ok := false
				if err == nil {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					ok = res.StatusCode == 200 && strings.HasPrefix(string(b), "version=")
					if !ok {
						err = fmt.Errorf("HTTP %d %q", res.StatusCode, b)
					}
				}
				if !ok {
					failed.Add(1)
					mu.Lock()
					if len(firsts) < 5 {
						firsts = append(firsts, err.Error())
					}
					mu.Unlock()
				}
			}
		}()
	}
	return func() (int64, int64, []string) {
		close(done)
		wg.Wait()
		return sent.Load(), failed.Load(), firsts
	}
}

func TestServiceApplication(t *testing.T) {
	h := startSvcAppHost(t)
	spec := agentproto.ServiceSpec{BuildCommand: "sh build.sh", StartCommand: "./run.sh", BuildTimeoutSeconds: 60}

	// A first release, built as the build account.
	c1 := h.push(t, "v1")
	o1 := h.deploy(t, "dep_1", c1, spec)
	if o1.Error != "" {
		t.Fatalf("first deploy: %s\n%s", o1.Error, o1.messages())
	}
	var r1 agentproto.DeployResult
	if err := json.Unmarshal(o1.Data, &r1); err != nil || r1.Service == nil {
		t.Fatalf("first deploy: result %s: %v", o1.Data, err)
	}
	s1 := r1.Service
	if want := fmt.Sprintf("capstan-app-svc@%d.service", s1.Port); s1.Unit != want || !s1.Built || s1.Release != "dep_1" ||
		s1.Dir != "/var/lib/capstan-apps/svc/releases/dep_1" {
		t.Errorf("first release %+v, want unit %s built from dep_1", s1, want)
	}
	h.wantServing(t, "v1")

	t.Run("BuildOutputStreamed", func(t *testing.T) {
		if msgs := o1.messages(); !strings.Contains(msgs, "info: building version v1 as capstan-build\n") || !strings.Contains(msgs, "info: built\n") {
			t.Errorf("the build's output is not in the events (as the build account):\n%s", msgs)
		}
		o := h.deploy(t, "dep_1", c1, spec) // the same deployment again: built already, released again
		if o.Error != "" {
			t.Fatal(o.Error)
		}
		res := h.Exec(t, "stat -c '%U %a' /var/lib/capstan-apps/svc/releases/dep_1 /var/lib/capstan-apps/svc/releases/dep_1/run.sh")
		if got, want := strings.TrimSpace(res.Stdout), "root 755\nroot 755"; got != want {
			t.Errorf("release owners and modes %q, want %q (root's once built)", got, want)
		}
	})
	h.wantServing(t, "v1")

	t.Run("Sandbox", func(t *testing.T) {
		_, live := h.liveUnit(t)
		props := h.Show(t, live, "DynamicUser", "ProtectSystem", "PrivateTmp", "NoNewPrivileges", "MemoryMax", "ActiveState", "WorkingDirectory", "EnvironmentFiles")
		for k, want := range map[string]string{"DynamicUser": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
			"NoNewPrivileges": "yes", "MemoryMax": strconv.Itoa(64 << 20), "ActiveState": "active"} {
			if props[k] != want {
				t.Errorf("%s of %s is %q, want %q", k, live, props[k], want)
			}
		}
		env := strings.Fields(props["EnvironmentFiles"])
		if len(env) == 0 {
			t.Fatalf("%s has no environment file: %v", live, props)
		}
		if got := strings.TrimSpace(h.MustRun(t, "stat", "-c", "%U %a", env[0])); got != "root 600" {
			t.Errorf("environment file %s: %s, want root 600", env[0], got)
		}
		code, body, err := h.get("/sandbox")
		if err != nil || code != 200 {
			t.Fatalf("GET /sandbox: %d %v", code, err)
		}
		var sb struct {
			UID      int  `json:"uid"`
			WriteCwd bool `json:"write_cwd"`
			WriteTmp bool `json:"write_tmp"`
			WriteEtc bool `json:"write_etc"`
		}
		if err := json.Unmarshal([]byte(body), &sb); err != nil {
			t.Fatal(err)
		}
		if sb.UID == 0 || sb.WriteCwd || sb.WriteEtc || !sb.WriteTmp {
			t.Errorf("sandbox %s: want a non-root user that writes only /tmp", body)
		}
	})

	t.Run("RedeployWithoutFailedRequests", func(t *testing.T) {
		n := 3
		if v, err := strconv.Atoi(os.Getenv("CAPSTAN_SVC_REDEPLOYS")); err == nil && v > 0 {
			n = v
		}
		stop := h.load(t, 4)
		var took []time.Duration
		for i := range n {
			version := fmt.Sprintf("v2.%d", i)
			c := h.push(t, version)
			start := time.Now()
			r := h.mustDeploy(t, fmt.Sprintf("dep_2_%d", i), c, spec)
			took = append(took, time.Since(start))
			if len(r.Service.Retired) != 1 {
				t.Errorf("redeploy %d retired %v, want the old slot", i, r.Service.Retired)
			}
			h.wantServing(t, version)
		}
		sent, failed, first := stop()
		t.Logf("%d redeploys under load: %v; %d requests, %d failed", n, took, sent, failed)
		if failed != 0 || sent == 0 {
			t.Errorf("%d of %d requests failed during the redeploys: %v", failed, sent, first)
		}
		if slots := h.slotUnits(t); len(slots) != 1 {
			t.Errorf("slot units after the redeploys: %v, want one", slots)
		}
	})

	t.Run("FailedBuildKeepsServing", func(t *testing.T) {
		c := h.push(t, "v3")
		_, before, _ := h.get("/")
		for _, tc := range []struct {
			name, cmd, want, tail string
		}{
			{"fails", "echo about to fail; exit 3", "the build command failed", "about to fail"},
			{"times out", "echo sleeping; sleep 600", "the build command exceeded its time limit of 2s", "sleeping"},
		} {
			o := h.deploy(t, "dep_3_"+strings.ReplaceAll(tc.name, " ", "_"), c, agentproto.ServiceSpec{BuildCommand: tc.cmd, StartCommand: "./run.sh", BuildTimeoutSeconds: 2})
			if !strings.Contains(o.Error, tc.want) || !strings.Contains(o.Error, tc.tail) {
				t.Errorf("a build that %s: error %q, want %q with the output tail %q", tc.name, o.Error, tc.want, tc.tail)
			}
			if code, body, err := h.get("/"); err != nil || code != 200 || body != before {
				t.Errorf("after a build that %s: %d %q %v; want the old release's %q", tc.name, code, body, err, before)
			}
		}
		if got := h.Exec(t, "ls /var/lib/capstan-apps/svc/releases").Stdout; strings.Contains(got, "dep_3") {
			t.Errorf("failed builds left releases: %s", got)
		}
	})

	t.Run("Rollback", func(t *testing.T) {
		r := h.mustDeploy(t, "dep_rb", "", agentproto.ServiceSpec{StartCommand: "./run.sh", Release: "dep_1"})
		if r.Service.Built || r.Service.Release != "dep_1" {
			t.Errorf("rollback %+v, want the kept release dep_1 not built again", r.Service)
		}
		h.wantServing(t, "v1")
	})

	t.Run("Logs", func(t *testing.T) {
		o := h.job(t, agentproto.JobAppLogs, agentproto.AppLogsPayload{AppID: svcAppID, Lines: 50}, nil)
		if o.Error != "" {
			t.Fatal(o.Error)
		}
		var res agentproto.AppLogsResult
		if err := json.Unmarshal(o.Data, &res); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range res.Lines {
			found = found || strings.HasPrefix(l.Message, "svcweb v1 starting on 127.0.0.1:")
		}
		_, live := h.liveUnit(t)
		if !found || res.Unit != live || res.State != "running" || len(res.Slots) != 1 || !res.Slots[0].Live {
			t.Errorf("logs: unit %s state %s slots %+v lines %+v; want the start line of %s", res.Unit, res.State, res.Slots, res.Lines, live)
		}
	})

	t.Run("KeepsFiveReleases", func(t *testing.T) {
		got := strings.Fields(h.MustExec(t, "ls /var/lib/capstan-apps/svc/releases"))
		if len(got) < 2 {
			t.Fatalf("releases %v", got)
		}
		keep := []string{"dep_2_0", "dep_2_1"}
		r := h.mustDeploy(t, "dep_keep", "", agentproto.ServiceSpec{StartCommand: "./run.sh", Release: "dep_1", KeepReleases: keep})
		after := strings.Fields(h.MustExec(t, "ls /var/lib/capstan-apps/svc/releases"))
		if strings.Join(after, " ") != "dep_1 dep_2_0 dep_2_1" {
			t.Errorf("releases after keeping %v: %v (pruned %v), want the kept ones and the live one", keep, after, r.Service.Pruned)
		}
	})

	t.Run("Remove", func(t *testing.T) {
		o := h.job(t, agentproto.JobAppRemove, agentproto.RemovePayload{AppID: svcAppID, AppName: svcAppName,
			Proxy: agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: svcHost, AppID: svcAppID, TLSMode: agentproto.TLSOff}}}}, nil)
		if o.Error != "" {
			t.Fatal(o.Error)
		}
		if slots := h.slotUnits(t); len(slots) != 0 {
			t.Errorf("slot units after removal: %v", slots)
		}
		if res := h.Exec(t, "ls /var/lib/capstan-apps/svc /etc/capstan-apps/svc /var/lib/capstan-agent/apps/svc"); res.ExitCode == 0 {
			t.Errorf("left behind after removal: %s", res.Stdout)
		}
		code, _, err := h.get("/")
		if err != nil || code != http.StatusServiceUnavailable {
			t.Errorf("GET / after removal: %d %v; want no upstream", code, err)
		}
	})
}

// slotUnits are the application's unit files.
func (h *svcAppHost) slotUnits(t *testing.T) []string {
	t.Helper()
	return strings.Fields(h.Exec(t, "cd /etc/systemd/system && ls capstan-app-svc@*.service 2>/dev/null").Stdout)
}

// liveUnit is the recorded live slot.
func (h *svcAppHost) liveUnit(t *testing.T) (int, string) {
	t.Helper()
	var l liveSlot
	if err := json.Unmarshal([]byte(h.MustRun(t, "cat", "/var/lib/capstan-agent/apps/svc/live.json")), &l); err != nil {
		t.Fatal(err)
	}
	return l.Port, SlotUnit(svcAppName, l.Port)
}
