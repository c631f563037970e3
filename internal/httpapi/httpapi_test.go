package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/jobs"
	logsvc "github.com/capstan-dev/capstan/internal/logs"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/platform"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/stream"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// testPassword passes the password rules.
const testPassword = "correct horse battery staple"

// newFakeClock starts at the real time: cookie Max-Age is computed from
// the wall clock.
func newFakeClock() *testlab.Clock { return testlab.NewClock(time.Now().UTC().Truncate(time.Second)) }

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type envOptions struct {
	dialect   store.Dialect // default SQLite
	publicURL string        // default http://capstan.test
}

// testEnv is a control plane served in-process, built as cmd/capstan does,
// on a fake clock.
type testEnv struct {
	srv   *Server
	ts    *httptest.Server // nil until serve is called
	clock *testlab.Clock
	auth  *auth.Service
	store *store.Store
	logs  *syncBuffer
	jobs  *jobs.Service
	live  *stream.Hub

	mu    sync.Mutex       // guards steps
	steps map[string]int64 // last TOTP step used per secret
}

// newTestEnv builds the control plane. Call serve for a loopback listener.
func newTestEnv(t testing.TB, o envOptions) *testEnv {
	t.Helper()
	if o.dialect == "" {
		o.dialect = store.SQLite
	}
	if o.publicURL == "" {
		o.publicURL = "http://capstan.test"
	}
	st := storetest.Open(t, o.dialect)
	key := secrets.GenerateKey()
	clock := newFakeClock()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log := audit.NewLog(st, clock.Now)
	js := jobs.NewService(jobs.Deps{Store: st, Key: key, Now: clock.Now, Log: logger})
	srvs := servers.NewService(servers.Deps{Store: st, Jobs: js, Audit: log, Now: clock.Now, PublicURL: o.publicURL, EnrollmentTTL: time.Hour})
	ms := metrics.NewService(st, srvs, clock.Now, logger)
	live := stream.NewHub(stream.DefaultRing)
	js.Watch(live.PublishJob)
	e := &testEnv{
		jobs:  js,
		live:  live,
		clock: clock,
		auth:  auth.NewService(st, key, log, clock.Now, platform.Name),
		store: st,
		logs:  logs,
		steps: map[string]int64{},
	}
	e.srv = New(Deps{
		Auth:      e.auth,
		Audit:     log,
		Platform:  platform.NewService(st, key, o.publicURL, "test", clock.Now),
		Servers:   srvs,
		Jobs:      js,
		Metrics:   ms,
		Logs:      logsvc.NewService(js, srvs, ms),
		Logger:    logger,
		Version:   "test",
		PublicURL: o.publicURL,
		Stream:    live,
		// The store keeps the stream tickets.
		StreamTickets: st,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return e
}

// serve starts a loopback HTTP server for the control plane.
func (e *testEnv) serve(t testing.TB) *testEnv {
	t.Helper()
	e.ts = httptest.NewServer(e.srv)
	t.Cleanup(e.ts.Close)
	return e
}

// createUser creates a user and returns it with its TOTP secret.
func (e *testEnv) createUser(t testing.TB, email string, admin bool) (auth.User, string) {
	t.Helper()
	u, en, err := e.auth.CreateUser(context.Background(), audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "test"}}, email, testPassword, admin)
	if err != nil {
		t.Fatalf("create user %s: %v", email, err)
	}
	return u, en.Secret
}

// code returns a TOTP code for secret that the server accepts now,
// advancing the fake clock past steps already used.
func (e *testEnv) code(t testing.TB, secret string) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	step := e.clock.Now().Unix() / 30
	if last := e.steps[secret]; step <= last {
		e.clock.Advance(time.Duration(last-step+1) * 30 * time.Second)
		step = last + 1
	}
	e.steps[secret] = step
	c, err := auth.TOTPCode(secret, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// response is a fully read response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) cookie(name string) *http.Cookie {
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (r *response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body is not JSON (%v): %s", err, r.body)
	}
}

// request sends one request over the loopback listener. body is sent as
// JSON unless it is a string (sent as is, as application/json).
func (e *testEnv) request(t testing.TB, method, path, token string, body any, cookies ...*http.Cookie) *response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}
}

func expectStatus(t testing.TB, r *response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status: got %d, want %d; body: %s", r.status, want, r.body)
	}
}

// expectProblem checks status, problem type and content type.
func expectProblem(t testing.TB, r *response, status int, code string) Problem {
	t.Helper()
	if got, want := r.status, status; got != want {
		t.Fatalf("status: got %d, want %d; body: %s", got, want, r.body)
	}
	if got, want := r.header.Get("Content-Type"), "application/problem+json"; got != want {
		t.Fatalf("Content-Type: got %q, want %q", got, want)
	}
	var p Problem
	r.decode(t, &p)
	if got, want := p.Type, ProblemTypeBase+code; got != want {
		t.Fatalf("problem type: got %q, want %q", got, want)
	}
	if got, want := p.Status, status; got != want {
		t.Fatalf("problem status: got %d, want %d", got, want)
	}
	if got, want := p.RequestID, r.header.Get("X-Request-ID"); got == "" || got != want {
		t.Fatalf("problem request_id: got %q, want the X-Request-ID header %q", got, want)
	}
	return p
}

// login does step 1 and returns the challenge id.
func (e *testEnv) login(t testing.TB, email string) string {
	t.Helper()
	r := e.request(t, http.MethodPost, "/api/v1/auth/login", "", map[string]string{"email": email, "password": testPassword})
	expectStatus(t, r, http.StatusOK)
	var out struct {
		ChallengeID string `json:"challenge_id"`
	}
	r.decode(t, &out)
	return out.ChallengeID
}

// signIn signs in and returns the access token and the refresh cookie.
func (e *testEnv) signIn(t testing.TB, email, secret string) (string, *http.Cookie) {
	t.Helper()
	challenge := e.login(t, email)
	r := e.request(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": challenge, "code": e.code(t, secret)})
	expectStatus(t, r, http.StatusOK)
	var out struct {
		AccessToken string `json:"access_token"`
	}
	r.decode(t, &out)
	c := r.cookie(e.srv.cookie.prefix + refreshCookieBase)
	if out.AccessToken == "" || c == nil {
		t.Fatalf("verify: no access token or refresh cookie: %s", r.body)
	}
	return out.AccessToken, c
}

func TestExpiredChallenge(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	u, secret := e.createUser(t, "alice@example.com", false)

	challenge := e.login(t, u.Email)
	e.clock.Advance(auth.ChallengeTTL)
	r := e.request(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": challenge, "code": e.code(t, secret)})
	expectProblem(t, r, http.StatusUnauthorized, "invalid-challenge")

	// One second earlier it is still good.
	challenge = e.login(t, u.Email)
	e.clock.Advance(auth.ChallengeTTL - time.Second)
	r = e.request(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": challenge, "code": e.code(t, secret)})
	expectStatus(t, r, http.StatusOK)
}

func TestChallengeUsedUpByWrongCodes(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	u, secret := e.createUser(t, "alice@example.com", false)
	challenge := e.login(t, u.Email)
	good := e.code(t, secret)
	bad := "000000"
	if bad == good {
		bad = "000001"
	}
	for range auth.MaxCodeFailures {
		r := e.request(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": bad})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-code")
	}
	r := e.request(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": good})
	expectProblem(t, r, http.StatusUnauthorized, "invalid-challenge")
}

func TestExpiredAccessToken(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	u, secret := e.createUser(t, "alice@example.com", false)
	token, refresh := e.signIn(t, u.Email, secret)

	e.clock.Advance(auth.AccessTTL - time.Second)
	expectStatus(t, e.request(t, http.MethodGet, "/api/v1/auth/me", token, nil), http.StatusOK)
	e.clock.Advance(time.Second)
	expectProblem(t, e.request(t, http.MethodGet, "/api/v1/auth/me", token, nil), http.StatusUnauthorized, "invalid-token")

	// The session lives on: refresh gives a working token.
	r := e.request(t, http.MethodPost, "/api/v1/auth/refresh", "", nil, refresh)
	expectStatus(t, r, http.StatusOK)
	var out struct {
		AccessToken string `json:"access_token"`
	}
	r.decode(t, &out)
	expectStatus(t, e.request(t, http.MethodGet, "/api/v1/auth/me", out.AccessToken, nil), http.StatusOK)

	// Until it is idle too long.
	next := r.cookie(e.srv.cookie.prefix + refreshCookieBase)
	e.clock.Advance(auth.SessionIdleTTL)
	r = e.request(t, http.MethodPost, "/api/v1/auth/refresh", "", nil, next)
	expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
}

func TestThrottleRetryAfter(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	u, _ := e.createUser(t, "alice@example.com", false)
	wrong := map[string]string{"email": u.Email, "password": "not the password at all"}
	for range 5 {
		expectProblem(t, e.request(t, http.MethodPost, "/api/v1/auth/login", "", wrong), http.StatusUnauthorized, "invalid-credentials")
	}
	r := e.request(t, http.MethodPost, "/api/v1/auth/login", "", map[string]string{"email": u.Email, "password": testPassword})
	expectProblem(t, r, http.StatusTooManyRequests, "too-many-attempts")
	if got, want := r.header.Get("Retry-After"), "60"; got != want {
		t.Fatalf("Retry-After: got %q, want %q", got, want)
	}
	e.clock.Advance(30 * time.Second)
	r = e.request(t, http.MethodPost, "/api/v1/auth/login", "", wrong)
	expectProblem(t, r, http.StatusTooManyRequests, "too-many-attempts")
	if got, want := r.header.Get("Retry-After"), "30"; got != want {
		t.Fatalf("Retry-After after 30 s: got %q, want %q", got, want)
	}
	e.clock.Advance(30 * time.Second)
	e.login(t, u.Email)
}

// TestPanicBecomesProblem registers operations on a private server that
// panic, before and after the response has started.
func TestPanicBecomesProblem(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	op(e.srv, huma.Operation{OperationID: "test-panic", Method: http.MethodGet, Path: "/test/panic"}, Public,
		func(context.Context, *struct{}) (*healthOutput, error) { panic("boom") })
	e.srv.mux.HandleFunc("GET /test/panic-late", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("partial")) //nolint:errcheck
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		panic("boom after the response began")
	})
	e.serve(t)

	r := e.request(t, http.MethodGet, "/test/panic", "", nil)
	p := expectProblem(t, r, http.StatusInternalServerError, "internal-error")
	if strings.Contains(string(r.body), "boom") {
		t.Fatalf("the problem shows the panic value: %s", r.body)
	}
	if got, want := p.Instance, "/test/panic"; got != want {
		t.Fatalf("instance: got %q, want %q", got, want)
	}
	if got, want := r.header.Get("X-Content-Type-Options"), "nosniff"; got != want {
		t.Fatalf("X-Content-Type-Options: got %q, want %q", got, want)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg":"panic in handler"`) || !strings.Contains(logs, p.RequestID) {
		t.Fatalf("the panic is not logged with its request id %s:\n%s", p.RequestID, logs)
	}

	// Too late for a problem: the connection is cut, so the client sees an
	// incomplete response instead of a complete 200.
	resp, err := e.ts.Client().Get(e.ts.URL + "/test/panic-late")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a panic after the response began gave a complete response")
	}

	// The server still serves.
	expectStatus(t, e.request(t, http.MethodGet, "/healthz", "", nil), http.StatusOK)
}

func TestRequestIDAndSecurityHeaders(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/api/v1/nope", nil)
	req.Header.Set("X-Request-ID", "client-chosen.id_1")
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for k, want := range map[string]string{
		"X-Request-Id":           "client-chosen.id_1",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
		"X-Frame-Options":        "DENY",
		"Cache-Control":          "no-store",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Fatalf("%s: got %q, want %q", k, got, want)
		}
	}
	req.Header.Set("X-Request-ID", "bad id with spaces")
	resp, err = e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-ID"); got == "" || got == "bad id with spaces" {
		t.Fatalf("X-Request-ID for an invalid client id: got %q, want a new one", got)
	}
}

// TestProblemsInProcess covers the error paths of the handler itself, on
// both stores; the e2e suite covers them against the binary.
func TestProblemsInProcess(t *testing.T) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			e := newTestEnv(t, envOptions{dialect: d}).serve(t)
			admin, adminSecret := e.createUser(t, "admin@example.com", true)
			user, userSecret := e.createUser(t, "user@example.com", false)
			adminToken, _ := e.signIn(t, admin.Email, adminSecret)
			userToken, _ := e.signIn(t, user.Email, userSecret)

			for _, c := range []struct {
				name, method, path, token string
				body                      any
				status                    int
				code                      string
			}{
				{"wrong password", "POST", "/api/v1/auth/login", "", map[string]string{"email": user.Email, "password": "nope nope nope"}, 401, "invalid-credentials"},
				{"unknown e-mail", "POST", "/api/v1/auth/login", "", map[string]string{"email": "x@example.com", "password": "nope nope nope"}, 401, "invalid-credentials"},
				{"NUL in e-mail", "POST", "/api/v1/auth/login", "", map[string]string{"email": "user\x00@example.com", "password": testPassword}, 401, "invalid-credentials"},
				{"garbage token", "GET", "/api/v1/auth/me", "garbage", nil, 401, "invalid-token"},
				{"no token", "GET", "/api/v1/platform", "", nil, 401, "invalid-token"},
				{"not admin", "GET", "/api/v1/audit-logs", userToken, nil, 403, "admin-required"},
				{"not admin kit", "POST", "/api/v1/platform/recovery-kit", userToken, map[string]string{"password": testPassword}, 403, "admin-required"},
				{"wrong kit password", "POST", "/api/v1/platform/recovery-kit", adminToken, map[string]string{"password": "nope nope nope"}, 403, "wrong-password"},
				{"malformed JSON", "POST", "/api/v1/auth/login", "", `{"email":`, 400, "malformed-request"},
				{"empty body", "POST", "/api/v1/auth/login", "", ``, 400, "malformed-request"},
				{"unknown field", "POST", "/api/v1/auth/login", "", `{"email":"a@b.c","password":"x","x":1}`, 422, "validation-failed"},
				{"too big", "POST", "/api/v1/auth/login", "", `{"email":"` + strings.Repeat("a", maxJSONBody) + `"}`, 413, "body-too-large"},
				{"bad action", "GET", "/api/v1/audit-logs?action=DROP%20TABLE", adminToken, nil, 422, "validation-failed"},
				{"unknown query", "GET", "/api/v1/auth/me?x=1", userToken, nil, 422, "validation-failed"},
				{"unknown path", "GET", "/api/v1/nope", "", nil, 404, "not-found"},
				{"wrong method", "PATCH", "/api/v1/platform", userToken, nil, 405, "method-not-allowed"},
			} {
				t.Run(c.name, func(t *testing.T) {
					r := e.request(t, c.method, c.path, c.token, c.body)
					expectProblem(t, r, c.status, c.code)
				})
			}
		})
	}
}

// A request whose client went away before the answer (a browser leaving
// the page) is answered 503 request-cancelled and logged as such, not as
// a server error; a real internal error still is.
func TestAbandonedRequestIsNoServerError(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	entered := make(chan struct{})
	op(e.srv, huma.Operation{OperationID: "test-slow", Method: http.MethodGet, Path: "/test/slow"}, Public,
		func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
			close(entered)
			<-ctx.Done()
			return nil, fmt.Errorf("reading: %w", ctx.Err())
		})
	op(e.srv, huma.Operation{OperationID: "test-broken", Method: http.MethodGet, Path: "/test/broken"}, Public,
		func(context.Context, *struct{}) (*healthOutput, error) { return nil, errors.New("broken") })
	e.serve(t)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/test/slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := e.ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: %v", err)
	}
	line := func(path string) map[string]any {
		for _, l := range strings.Split(e.logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["path"] == path {
				return m
			}
		}
		return nil
	}
	testlab.Eventually(t, 10*time.Second, "the abandoned request logged", func() bool { return line("/test/slow") != nil })
	if m := line("/test/slow"); m["level"] != "INFO" || m["status"] != float64(http.StatusServiceUnavailable) {
		t.Fatalf("abandoned request logged as %v", m)
	}
	expectProblem(t, e.request(t, http.MethodGet, "/test/broken", "", nil), http.StatusInternalServerError, "internal-error")
	if m := line("/test/broken"); m == nil || m["level"] != "ERROR" {
		t.Fatalf("internal error logged as %v", m)
	}
}
