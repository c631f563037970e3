package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/stream"
)

// TestPolicyTablesNameRoutes: every operation the token tables name is
// one the API has, so a renamed path cannot fall back to a default.
func TestPolicyTablesNameRoutes(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	have := map[string]Access{}
	for _, r := range e.srv.Routes() {
		have[r.Method+" "+r.Path] = r.Access
	}
	// The tables name operations of services this rig does not have;
	// their handlers are registered all the same.
	for _, table := range []map[string]bool{sessionOnly, global} {
		for name := range table {
			// The cloud drive's operations exist where it is configured
			// (the access test in e2e has them).
			if _, ok := have[name]; !ok && !strings.Contains(name, "/clouddrive/") {
				t.Errorf("%s is in a token table but not an operation", name)
			}
		}
	}
	for name, scope := range scopeOf {
		a, ok := have[name]
		if !ok {
			t.Errorf("%s is in scopeOf but not an operation", name)
		}
		if !slices.Contains(auth.Scopes, scope) || a == Public || a == Agent {
			t.Errorf("%s: scope %q for access %v", name, scope, a)
		}
	}
}

func createToken(t *testing.T, e *testEnv, session string, body map[string]any) auth.CreatedToken {
	t.Helper()
	r := e.request(t, http.MethodPost, "/api/v1/tokens", session, body)
	expectStatus(t, r, http.StatusCreated)
	var ct auth.CreatedToken
	r.decode(t, &ct)
	if !strings.HasPrefix(ct.Token, "cpt_") || len(ct.Token) < 4+43 {
		t.Fatalf("token %q", ct.Token)
	}
	return ct
}

// TestAPITokens: a token is shown once, acts within its scopes and its
// owner's role at the moment of use, never on session-only operations,
// and stops at its revocation; bad requests change nothing.
func TestAPITokens(t *testing.T) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			e := newTestEnv(t, envOptions{dialect: d}).serve(t)
			admin, adminSecret := e.createUser(t, "admin@example.com", true)
			_, memberSecret := e.createUser(t, "member@example.com", false)
			session, _ := e.signIn(t, admin.Email, adminSecret)
			memberSession, _ := e.signIn(t, "member@example.com", memberSecret)

			for _, bad := range []map[string]any{
				{"name": "x", "scopes": []string{"root"}},
				{"name": "x", "scopes": []string{"read", "read"}},
				{"name": "x", "scopes": []string{}},
				{"name": " ", "scopes": []string{"read"}},
				{"name": "x", "scopes": []string{"read"}, "expires_in_days": 366},
				{"name": "x", "scopes": []string{"read"}, "expires_in_days": 5, "never_expires": true},
				{"name": "x", "scopes": []string{"read"}, "resources": []string{"app:"}},
				{"name": "x", "scopes": []string{"read"}, "resources": []string{"server:srv_none"}},
				{"name": "x", "scopes": []string{"read"}, "resources": []string{"server-tag:prod", "server-tag:prod"}},
			} {
				r := e.request(t, http.MethodPost, "/api/v1/tokens", session, bad)
				if r.status != http.StatusUnprocessableEntity {
					t.Errorf("%v: status %d, want 422: %s", bad, r.status, r.body)
				}
			}
			// A member's token only reads, and never without expiry.
			for _, bad := range []map[string]any{
				{"name": "x", "scopes": []string{"write"}},
				{"name": "x", "scopes": []string{"read"}, "never_expires": true},
			} {
				r := e.request(t, http.MethodPost, "/api/v1/tokens", memberSession, bad)
				if r.status != http.StatusUnprocessableEntity {
					t.Errorf("member %v: status %d, want 422: %s", bad, r.status, r.body)
				}
			}
			list := e.request(t, http.MethodGet, "/api/v1/tokens", session, nil)
			expectStatus(t, list, http.StatusOK)
			if !strings.Contains(string(list.body), `"tokens":[]`) {
				t.Fatalf("bad requests made tokens: %s", list.body)
			}

			ct := createToken(t, e, session, map[string]any{"name": "ci", "scopes": []string{"write"}})
			if ct.ExpiresAt == nil || ct.ExpiresAt.Sub(e.clock.Now()) != auth.TokenDefaultTTL {
				t.Fatalf("expiry %v, want 90 days", ct.ExpiresAt)
			}
			// Parallel first uses from one address: one audit record.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					r := e.request(t, http.MethodGet, "/api/v1/tokens/current", ct.Token, nil)
					if r.status != http.StatusOK {
						t.Errorf("current: %d %s", r.status, r.body)
					}
				})
			}
			wg.Wait()
			entries, err := e.store.ListAudit(t.Context(), audit.Query{Action: audit.TokenNewAddress, Limit: 10})
			if err != nil || len(entries) != 1 || entries[0].Actor.TokenID != ct.ID || entries[0].Actor.TokenName != "ci" {
				t.Fatalf("new-address records: %+v, %v", entries, err)
			}
			var cur struct {
				Token   auth.APIToken `json:"token"`
				Role    string        `json:"role"`
				Allowed []string      `json:"allowed"`
			}
			e.request(t, http.MethodGet, "/api/v1/tokens/current", ct.Token, nil).decode(t, &cur)
			if cur.Role != "admin" || strings.Join(cur.Allowed, " ") != "read deploy operate write" || cur.Token.LastUsedIP == "" {
				t.Fatalf("current: %+v", cur)
			}

			// Session-only operations refuse every token.
			for _, c := range []struct{ method, path string }{
				{http.MethodPost, "/api/v1/tokens"}, {http.MethodGet, "/api/v1/users"},
				{http.MethodPost, "/api/v1/platform/recovery-kit"}, {http.MethodPost, "/api/v1/auth/password"},
			} {
				expectProblem(t, e.request(t, c.method, c.path, ct.Token, map[string]any{}), http.StatusForbidden, auth.CodeSessionRequired)
			}
			// Scopes: write does not read secrets or read what only
			// administrators read.
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/audit-logs", ct.Token, nil), http.StatusForbidden, codeTokenScope)
			reader := createToken(t, e, session, map[string]any{"name": "reader", "scopes": []string{"read"}})
			expectStatus(t, e.request(t, http.MethodGet, "/api/v1/servers", reader.Token, nil), http.StatusOK)
			expectProblem(t, e.request(t, http.MethodPost, "/api/v1/servers/enrollments", reader.Token, map[string]any{"name": "x"}),
				http.StatusForbidden, codeTokenScope)
			r := e.request(t, http.MethodPost, "/api/v1/servers/enrollments", ct.Token, map[string]any{"name": "web-1"})
			expectStatus(t, r, http.StatusCreated)
			var srv struct {
				Server struct {
					ID string `json:"id"`
				} `json:"server"`
			}
			r.decode(t, &srv)
			created, err := e.store.ListAudit(t.Context(), audit.Query{Action: "server.enrollment.created", Limit: 1})
			if err != nil || len(created) != 1 || created[0].Actor.TokenID != ct.ID || created[0].Actor.Email != admin.Email {
				t.Fatalf("the enrollment's audit record names no token: %+v, %v", created, err)
			}

			// Narrowed to a server: that server, not another.
			narrow := createToken(t, e, session, map[string]any{"name": "one server", "scopes": []string{"read"},
				"resources": []string{"server:" + srv.Server.ID}})
			expectStatus(t, e.request(t, http.MethodGet, "/api/v1/servers/"+srv.Server.ID, narrow.Token, nil), http.StatusOK)
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/servers/srv_other", narrow.Token, nil), http.StatusForbidden, codeTokenResource)
			// Lists keep what the resources cover.
			lst := e.request(t, http.MethodGet, "/api/v1/servers", narrow.Token, nil)
			expectStatus(t, lst, http.StatusOK)
			var listed struct {
				Servers []struct {
					ID string `json:"id"`
				} `json:"servers"`
			}
			lst.decode(t, &listed)
			if len(listed.Servers) != 1 || listed.Servers[0].ID != srv.Server.ID {
				t.Fatalf("a token narrowed to %s lists %+v", srv.Server.ID, listed.Servers)
			}
			tagged := createToken(t, e, session, map[string]any{"name": "no such tag", "scopes": []string{"read"},
				"resources": []string{"server-tag:nowhere"}})
			lst = e.request(t, http.MethodGet, "/api/v1/servers", tagged.Token, nil)
			expectStatus(t, lst, http.StatusOK)
			lst.decode(t, &listed)
			if len(listed.Servers) != 0 {
				t.Fatalf("a token narrowed to a tag no server has lists %+v", listed.Servers)
			}
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/domains", narrow.Token, nil), http.StatusForbidden, codeTokenResource)
			expectStatus(t, e.request(t, http.MethodGet, "/api/v1/tokens/current", narrow.Token, nil), http.StatusOK)

			// Demoting the owner narrows the token at its next call;
			// disabling stops it.
			other, otherSecret := e.createUser(t, "second@example.com", true)
			otherSession, _ := e.signIn(t, other.Email, otherSecret)
			ot := createToken(t, e, otherSession, map[string]any{"name": "ops", "scopes": []string{"admin"}, "never_expires": true})
			if ot.ExpiresAt != nil {
				t.Fatalf("never_expires token expires %v", ot.ExpiresAt)
			}
			expectStatus(t, e.request(t, http.MethodGet, "/api/v1/audit-logs", ot.Token, nil), http.StatusOK)
			expectStatus(t, e.request(t, http.MethodPatch, "/api/v1/users/"+other.ID, session, map[string]any{"admin": false}), http.StatusOK)
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/audit-logs", ot.Token, nil), http.StatusForbidden, auth.CodeAdminRequired)
			expectStatus(t, e.request(t, http.MethodGet, "/api/v1/servers", ot.Token, nil), http.StatusOK)
			expectProblem(t, e.request(t, http.MethodPost, "/api/v1/jobs/job_none/cancel", ot.Token, nil), http.StatusForbidden, auth.CodeAdminRequired)
			expectStatus(t, e.request(t, http.MethodPatch, "/api/v1/users/"+other.ID, session, map[string]any{"disabled": true}), http.StatusOK)
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/servers", ot.Token, nil), http.StatusUnauthorized, auth.CodeInvalidToken)

			// A member revokes only their own; revoked tokens stop; a
			// second revocation is 404. Parallel revocations: one wins.
			mt := createToken(t, e, memberSession, map[string]any{"name": "mine", "scopes": []string{"read"}})
			expectStatus(t, e.request(t, http.MethodDelete, "/api/v1/tokens/"+ct.ID, memberSession, nil), http.StatusNotFound)
			var ok, missing int
			var mu sync.Mutex
			for range 6 {
				wg.Go(func() {
					r := e.request(t, http.MethodDelete, "/api/v1/tokens/"+ct.ID, session, nil)
					mu.Lock()
					defer mu.Unlock()
					switch r.status {
					case http.StatusOK:
						ok++
					case http.StatusNotFound:
						missing++
					default:
						t.Errorf("revoke: %d %s", r.status, r.body)
					}
				})
			}
			wg.Wait()
			if ok != 1 || missing != 5 {
				t.Fatalf("parallel revocations: %d succeeded, %d not found", ok, missing)
			}
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/servers", ct.Token, nil), http.StatusUnauthorized, auth.CodeInvalidToken)
			expectStatus(t, e.request(t, http.MethodDelete, "/api/v1/tokens/"+mt.ID, memberSession, nil), http.StatusOK)
			var mine struct {
				Tokens []auth.APIToken `json:"tokens"`
			}
			e.request(t, http.MethodGet, "/api/v1/tokens", memberSession, nil).decode(t, &mine)
			if len(mine.Tokens) != 1 || mine.Tokens[0].RevokedAt == nil || strings.Contains(fmt.Sprint(mine), mt.Token) {
				t.Fatalf("the member's list: %+v", mine)
			}

			// Expiry: a token stops when it expires.
			short := createToken(t, e, session, map[string]any{"name": "short", "scopes": []string{"read"}, "expires_in_days": 1})
			expectStatus(t, e.request(t, http.MethodGet, "/api/v1/tokens/current", short.Token, nil), http.StatusOK)
			e.clock.Advance(24*time.Hour + time.Second)
			expectProblem(t, e.request(t, http.MethodGet, "/api/v1/tokens/current", short.Token, nil), http.StatusUnauthorized, auth.CodeInvalidToken)
		})
	}
}

// A token's stream is filtered by what the token may read, like the API:
// with read:secrets a job's events and error, without them its states
// only. Revoking the token closes its stream.
func TestTokenStream(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	admin, secret := e.createUser(t, "admin@example.com", true)
	session, _ := e.signIn(t, admin.Email, secret)
	reader := createToken(t, e, session, map[string]any{"name": "reader", "scopes": []string{"read"}})
	secrets := createToken(t, e, session, map[string]any{"name": "secrets", "scopes": []string{"read:secrets"}})
	narrow := createToken(t, e, session, map[string]any{"name": "narrow", "scopes": []string{"read"}, "resources": []string{"server-tag:prod"}})
	prod, err := e.srv.deps.Servers.CreateEnrollment(t.Context(), audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "test"}}, "prod-1", []string{"prod"})
	if err != nil {
		t.Fatal(err)
	}
	// Narrowed to the servers tagged prod: its stream carries their jobs
	// and no other.
	narrowed := e.stream(t, narrow.Token, 0)

	plain := e.stream(t, reader.Token, 0)
	full := e.stream(t, secrets.Token, 0)
	const marker = "s3cret-token-stream-0462"
	j := e.runJob(t, marker)
	for _, m := range plain.until(t, finished(j.ID)) {
		if m.Event != stream.TypeJob || strings.Contains(m.Data, marker) {
			t.Errorf("a read token's stream carries %s: %s", m.Event, m.Data)
		}
	}
	got := full.until(t, finished(j.ID))
	if last := got[len(got)-1]; !strings.Contains(last.Data, "failed: "+marker) {
		t.Errorf("a read:secrets token's stream lacks the error: %s", last.Data)
	}

	// The job above was another server's; the next one is prod's, and it
	// is the first the narrowed stream carries.
	pj, _, err := e.jobs.Enqueue(t.Context(), jobs.NewJob{ServerID: prod.Server.ID,
		Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{Message: "prod"})})
	if err != nil {
		t.Fatal(err)
	}
	if m := narrowed.next(t); m.Event != stream.TypeJob || !strings.Contains(m.Data, `"id":"`+pj.ID+`"`) {
		t.Fatalf("the narrowed stream's first message: %s %s, want prod's job %s", m.Event, m.Data, pj.ID)
	}
	expectStatus(t, e.request(t, http.MethodDelete, "/api/v1/tokens/"+secrets.ID, session, nil), http.StatusOK)
	full.Ends(t, 10*time.Second)
}

// BenchmarkAuthenticatedRead is one GET /api/v1/auth/me end to end over
// loopback with a session's access token and with an API token (the
// token's resolution, its scope check and its last-use bookkeeping).
func BenchmarkAuthenticatedRead(b *testing.B) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		e := newTestEnv(b, envOptions{dialect: d}).serve(b)
		u, secret := e.createUser(b, "bench@example.com", true)
		session, _ := e.signIn(b, u.Email, secret)
		r := e.request(b, http.MethodPost, "/api/v1/tokens", session, map[string]any{"name": "bench", "scopes": []string{"read"}})
		expectStatus(b, r, http.StatusCreated)
		var ct auth.CreatedToken
		r.decode(b, &ct)
		for _, c := range []struct{ name, token string }{{"session", session}, {"token", ct.Token}} {
			b.Run(string(d)+"/"+c.name, func(b *testing.B) {
				for b.Loop() {
					if r := e.request(b, http.MethodGet, "/api/v1/auth/me", c.token, nil); r.status != http.StatusOK {
						b.Fatalf("status %d", r.status)
					}
				}
			})
		}
	}
}
