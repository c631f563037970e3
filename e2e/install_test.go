package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// Versions stamped into the two agent builds of TestInstallerOnSystemdHost.
const (
	agentVersion1 = "e2e-agent-1"
	agentVersion2 = "e2e-agent-2"
)

// agentExitRevoked is the agent's exit status once its credential is revoked.
const agentExitRevoked = "78"

// buildAgent builds cmd/capstan-agent, static, into path.
func buildAgent(t *testing.T, path, version string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+version,
		"-o", path, "github.com/capstan-dev/capstan/cmd/capstan-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building capstan-agent: %v\n%s", err, out)
	}
}

// apiServer is a server as the API shows it.
type apiServer struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	AgentVersion string `json:"agent_version"`
	Facts        *struct {
		Hostname string `json:"hostname"`
		OS       string `json:"os"`
		Arch     string `json:"arch"`
	} `json:"facts"`
}

func getServer(t *testing.T, cp *ControlPlane, token, id string) apiServer {
	t.Helper()
	var s apiServer
	expectJSON(t, cp.Get(t, "/api/v1/servers/"+id, token), http.StatusOK, &s)
	return s
}

// waitFor polls cond until it returns true, failing the test with what
// and the state cond described last if that takes longer than timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testlab.EventuallyReport(t, timeout, what, cond)
}

// pingAgent queues agent.ping on the server and waits until it succeeds;
// it returns the ping's result.
func pingAgent(t *testing.T, cp *ControlPlane, token, serverID, message string) (result struct {
	Message      string `json:"message"`
	AgentVersion string `json:"agent_version"`
	Facts        struct {
		Hostname  string `json:"hostname"`
		OS        string `json:"os"`
		OSVersion string `json:"os_version"`
	} `json:"facts"`
}) {
	t.Helper()
	r := cp.Post(t, "/api/v1/servers/"+serverID+"/actions", token,
		map[string]any{"type": "agent.ping", "payload": map[string]string{"message": message}})
	var queued struct {
		JobID string `json:"job_id"`
	}
	expectJSON(t, r, http.StatusAccepted, &queued)
	var body []byte
	waitFor(t, 90*time.Second, "agent.ping "+queued.JobID+" succeeds", func() (bool, string) {
		r := cp.Get(t, "/api/v1/jobs/"+queued.JobID, token)
		var j struct {
			Status string `json:"status"`
		}
		expectJSON(t, r, http.StatusOK, &j)
		switch j.Status {
		case "failed", "cancelled":
			t.Fatalf("agent.ping %s ended %s: %s", queued.JobID, j.Status, r.Body)
		}
		body = r.Body
		return j.Status == "succeeded", string(r.Body)
	})
	var j struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &j); err != nil || json.Unmarshal(j.Data, &result) != nil {
		t.Fatalf("agent.ping result: %s", body)
	}
	if result.Message != message {
		t.Fatalf("agent.ping echoed %q, want %q", result.Message, message)
	}
	return result
}

// copyFile copies the executable src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// agentConfig reads the agent's configuration inside the container.
func agentConfig(t *testing.T, c *Container) (cfg struct {
	APIURL     string `json:"api_url"`
	ServerID   string `json:"server_id"`
	AgentToken string `json:"agent_token"`
}) {
	t.Helper()
	out := c.MustExec(t, "cat /etc/capstan/agent.json")
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("/etc/capstan/agent.json is not JSON: %v", err)
	}
	return cfg
}

// TestInstallerOnSystemdHost installs the agent with the served installer
// on a booted Debian (systemd-nspawn), as an operator would, and follows
// the agent through its life: online, running a job, upgraded in place,
// revoked.
func TestInstallerOnSystemdHost(t *testing.T) {
	t.Parallel()
	requireNspawnHost(t)
	root := debianRootfs(t)
	start := time.Now()

	agentDir := t.TempDir()
	buildAgent(t, filepath.Join(agentDir, "capstan-agent"), agentVersion1)
	// The Caddy servers get, in place of Debian's 2.6.2: the one the tests
	// run (scripts/testenv.sh builds it as make dist does).
	caddyVersion := testlab.CaddyVersion(t)
	copyFile(t, testlab.CaddyBinary(t), filepath.Join(agentDir, "caddy-linux-"+runtime.GOARCH))
	// The upgrade: built now, put in place later.
	upgrade := filepath.Join(t.TempDir(), "capstan-agent")
	buildAgent(t, upgrade, agentVersion2)

	cp := startControlPlane(t, Options{Args: []string{"--agent-dir", agentDir}})
	admin := signInUser(t, cp, newAdmin(t, cp, "admin@example.com"))
	tok := admin.AccessToken

	r := cp.Post(t, "/api/v1/servers/enrollments", tok, map[string]any{"name": "nspawn-1", "tags": []string{"e2e"}})
	var enr struct {
		Server         apiServer `json:"server"`
		Token          string    `json:"token"`
		InstallCommand string    `json:"install_command"`
	}
	expectJSON(t, r, http.StatusCreated, &enr)
	serverID := enr.Server.ID
	if serverID == "" || !strings.HasPrefix(enr.Token, "ept_") {
		t.Fatalf("enrollment: %s", r.Body)
	}
	installURL := cp.URL + "/agent/install.sh"
	// The token is in the environment, not on a command line: only the
	// shell's own export names it.
	if want := "export CAPSTAN_ENROLL_TOKEN=" + enr.Token + "; curl -fsSL " + installURL + " | sudo --preserve-env=CAPSTAN_ENROLL_TOKEN sh;"; !strings.HasPrefix(enr.InstallCommand, want) ||
		strings.Count(enr.InstallCommand, enr.Token) != 1 {
		t.Fatalf("install_command %q does not fetch %s with the token in the environment only", enr.InstallCommand, installURL)
	}

	// A Docker host: the machine's engine, whose socket's group the
	// agent's account joins (the proxy looks up containers there).
	testlab.Docker(t)
	dockerSock := strings.TrimPrefix(cmp.Or(testlab.DockerHost(), "unix:///var/run/docker.sock"), "unix://")
	st, err := os.Stat(dockerSock)
	if err != nil {
		t.Fatal(err)
	}
	c := testlab.BootHost(t, root, testlab.HostOptions{Binds: []string{dockerSock + ":/run/docker.sock"}})
	t.Logf("container %s booted after %s", c.Name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("capstan-agent and caddy journal:\n%s", c.Exec(t, "journalctl -u capstan-agent -u caddy-api --no-pager -n 120").Stdout)
		}
	})
	c.MustExec(t, fmt.Sprintf("groupadd --system --gid %d docker", st.Sys().(*syscall.Stat_t).Gid))

	// Install as the enrollment says, word for word.
	c.InstallPackages(t, "sudo")
	res := c.Exec(t, enr.InstallCommand)
	if res.ExitCode != 0 || !strings.Contains(res.Stderr, "capstan-agent is running") {
		t.Fatalf("installer: exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	t.Logf("installed after %s", time.Since(start).Round(time.Millisecond))

	// The service account: no login shell, in the groups that exist.
	passwd := strings.Split(strings.TrimSpace(c.MustExec(t, "getent passwd capstan")), ":")
	if len(passwd) != 7 || passwd[6] != "/usr/sbin/nologin" {
		t.Fatalf("capstan account: %q, want the shell /usr/sbin/nologin", passwd)
	}
	groups := strings.Fields(c.MustExec(t, "id -nG capstan"))
	for _, g := range []string{"docker", "systemd-journal"} {
		if c.Exec(t, "getent group "+g).ExitCode == 0 && !slices.Contains(groups, g) {
			t.Errorf("capstan is not in the %s group (groups: %v)", g, groups)
		}
	}

	// The credential: readable by the agent's account only.
	if got, want := strings.TrimSpace(c.MustExec(t, "stat -c '%a %U' /etc/capstan/agent.json")), "600 capstan"; got != want {
		t.Errorf("/etc/capstan/agent.json mode and owner: %q, want %q", got, want)
	}
	if got, want := strings.TrimSpace(c.MustExec(t, "stat -c '%a %U' /etc/capstan")), "700 capstan"; got != want {
		t.Errorf("/etc/capstan mode and owner: %q, want %q", got, want)
	}
	cfg := agentConfig(t, c)
	if cfg.ServerID != serverID || cfg.APIURL != cp.URL || !strings.HasPrefix(cfg.AgentToken, "agt_") {
		t.Fatalf("agent.json: server %q at %q, want %q at %q", cfg.ServerID, cfg.APIURL, serverID, cp.URL)
	}

	// The service: enabled, running as capstan, not restarted once revoked.
	props := c.Show(t, "capstan-agent", "ActiveState", "User", "RestartPreventExitStatus", "UnitFileState", "MainPID")
	if props["ActiveState"] != "active" || props["User"] != "capstan" || props["UnitFileState"] != "enabled" ||
		props["RestartPreventExitStatus"] != agentExitRevoked {
		t.Fatalf("capstan-agent.service: %v", props)
	}
	// systemd reports a simple service active as soon as it forked it; the
	// child drops to the service's user when it executes the agent.
	uid := strings.TrimSpace(c.MustExec(t, "id -u capstan"))
	waitFor(t, 90*time.Second, "the agent (pid "+props["MainPID"]+") runs as capstan (uid "+uid+")", func() (bool, string) {
		status := c.MustExec(t, "cat /proc/"+props["MainPID"]+"/status")
		if strings.HasPrefix(status, "Name:\t(") {
			return false, status // systemd's child, before the exec
		}
		if !strings.Contains(status, "\nUid:\t"+uid+"\t"+uid+"\t"+uid+"\t"+uid+"\n") {
			t.Fatalf("the agent (pid %s) does not run as capstan (uid %s):\n%s", props["MainPID"], uid, status)
		}
		return true, ""
	})

	// polkit lets the agent's account start, stop and restart services.
	rules := c.MustExec(t, "stat -c '%a %U' /etc/polkit-1/rules.d/50-capstan-agent.rules && cat /etc/polkit-1/rules.d/50-capstan-agent.rules")
	if !strings.HasPrefix(rules, "644 root\n") || !strings.Contains(rules, `subject.user == "capstan"`) {
		t.Fatalf("polkit rule:\n%s", rules)
	}
	c.MustExec(t, `printf '[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n' >/etc/systemd/system/e2e-dummy.service &&
		systemctl daemon-reload`)
	if res := c.Exec(t, "runuser -u capstan -- systemctl restart e2e-dummy.service"); res.ExitCode != 0 {
		t.Fatalf("capstan may not restart a service through polkit: exit %d: %s", res.ExitCode, res.Stderr)
	}
	if res := c.Exec(t, "runuser -u capstan -- systemctl mask e2e-dummy.service"); res.ExitCode == 0 {
		t.Fatal("capstan may mask a service; the polkit rule allows only start, stop and restart")
	}
	// Service applications: the build account, the root helper unit the
	// agent starts (and nothing in the agent's own rights grows), the
	// directories of releases and of root-only environment files.
	if out := c.MustExec(t, "id -un capstan-build && stat -c '%a %U' /var/lib/capstan-apps /etc/capstan-apps && "+
		"systemctl show -p ExecStart --value capstan-app-helper@web.service && systemctl show -p StartLimitIntervalUSec capstan-app-helper@web.service"); !strings.HasPrefix(out, "capstan-build\n755 root\n700 root\n") ||
		!strings.Contains(out, "/opt/capstan-agent/capstan-agent app-helper web ;") || !strings.HasSuffix(out, "\nStartLimitIntervalUSec=0\n") {
		t.Fatalf("service application setup:\n%s", out)
	}
	// The control plane's Caddy took the place of Debian's, which is
	// diverted aside so that a package upgrade does not bring it back.
	if !strings.Contains(res.Stderr, "installed Caddy "+caddyVersion+" from the control plane") {
		t.Errorf("the installer did not say it installed Caddy %s:\n%s", caddyVersion, res.Stderr)
	}
	if got := strings.Fields(c.MustExec(t, "caddy version")); len(got) == 0 || got[0] != caddyVersion {
		t.Fatalf("caddy version on the server: %q, want %s", got, caddyVersion)
	}
	if out := c.MustExec(t, "dpkg-divert --list /usr/bin/caddy && /usr/bin/caddy.distrib version"); !strings.Contains(out, "diversion of /usr/bin/caddy to /usr/bin/caddy.distrib") ||
		!strings.Contains(out, "\n2.6.") {
		t.Fatalf("Debian's caddy is not diverted to /usr/bin/caddy.distrib:\n%s", out)
	}
	// The agent's upstream files, which that Caddy reads.
	if out := c.MustExec(t, "stat -c '%a %U' /var/lib/capstan-proxy"); strings.TrimSpace(out) != "755 capstan" {
		t.Fatalf("/var/lib/capstan-proxy: got %q, want mode 755 owned by capstan", out)
	}
	// Caddy runs in API mode, so the configuration the agent loads
	// survives restarts, and the agent may read the proxy's access log.
	if out := c.MustExec(t, "systemctl is-enabled caddy-api.service; systemctl is-enabled caddy.service || true"); !strings.HasPrefix(out, "enabled\n") || !strings.Contains(out, "disabled") {
		t.Fatalf("caddy-api.service should be enabled and caddy.service disabled:\n%s", out)
	}
	// Caddy's admin API is a unix socket that only Caddy and its group
	// (the agent's account) may open, and no TCP port.
	wantCaddyAdminSocket(t, c)
	if out := c.MustExec(t, "systemctl show -p Environment --value capstan-agent"); !strings.Contains(out, "CAPSTAN_CADDY_ADMIN=unix//run/capstan-proxy/admin.sock|0660") {
		t.Errorf("the agent is not told the admin socket: Environment=%s", out)
	}
	// Connections queued on a listener Caddy closes at a reload are handed
	// to its successor (Linux 5.14+).
	if out := c.MustExec(t, "cat /etc/sysctl.d/60-capstan.conf"); !strings.Contains(out, "\nnet.ipv4.tcp_migrate_req = 1\n") {
		t.Fatalf("/etc/sysctl.d/60-capstan.conf:\n%s", out)
	}
	if out := c.MustExec(t, "stat -c '%a %U %G' /var/log/caddy/capstan-access.log"); strings.TrimSpace(out) != "640 caddy capstan" {
		t.Fatalf("access log: got %q, want mode 640 owned by caddy, group capstan", out)
	}
	if res := c.Exec(t, "runuser -u capstan -- cat /var/log/caddy/capstan-access.log"); res.ExitCode != 0 {
		t.Fatalf("capstan cannot read the access log: %s", res.Stderr)
	}
	// The journal is readable through the systemd-journal group.
	if out := c.MustExec(t, "runuser -u capstan -- journalctl -q -u capstan-agent -n 5 --no-pager"); !strings.Contains(out, "capstan-agent") {
		t.Fatalf("capstan cannot read the agent's journal:\n%s", out)
	}

	// The control plane sees the agent, and the agent runs its jobs.
	waitFor(t, 90*time.Second, "the server is online", func() (bool, string) {
		s := getServer(t, cp, tok, serverID)
		return s.Status == "online" && s.AgentVersion == agentVersion1, fmt.Sprintf("%+v", s)
	})
	pong := pingAgent(t, cp, tok, serverID, "hello from e2e")
	if pong.AgentVersion != agentVersion1 || pong.Facts.Hostname != c.Name || pong.Facts.OS != "debian" {
		t.Fatalf("agent.ping ran elsewhere: %+v, want version %s on host %s (debian)", pong, agentVersion1, c.Name)
	}
	t.Logf("online and pinged after %s", time.Since(start).Round(time.Millisecond))

	// A domain, applied by the agent through the socket: Caddy serves it
	// on free ports of this machine (the host shares its network).
	httpPort, httpsPort := testlab.FreePort(t), testlab.FreePort(t)
	c.MustExec(t, fmt.Sprintf(`set -e
mkdir -p /etc/systemd/system/capstan-agent.service.d
printf '[Service]\nEnvironment=CAPSTAN_PROXY_HTTP_PORT=%d CAPSTAN_PROXY_HTTPS_PORT=%d CAPSTAN_PROXY_LISTEN_HOST=127.0.0.1\n' >/etc/systemd/system/capstan-agent.service.d/test.conf
systemctl daemon-reload
systemctl restart capstan-agent.service`, httpPort, httpsPort))
	domainHost := "web.install.test"
	r = cp.Post(t, "/api/v1/applications", tok, map[string]any{"name": "web", "server_id": serverID, "deploy": false,
		"source": map[string]any{"type": "image", "image": "nginx:1.27"}, "container_port": 80})
	var app struct {
		ID string `json:"id"`
	}
	expectJSON(t, r, http.StatusCreated, &app)
	applyDomain(t, cp, tok, map[string]any{"hostname": domainHost, "application_id": app.ID, "tls_mode": "off"})
	wantDomainServed(t, c, domainHost, httpPort, httpsPort)
	t.Logf("domain served after %s", time.Since(start).Round(time.Millisecond))

	// Services through the API, with the agent's real permissions: a unit
	// is stopped, started, restarted and its journal read.
	t.Run("HostWorkServices", func(t *testing.T) { hostWorkServices(t, cp, tok, serverID, c) })
	t.Logf("service work done after %s", time.Since(start).Round(time.Millisecond))

	// Re-running the installer without a token upgrades the agent and keeps
	// the enrollment.
	if err := os.Rename(upgrade, filepath.Join(agentDir, "capstan-agent")); err != nil {
		t.Fatal(err)
	}
	// This server is made as an earlier installer left it: Caddy's
	// admin API on TCP (in the configuration it resumes), no drop-in.
	oldAdmin := fmt.Sprintf("127.0.0.1:%d", testlab.FreePort(t))
	c.MustExec(t, fmt.Sprintf(`set -e
curl -fsS -o /dev/null -X PATCH -H 'Content-Type: application/json' --data-binary '{"listen":"%s"}' --unix-socket /run/capstan-proxy/admin.sock http://caddy/config/admin
for i in $(seq 100); do curl -fsS -o /dev/null http://%s/config/ && break; sleep 0.1; done
rm /etc/systemd/system/caddy-api.service.d/50-capstan.conf
systemctl daemon-reload
systemctl restart caddy-api.service
curl -fsS -o /dev/null http://%s/config/`, oldAdmin, oldAdmin, oldAdmin))
	if ports := caddyTCPListeners(t, c); !slices.Contains(ports, portOf(t, oldAdmin)) {
		t.Fatalf("the old-style server's Caddy does not listen on %s: %v", oldAdmin, ports)
	}
	res = c.RunInstaller(t, installURL)
	if res.ExitCode != 0 || !strings.Contains(res.Stderr, "already enrolled") {
		t.Fatalf("installer (upgrade): exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Caddy is the control plane's already: left as it is.
	if !strings.Contains(res.Stderr, "Caddy is the control plane's ("+caddyVersion+")") || strings.Contains(res.Stderr, "installed Caddy") {
		t.Errorf("the upgrade should keep the control plane's Caddy as it is:\n%s", res.Stderr)
	}
	if got := strings.TrimSpace(c.MustExec(t, "/opt/capstan-agent/capstan-agent version")); got != agentVersion2 {
		t.Fatalf("after the upgrade, capstan-agent version says %q, want %q", got, agentVersion2)
	}
	if cfg2 := agentConfig(t, c); cfg2 != cfg {
		t.Fatalf("the upgrade changed agent.json: server %q, want %q (token kept: %v)",
			cfg2.ServerID, cfg.ServerID, cfg2.AgentToken == cfg.AgentToken)
	}
	if got, want := strings.TrimSpace(c.MustExec(t, "stat -c '%a %U' /etc/capstan/agent.json")), "600 capstan"; got != want {
		t.Errorf("after the upgrade, /etc/capstan/agent.json mode and owner: %q, want %q", got, want)
	}
	props2 := c.Show(t, "capstan-agent", "ActiveState", "MainPID")
	if props2["ActiveState"] != "active" || props2["MainPID"] == props["MainPID"] {
		t.Fatalf("after the upgrade, capstan-agent.service: %v (before: MainPID %s)", props2, props["MainPID"])
	}
	waitFor(t, 90*time.Second, "the server reports the new agent version", func() (bool, string) {
		s := getServer(t, cp, tok, serverID)
		return s.Status == "online" && s.AgentVersion == agentVersion2, fmt.Sprintf("%+v", s)
	})
	if pong := pingAgent(t, cp, tok, serverID, "after the upgrade"); pong.AgentVersion != agentVersion2 {
		t.Fatalf("agent.ping after the upgrade ran version %q, want %q", pong.AgentVersion, agentVersion2)
	}
	// The upgrade moved Caddy's admin API back to the socket; the domain
	// is still served, and the agent applies the next change through it.
	if !strings.Contains(res.Stderr, "moved Caddy's admin API from TCP") {
		t.Errorf("the upgrade did not say it moved Caddy's admin API:\n%s", res.Stderr)
	}
	wantCaddyAdminSocket(t, c)
	wantDomainServed(t, c, domainHost, httpPort, httpsPort)
	applyDomain(t, cp, tok, map[string]any{"hostname": "api.install.test", "application_id": app.ID, "tls_mode": "off"})
	wantDomainServed(t, c, "api.install.test", httpPort, httpsPort)
	t.Logf("upgraded after %s", time.Since(start).Round(time.Millisecond))

	// Revocation: the agent exits 78 and systemd leaves it down.
	r = cp.Post(t, "/api/v1/servers/"+serverID+"/revoke", tok, nil)
	expectStatus(t, r, http.StatusOK)
	var last map[string]string
	waitFor(t, 2*time.Minute, "the revoked agent exits 78 and stays down", func() (bool, string) {
		last = c.Show(t, "capstan-agent", "ActiveState", "SubState", "Result", "ExecMainStatus", "NRestarts")
		down := last["ActiveState"] == "failed" || last["ActiveState"] == "inactive"
		return down && last["ExecMainStatus"] == agentExitRevoked, fmt.Sprintf("%v", last)
	})
	// failed or inactive, not activating (auto-restart): no restart is
	// pending, and none happened.
	if last["NRestarts"] != "0" {
		t.Fatalf("systemd restarted the revoked agent: %v", last)
	}
	if s := getServer(t, cp, tok, serverID); s.Status != "revoked" {
		t.Fatalf("server status %q after revocation, want revoked", s.Status)
	}
	t.Logf("revoked and stopped after %s", time.Since(start).Round(time.Millisecond))
}

// wantCaddyAdminSocket fails unless the host's Caddy has its admin API on
// /run/capstan-proxy/admin.sock, mode 0660, which the agent's account may
// open and another may not, and listens on no TCP port but its servers'.
func wantCaddyAdminSocket(t *testing.T, c *Container) {
	t.Helper()
	if out := c.MustExec(t, "stat -c '%a %U %G %F' /run/capstan-proxy /run/capstan-proxy/admin.sock"); out != "750 caddy caddy directory\n660 caddy caddy socket\n" {
		t.Fatalf("/run/capstan-proxy and its admin.sock: %q, want mode 750 and a socket of mode 660, owned by caddy", out)
	}
	if groups := strings.Fields(c.MustExec(t, "id -nG capstan")); !slices.Contains(groups, "caddy") {
		t.Errorf("capstan is not in the caddy group (groups: %v)", groups)
	}
	const get = " -- curl -fsS -o /dev/null --unix-socket /run/capstan-proxy/admin.sock http://caddy/config/"
	if res := c.Exec(t, "runuser -u capstan"+get); res.ExitCode != 0 {
		t.Fatalf("the agent's account cannot reach Caddy's admin API: %s", res.Stderr)
	}
	if res := c.Exec(t, "runuser -u nobody"+get); res.ExitCode == 0 {
		t.Fatal("another account (nobody) reaches Caddy's admin API")
	}
	// Before the agent's first load, Caddy runs no configuration (null).
	if cfg := c.MustExec(t, "curl -fsS --unix-socket /run/capstan-proxy/admin.sock http://caddy/config/"); strings.TrimSpace(cfg) != "null" &&
		!strings.Contains(cfg, `"admin":{"listen":"unix//run/capstan-proxy/admin.sock|0660","origins":["caddy"]}`) {
		t.Errorf("Caddy's configuration does not keep the admin socket: %s", cfg)
	}
	for _, p := range caddyTCPListeners(t, c) {
		if p == 2019 {
			t.Errorf("Caddy listens on its TCP admin port 2019")
		}
	}
}

// applyDomain creates a domain and waits until its proxy.apply job
// succeeded.
func applyDomain(t *testing.T, cp *ControlPlane, token string, body map[string]any) {
	t.Helper()
	r := cp.Post(t, "/api/v1/domains", token, body)
	var dom struct {
		JobID string `json:"job_id"`
	}
	expectJSON(t, r, http.StatusCreated, &dom)
	if dom.JobID == "" {
		t.Fatalf("domain create: %s", r.Body)
	}
	waitFor(t, 90*time.Second, "proxy.apply "+dom.JobID+" succeeds", func() (bool, string) {
		r := cp.Get(t, "/api/v1/jobs/"+dom.JobID, token)
		var j struct {
			Status string `json:"status"`
		}
		expectJSON(t, r, http.StatusOK, &j)
		if j.Status == "failed" || j.Status == "cancelled" {
			t.Fatalf("proxy.apply %s ended %s: %s", dom.JobID, j.Status, r.Body)
		}
		return j.Status == "succeeded", string(r.Body)
	})
}

// wantDomainServed fails unless the host's Caddy serves host on httpPort
// (503: the application runs no container) and an unknown name gets the
// 404 of no site, and Caddy listens on TCP on its two servers' ports only.
func wantDomainServed(t *testing.T, c *Container, host string, httpPort, httpsPort int) {
	t.Helper()
	status := func(name string) string {
		return strings.TrimSpace(c.MustExec(t, fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}' -H 'Host: %s' http://127.0.0.1:%d/", name, httpPort)))
	}
	if got := status(host); got != "503" {
		t.Errorf("%s on the proxy: HTTP %s, want 503 (the site, without a running container)", host, got)
	}
	if got := status("unknown.install.test"); got != "404" {
		t.Errorf("an unknown name on the proxy: HTTP %s, want 404", got)
	}
	ports := caddyTCPListeners(t, c)
	slices.Sort(ports)
	if want := []int{min(httpPort, httpsPort), max(httpPort, httpsPort)}; !slices.Equal(slices.Compact(ports), want) {
		t.Errorf("Caddy listens on TCP ports %v, want its servers' %v only", ports, want)
	}
}

// caddyTCPListeners lists the TCP ports the host's Caddy (caddy-api's main
// process) listens on: its sockets among the listening ones of
// /proc/net/tcp and tcp6.
func caddyTCPListeners(t *testing.T, c *Container) []int {
	t.Helper()
	pid := c.Show(t, "caddy-api", "MainPID")["MainPID"]
	if pid == "" || pid == "0" {
		t.Fatal("caddy-api.service has no main process")
	}
	fds := c.MustExec(t, "for f in /proc/"+pid+"/fd/*; do readlink \"$f\"; done")
	inodes := map[string]bool{}
	for _, l := range strings.Fields(fds) {
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var ports []int
	for _, l := range strings.Split(c.MustExec(t, "cat /proc/net/tcp /proc/net/tcp6"), "\n") {
		f := strings.Fields(l)
		// sl local_address rem_address st ... inode (the tenth field)
		if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
			continue
		}
		_, hexPort, _ := strings.Cut(f[1], ":")
		p, err := strconv.ParseInt(hexPort, 16, 32)
		if err != nil {
			t.Fatalf("/proc/net/tcp line %q: %v", l, err)
		}
		ports = append(ports, int(p))
	}
	return ports
}

// portOf is the port of host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInstallerKeepsTokenOffCommandLines installs the agent on a booted
// Debian with the token in CAPSTAN_ENROLL_TOKEN and, while the control
// plane holds the enrollment request, reads every process's command line
// on the host: none has the token, and capstan-agent enroll has it in its
// environment. The host keeps Debian's Caddy 2.6 (none is served), whose
// admin socket the agent reaches too.
func TestInstallerKeepsTokenOffCommandLines(t *testing.T) {
	t.Parallel()
	requireNspawnHost(t)
	root := debianRootfs(t)
	agentDir := t.TempDir()
	buildAgent(t, filepath.Join(agentDir, "capstan-agent"), agentVersion1)
	cp := startControlPlane(t, Options{Args: []string{"--agent-dir", agentDir}})
	admin := signInUser(t, cp, newAdmin(t, cp, "admin@example.com"))
	r := cp.Post(t, "/api/v1/servers/enrollments", admin.AccessToken, map[string]any{"name": "argv"})
	var enr struct {
		Server apiServer `json:"server"`
		Token  string    `json:"token"`
	}
	expectJSON(t, r, http.StatusCreated, &enr)

	// The enrollment request waits at this proxy until released.
	target, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	fwd := httputil.NewSingleHostReverseProxy(target)
	held, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/enroll") {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	c := bootContainer(t, root)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("installer output:\n%s", c.Exec(t, "cat /root/install.log").Stdout)
			t.Logf("caddy journal:\n%s", c.Exec(t, "journalctl -u caddy-api --no-pager -n 60").Stdout)
		}
	})
	c.MustExec(t, fmt.Sprintf(`CAPSTAN_ENROLL_TOKEN=%s; export CAPSTAN_ENROLL_TOKEN
setsid sh -c 'curl -fsSL %s/agent/install.sh | sh -s -- --url %s >/root/install.log 2>&1; echo $? >/root/install.rc' </dev/null >/dev/null 2>&1 &`,
		enr.Token, cp.URL, front.URL))
	select {
	case <-held:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the installer never enrolled:\n%s", c.Exec(t, "cat /root/install.log").Stdout)
	}
	procs := c.MustExec(t, `for p in /proc/[0-9]*; do
	cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
	printf '%s\t%s\n' "${p#/proc/}" "$cmd"
done`)
	enrollPID := ""
	for _, l := range strings.Split(strings.TrimSpace(procs), "\n") {
		pid, cmd, _ := strings.Cut(l, "\t")
		if strings.Contains(cmd, enr.Token) {
			t.Errorf("process %s has the enrollment token on its command line: %s", pid, cmd)
		}
		if strings.Contains(cmd, "capstan-agent enroll ") {
			enrollPID = pid
		}
	}
	if enrollPID == "" {
		t.Fatalf("no capstan-agent enroll among the host's processes:\n%s", procs)
	}
	if env := c.MustExec(t, "tr '\\0' '\\n' </proc/"+enrollPID+"/environ"); !strings.Contains(env, "\nCAPSTAN_ENROLL_TOKEN="+enr.Token+"\n") &&
		!strings.HasPrefix(env, "CAPSTAN_ENROLL_TOKEN="+enr.Token+"\n") {
		t.Errorf("capstan-agent enroll does not have the token in its environment")
	}
	releaseOnce.Do(func() { close(release) })
	waitFor(t, 3*time.Minute, "the installer finishes", func() (bool, string) {
		res := c.Exec(t, "cat /root/install.rc")
		return res.ExitCode == 0 && strings.TrimSpace(res.Stdout) != "", res.Stderr
	})
	if rc := strings.TrimSpace(c.MustExec(t, "cat /root/install.rc")); rc != "0" {
		t.Fatalf("installer exit %s:\n%s", rc, c.MustExec(t, "cat /root/install.log"))
	}
	if s := getServer(t, cp, admin.AccessToken, enr.Server.ID); s.Status == "pending" {
		t.Errorf("server %s still pending after the installer enrolled it", s.ID)
	}

	// Debian's Caddy 2.6 cannot set the socket's mode: the umask makes it
	// 0770, in the directory only Caddy's group may enter.
	if v := strings.Fields(c.MustExec(t, "caddy version")); len(v) == 0 || testlab.CaddyAtLeast(v[0], 2, 7) {
		t.Fatalf("caddy version on the host: %v, want Debian's 2.6", v)
	}
	if out := c.MustExec(t, "stat -c '%a %U %G %F' /run/capstan-proxy /run/capstan-proxy/admin.sock"); out != "750 caddy caddy directory\n770 caddy caddy socket\n" {
		t.Errorf("/run/capstan-proxy and its admin.sock: %q", out)
	}
	const get = " -- curl -fsS -o /dev/null --unix-socket /run/capstan-proxy/admin.sock http://caddy/config/"
	if res := c.Exec(t, "runuser -u capstan"+get); res.ExitCode != 0 {
		t.Errorf("the agent's account cannot reach Caddy 2.6's admin API: %s", res.Stderr)
	}
	if res := c.Exec(t, "runuser -u nobody"+get); res.ExitCode == 0 {
		t.Error("another account (nobody) reaches Caddy 2.6's admin API")
	}
	if ports := caddyTCPListeners(t, c); len(ports) != 0 {
		t.Errorf("Caddy 2.6 listens on TCP ports %v", ports)
	}
}
