package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/procstat"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// run executes the command line in-process, with nothing on stdin.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runStdin(t, "", args...)
}

// runStdin executes the command line in-process with stdin on its input.
func runStdin(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func enrollmentToken(cp *agenttest.ControlPlane) string {
	tok := ids.Token("ept")
	cp.AddEnrollmentToken(tok)
	return tok
}

func TestEnrollWritesConfig(t *testing.T) {
	cp := agenttest.New(t)
	dir := filepath.Join(t.TempDir(), "capstan")
	path := filepath.Join(dir, "agent.json")

	code, out, errOut := run(t, "enroll", "--url", cp.URL+"/", "--token", enrollmentToken(cp), "--config", path)
	if code != 0 {
		t.Fatalf("enroll exit %d: %s", code, errOut)
	}
	if strings.Contains(out+errOut, cp.AgentToken()) {
		t.Fatal("enroll printed the agent token")
	}
	if !strings.Contains(out, cp.ServerID()) || !strings.Contains(out, "capstan-agent run --config "+path+"\n") {
		t.Errorf("enroll output does not name the server and the exact run command: %s", out)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("config mode = %v, want %v", got, want)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("config dir: %v, mode %v; want created 0700", err, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"agent_token", "api_url", "heartbeat_seconds", "metrics_seconds", "server_id", "server_name"}; !slices.Equal(keys, want) {
		t.Fatalf("config keys = %v, want %v", keys, want)
	}
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := agent.Config{APIURL: cp.URL, ServerID: cp.ServerID(), ServerName: cp.ServerName(), AgentToken: cp.AgentToken(), HeartbeatSeconds: 1, MetricsSeconds: 60}
	if cfg != want {
		t.Fatalf("config = %+v, want %+v", cfg, want)
	}
	enrolls := cp.Enrolls()
	if got, want := len(enrolls), 1; got != want {
		t.Fatalf("%d enroll requests, want %d", got, want)
	}
	if f := enrolls[0].Facts; f.Hostname == "" || f.Arch == "" || f.CPUCount == 0 || f.AgentVersion == "" {
		t.Errorf("enroll facts incomplete: %+v", f)
	}

	// A second enroll is refused before the token is spent.
	code, _, errOut = run(t, "enroll", "--url", cp.URL, "--token", enrollmentToken(cp), "--config", path)
	if got, want := code, 1; got != want {
		t.Fatalf("second enroll exit %d, want %d", got, want)
	}
	if !strings.Contains(errOut, "already enrolled") || !strings.Contains(errOut, "--force") {
		t.Errorf("refusal message = %q, want it to say already enrolled and mention --force", errOut)
	}
	if got, want := len(cp.Enrolls()), 1; got != want {
		t.Fatalf("%d enroll requests after refusal, want %d (token not spent)", got, want)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Fatal("config changed by a refused enroll")
	}

	// --force replaces it.
	code, _, errOut = run(t, "enroll", "--url", cp.URL, "--token", enrollmentToken(cp), "--config", path, "--force")
	if code != 0 {
		t.Fatalf("enroll --force exit %d: %s", code, errOut)
	}
	entries, _ := os.ReadDir(dir)
	if got, want := len(entries), 1; got != want {
		t.Errorf("%d files in the config dir, want %d (no temporary files left)", got, want)
	}
}

func TestEnrollConfigPathFromEnv(t *testing.T) {
	cp := agenttest.New(t)
	path := filepath.Join(t.TempDir(), "agent.json")
	t.Setenv("CAPSTAN_AGENT_CONFIG", path)
	if code, _, errOut := run(t, "enroll", "--url", cp.URL, "--token", enrollmentToken(cp)); code != 0 {
		t.Fatalf("enroll exit %d: %s", code, errOut)
	}
	if _, err := agent.LoadConfig(path); err != nil {
		t.Fatal(err)
	}
}

// TestEnrollTokenOffTheCommandLine: the token comes from
// CAPSTAN_ENROLL_TOKEN or from stdin (--token -), so that no command line
// carries it (ps shows command lines to every user of the host).
func TestEnrollTokenOffTheCommandLine(t *testing.T) {
	cp := agenttest.New(t)
	enrolled := func(t *testing.T, path string) {
		t.Helper()
		if cfg, err := agent.LoadConfig(path); err != nil || cfg.ServerID != cp.ServerID() {
			t.Fatalf("config after the enrollment: %+v, %v", cfg, err)
		}
	}
	t.Run("environment", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agent.json")
		t.Setenv("CAPSTAN_ENROLL_TOKEN", enrollmentToken(cp))
		if code, _, errOut := run(t, "enroll", "--url", cp.URL, "--config", path); code != 0 {
			t.Fatalf("enroll exit %d: %s", code, errOut)
		}
		enrolled(t, path)
	})
	t.Run("stdin", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agent.json")
		if code, _, errOut := runStdin(t, "  "+enrollmentToken(cp)+"\r\nignored\n", "enroll", "--url", cp.URL, "--token", "-", "--config", path); code != 0 {
			t.Fatalf("enroll exit %d: %s", code, errOut)
		}
		enrolled(t, path)
	})
	t.Run("empty stdin", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agent.json")
		code, _, errOut := runStdin(t, "\n", "enroll", "--url", cp.URL, "--token", "-", "--config", path)
		if code != 1 || !strings.Contains(errOut, "stdin has no enrollment token") {
			t.Fatalf("enroll with an empty stdin: exit %d, %q", code, errOut)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("config written without a token: %v", err)
		}
	})
	t.Run("none", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agent.json")
		if code, _, errOut := run(t, "enroll", "--url", cp.URL, "--config", path); code == 0 || !strings.Contains(errOut, "--token") {
			t.Fatalf("enroll without a token: exit %d, %q", code, errOut)
		}
	})
}

func TestEnrollInvalidToken(t *testing.T) {
	cp := agenttest.New(t)
	path := filepath.Join(t.TempDir(), "agent.json")
	code, _, errOut := run(t, "enroll", "--url", cp.URL, "--token", "ept_unknown", "--config", path)
	if got, want := code, 1; got != want {
		t.Fatalf("exit %d, want %d", got, want)
	}
	if !strings.Contains(errOut, "already used or expired") {
		t.Errorf("message = %q, want it to explain the token problem", errOut)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("config written after a failed enroll: %v", err)
	}
}

func TestEnrollValidatesFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	for _, tc := range []struct{ url, token, want string }{
		{"ftp://cp.example.com", "ept_x", "http"},
		{"cp.example.com", "ept_x", "http"},
		{"http://", "ept_x", "no host"},
		{"https://cp.example.com", "agt_x", "ept_"},
	} {
		code, _, errOut := run(t, "enroll", "--url", tc.url, "--token", tc.token, "--config", path)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("enroll --url %q --token %q: exit %d, %q; want 1 and a message with %q", tc.url, tc.token, code, errOut, tc.want)
		}
	}
}

func TestStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	state := t.TempDir()
	code, out, errOut := run(t, "status", "--config", path, "--state-dir", state)
	if got, want := code, 1; got != want {
		t.Fatalf("status when not enrolled: exit %d, want %d", got, want)
	}
	if !strings.Contains(errOut, "not enrolled") || !strings.Contains(out, "Hostname") {
		t.Errorf("status when not enrolled: stdout %q stderr %q", out, errOut)
	}

	cfg := agent.Config{APIURL: "https://cp.example.com", ServerID: "srv_1", ServerName: "web-1", AgentToken: "agt_secret", HeartbeatSeconds: 30, MetricsSeconds: 60}
	if err := agent.SaveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "status", "--config", path, "--state-dir", state)
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"https://cp.example.com", "srv_1", "web-1", host, "Agent:", "not running (it never ran", "Control plane reached:"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "agt_secret") {
		t.Fatal("status printed the agent token")
	}

	code, out, _ = run(t, "status", "--config", path, "--state-dir", state, "--json")
	if code != 0 {
		t.Fatalf("status --json exit %d", code)
	}
	if strings.Contains(out, "agt_secret") {
		t.Fatal("status --json printed the agent token")
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Enrolled || r.APIURL != cfg.APIURL || r.ServerID != cfg.ServerID || r.ServerName != cfg.ServerName || r.Facts.Hostname != host ||
		r.Running || r.Contact != nil {
		t.Fatalf("status --json = %+v", r)
	}
}

// TestStatusOfARunningAgent: status says that the agent runs and when it
// last reached the control plane, and that it no longer runs once stopped.
func TestStatusOfARunningAgent(t *testing.T) {
	cp := agenttest.New(t)
	path := writeConfig(t, cp)
	state := t.TempDir()
	p := startBinary(t, "run", "--config", path, "--state-dir", state)
	status := func() statusReport {
		t.Helper()
		code, out, errOut := run(t, "status", "--config", path, "--state-dir", state, "--json")
		if code != 0 {
			t.Fatalf("status --json exit %d: %s", code, errOut)
		}
		var r statusReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var r statusReport
	testlab.Eventually(t, time.Minute, "status to report a contact", func() bool {
		r = status()
		return r.Contact != nil && !r.Contact.LastContactAt.IsZero()
	})
	if !r.Running || r.Contact.PID != p.cmd.Process.Pid || r.Contact.Version != "e2e" || r.Contact.LastError != "" {
		t.Fatalf("status of the running agent: running %v, %+v; want running, pid %d", r.Running, r.Contact, p.cmd.Process.Pid)
	}
	_, out, _ := run(t, "status", "--config", path, "--state-dir", state)
	if !strings.Contains(out, fmt.Sprintf("running, pid %d", p.cmd.Process.Pid)) || !strings.Contains(out, " ago (") {
		t.Errorf("status output:\n%s", out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.exitStatus(t, time.Minute)
	if r := status(); r.Running || r.Contact == nil {
		t.Fatalf("status after the agent stopped: running %v, contact %+v", r.Running, r.Contact)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != 0 || strings.TrimSpace(out) != version {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	if code, _, _ := run(t, "bogus"); code == 0 || code == agentproto.ExitRevoked {
		t.Fatalf("unknown command: exit %d, want a usage error", code)
	}
	if code, _, _ := run(t, "--help"); code != 0 {
		t.Fatalf("--help: exit %d, want 0", code)
	}
}

func TestExitCode(t *testing.T) {
	revoked := &agent.RevokedError{Problem: agentproto.Problem{Type: agentproto.ProblemAgentRevoked}}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("boom"), 1},
		{revoked, agentproto.ExitRevoked},
		{fmt.Errorf("run: %w", revoked), agentproto.ExitRevoked},
	} {
		if got := exitCode(io.Discard, tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// Tests of the built binary.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// binary builds capstan-agent once, with version "e2e".
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "capstan-agent-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "capstan-agent")
		cmd := exec.Command(goTool, "build", "-trimpath", "-ldflags", "-s -w -X main.version=e2e", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is a running capstan-agent.
type process struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	p := &process{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	// Its own state directory, proxy files and Caddy admin socket unless
	// the arguments name them: nothing of a test is kept in the machine's
	// /var/lib/capstan-agent, and the machine's own Caddy, access log and
	// upstream directory (on a server) are not read.
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), "CAPSTAN_AGENT_CONFIG=/nonexistent/agent.json", "CAPSTAN_AGENT_STATE_DIR="+dir,
		"CAPSTAN_PROXY_UPSTREAM_DIR="+filepath.Join(dir, "upstreams"),
		"CAPSTAN_PROXY_ACCESS_LOG="+filepath.Join(dir, "access.log"),
		"CAPSTAN_CADDY_ADMIN=unix/"+filepath.Join(dir, "caddy-admin.sock"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// exitStatus waits for the process and returns its exit status.
func (p *process) exitStatus(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("agent did not exit within %s", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

func writeConfig(t *testing.T, cp *agenttest.ControlPlane) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.json")
	cfg := agent.Config{APIURL: cp.URL, ServerID: cp.ServerID(), ServerName: cp.ServerName(), AgentToken: cp.AgentToken(), HeartbeatSeconds: 1, MetricsSeconds: 60}
	if err := agent.SaveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBinaryExitsRevoked(t *testing.T) {
	cp := agenttest.New(t)
	path := writeConfig(t, cp)
	cp.Revoke()
	p := startBinary(t, "run", "--config", path)
	if got, want := p.exitStatus(t, time.Minute), agentproto.ExitRevoked; got != want {
		t.Fatalf("exit status = %d, want %d", got, want)
	}
	// The log says why, as JSON lines.
	found := false
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["problem_type"] == agentproto.ProblemAgentRevoked {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON log line with the revocation problem type:\n%s", p.stderr.String())
	}
}

func TestBinaryExitsOneWithoutConfig(t *testing.T) {
	p := startBinary(t, "run", "--config", filepath.Join(t.TempDir(), "missing.json"))
	if got, want := p.exitStatus(t, time.Minute), 1; got != want {
		t.Fatalf("exit status = %d, want %d", got, want)
	}
	if !strings.Contains(p.stderr.String(), "not enrolled") {
		t.Errorf("stderr does not say the agent is not enrolled:\n%s", p.stderr.String())
	}
}

func TestBinaryRunsPingAndStopsOnSIGTERM(t *testing.T) {
	cp := agenttest.New(t)
	path := writeConfig(t, cp)
	p := startBinary(t, "run", "--config", path)
	testlab.Eventually(t, time.Minute, "a heartbeat", func() bool { return len(cp.Heartbeats()) > 0 })
	if got, want := cp.Heartbeats()[0].AgentVersion, "e2e"; got != want {
		t.Errorf("heartbeat agent_version = %q, want %q (set by -ldflags)", got, want)
	}
	job := agentproto.Job{ID: ids.New(ids.Job), Type: agentproto.JobAgentPing, Payload: json.RawMessage(`{"message":"hi"}`), TimeoutSeconds: 10}
	cp.Enqueue(job, nil)
	testlab.Eventually(t, time.Minute, "the ping result", func() bool { return len(cp.Completions(job.ID)) > 0 })
	var pr agentproto.PingResult
	if err := json.Unmarshal(cp.Completions(job.ID)[0].Data, &pr); err != nil || pr.Message != "hi" || pr.AgentVersion != "e2e" {
		t.Fatalf("ping result %+v (%v), want message hi from version e2e", pr, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got, want := p.exitStatus(t, time.Minute), 0; got != want {
		t.Fatalf("exit status after SIGTERM = %d, want %d", got, want)
	}
}

// TestIdleRSS measures the agent's resident memory after running idle
// against the fake for CAPSTAN_AGENT_RSS_SECONDS seconds (heartbeat every
// second). Skipped unless that variable is set.
func TestIdleRSS(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("CAPSTAN_AGENT_RSS_SECONDS"))
	if secs <= 0 {
		t.Skip("set CAPSTAN_AGENT_RSS_SECONDS to measure idle RSS")
	}
	cp := agenttest.New(t)
	path := writeConfig(t, cp)
	p := startBinary(t, "run", "--config", path)
	// One ping, then idle heartbeats (one a second) for secs seconds.
	job := agentproto.Job{ID: ids.New(ids.Job), Type: agentproto.JobAgentPing, TimeoutSeconds: 10}
	cp.Enqueue(job, nil)
	testlab.Eventually(t, time.Minute, "ping", func() bool { return len(cp.Completions(job.ID)) > 0 })
	testlab.Eventually(t, time.Duration(2*secs+20)*time.Second, "idle heartbeats", func() bool { return len(cp.Heartbeats()) >= secs })
	st, err := procstat.Status(strconv.Itoa(p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VmRSS: %d kB, VmHWM: %d kB", st["VmRSS"], st["VmHWM"])
	t.Logf("after %d heartbeats", len(cp.Heartbeats()))
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if got := p.exitStatus(t, time.Minute); got != 0 {
		t.Fatalf("exit status = %d", got)
	}
}
