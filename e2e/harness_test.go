package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Time limits of the harness. Generous: CI machines are slow, and none of
// them is waited out when things work.
const (
	startTimeout = 60 * time.Second // until "listening" and a healthy /healthz
	stopTimeout  = 10 * time.Second // from SIGTERM to exit
	cliTimeout   = 60 * time.Second // one CLI command
)

// problemBase prefixes every problem type.
const problemBase = "https://capstan.dev/problems/"

// Options configure startControlPlane. The zero value serves on SQLite.
type Options struct {
	// Dialect selects the store: SQLite (default, in the data dir) or
	// PostgreSQL (a fresh database on the test server, dropped afterwards).
	Dialect store.Dialect
	// DataDir, when set, is used instead of a fresh directory: to start a
	// control plane again on the data of a stopped one.
	DataDir string
	// DatabaseURL, when set, is used instead of a fresh PostgreSQL
	// database (Dialect must be store.Postgres).
	DatabaseURL string
	// PublicURL, when set, is passed as --public-url.
	PublicURL string
	// ListenHost, when set, is the address capstan serve listens on
	// (port from :0) instead of 127.0.0.1: the test's end of a link to a
	// network namespace the test made (testlab.NewNetNS), never another.
	ListenHost string
	// Args are extra arguments for capstan serve.
	Args []string
	// Env holds extra KEY=value variables for the server and the CLI.
	// Inherited CAPSTAN_* variables are never passed on.
	Env []string
}

// ControlPlane is a running capstan serve process.
type ControlPlane struct {
	URL         string // http://127.0.0.1:PORT
	Addr        string // 127.0.0.1:PORT
	DataDir     string
	DatabaseURL string // "" for SQLite
	Dialect     store.Dialect
	// Client talks to the control plane: no proxy, no cookie jar, redirects
	// are returned rather than followed.
	Client *http.Client

	env []string
	process

	stopOnce sync.Once
}

// process is a child process a test started, with its output.
type process struct {
	cmd    *exec.Cmd
	logs   *lineLog
	exited chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, valid once exited is closed
}

// start starts cmd with its output in p.logs (set beforehand), failing
// the test if it cannot; what names the program in the failure.
func (p *process) start(t testing.TB, cmd *exec.Cmd, what string) {
	t.Helper()
	p.cmd = cmd
	p.exited = make(chan struct{})
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.WaitDelay = stopTimeout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
}

// Logs returns what the process wrote to stdout and stderr so far.
func (p *process) Logs() string { return p.logs.String() }

// forEachStore runs fn in parallel subtests, once per store dialect.
func forEachStore(t *testing.T, fn func(t *testing.T, d store.Dialect)) {
	t.Helper()
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// forEachControlPlane runs fn in parallel subtests, once per store
// dialect, each on a control plane of its own with that store.
func forEachControlPlane(t *testing.T, fn func(t *testing.T, cp *ControlPlane)) {
	t.Helper()
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		fn(t, startControlPlane(t, Options{Dialect: d}))
	})
}

// startControlPlane starts capstan serve on a free loopback port with a
// fresh data dir (and database), waits until /healthz answers 200, and stops
// it with SIGTERM when the test ends, failing the test if it does not exit
// cleanly within stopTimeout.
func startControlPlane(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Dialect == "" {
		opts.Dialect = store.SQLite
	}
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = storetest.DatabaseURL(t, opts.Dialect)
	} else if opts.Dialect != store.Postgres {
		t.Fatalf("Options.DatabaseURL needs Dialect %q", store.Postgres)
	}
	cp := &ControlPlane{
		DataDir:     opts.DataDir,
		DatabaseURL: opts.DatabaseURL,
		Dialect:     opts.Dialect,
		env:         childEnv(opts.Env),
	}
	listenHost := "127.0.0.1"
	if opts.ListenHost != "" {
		listenHost = opts.ListenHost
	}
	args := append([]string{"serve", "--listen", net.JoinHostPort(listenHost, "0"), "--log-level", "debug"}, cp.StoreArgs()...)
	if opts.PublicURL != "" {
		args = append(args, "--public-url", opts.PublicURL)
	}
	args = append(args, opts.Args...)

	listening := make(chan string, 1)
	cp.logs = &lineLog{onLine: func(line string) {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" {
			select {
			case listening <- l.Addr:
			default:
			}
		}
	}}
	cmd := exec.Command(capstanBin, args...)
	cmd.Env = cp.env
	cp.start(t, cmd, "capstan serve")
	t.Cleanup(func() {
		cp.Stop(t)
		if t.Failed() {
			t.Logf("capstan serve log:\n%s", cp.Logs())
		}
	})

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case addr := <-listening:
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != listenHost {
			t.Fatalf("listening on %q, want %s:<port>", addr, listenHost)
		}
		cp.Addr, cp.URL = addr, "http://"+addr
	case <-cp.exited:
		t.Fatalf("capstan serve exited before listening: %v\n%s", cp.err, cp.Logs())
	case <-timer.C:
		t.Fatalf("capstan serve did not log \"listening\" within %s\n%s", startTimeout, cp.Logs())
	}
	cp.Client = &http.Client{
		Transport:     &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext},
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := cp.Client.Get(cp.URL + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz did not answer 200 within %s (last: %v)", startTimeout, describe(resp, err))
		}
		select {
		case <-cp.exited:
			t.Fatalf("capstan serve exited while starting: %v", cp.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return cp
}

func describe(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// Stop sends SIGTERM and waits for a clean exit; it fails the test if the
// process is already gone, exits non-zero, or takes longer than
// stopTimeout (then it is killed). Later calls do nothing.
func (cp *ControlPlane) Stop(t testing.TB) {
	t.Helper()
	cp.stopOnce.Do(func() {
		if cp.Client != nil {
			cp.Client.CloseIdleConnections()
		}
		select {
		case <-cp.exited:
			t.Errorf("capstan serve exited before the test ended: %v", cp.err)
			return
		default:
		}
		if err := cp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM: %v", err)
		}
		timer := time.NewTimer(stopTimeout)
		defer timer.Stop()
		select {
		case <-cp.exited:
			if cp.err != nil {
				t.Errorf("capstan serve did not exit cleanly on SIGTERM: %v", cp.err)
			}
		case <-timer.C:
			cp.cmd.Process.Kill() //nolint:errcheck // best effort
			<-cp.exited
			t.Errorf("capstan serve did not exit within %s of SIGTERM", stopTimeout)
		}
	})
}

// Kill ends the server with SIGKILL, as a crash or power loss would, and
// waits for it to be gone; a later Stop does nothing.
func (cp *ControlPlane) Kill(t testing.TB) {
	t.Helper()
	cp.stopOnce.Do(func() {
		if err := cp.cmd.Process.Kill(); err != nil {
			t.Errorf("SIGKILL capstan serve: %v", err)
		}
		<-cp.exited
	})
}

// LogLines returns the server's JSON log lines, parsed; lines that are not
// JSON are skipped.
func (cp *ControlPlane) LogLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(cp.Logs(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// StoreArgs are the --data-dir and --database-url flags of this control
// plane, for CLI commands that open its store.
func (cp *ControlPlane) StoreArgs() []string {
	args := []string{"--data-dir", cp.DataDir}
	if cp.DatabaseURL != "" {
		args = append(args, "--database-url", cp.DatabaseURL)
	}
	return args
}

// childEnv is the environment of the processes under test: the test's own,
// without CAPSTAN_* variables (a developer's settings must not leak in),
// plus extra.
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAPSTAN_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// lineLog collects process output and calls onLine for each complete line.
type lineLog struct {
	onLine func(string)

	mu      sync.Mutex // guards buf and partial
	buf     bytes.Buffer
	partial []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	var lines []string
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	l.mu.Unlock()
	for _, line := range lines {
		if l.onLine != nil {
			l.onLine(line)
		}
	}
	return len(p), nil
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// CLIResult is the outcome of one CLI command (or of a command in a
// systemd host).
type CLIResult = testlab.ExecResult

// CLI runs the capstan binary with args (add cp.StoreArgs() for commands
// that open the store) and stdin, in the control plane's environment.
func (cp *ControlPlane) CLI(t testing.TB, stdin string, args ...string) CLIResult {
	t.Helper()
	return runCLI(t, cp.env, stdin, args...)
}

func runCLI(t testing.TB, env []string, stdin string, args ...string) CLIResult {
	t.Helper()
	return runBinary(t, capstanBin, env, stdin, args...)
}

// runBinary runs bin with args, env and stdin, and returns its output and
// exit status; it fails the test if bin cannot run or takes longer than
// cliTimeout.
func runBinary(t testing.TB, bin string, env []string, stdin string, args ...string) CLIResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	return testlab.RunCommand(t, ctx, cmd, filepath.Base(bin)+" "+strings.Join(args, " "))
}

// User is a user created with the CLI, with what it needs to sign in.
type User struct {
	ID         string `json:"id"`
	Email      string `json:"email"`
	Admin      bool   `json:"admin"`
	TOTPSecret string `json:"totp_secret"`
	OTPAuthURI string `json:"otpauth_uri"`
	Password   string `json:"-"`
}

// createUser creates a user with capstan user create --json, as an operator
// would on the control plane host.
func createUser(t testing.TB, cp *ControlPlane, email, password string, admin bool) User {
	t.Helper()
	args := append([]string{"user", "create", "--email", email, "--password-stdin", "--json"}, cp.StoreArgs()...)
	if admin {
		args = append(args, "--admin")
	}
	res := cp.CLI(t, password+"\n", args...)
	if res.ExitCode != 0 {
		t.Fatalf("capstan user create: exit %d\nstderr: %s", res.ExitCode, res.Stderr)
	}
	var u User
	dec := json.NewDecoder(strings.NewReader(res.Stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		t.Fatalf("capstan user create --json: %v\nstdout: %s", err, res.Stdout)
	}
	if u.ID == "" || u.TOTPSecret == "" {
		t.Fatalf("capstan user create --json: missing id or totp_secret: %s", res.Stdout)
	}
	u.Password = password
	return u
}

// testPassword is a password that passes the password rules.
const testPassword = "correct horse battery staple"

// newAdmin creates an administrator with testPassword.
func newAdmin(t testing.TB, cp *ControlPlane, email string) User {
	t.Helper()
	return createUser(t, cp, email, testPassword, true)
}

// Response is a fully read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Cookie returns the cookie the response sets under name, or nil.
func (r *Response) Cookie(name string) *http.Cookie {
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// JSON decodes the body into v, failing the test if it is not JSON.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response body is not JSON (%v): %s", err, r.Body)
	}
}

// Req is one request to a control plane.
type Req struct {
	Method string
	Path   string
	// Token, when set, is sent as Authorization: Bearer.
	Token string
	// JSON, when not nil, is encoded as the body (Content-Type
	// application/json unless ContentType says otherwise).
	JSON any
	// Body is sent as is when JSON is nil.
	Body        []byte
	ContentType string
	Header      http.Header
	Cookies     []*http.Cookie
	// Jar, when set, supplies cookies and receives the ones set.
	Jar http.CookieJar
}

// Do sends r and reads the whole response.
func (cp *ControlPlane) Do(t testing.TB, r Req) *Response {
	t.Helper()
	body := r.Body
	ct := r.ContentType
	if r.JSON != nil {
		b, err := json.Marshal(r.JSON)
		if err != nil {
			t.Fatal(err)
		}
		body = b
		if ct == "" {
			ct = "application/json"
		}
	}
	req, err := http.NewRequest(r.Method, cp.URL+r.Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for _, c := range r.Cookies {
		req.AddCookie(c)
	}
	client := *cp.Client
	client.Jar = r.Jar
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", r.Method, r.Path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Get sends a GET with an optional access token.
func (cp *ControlPlane) Get(t testing.TB, path, token string) *Response {
	t.Helper()
	return cp.Do(t, Req{Method: http.MethodGet, Path: path, Token: token})
}

// Post sends a POST with a JSON body and an optional access token.
func (cp *ControlPlane) Post(t testing.TB, path, token string, body any) *Response {
	t.Helper()
	return cp.Do(t, Req{Method: http.MethodPost, Path: path, Token: token, JSON: body})
}

// expectStatus fails the test unless r has the given status.
func expectStatus(t testing.TB, r *Response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status: got %d, want %d; body: %s", r.Status, want, r.Body)
	}
}

// expectJSON fails the test unless r has the given status, and decodes
// its body into v.
func expectJSON(t testing.TB, r *Response, want int, v any) {
	t.Helper()
	expectStatus(t, r, want)
	r.JSON(t, v)
}

// Problem is an RFC 9457 problem as the API sends it.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	RequestID string `json:"request_id"`
	Errors    []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

// expectProblem checks that r is a problem with the given status and type
// (problemBase+code), sent as application/problem+json, and returns it.
func expectProblem(t testing.TB, r *Response, status int, code string) Problem {
	t.Helper()
	if got, want := r.Status, status; got != want {
		t.Fatalf("status: got %d, want %d; body: %s", got, want, r.Body)
	}
	if got, want := r.Header.Get("Content-Type"), "application/problem+json"; got != want {
		t.Fatalf("Content-Type: got %q, want %q", got, want)
	}
	var p Problem
	r.JSON(t, &p)
	if got, want := p.Type, problemBase+code; got != want {
		t.Fatalf("problem type: got %q, want %q; body: %s", got, want, r.Body)
	}
	if got, want := p.Status, status; got != want {
		t.Fatalf("problem status: got %d, want %d", got, want)
	}
	if p.Title == "" || p.Detail == "" || p.RequestID == "" {
		t.Fatalf("problem lacks title, detail or request_id: %s", r.Body)
	}
	if got, want := p.RequestID, r.Header.Get("X-Request-ID"); got != want {
		t.Fatalf("problem request_id: got %q, want the X-Request-ID header %q", got, want)
	}
	return p
}

// Session is a signed-in user.
type Session struct {
	User struct {
		ID    string `json:"id"`
		Email string `json:"email"`
		Admin bool   `json:"admin"`
	} `json:"user"`
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
	// Refresh is the refresh cookie set by the verify response.
	Refresh *http.Cookie `json:"-"`
	// Jar holds the refresh cookie as a browser would (not for the
	// __Host- cookie of an https public URL over the plain-http test
	// listener: send Refresh by hand then).
	Jar http.CookieJar `json:"-"`
}

// refreshCookieName is the refresh cookie's name on a control plane whose
// public URL is http://.
const refreshCookieName = "capstan_refresh"

// totpSteps remembers the last TOTP time step used per secret in this test
// process: the server accepts each step once per user.
var totpSteps = struct {
	sync.Mutex
	last map[string]int64
}{last: map[string]int64{}}

// totpCode returns a code of a time step that the server has not seen from
// this process for the secret, waiting for the clock when the two steps
// the server accepts (the current one and the next) are used up.
func totpCode(t testing.TB, secret string) string {
	t.Helper()
	totpSteps.Lock()
	step := max(time.Now().Unix()/30, totpSteps.last[secret]+1)
	totpSteps.last[secret] = step
	totpSteps.Unlock()
	// The server accepts one step either side of its clock: wait until step
	// is at most one ahead.
	if wait := time.Until(time.Unix((step-1)*30, 0)); wait > 0 {
		if wait > 31*time.Second {
			t.Fatalf("TOTP step %d is too far ahead", step)
		}
		time.Sleep(wait)
	}
	code, err := auth.TOTPCode(secret, time.Unix(step*30, 0))
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// login does step 1 of sign-in and returns the challenge id.
func login(t testing.TB, cp *ControlPlane, email, password string) string {
	t.Helper()
	r := cp.Post(t, "/api/v1/auth/login", "", map[string]string{"email": email, "password": password})
	var out struct {
		Status      string `json:"status"`
		ChallengeID string `json:"challenge_id"`
		Method      string `json:"method"`
	}
	expectJSON(t, r, http.StatusOK, &out)
	if out.Status != "two_factor_required" || out.Method != "totp" || out.ChallengeID == "" {
		t.Fatalf("login: unexpected body %s", r.Body)
	}
	return out.ChallengeID
}

// signIn signs in with password and TOTP (login, then 2fa/verify with a
// code computed from totpSecret) and returns the session.
func signIn(t testing.TB, cp *ControlPlane, email, password, totpSecret string) *Session {
	t.Helper()
	challenge := login(t, cp, email, password)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/2fa/verify", Jar: jar,
		JSON: map[string]string{"challenge_id": challenge, "code": totpCode(t, totpSecret)}})
	expectStatus(t, r, http.StatusOK)
	s := &Session{Jar: jar}
	r.JSON(t, s)
	if s.AccessToken == "" || s.TokenType != "Bearer" {
		t.Fatalf("verify: unexpected body %s", r.Body)
	}
	for _, name := range []string{refreshCookieName, "__Host-" + refreshCookieName} {
		if c := r.Cookie(name); c != nil {
			s.Refresh = c
		}
	}
	if s.Refresh == nil || s.Refresh.Value == "" {
		t.Fatalf("verify set no refresh cookie; Set-Cookie: %q", r.Header.Values("Set-Cookie"))
	}
	return s
}

// signInUser signs in a user made by createUser.
func signInUser(t testing.TB, cp *ControlPlane, u User) *Session {
	t.Helper()
	return signIn(t, cp, u.Email, u.Password, u.TOTPSecret)
}

// AuditEntry is an audit log entry as the API lists it.
type AuditEntry struct {
	ID     string    `json:"id"`
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	Actor  struct {
		Type  string `json:"type"`
		ID    string `json:"id"`
		Email string `json:"email"`
	} `json:"actor"`
	Target struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	} `json:"target"`
	IP      string         `json:"ip"`
	Details map[string]any `json:"details"`
}

// auditEntries lists the newest audit entries with this action (or prefix
// ending in .*), as an administrator.
func auditEntries(t testing.TB, cp *ControlPlane, adminToken, action string) []AuditEntry {
	t.Helper()
	var out struct {
		Entries []AuditEntry `json:"entries"`
	}
	expectJSON(t, cp.Get(t, "/api/v1/audit-logs?limit=200&action="+action, adminToken), http.StatusOK, &out)
	return out.Entries
}

// String describes the control plane in failure messages.
func (cp *ControlPlane) String() string {
	return fmt.Sprintf("capstan at %s (%s, data dir %s)", cp.URL, cp.Dialect, cp.DataDir)
}
