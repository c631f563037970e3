package e2e

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// checkRefreshCookie checks the attributes of the refresh cookie set by r
// and returns it.
func checkRefreshCookie(t *testing.T, r *Response, name string, secure bool) *http.Cookie {
	t.Helper()
	c := r.Cookie(name)
	if c == nil {
		t.Fatalf("no %s cookie; Set-Cookie: %q", name, r.Header.Values("Set-Cookie"))
	}
	if c.Value == "" {
		t.Fatalf("%s cookie is empty", name)
	}
	if !c.HttpOnly {
		t.Fatalf("%s cookie is not HttpOnly", name)
	}
	if got, want := c.SameSite, http.SameSiteStrictMode; got != want {
		t.Fatalf("%s cookie SameSite: got %v, want Strict", name, got)
	}
	wantPath := "/api/v1/auth"
	if secure {
		wantPath = "/"
		if c.Domain != "" {
			t.Fatalf("%s cookie Domain: got %q, want none", name, c.Domain)
		}
	}
	if got, want := c.Path, wantPath; got != want {
		t.Fatalf("%s cookie Path: got %q, want %q", name, got, want)
	}
	if got, want := c.Secure, secure; got != want {
		t.Fatalf("%s cookie Secure: got %v, want %v", name, got, want)
	}
	if c.MaxAge <= 0 {
		t.Fatalf("%s cookie Max-Age: got %d, want > 0", name, c.MaxAge)
	}
	return c
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		alice := newAdmin(t, cp, "alice@example.com")
		bob := newAdmin(t, cp, "bob@example.com")

		// Login, then verify with a computed code, as signIn does, but
		// keeping the verify response to check its cookie.
		challenge := login(t, cp, alice.Email, alice.Password)
		r := cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{
			"challenge_id": challenge, "code": totpCode(t, alice.TOTPSecret)})
		var tokens struct {
			Status      string `json:"status"`
			AccessToken string `json:"access_token"`
			TokenType   string `json:"token_type"`
			ExpiresIn   int    `json:"expires_in"`
			User        struct {
				ID    string `json:"id"`
				Email string `json:"email"`
			} `json:"user"`
		}
		expectJSON(t, r, http.StatusOK, &tokens)
		if got, want := tokens.Status, "authenticated"; got != want {
			t.Fatalf("verify status: got %q, want %q", got, want)
		}
		if got, want := tokens.TokenType, "Bearer"; got != want {
			t.Fatalf("token_type: got %q, want %q", got, want)
		}
		if got, want := tokens.ExpiresIn, 900; got != want {
			t.Fatalf("expires_in: got %d, want %d", got, want)
		}
		if got, want := tokens.User.ID, alice.ID; got != want {
			t.Fatalf("verify user id: got %q, want %q", got, want)
		}
		first := checkRefreshCookie(t, r, refreshCookieName, false)
		access := tokens.AccessToken

		// The challenge is used up.
		r = cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": "000000"})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-challenge")

		var me struct {
			User struct {
				ID       string `json:"id"`
				Email    string `json:"email"`
				Admin    bool   `json:"admin"`
				Disabled bool   `json:"disabled"`
			} `json:"user"`
			AccessExpiresAt time.Time `json:"access_expires_at"`
		}
		expectJSON(t, cp.Get(t, "/api/v1/auth/me", access), http.StatusOK, &me)
		if got, want := me.User.ID, alice.ID; got != want {
			t.Fatalf("me id: got %q, want %q", got, want)
		}
		if got, want := me.User.Email, alice.Email; got != want {
			t.Fatalf("me email: got %q, want %q", got, want)
		}
		if !me.User.Admin || me.User.Disabled {
			t.Fatalf("me: got admin=%v disabled=%v, want an enabled admin", me.User.Admin, me.User.Disabled)
		}
		if left := time.Until(me.AccessExpiresAt); left < 800*time.Second || left > 901*time.Second {
			t.Fatalf("access_expires_at: %v from now, want about 900 s", left)
		}

		var info struct {
			Name          string `json:"name"`
			PublicURL     string `json:"public_url"`
			Version       string `json:"version"`
			AgentProtocol string `json:"agent_protocol"`
			API           string `json:"api"`
			Schema        struct {
				Dialect string `json:"dialect"`
				Version int64  `json:"version"`
			} `json:"schema"`
		}
		expectJSON(t, cp.Get(t, "/api/v1/platform", access), http.StatusOK, &info)
		for _, c := range []struct{ field, got, want string }{
			{"name", info.Name, "Capstan"},
			{"public_url", info.PublicURL, cp.URL},
			{"version", info.Version, buildVersion},
			{"agent_protocol", info.AgentProtocol, "v1"},
			{"api", info.API, "v1"},
			{"schema.dialect", info.Schema.Dialect, string(cp.Dialect)},
		} {
			if c.got != c.want {
				t.Fatalf("platform %s: got %q, want %q", c.field, c.got, c.want)
			}
		}
		if info.Schema.Version < 1 {
			t.Fatalf("platform schema.version: got %d, want >= 1", info.Schema.Version)
		}

		// Refresh twice: the cookie rotates each time.
		refresh := func(c *http.Cookie) (*http.Cookie, string) {
			t.Helper()
			r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
				Cookies: []*http.Cookie{{Name: c.Name, Value: c.Value}}})
			var out struct {
				AccessToken string `json:"access_token"`
				User        struct {
					ID string `json:"id"`
				} `json:"user"`
			}
			expectJSON(t, r, http.StatusOK, &out)
			if got, want := out.User.ID, alice.ID; got != want {
				t.Fatalf("refresh user: got %q, want %q", got, want)
			}
			return checkRefreshCookie(t, r, refreshCookieName, false), out.AccessToken
		}
		second, access2 := refresh(first)
		third, access3 := refresh(second)
		if second.Value == first.Value || third.Value == second.Value || third.Value == first.Value {
			t.Fatalf("refresh cookie did not change: %q, %q, %q", first.Value, second.Value, third.Value)
		}
		if access2 == access || access3 == access2 {
			t.Fatal("refresh returned the same access token")
		}
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", access3), http.StatusOK)

		// Replaying the first cookie after the grace (a second tab gets a
		// pair within it) revokes the whole session.
		testlab.Eventually(t, auth.RefreshGrace+15*time.Second, "replay after the grace", func() bool {
			r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
				Cookies: []*http.Cookie{{Name: first.Name, Value: first.Value}}})
			return r.Status != http.StatusOK
		})
		expectProblem(t, r, http.StatusUnauthorized, "refresh-token-reused")
		for _, tok := range []string{access, access2, access3} {
			expectProblem(t, cp.Get(t, "/api/v1/auth/me", tok), http.StatusUnauthorized, "invalid-token")
		}
		r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
			Cookies: []*http.Cookie{{Name: third.Name, Value: third.Value}}})
		if got, want := r.Status, http.StatusUnauthorized; got != want {
			t.Fatalf("refresh with the latest cookie of a revoked session: got %d, want %d", got, want)
		}

		// Another administrator sees the reuse in the audit log.
		sb := signInUser(t, cp, bob)
		entries := auditEntries(t, cp, sb.AccessToken, "auth.refresh.reused")
		if len(entries) == 0 {
			t.Fatal("no auth.refresh.reused entry in the audit log")
		}
		e := entries[0]
		if got, want := e.Actor.ID, alice.ID; got != want {
			t.Fatalf("auth.refresh.reused actor: got %q, want %q", got, want)
		}
		if got, want := e.Target.Type, "session"; got != want {
			t.Fatalf("auth.refresh.reused target type: got %q, want %q", got, want)
		}
		if got, want := e.Details["session_revoked"], any(true); got != want {
			t.Fatalf("auth.refresh.reused session_revoked: got %v, want %v", got, want)
		}
		if got, want := e.IP, "127.0.0.1"; got != want {
			t.Fatalf("auth.refresh.reused ip: got %q, want %q", got, want)
		}

		// Logout ends bob's session: the token and the refresh cookie.
		r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/logout", Token: sb.AccessToken, Jar: sb.Jar})
		expectStatus(t, r, http.StatusNoContent)
		if c := r.Cookie(refreshCookieName); c == nil || c.MaxAge >= 0 || c.Value != "" {
			t.Fatalf("logout does not clear the refresh cookie; Set-Cookie: %q", r.Header.Values("Set-Cookie"))
		}
		expectProblem(t, cp.Get(t, "/api/v1/auth/me", sb.AccessToken), http.StatusUnauthorized, "invalid-token")
		r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
			Cookies: []*http.Cookie{{Name: sb.Refresh.Name, Value: sb.Refresh.Value}}})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
	})
}

// TestSignInCookieJar refreshes the way a browser does: the jar stores the
// cookie from verify and sends it back only to /api/v1/auth.
func TestSignInCookieJar(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{})
	u := newAdmin(t, cp, "jar@example.com")
	s := signInUser(t, cp, u)
	prev := s.Refresh.Value
	for range 2 {
		r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh", Jar: s.Jar})
		expectStatus(t, r, http.StatusOK)
		c := checkRefreshCookie(t, r, refreshCookieName, false)
		if c.Value == prev {
			t.Fatal("refresh cookie did not change")
		}
		prev = c.Value
	}
	// Without the cookie there is nothing to refresh.
	r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh"})
	expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
}

// TestSignInSecureCookie: behind an https public URL the refresh and
// device cookies carry the __Host- prefix (Secure, Path=/, no Domain), and
// every response carries Strict-Transport-Security. The test listener is
// plain http, so the cookie is sent back by hand.
func TestSignInSecureCookie(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{PublicURL: "https://cp.example.com"})
	u := newAdmin(t, cp, "secure@example.com")

	challenge := login(t, cp, u.Email, u.Password)
	r := cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": challenge, "code": totpCode(t, u.TOTPSecret)})
	expectStatus(t, r, http.StatusOK)
	const name = "__Host-capstan_refresh"
	c := checkRefreshCookie(t, r, name, true)
	checkRefreshCookie(t, r, "__Host-capstan_device", true)
	if r.Cookie(refreshCookieName) != nil || r.Cookie("__Secure-capstan_refresh") != nil {
		t.Fatalf("another refresh cookie is set too: %q", r.Header.Values("Set-Cookie"))
	}
	for _, path := range []string{"/api/v1/auth/me", "/openapi.json", "/agent/v1/claim", "/no/such/page"} {
		if got, want := cp.Get(t, path, "").Header.Get("Strict-Transport-Security"), "max-age=31536000"; got != want {
			t.Fatalf("%s Strict-Transport-Security: got %q, want %q", path, got, want)
		}
	}
	var tokens struct {
		AccessToken string `json:"access_token"`
	}
	r.JSON(t, &tokens)

	var info struct {
		PublicURL string `json:"public_url"`
	}
	expectJSON(t, cp.Get(t, "/api/v1/platform", tokens.AccessToken), http.StatusOK, &info)
	if got, want := info.PublicURL, "https://cp.example.com"; got != want {
		t.Fatalf("public_url: got %q, want %q", got, want)
	}

	// Other names (one a sibling subdomain could plant) are not read.
	for _, other := range []string{refreshCookieName, "__Secure-capstan_refresh"} {
		r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
			Cookies: []*http.Cookie{{Name: other, Value: c.Value}}})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
	}

	r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
		Cookies: []*http.Cookie{{Name: name, Value: c.Value}}})
	expectStatus(t, r, http.StatusOK)
	next := checkRefreshCookie(t, r, name, true)
	if next.Value == c.Value {
		t.Fatal("refresh cookie did not change")
	}

	r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/logout", Token: tokens.AccessToken})
	expectStatus(t, r, http.StatusNoContent)
	if cl := r.Cookie(name); cl == nil || !cl.Secure || cl.MaxAge >= 0 {
		t.Fatalf("logout does not clear the secure cookie; Set-Cookie: %q", r.Header.Values("Set-Cookie"))
	}
}

// wrongCode returns a six-digit code that matches none of the steps the
// server accepts now for secret.
func wrongCode(t *testing.T, secret string) string {
	t.Helper()
	valid := map[string]bool{}
	now := time.Now()
	for d := -2; d <= 2; d++ {
		c, err := auth.TOTPCode(secret, now.Add(time.Duration(d)*30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		valid[c] = true
	}
	for n := 0; ; n++ {
		c := strconv.Itoa(100000 + n*7919%900000)
		if !valid[c] {
			return c
		}
	}
}

func TestSignInRejections(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		carol := createUser(t, cp, "carol@example.com", testPassword, false)
		dave := createUser(t, cp, "dave@example.com", testPassword, false)
		sa := signInUser(t, cp, admin)
		sc := signInUser(t, cp, carol)

		loginBody := func(email, password string) map[string]string {
			return map[string]string{"email": email, "password": password}
		}

		t.Run("wrong password and unknown e-mail", func(t *testing.T) {
			const pw = "not the password at all"
			wrong := cp.Post(t, "/api/v1/auth/login", "", loginBody(admin.Email, pw))
			pWrong := expectProblem(t, wrong, http.StatusUnauthorized, "invalid-credentials")
			unknown := cp.Post(t, "/api/v1/auth/login", "", loginBody("nobody@example.com", pw))
			pUnknown := expectProblem(t, unknown, http.StatusUnauthorized, "invalid-credentials")
			// Nothing tells the two apart but the request id.
			pWrong.RequestID, pUnknown.RequestID = "", ""
			if !reflect.DeepEqual(pWrong, pUnknown) {
				t.Fatalf("unknown e-mail and wrong password differ:\n%+v\n%+v", pWrong, pUnknown)
			}
			var mWrong, mUnknown map[string]any
			wrong.JSON(t, &mWrong)
			unknown.JSON(t, &mUnknown)
			if got, want := slices.Sorted(maps.Keys(mUnknown)), slices.Sorted(maps.Keys(mWrong)); !slices.Equal(got, want) {
				t.Fatalf("unknown e-mail body keys: got %v, want %v", got, want)
			}
			if strings.Contains(string(wrong.Body), pw) {
				t.Fatal("the problem echoes the password")
			}
		})

		t.Run("NUL in e-mail", func(t *testing.T) {
			r := cp.Post(t, "/api/v1/auth/login", "", loginBody("admin\x00@example.com", testPassword))
			expectProblem(t, r, http.StatusUnauthorized, "invalid-credentials")
		})

		t.Run("wrong and replayed code", func(t *testing.T) {
			challenge := login(t, cp, carol.Email, carol.Password)
			r := cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{
				"challenge_id": challenge, "code": wrongCode(t, carol.TOTPSecret)})
			expectProblem(t, r, http.StatusUnauthorized, "invalid-code")

			code := totpCode(t, carol.TOTPSecret)
			r = cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": code})
			expectStatus(t, r, http.StatusOK)

			challenge = login(t, cp, carol.Email, carol.Password)
			r = cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": code})
			expectProblem(t, r, http.StatusUnauthorized, "code-reused")

			r = cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": "chl_unknown", "code": code})
			expectProblem(t, r, http.StatusUnauthorized, "invalid-challenge")

			entries := auditEntries(t, cp, sa.AccessToken, "auth.2fa.failed")
			var reasons []string
			for _, e := range entries {
				if e.Actor.ID == carol.ID {
					reasons = append(reasons, e.Details["reason"].(string))
				}
			}
			slices.Sort(reasons)
			if got, want := reasons, []string{"code_reused", "wrong_code"}; !slices.Equal(got, want) {
				t.Fatalf("auth.2fa.failed reasons for carol: got %v, want %v", got, want)
			}
		})

		t.Run("administrator required", func(t *testing.T) {
			expectProblem(t, cp.Get(t, "/api/v1/audit-logs", sc.AccessToken), http.StatusForbidden, "admin-required")
			r := cp.Post(t, "/api/v1/platform/recovery-kit", sc.AccessToken, map[string]string{"password": carol.Password})
			expectProblem(t, r, http.StatusForbidden, "admin-required")
			// Signed-in endpoints still answer.
			expectStatus(t, cp.Get(t, "/api/v1/platform", sc.AccessToken), http.StatusOK)
		})

		t.Run("bearer tokens", func(t *testing.T) {
			r := cp.Get(t, "/api/v1/auth/me", "")
			expectProblem(t, r, http.StatusUnauthorized, "invalid-token")
			if got := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Fatalf("WWW-Authenticate: got %q, want a Bearer challenge", got)
			}
			for _, tok := range []string{"garbage", "cat_" + strings.Repeat("a", 52), sa.AccessToken + "x", strings.Repeat("x", 4096)} {
				expectProblem(t, cp.Get(t, "/api/v1/auth/me", tok), http.StatusUnauthorized, "invalid-token")
			}
			r = cp.Do(t, Req{Method: http.MethodGet, Path: "/api/v1/auth/me",
				Header: http.Header{"Authorization": {"Basic YWRtaW46cGFzc3dvcmQ="}}})
			expectProblem(t, r, http.StatusUnauthorized, "invalid-token")

			// A revoked token: log out, try again.
			expectStatus(t, cp.Get(t, "/api/v1/auth/me", sc.AccessToken), http.StatusOK)
			expectStatus(t, cp.Post(t, "/api/v1/auth/logout", sc.AccessToken, nil), http.StatusNoContent)
			expectProblem(t, cp.Get(t, "/api/v1/auth/me", sc.AccessToken), http.StatusUnauthorized, "invalid-token")
		})

		t.Run("malformed requests", func(t *testing.T) {
			r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/login",
				ContentType: "application/json", Body: []byte(`{"email": "admin@example.com", "password": `)})
			expectProblem(t, r, http.StatusBadRequest, "malformed-request")

			r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/login",
				ContentType: "text/plain", Body: []byte(`{"email":"admin@example.com","password":"x"}`)})
			expectProblem(t, r, http.StatusUnsupportedMediaType, "unsupported-media-type")

			big := `{"email":"admin@example.com","password":"` + strings.Repeat("x", 65<<10) + `"}`
			r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/login",
				ContentType: "application/json", Body: []byte(big)})
			expectProblem(t, r, http.StatusRequestEntityTooLarge, "body-too-large")

			r = cp.Post(t, "/api/v1/auth/login", "", map[string]any{
				"email": "admin@example.com", "password": testPassword, "remember_me": true})
			p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if len(p.Errors) != 1 || p.Errors[0].Field != "remember_me" || p.Errors[0].Message == "" {
				t.Fatalf("errors: got %+v, want one for field remember_me", p.Errors)
			}
			if strings.Contains(string(r.Body), testPassword) {
				t.Fatal("the problem echoes the password")
			}

			r = cp.Post(t, "/api/v1/auth/login", "", map[string]any{"email": "", "password": 7})
			p = expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			var fields []string
			for _, e := range p.Errors {
				fields = append(fields, e.Field)
			}
			slices.Sort(fields)
			if got, want := fields, []string{"email", "password"}; !slices.Equal(got, want) {
				t.Fatalf("error fields: got %v, want %v", got, want)
			}

			r = cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": "chl_x", "code": "12345a"})
			p = expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if len(p.Errors) != 1 || p.Errors[0].Field != "code" {
				t.Fatalf("errors: got %+v, want one for field code", p.Errors)
			}
		})

		t.Run("routing", func(t *testing.T) {
			for _, path := range []string{"/api/v1/nope", "/api/v2/auth/login", "/nope", "/api/v1/auth/login/"} {
				r := cp.Do(t, Req{Method: http.MethodPost, Path: path, JSON: loginBody(admin.Email, testPassword)})
				p := expectProblem(t, r, http.StatusNotFound, "not-found")
				if got, want := p.Instance, path; got != want {
					t.Fatalf("instance: got %q, want %q", got, want)
				}
			}
			for _, c := range []struct{ method, path, allow string }{
				{http.MethodDelete, "/api/v1/auth/login", "POST"},
				{http.MethodGet, "/api/v1/auth/login", "POST"},
				{http.MethodPost, "/api/v1/auth/me", "GET, HEAD"},
				{http.MethodPut, "/api/v1/audit-logs", "GET, HEAD"},
			} {
				r := cp.Do(t, Req{Method: c.method, Path: c.path, Token: sa.AccessToken})
				expectProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
				if got, want := r.Header.Get("Allow"), c.allow; got != want {
					t.Fatalf("%s %s: Allow: got %q, want %q", c.method, c.path, got, want)
				}
			}
		})

		t.Run("unknown query parameter", func(t *testing.T) {
			r := cp.Get(t, "/api/v1/audit-logs?bogus=1", sa.AccessToken)
			p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if len(p.Errors) != 1 || p.Errors[0].Field != "bogus" {
				t.Fatalf("errors: got %+v, want one for field bogus", p.Errors)
			}
			r = cp.Get(t, "/api/v1/audit-logs?limit=1000", sa.AccessToken)
			p = expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if len(p.Errors) != 1 || p.Errors[0].Field != "limit" {
				t.Fatalf("errors: got %+v, want one for field limit", p.Errors)
			}
			r = cp.Get(t, "/api/v1/audit-logs?before=bm90LWEtY3Vyc29y", sa.AccessToken)
			p = expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if len(p.Errors) != 1 || p.Errors[0].Field != "before" {
				t.Fatalf("errors: got %+v, want one for field before", p.Errors)
			}
			expectProblem(t, cp.Get(t, "/healthz?verbose=1", ""), http.StatusUnprocessableEntity, "validation-failed")
		})

		// Last: it uses up the per-address failure budget fastest.
		t.Run("throttling", func(t *testing.T) {
			for i := range 5 {
				r := cp.Post(t, "/api/v1/auth/login", "", loginBody(dave.Email, "wrong password number "+strconv.Itoa(i)))
				expectProblem(t, r, http.StatusUnauthorized, "invalid-credentials")
			}
			for _, pw := range []string{"wrong password number 5", dave.Password} {
				r := cp.Post(t, "/api/v1/auth/login", "", loginBody(dave.Email, pw))
				expectProblem(t, r, http.StatusTooManyRequests, "too-many-attempts")
				after, err := strconv.Atoi(r.Header.Get("Retry-After"))
				if err != nil || after < 1 {
					t.Fatalf("Retry-After: got %q, want an integer >= 1", r.Header.Get("Retry-After"))
				}
			}
			// Other accounts are not affected.
			login(t, cp, carol.Email, carol.Password)
		})
	})
}

// TestUserCreateJSON: user create --json prints exactly one JSON object.
func TestUserCreateJSON(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{})
	res := cp.CLI(t, testPassword+"\n", append([]string{"user", "create", "--email", " Erin@Example.com ",
		"--admin", "--password-stdin", "--json"}, cp.StoreArgs()...)...)
	if res.ExitCode != 0 {
		t.Fatalf("user create: exit %d: %s", res.ExitCode, res.Stderr)
	}
	dec := json.NewDecoder(strings.NewReader(res.Stdout))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not a JSON object (%v): %s", err, res.Stdout)
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON value: %s", res.Stdout)
	}
	if got, want := slices.Sorted(maps.Keys(obj)), []string{"admin", "email", "id", "otpauth_uri", "totp_secret"}; !slices.Equal(got, want) {
		t.Fatalf("keys: got %v, want %v", got, want)
	}
	if got, want := obj["email"], any("erin@example.com"); got != want {
		t.Fatalf("email: got %v, want %v", got, want)
	}
	if got, want := obj["admin"], any(true); got != want {
		t.Fatalf("admin: got %v, want %v", got, want)
	}
	id, _ := obj["id"].(string)
	secret, _ := obj["totp_secret"].(string)
	uri, _ := obj["otpauth_uri"].(string)
	if !strings.HasPrefix(id, "usr_") {
		t.Fatalf("id: got %q, want usr_…", id)
	}
	if len(secret) < 32 || !strings.HasPrefix(uri, "otpauth://totp/") || !strings.Contains(uri, "secret="+secret) {
		t.Fatalf("totp_secret %q / otpauth_uri %q do not match", secret, uri)
	}
	// The enrolment works.
	s := signIn(t, cp, "erin@example.com", testPassword, secret)
	if got, want := s.User.ID, id; got != want {
		t.Fatalf("signed-in user: got %q, want %q", got, want)
	}

	// The e-mail is taken now.
	res = cp.CLI(t, testPassword+"\n", append([]string{"user", "create", "--email", "erin@example.com",
		"--password-stdin", "--json"}, cp.StoreArgs()...)...)
	if res.ExitCode == 0 || res.Stdout != "" {
		t.Fatalf("second user create with the same e-mail: exit %d, stdout %q", res.ExitCode, res.Stdout)
	}
}

// listUsers runs user list --json.
func listUsers(t *testing.T, cp *ControlPlane) []struct {
	ID       string `json:"id"`
	Email    string `json:"email"`
	Admin    bool   `json:"admin"`
	Disabled bool   `json:"disabled"`
} {
	t.Helper()
	res := cp.CLI(t, "", append([]string{"user", "list", "--json"}, cp.StoreArgs()...)...)
	if res.ExitCode != 0 {
		t.Fatalf("user list: exit %d: %s", res.ExitCode, res.Stderr)
	}
	var users []struct {
		ID       string `json:"id"`
		Email    string `json:"email"`
		Admin    bool   `json:"admin"`
		Disabled bool   `json:"disabled"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &users); err != nil {
		t.Fatalf("user list --json: %v: %s", err, res.Stdout)
	}
	return users
}

func TestUserCreateRefusesWeakPasswords(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{})
	for _, c := range []struct{ password, complaint string }{
		{"short pw 1", "at least 12 characters"},
		{"password1234", "commonly used"},
		{"123456789012", "commonly used"},
		{"qwertyqwerty", "commonly used"},
		// Leaked passwords of 12 characters or more.
		{"leavemealone", "commonly used"},
		{"FinalFantasy", "commonly used"},
		{"justinbieber", "commonly used"},
		{"weak@example.com", "e-mail"},
	} {
		res := cp.CLI(t, c.password+"\n", append([]string{"user", "create", "--email", "weak@example.com",
			"--password-stdin", "--json"}, cp.StoreArgs()...)...)
		if res.ExitCode == 0 {
			t.Fatalf("user create with password %q: exit 0, want non-zero", c.password)
		}
		if res.Stdout != "" {
			t.Fatalf("user create with password %q printed %q", c.password, res.Stdout)
		}
		if !strings.Contains(res.Stderr, c.complaint) {
			t.Fatalf("user create with password %q: stderr %q does not mention %q", c.password, res.Stderr, c.complaint)
		}
	}
	if users := listUsers(t, cp); len(users) != 0 {
		t.Fatalf("users after refused creations: got %+v, want none", users)
	}
	res := cp.CLI(t, "\n", append([]string{"user", "create", "--email", "not-an-address", "--password-stdin"}, cp.StoreArgs()...)...)
	if res.ExitCode == 0 {
		t.Fatal("user create with a malformed e-mail: exit 0, want non-zero")
	}
}

func TestUserDisableEndsSessions(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		frank := createUser(t, cp, "frank@example.com", testPassword, false)
		sa := signInUser(t, cp, admin)
		sf := signInUser(t, cp, frank)
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", sf.AccessToken), http.StatusOK)

		res := cp.CLI(t, "", append([]string{"user", "disable", "--email", frank.Email}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 {
			t.Fatalf("user disable: exit %d: %s", res.ExitCode, res.Stderr)
		}
		expectProblem(t, cp.Get(t, "/api/v1/auth/me", sf.AccessToken), http.StatusUnauthorized, "invalid-token")
		r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
			Cookies: []*http.Cookie{{Name: sf.Refresh.Name, Value: sf.Refresh.Value}}})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
		r = cp.Post(t, "/api/v1/auth/login", "", map[string]string{"email": frank.Email, "password": frank.Password})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-credentials")

		// Other users keep their sessions.
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", sa.AccessToken), http.StatusOK)
		var found bool
		for _, u := range listUsers(t, cp) {
			if u.ID == frank.ID {
				found = true
				if !u.Disabled {
					t.Fatal("user list shows frank enabled")
				}
			}
		}
		if !found {
			t.Fatal("user list lacks frank")
		}
		entries := auditEntries(t, cp, sa.AccessToken, "user.disabled")
		if len(entries) != 1 || entries[0].Target.ID != frank.ID || entries[0].Actor.Type != "system" {
			t.Fatalf("user.disabled entries: got %+v, want one for frank by the system", entries)
		}
		failed := auditEntries(t, cp, sa.AccessToken, "auth.login.failed")
		if len(failed) == 0 || failed[0].Details["reason"] != "disabled" {
			t.Fatalf("auth.login.failed after disable: got %+v, want reason disabled", failed)
		}

		res = cp.CLI(t, "", append([]string{"user", "disable", "--email", "nobody@example.com"}, cp.StoreArgs()...)...)
		if res.ExitCode == 0 {
			t.Fatal("user disable of an unknown user: exit 0, want non-zero")
		}
	})
}

func TestUserReset2FA(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		gina := createUser(t, cp, "gina@example.com", testPassword, false)

		res := cp.CLI(t, "", append([]string{"user", "reset-2fa", "--email", gina.Email, "--json"}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 {
			t.Fatalf("user reset-2fa: exit %d: %s", res.ExitCode, res.Stderr)
		}
		var reset User
		if err := json.Unmarshal([]byte(res.Stdout), &reset); err != nil {
			t.Fatalf("user reset-2fa --json: %v: %s", err, res.Stdout)
		}
		if got, want := reset.ID, gina.ID; got != want {
			t.Fatalf("reset-2fa id: got %q, want %q", got, want)
		}
		if reset.TOTPSecret == "" || reset.TOTPSecret == gina.TOTPSecret {
			t.Fatalf("reset-2fa secret: got %q, want a new one", reset.TOTPSecret)
		}

		challenge := login(t, cp, gina.Email, gina.Password)
		// The old secret's codes, all of them, fail now (unless one happens
		// to equal a current code of the new secret).
		newCodes := map[string]bool{}
		for dt := -1; dt <= 1; dt++ {
			c, _ := auth.TOTPCode(reset.TOTPSecret, time.Now().Add(time.Duration(dt)*30*time.Second))
			newCodes[c] = true
		}
		old, err := auth.TOTPCode(gina.TOTPSecret, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !newCodes[old] {
			r := cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": old})
			expectProblem(t, r, http.StatusUnauthorized, "invalid-code")
		}
		r := cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{
			"challenge_id": challenge, "code": totpCode(t, reset.TOTPSecret)})
		expectStatus(t, r, http.StatusOK)

		res = cp.CLI(t, "", append([]string{"user", "reset-2fa", "--email", "nobody@example.com"}, cp.StoreArgs()...)...)
		if res.ExitCode == 0 {
			t.Fatal("user reset-2fa of an unknown user: exit 0, want non-zero")
		}
	})
}
