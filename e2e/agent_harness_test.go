package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Time limits of the agent harness.
const (
	// agentStopTimeout is how long an agent may take to exit on SIGTERM:
	// its shutdown grace (10 s) plus the time it gives jobs to stop.
	agentStopTimeout = 25 * time.Second
	// jobTimeout bounds the wait for an agent.ping to finish.
	jobTimeout = 90 * time.Second
	// pollInterval is how often the harness polls for a state.
	pollInterval = 25 * time.Millisecond
)

// agentBuild builds cmd/capstan-agent once per test process, next to
// capstanBin, in the directory TestMain removes.
var agentBuild struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// agentBinary returns the path of the capstan-agent binary under test,
// building it on first use. A failed build fails the test: the agent is part
// of the product, never a missing component.
func agentBinary(t testing.TB) string {
	t.Helper()
	agentBuild.once.Do(func() {
		path := filepath.Join(filepath.Dir(capstanBin), "capstan-agent")
		cmd := exec.Command("go", "build", "-trimpath",
			"-ldflags", "-X main.version="+buildVersion,
			"-o", path, "github.com/capstan-dev/capstan/cmd/capstan-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		agentBuild.out, agentBuild.err = cmd.CombinedOutput()
		agentBuild.path = path
	})
	if agentBuild.err != nil {
		t.Fatalf("building capstan-agent: %v\n%s", agentBuild.err, agentBuild.out)
	}
	return agentBuild.path
}

// agentCLI runs capstan-agent with args, in the environment of the
// processes under test.
func agentCLI(t testing.TB, args ...string) CLIResult {
	t.Helper()
	return runBinary(t, agentBinary(t), childEnv(nil), "", args...)
}

// AgentConfig is the agent's configuration file.
type AgentConfig struct {
	APIURL           string `json:"api_url"`
	ServerID         string `json:"server_id"`
	ServerName       string `json:"server_name"`
	AgentToken       string `json:"agent_token"`
	HeartbeatSeconds int    `json:"heartbeat_seconds"`
	MetricsSeconds   int    `json:"metrics_seconds"`
}

// enrollAgent runs capstan-agent enroll with a fresh config path in a
// temporary directory, fails the test unless it succeeds, and returns the
// config path.
func enrollAgent(t testing.TB, cp *ControlPlane, token string) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "agent.json")
	res := agentCLI(t, "enroll", "--url", cp.URL, "--token", token, "--config", config)
	if res.ExitCode != 0 {
		t.Fatalf("capstan-agent enroll: exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	return config
}

// readAgentConfig reads an agent's configuration file.
func readAgentConfig(t testing.TB, path string) AgentConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c AgentConfig
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("agent config %s: %v\n%s", path, err, b)
	}
	return c
}

// AgentProcess is a running capstan-agent run.
type AgentProcess struct {
	Config string
	process
}

// startAgent starts capstan-agent run with the config at path. When the test
// ends, a still running agent gets SIGTERM (SIGKILL after
// agentStopTimeout); its output is logged if the test failed.
func startAgent(t testing.TB, config string) *AgentProcess {
	t.Helper()
	return launchAgent(t, config, nil, nil)
}

// startAgentWith is startAgent with debug logging, extra environment
// variables and extra arguments of capstan-agent run.
func startAgentWith(t testing.TB, config string, env []string, args ...string) *AgentProcess {
	t.Helper()
	return launchAgent(t, config, env, append([]string{"--log-level", "debug"}, args...))
}

// startAgentIn is startAgentWith for an agent in the network namespace
// ns: it reaches the control plane only over ns's link, which the test
// can cut.
func startAgentIn(t testing.TB, ns *testlab.NetNS, config string, env []string, args ...string) *AgentProcess {
	t.Helper()
	return launchAgentCmd(t, config, env, append([]string{"--log-level", "debug"}, args...), ns.Command)
}

func launchAgent(t testing.TB, config string, env, args []string) *AgentProcess {
	t.Helper()
	return launchAgentCmd(t, config, env, args, exec.Command)
}

// launchAgentCmd starts capstan-agent run through command (exec.Command,
// or a wrapper that execs it: the process is the agent's).
func launchAgentCmd(t testing.TB, config string, env, args []string, command func(string, ...string) *exec.Cmd) *AgentProcess {
	t.Helper()
	a := &AgentProcess{Config: config, process: process{logs: &lineLog{}}}
	cmd := command(agentBinary(t), append([]string{"run", "--config", config}, args...)...)
	// Its own state directory unless env or args name one: agents of
	// parallel tests do not share what they keep across restarts.
	cmd.Env = childEnv(append([]string{"CAPSTAN_AGENT_STATE_DIR=" + t.TempDir()}, env...))
	a.start(t, cmd, "capstan-agent run")
	t.Cleanup(func() {
		if a.Running() {
			a.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may just have exited
			select {
			case <-a.exited:
			case <-time.After(agentStopTimeout):
				a.cmd.Process.Kill() //nolint:errcheck // best effort
				<-a.exited
				t.Errorf("capstan-agent did not exit within %s of SIGTERM", agentStopTimeout)
			}
		}
		if t.Failed() {
			t.Logf("capstan-agent log (%s):\n%s", config, a.Logs())
		}
	})
	return a
}

// Running reports whether the agent process has not exited yet.
func (a *AgentProcess) Running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// Wait waits up to timeout for the agent to exit and returns its exit code
// (-1 when a signal ended it); it fails the test on timeout.
func (a *AgentProcess) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-a.exited:
	case <-timer.C:
		t.Fatalf("capstan-agent did not exit within %s\n%s", timeout, a.Logs())
	}
	var exit *exec.ExitError
	switch {
	case a.err == nil:
		return 0
	case errors.As(a.err, &exit):
		return exit.ExitCode()
	default:
		t.Fatalf("capstan-agent: %v", a.err)
		return 0
	}
}

// Terminate sends SIGTERM, as systemd stop does, and returns the exit code.
func (a *AgentProcess) Terminate(t testing.TB) int {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM capstan-agent: %v", err)
	}
	return a.Wait(t, agentStopTimeout)
}

// Kill ends the agent with SIGKILL, as a crash or power loss would, and
// waits for it to be gone.
func (a *AgentProcess) Kill(t testing.TB) {
	t.Helper()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL capstan-agent: %v", err)
	}
	if got, want := a.Wait(t, stopTimeout), -1; got != want {
		t.Fatalf("exit code after SIGKILL: got %d, want %d", got, want)
	}
}

// Freeze stops the agent with SIGSTOP, as a hung host or a paused VM
// would: its connections stay open but it reads, writes and heartbeats
// nothing until Thaw (done anyway when the test ends, before the agent is
// stopped).
func (a *AgentProcess) Freeze(t testing.TB) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP capstan-agent: %v", err)
	}
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) }) //nolint:errcheck // it may have exited
}

// Thaw resumes an agent stopped by Freeze.
func (a *AgentProcess) Thaw(t testing.TB) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT capstan-agent: %v", err)
	}
}

// restartControlPlane stops cp with SIGTERM (failing the test unless it
// exits cleanly in time) and starts a new capstan serve with the same
// options, listen address, data dir and database. Later flags win, so the
// new process uses cp's address and store rather than fresh ones.
func restartControlPlane(t testing.TB, cp *ControlPlane, opts Options) *ControlPlane {
	t.Helper()
	cp.Stop(t)
	if t.Failed() {
		t.FailNow()
	}
	opts.Args = append(append([]string(nil), opts.Args...), append([]string{"--listen", cp.Addr}, cp.StoreArgs()...)...)
	next := startControlPlane(t, opts)
	next.DataDir, next.DatabaseURL = cp.DataDir, cp.DatabaseURL
	if got, want := next.Addr, cp.Addr; got != want {
		t.Fatalf("restarted control plane listens on %s, want %s", got, want)
	}
	return next
}

// Fleet is a control plane with a signed-in administrator.
type Fleet struct {
	*ControlPlane
	Opts  Options
	Admin User
	Token string // the administrator's access token
}

// newFleet starts a control plane and signs in a new administrator.
func newFleet(t testing.TB, opts Options) *Fleet {
	t.Helper()
	cp := startControlPlane(t, opts)
	admin := newAdmin(t, cp, "admin@example.com")
	s := signInUser(t, cp, admin)
	return &Fleet{ControlPlane: cp, Opts: opts, Admin: admin, Token: s.AccessToken}
}

// ServerInfo is a server as the API shows it.
type ServerInfo struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Tags         []string          `json:"tags"`
	Status       string            `json:"status"`
	Facts        *agentproto.Facts `json:"facts"`
	AgentVersion string            `json:"agent_version"`
	EnrolledAt   *time.Time        `json:"enrolled_at"`
	LastSeenAt   *time.Time        `json:"last_seen_at"`
	RevokedAt    *time.Time        `json:"revoked_at"`
	CreatedAt    time.Time         `json:"created_at"`
}

// Enrollment is the reply of POST /api/v1/servers/enrollments.
type Enrollment struct {
	Server         ServerInfo `json:"server"`
	Token          string     `json:"token"`
	InstallCommand string     `json:"install_command"`
	ExpiresAt      time.Time  `json:"expires_at"`
}

// JobEvent is one event of a job as the API shows it.
type JobEvent struct {
	Seq     int             `json:"seq"`
	At      time.Time       `json:"at"`
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// JobInfo is a job as GET /api/v1/jobs/{id} shows it.
type JobInfo struct {
	ID             string          `json:"id"`
	ServerID       string          `json:"server_id"`
	Type           string          `json:"type"`
	Status         string          `json:"status"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key"`
	CreatedBy      string          `json:"created_by"`
	TimeoutSeconds int             `json:"timeout_seconds"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	Error          *string         `json:"error"`
	Data           json.RawMessage `json:"data"`
	Output         json.RawMessage `json:"output"`
	Events         []JobEvent      `json:"events"`
	LateResult     *struct {
		Status string          `json:"status"`
		Error  *string         `json:"error"`
		Data   json.RawMessage `json:"data"`
		At     time.Time       `json:"at"`
	} `json:"late_result"`
}

// Accepted is the reply of an endpoint that queues a job.
type Accepted struct {
	JobID  string  `json:"job_id"`
	Status string  `json:"status"`
	Job    JobInfo `json:"job"`
}

// enrollmentReq creates an enrollment and returns the raw response.
func (f *Fleet) enrollmentReq(t testing.TB, name string, tags []string) *Response {
	t.Helper()
	body := map[string]any{"name": name}
	if tags != nil {
		body["tags"] = tags
	}
	return f.Post(t, "/api/v1/servers/enrollments", f.Token, body)
}

// createEnrollment creates a pending server with its one-time token.
func (f *Fleet) createEnrollment(t testing.TB, name string, tags ...string) Enrollment {
	t.Helper()
	r := f.enrollmentReq(t, name, tags)
	expectStatus(t, r, http.StatusCreated)
	var e Enrollment
	r.JSON(t, &e)
	if e.Server.ID == "" || !strings.HasPrefix(e.Token, agentproto.EnrollmentTokenPrefix) {
		t.Fatalf("enrollment lacks server id or token: %s", r.Body)
	}
	return e
}

// enrollServer creates a pending server and enrolls an agent for it with
// capstan-agent enroll; it returns the enrollment and the agent's config
// path.
func (f *Fleet) enrollServer(t testing.TB, name string, tags ...string) (Enrollment, string) {
	t.Helper()
	e := f.createEnrollment(t, name, tags...)
	return e, enrollAgent(t, f.ControlPlane, e.Token)
}

// enrollHTTP redeems an enrollment token over the agent protocol, as an
// agent would, and returns the agent's credential.
func (f *Fleet) enrollHTTP(t testing.TB, token string) agentproto.EnrollResponse {
	t.Helper()
	r := f.Post(t, "/agent/v1/enroll", "", agentproto.EnrollRequest{Token: token,
		Facts: agentproto.Facts{Hostname: "e2e-host", OS: "debian", Arch: "amd64", AgentVersion: buildVersion}})
	var res agentproto.EnrollResponse
	expectJSON(t, r, http.StatusOK, &res)
	if !strings.HasPrefix(res.AgentToken, agentproto.AgentTokenPrefix) {
		t.Fatalf("enroll reply has no agent token: %s", r.Body)
	}
	return res
}

// server returns GET /api/v1/servers/{id}.
func (f *Fleet) server(t testing.TB, id string) ServerInfo {
	t.Helper()
	var s ServerInfo
	expectJSON(t, f.Get(t, "/api/v1/servers/"+id, f.Token), http.StatusOK, &s)
	return s
}

// action posts an action on a server and returns the raw response.
func (f *Fleet) action(t testing.TB, serverID string, body map[string]any) *Response {
	t.Helper()
	return f.Post(t, "/api/v1/servers/"+serverID+"/actions", f.Token, body)
}

// ping queues agent.ping with message and returns the queued job's id.
func (f *Fleet) ping(t testing.TB, serverID, message string) string {
	t.Helper()
	r := f.action(t, serverID, map[string]any{"type": agentproto.JobAgentPing, "payload": map[string]any{"message": message}})
	expectStatus(t, r, http.StatusAccepted)
	var a Accepted
	r.JSON(t, &a)
	if a.JobID == "" || a.Status != "queued" {
		t.Fatalf("queued ping: unexpected body %s", r.Body)
	}
	return a.JobID
}

// job returns GET /api/v1/jobs/{id}.
func (f *Fleet) job(t testing.TB, id string) JobInfo {
	t.Helper()
	var j JobInfo
	expectJSON(t, f.Get(t, "/api/v1/jobs/"+id, f.Token), http.StatusOK, &j)
	return j
}

// listJobs returns GET /api/v1/jobs with the query.
func (f *Fleet) listJobs(t testing.TB, query string) []JobInfo {
	t.Helper()
	var out struct {
		Jobs []JobInfo `json:"jobs"`
	}
	expectJSON(t, f.Get(t, "/api/v1/jobs"+query, f.Token), http.StatusOK, &out)
	return out.Jobs
}

// waitJob polls a job until it is finished, and fails the test unless it
// ends with status want within timeout.
func (f *Fleet) waitJob(t testing.TB, id, want string, timeout time.Duration) JobInfo {
	t.Helper()
	var j JobInfo
	testlab.EventuallyReport(t, timeout, fmt.Sprintf("job %s ends %s", id, want), func() (bool, string) {
		j = f.job(t, id)
		if j.Status == want {
			return true, ""
		}
		if j.Status == "succeeded" || j.Status == "failed" || j.Status == "cancelled" {
			t.Fatalf("job %s ended %s (error %v), want %s: %+v", id, j.Status, deref(j.Error), want, j)
		}
		return false, j.Status
	})
	return j
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// agentCall sends one /agent/v1 request with an agent token.
func (f *Fleet) agentCall(t testing.TB, token, method, path string, body any) *Response {
	t.Helper()
	return f.Do(t, Req{Method: method, Path: "/agent/v1" + path, Token: token, JSON: body})
}

// claim long-polls for a job with an agent token; nil when none came.
func (f *Fleet) claim(t testing.TB, token string, waitSeconds int) *agentproto.Job {
	t.Helper()
	r := f.agentCall(t, token, http.MethodPost, "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: waitSeconds})
	if r.Status == http.StatusNoContent {
		return nil
	}
	expectStatus(t, r, http.StatusOK)
	var c agentproto.ClaimResponse
	r.JSON(t, &c)
	return &c.Job
}

// String describes an agent process in failure messages.
func (a *AgentProcess) String() string { return fmt.Sprintf("capstan-agent (config %s)", a.Config) }

// restart restarts the fleet's control plane on the same address and store
// (see restartControlPlane). The administrator's access token stays valid.
func (f *Fleet) restart(t testing.TB) {
	t.Helper()
	f.ControlPlane = restartControlPlane(t, f.ControlPlane, f.Opts)
}
