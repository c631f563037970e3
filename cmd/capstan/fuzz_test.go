package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentapi"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/httpapi"
	"github.com/capstan-dev/capstan/internal/notify"
)

// fuzzPlane is a whole control plane in-process on SQLite, as capstan
// serve wires it (without its background loops, so nothing is delivered
// anywhere), with an administrator's access token and an enrolled
// server's agent token.
type fuzzPlane struct {
	api        *httpapi.Server
	adminToken string
	agentToken string
	serverID   string
	// bodyRoutes are the routes that take a request body, "METHOD path".
	bodyRoutes []string
}

// loopbackOnly is where the git host client is sent: a closed loopback
// port, so that no fuzzed request reaches anything.
const loopbackOnly = "http://127.0.0.1:1"

func newFuzzPlane(t testing.TB) *fuzzPlane {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	provider, err := githost.NewGitHub(loopbackOnly, loopbackOnly, nil)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	a, err := openAppWith(ctx, StoreFlags{DataDir: dataDir}, appOptions{PublicURL: "http://capstan.test", Provider: provider, Logger: log,
		Artifacts: &databases.ArtifactOptions{TTL: time.Hour, MaxImportBytes: 1 << 20, MaxExportBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	// No destination is allowed to notification channels: nothing leaves.
	a.channels = notify.NewChannels(a.store, a.key, a.audit, notify.Guard{}, time.Now, log)
	api := httpapi.New(httpapi.Deps{
		Auth: a.auth, Audit: a.audit, Platform: a.platform, Servers: a.servers, Jobs: a.jobs, Metrics: a.metrics, Logs: a.logs, Logger: log,
		Apps: a.apps, Domains: a.domains, Databases: a.dbs, Events: a.store, GitHost: a.githost, Monitoring: a.monitor, Inbox: a.inbox,
		Backups: a.backups, Channels: a.channels, Preferences: notify.NewPreferences(a.store, time.Now),
		Version: "fuzz", PublicURL: "http://capstan.test",
	}, agentapi.Mount(agentapi.Deps{Servers: a.servers, Jobs: a.jobs, Metrics: a.metrics, Domains: a.domains,
		Monitoring: a.monitor, Databases: a.dbs, Backups: a.backups, PublicURL: "http://capstan.test", AgentDir: t.TempDir(), Version: "fuzz"}),
		httpapi.CloudDrive(nil))
	p := &fuzzPlane{api: api}

	system := audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "fuzz"}}
	const email, password = "fuzz@example.com", "a long enough fuzz password"
	_, en, err := a.auth.CreateUser(ctx, system, email, password, true)
	if err != nil {
		t.Fatal(err)
	}
	var login struct {
		ChallengeID string `json:"challenge_id"`
	}
	p.mustCall(t, http.MethodPost, "/api/v1/auth/login", "", map[string]any{"email": email, "password": password}, &login)
	code, err := auth.TOTPCode(en.Secret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var tokens struct {
		AccessToken string `json:"access_token"`
	}
	p.mustCall(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]any{"challenge_id": login.ChallengeID, "code": code}, &tokens)
	p.adminToken = tokens.AccessToken

	enr, err := a.servers.CreateEnrollment(ctx, system, "fuzz-host", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.servers.Enroll(ctx, audit.Caller{}, agentproto.EnrollRequest{Token: enr.Token})
	if err != nil {
		t.Fatal(err)
	}
	p.agentToken, p.serverID = res.AgentToken, res.ServerID

	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody any `json:"requestBody"`
		} `json:"paths"`
	}
	p.mustCall(t, http.MethodGet, "/openapi.json", "", nil, &doc)
	for _, r := range api.Routes() {
		if op, ok := doc.Paths[r.Path][strings.ToLower(r.Method)]; ok && op.RequestBody != nil {
			p.bodyRoutes = append(p.bodyRoutes, r.Method+" "+r.Path)
		}
	}
	if len(p.bodyRoutes) < 40 {
		t.Fatalf("only %d routes take a body: %q", len(p.bodyRoutes), p.bodyRoutes)
	}
	return p
}

func (p *fuzzPlane) mustCall(t testing.TB, method, path, token string, body, out any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	rec := p.serve(method, path, token, rd)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

func (p *fuzzPlane) serve(method, path, token string, body *bytes.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-ID", "fuzz-request")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	p.api.ServeHTTP(rec, req)
	return rec
}

// queuePing queues an agent.ping for the enrolled server.
func (p *fuzzPlane) queuePing(t testing.TB) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"type": agentproto.JobAgentPing, "payload": map[string]string{"message": "fuzz"}})
	rec := p.serve(http.MethodPost, "/api/v1/servers/"+p.serverID+"/actions", p.adminToken, bytes.NewReader(b))
	if rec.Code != http.StatusAccepted && rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		t.Fatalf("queuing a ping: %d %s", rec.Code, rec.Body)
	}
}

// path fills in a route's path parameters: the enrolled server's id for
// a server, an id of nothing for the others.
func (p *fuzzPlane) path(route string) string {
	if strings.HasPrefix(route, "/api/v1/servers/{id}") {
		route = strings.Replace(route, "{id}", p.serverID, 1)
	}
	for strings.Contains(route, "{") {
		i, j := strings.Index(route, "{"), strings.Index(route, "}")
		route = route[:i] + "x_0123456789abcdefghjkmnpqrs" + route[j+1:]
	}
	return route
}

// FuzzRequestBodies posts each fuzzed body to every route of /api/v1 and
// /agent/v1 that takes one, as the administrator and as the enrolled
// agent: whatever the body, the answer is never a 5xx, and every error is
// an RFC 9457 problem with the response's status.
func FuzzRequestBodies(f *testing.F) {
	p := newFuzzPlane(f)
	for _, seed := range []string{
		`{}`, `[]`, `null`, `""`, `0`, `{"name":"web","tags":["a"]}`, `{"email":"a@b.c","password":"x"}`,
		`{"name":"app","source":{"type":"image","image":"nginx:1"},"container_port":80,"health_path":"/"}`,
		`{"hostname":"example.com","application_id":"app_x","tls_mode":"internal"}`,
		`{"engine":"postgres","version":"16","name":"db"}`,
		`{"kind":"cpu","threshold":90,"for_seconds":60}`,
		`{"type":"webhook","name":"w","config":{"url":"https://example.com/hook"}}`,
		`{"samples":[{"at":"2026-11-24T10:00:00Z","cpu_percent":5}]}`,
		`{"status":"succeeded","data":{}}`, `{"events":[{"level":"info","message":"m"}]}`,
		`{"wait_seconds":0}`, `{"agent_version":"1","uptime_seconds":1,"running_job_ids":["job_x"]}`,
		`{"services":null,"containers":[],"ports":[]}`, `{"minutes":[{"host":"h","at":"2026-11-24T10:00:00Z"}]}`,
		`{"action":"ping","message":"hi"}`, `{"source":{"type":"service","name":"ssh"},"lines":10,"cursor":"x"}`,
		`{"a":{"b":{"c":{"d":[1,2,3,{"e":null}]}}}}`, `{"name":"` + strings.Repeat("n", 300) + `"}`,
		`{"name":"\u0000\ud800"}`, `{"x":1e999}`, `{"x":-0}`, "\xff\xfe{}", `{"`, `{"a":1,"a":2}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, r := range p.bodyRoutes {
			method, route, _ := strings.Cut(r, " ")
			token := p.adminToken
			if strings.HasPrefix(route, "/agent/") {
				token = p.agentToken
			}
			path := p.path(route)
			if route == "/agent/v1/jobs/claim" {
				// A claim waits up to wait_seconds for a job: one is
				// queued, so the claim returns at once.
				p.queuePing(t)
			}
			rec := p.serve(method, path, token, bytes.NewReader(body))
			checkProblem(t, method+" "+path, rec, body)
		}
	})
}

// checkProblem fails on a 5xx, and on an error that is not a problem
// document with the response's status.
func checkProblem(t *testing.T, what string, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d for body %q: %s", what, rec.Code, body, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: %d with Content-Type %q for body %q", what, rec.Code, ct, body)
	}
	var pr struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &pr); err != nil || pr.Status != rec.Code || pr.Type == "" || pr.Detail == "" {
		t.Fatalf("%s: %d with a body that is not its problem (%v): %s", what, rec.Code, err, rec.Body)
	}
}

// TestFuzzPlaneCoversEveryBodyRoute guards the fuzz target's table: every
// operation of the OpenAPI document that takes a body is fuzzed.
func TestFuzzPlaneCoversEveryBodyRoute(t *testing.T) {
	p := newFuzzPlane(t)
	for _, want := range []string{"POST /api/v1/applications", "POST /agent/v1/jobs/{id}/complete", "PATCH /api/v1/domains/{id}", "POST /agent/v1/metrics"} {
		if !slices.Contains(p.bodyRoutes, want) {
			t.Errorf("%s is not fuzzed; fuzzed: %q", want, p.bodyRoutes)
		}
	}
}
