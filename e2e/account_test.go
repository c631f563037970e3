package e2e

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// sessionList is GET /api/v1/auth/sessions's body.
type sessionList struct {
	Sessions []struct {
		ID         string    `json:"id"`
		CreatedAt  time.Time `json:"created_at"`
		LastUsedAt time.Time `json:"last_used_at"`
		IP         string    `json:"ip"`
		UserAgent  string    `json:"user_agent"`
		Current    bool      `json:"current"`
	} `json:"sessions"`
}

func listSessions(t *testing.T, cp *ControlPlane, token string) sessionList {
	t.Helper()
	var l sessionList
	expectJSON(t, cp.Get(t, "/api/v1/auth/sessions", token), http.StatusOK, &l)
	return l
}

// TestSessionsListAndRevoke: a user lists their sessions, the current one
// marked, and revokes one, which ends its tokens and its live stream;
// another user's session is 404 and stays; revocations are audited.
func TestSessionsListAndRevoke(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		alice := newAdmin(t, cp, "alice@example.com")
		bob := newAdmin(t, cp, "bob@example.com")
		s1 := signInUser(t, cp, alice)
		s2 := signInUser(t, cp, alice)
		sb := signInUser(t, cp, bob)

		l := listSessions(t, cp, s1.AccessToken)
		if len(l.Sessions) != 2 {
			t.Fatalf("alice's sessions: got %d, want 2: %+v", len(l.Sessions), l)
		}
		var current, other string
		for _, s := range l.Sessions {
			if s.IP != "127.0.0.1" || s.UserAgent == "" || s.CreatedAt.IsZero() || s.LastUsedAt.Before(s.CreatedAt) {
				t.Fatalf("session fields: %+v", s)
			}
			if s.Current {
				current = s.ID
			} else {
				other = s.ID
			}
		}
		if current == "" || other == "" {
			t.Fatalf("sessions: want one current and one other: %+v", l)
		}
		bobs := listSessions(t, cp, sb.AccessToken).Sessions[0].ID

		// Another user's session is not found, and stays.
		r := cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/auth/sessions/" + bobs, Token: s1.AccessToken})
		expectProblem(t, r, http.StatusNotFound, "not-found")
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", sb.AccessToken), http.StatusOK)

		stream := openLiveStream(t, cp, s2.AccessToken)
		r = cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/auth/sessions/" + other, Token: s1.AccessToken})
		expectStatus(t, r, http.StatusNoContent)
		stream.Ends(t, 5*time.Second)
		expectProblem(t, cp.Get(t, "/api/v1/auth/me", s2.AccessToken), http.StatusUnauthorized, "invalid-token")
		r = cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
			Cookies: []*http.Cookie{{Name: s2.Refresh.Name, Value: s2.Refresh.Value}}})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", s1.AccessToken), http.StatusOK)
		if l := listSessions(t, cp, s1.AccessToken); len(l.Sessions) != 1 || l.Sessions[0].ID != current {
			t.Fatalf("sessions after revoking one: %+v", l)
		}
		// An ended session is not found either.
		r = cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/auth/sessions/" + other, Token: s1.AccessToken})
		expectProblem(t, r, http.StatusNotFound, "not-found")
		expectProblem(t, cp.Get(t, "/api/v1/auth/sessions", ""), http.StatusUnauthorized, "invalid-token")

		entries := auditEntries(t, cp, sb.AccessToken, "auth.session.revoked")
		if len(entries) != 1 || entries[0].Target.ID != other || entries[0].Actor.ID != alice.ID || entries[0].IP != "127.0.0.1" {
			t.Fatalf("auth.session.revoked entries: got %+v, want one for alice's other session", entries)
		}
	})
}

// TestPasswordChange: a signed-in user changes their password with the
// current one and a TOTP code; every other session ends (and its stream
// closes), the caller's stays; the old password stops working; a wrong
// password or code, or a weak new password, changes nothing.
func TestPasswordChange(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		alice := newAdmin(t, cp, "alice@example.com")
		ops := newAdmin(t, cp, "ops@example.com")
		s1 := signInUser(t, cp, alice)
		s2 := signInUser(t, cp, alice)
		so := signInUser(t, cp, ops)
		const next = "a brand new and long passphrase"
		change := func(current, code, newPassword string) *Response {
			return cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/password", Token: s1.AccessToken,
				JSON: map[string]string{"current_password": current, "code": code, "new_password": newPassword}})
		}

		expectProblem(t, change("not the password", wrongCode(t, alice.TOTPSecret), next), http.StatusForbidden, "wrong-password")
		expectProblem(t, change(alice.Password, wrongCode(t, alice.TOTPSecret), next), http.StatusForbidden, "wrong-code")
		p := expectProblem(t, change(alice.Password, totpCode(t, alice.TOTPSecret), "password1234"), http.StatusUnprocessableEntity, "validation-failed")
		if len(p.Errors) != 1 || p.Errors[0].Field != "new_password" {
			t.Fatalf("weak new password: got %+v, want an error on new_password", p)
		}
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", s2.AccessToken), http.StatusOK)
		login(t, cp, alice.Email, alice.Password) // unchanged

		stream := openLiveStream(t, cp, s2.AccessToken)
		expectStatus(t, change(alice.Password, totpCode(t, alice.TOTPSecret), next), http.StatusNoContent)
		stream.Ends(t, 5*time.Second)
		expectProblem(t, cp.Get(t, "/api/v1/auth/me", s2.AccessToken), http.StatusUnauthorized, "invalid-token")
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", s1.AccessToken), http.StatusOK)
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", so.AccessToken), http.StatusOK)

		r := cp.Post(t, "/api/v1/auth/login", "", map[string]string{"email": alice.Email, "password": alice.Password})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-credentials")
		signIn(t, cp, alice.Email, next, alice.TOTPSecret)

		changed := auditEntries(t, cp, so.AccessToken, "user.password.changed")
		if len(changed) != 1 || changed[0].Target.ID != alice.ID || changed[0].Details["sessions_revoked"] != float64(1) {
			t.Fatalf("user.password.changed entries: got %+v, want one for alice with 1 session revoked", changed)
		}
		refused := auditEntries(t, cp, so.AccessToken, "user.password.refused")
		if len(refused) != 2 {
			t.Fatalf("user.password.refused entries: got %+v, want 2", refused)
		}
	})
}

// TestRefreshConcurrentTabs: two tabs refreshing with the same cookie at
// once both get a working pair and the session stays; the cookie used
// again after the grace revokes the session.
func TestRefreshConcurrentTabs(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		alice := newAdmin(t, cp, "alice@example.com")
		s := signInUser(t, cp, alice)
		cookie := []*http.Cookie{{Name: s.Refresh.Name, Value: s.Refresh.Value}}

		const tabs = 4
		var mu sync.Mutex
		var tokens []string
		testlab.InParallel(tabs, func(int) {
			r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh", Cookies: cookie})
			if r.Status != http.StatusOK {
				t.Errorf("parallel refresh: %d %s", r.Status, r.Body)
				return
			}
			var out struct {
				AccessToken string `json:"access_token"`
			}
			r.JSON(t, &out)
			mu.Lock()
			tokens = append(tokens, out.AccessToken)
			mu.Unlock()
		})
		if t.Failed() {
			return
		}
		for _, tok := range tokens {
			expectStatus(t, cp.Get(t, "/api/v1/auth/me", tok), http.StatusOK)
		}
		first := time.Now()

		// Past the grace the same cookie is reuse: the session ends.
		testlab.Eventually(t, auth.RefreshGrace+15*time.Second, "reuse after the grace", func() bool {
			r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh", Cookies: cookie})
			if r.Status == http.StatusOK {
				return false
			}
			expectProblem(t, r, http.StatusUnauthorized, "refresh-token-reused")
			return true
		})
		if took := time.Since(first); took < auth.RefreshGrace-5*time.Second {
			t.Fatalf("reuse detected %v after the first use, within the grace of %v", took, auth.RefreshGrace)
		}
		for _, tok := range tokens {
			expectProblem(t, cp.Get(t, "/api/v1/auth/me", tok), http.StatusUnauthorized, "invalid-token")
		}
	})
}

// TestAdminRevocationEndsSessionsAndStreams: capstan user reset-2fa and
// capstan user disable end every session of the user, and their live
// streams close within seconds; devices are forgotten.
func TestAdminRevocationEndsSessionsAndStreams(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		gina := createUser(t, cp, "gina@example.com", testPassword, false)
		sa := signInUser(t, cp, admin)

		sg := signInUser(t, cp, gina)
		stream := openLiveStream(t, cp, sg.AccessToken)
		res := cp.CLI(t, "", append([]string{"user", "reset-2fa", "--email", gina.Email, "--json"}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 {
			t.Fatalf("user reset-2fa: exit %d: %s", res.ExitCode, res.Stderr)
		}
		stream.Ends(t, 5*time.Second)
		expectProblem(t, cp.Get(t, "/api/v1/auth/me", sg.AccessToken), http.StatusUnauthorized, "invalid-token")
		r := cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/refresh",
			Cookies: []*http.Cookie{{Name: sg.Refresh.Name, Value: sg.Refresh.Value}}})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-refresh-token")
		if !strings.Contains(res.Stdout, "totp_secret") {
			t.Fatalf("reset-2fa --json: %s", res.Stdout)
		}
		entries := auditEntries(t, cp, sa.AccessToken, "user.2fa.reset")
		if len(entries) != 1 || entries[0].Details["sessions_revoked"] != float64(1) {
			t.Fatalf("user.2fa.reset entries: got %+v, want one with 1 session revoked", entries)
		}

		frank := createUser(t, cp, "frank@example.com", testPassword, false)
		sf := signInUser(t, cp, frank)
		stream = openLiveStream(t, cp, sf.AccessToken)
		res = cp.CLI(t, "", append([]string{"user", "disable", "--email", frank.Email}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 {
			t.Fatalf("user disable: exit %d: %s", res.ExitCode, res.Stderr)
		}
		stream.Ends(t, 5*time.Second)
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", sa.AccessToken), http.StatusOK)
	})
}
