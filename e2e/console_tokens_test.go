package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestConsoleTokens drives the API tokens screen in headless Chromium
// (web/e2e/tokens.mjs): the administrator makes a token with scope deploy
// narrowed to one of two applications and sees its secret once; this test
// then calls the API with the secret (what it may do, the application it
// is narrowed to, and the other one, refused), the screen shows that use,
// revokes the token after asking, and the secret is refused from then on.
// A member then makes a read token, offered nothing more. Checked here
// through the API: the tokens as listed and the audit entries.
func TestConsoleTokens(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	en := f.createEnrollment(t, "tokens-host")
	server := f.enrollHTTP(t, en.Token).ServerID
	newApp := func(name string) AppInfo {
		t.Helper()
		r := f.Post(t, "/api/v1/applications", f.Token, map[string]any{"name": name, "server_id": server, "deploy": false,
			"source": map[string]any{"type": "image", "image": "ghcr.io/acme/" + name + ":1"}, "container_port": 8080})
		var a AppInfo
		expectJSON(t, r, http.StatusCreated, &a)
		return a
	}
	web, other := newApp("web"), newApp("shop")

	user := createUser(t, f.ControlPlane, "browser-tokens@example.com", testPassword, true)
	member := createUser(t, f.ControlPlane, "member-tokens@example.com", testPassword, false)
	secretFile := filepath.Join(t.TempDir(), "secret")
	var secret, tokenID string
	var madeAt time.Time
	steps := runConsoleScriptAsUser(t, f, "tokens.mjs", user, []string{
		"CAPSTAN_APP_NAME=" + web.Name, "CAPSTAN_APP_ID=" + web.ID, "CAPSTAN_SECRET_FILE=" + secretFile,
		"CAPSTAN_MEMBER_EMAIL=" + member.Email, "CAPSTAN_MEMBER_PASSWORD=" + member.Password, "CAPSTAN_MEMBER_TOTP_SECRET=" + member.TOTPSecret,
	}, func(line string, fields []string) {
		switch fields[0] {
		case "created":
			// The secret the screen showed: what it may do, the
			// application it is narrowed to, and not the other one.
			b, err := os.ReadFile(secretFile)
			if err != nil {
				t.Errorf("the secret: %v", err)
				return
			}
			secret, tokenID, madeAt = string(b), fields[1], time.Now()
			r := f.Get(t, "/api/v1/tokens/current", secret)
			if r.Status != http.StatusOK {
				t.Errorf("tokens/current with the new token: %d %s", r.Status, r.Body)
				return
			}
			var cur struct {
				Token struct {
					ID        string     `json:"id"`
					Scopes    []string   `json:"scopes"`
					Resources []string   `json:"resources"`
					ExpiresAt *time.Time `json:"expires_at"`
				} `json:"token"`
				Allowed []string `json:"allowed"`
			}
			r.JSON(t, &cur)
			if cur.Token.ID != tokenID || !slices.Equal(cur.Token.Scopes, []string{"deploy"}) ||
				!slices.Equal(cur.Token.Resources, []string{"app:" + web.ID}) || !slices.Equal(cur.Allowed, []string{"read", "deploy"}) {
				t.Errorf("tokens/current: %s", r.Body)
			}
			if cur.Token.ExpiresAt == nil || cur.Token.ExpiresAt.Sub(madeAt) < 29*24*time.Hour || cur.Token.ExpiresAt.Sub(madeAt) > 30*24*time.Hour+time.Minute {
				t.Errorf("the token expires at %v, want 30 days after %v", cur.Token.ExpiresAt, madeAt)
			}
			if r := f.Get(t, "/api/v1/applications/"+web.ID, secret); r.Status != http.StatusOK {
				t.Errorf("the application the token is narrowed to: %d %s", r.Status, r.Body)
			}
			if r := f.Get(t, "/api/v1/applications/"+other.ID, secret); r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "token-resource") {
				t.Errorf("another application with the narrowed token: %d %s", r.Status, r.Body)
			}
		case "used":
			if len(fields) != 2 || fields[1] != "127.0.0.1" {
				t.Errorf("used line %q: want the test's address 127.0.0.1", line)
			}
		case "revoked":
			if r := f.Get(t, "/api/v1/tokens/current", secret); r.Status != http.StatusUnauthorized {
				t.Errorf("tokens/current with the revoked token: %d %s", r.Status, r.Body)
			}
		}
	}, nil)
	if want := "refused created listed used revoked audited member done"; strings.Join(steps, " ") != want {
		t.Fatalf("tokens.mjs steps %v, want %s", steps, want)
	}
	if secret == "" {
		t.Fatal("no secret came from the screen")
	}
	if r := f.Get(t, "/api/v1/applications/"+web.ID, secret); r.Status != http.StatusUnauthorized {
		t.Fatalf("the revoked token after the browser closed: %d %s", r.Status, r.Body)
	}

	// The list: the administrator's token revoked, the member's live and
	// reading only.
	r := f.Get(t, "/api/v1/tokens", f.Token)
	var list struct {
		Tokens []struct {
			ID         string     `json:"id"`
			Name       string     `json:"name"`
			UserEmail  string     `json:"user_email"`
			Scopes     []string   `json:"scopes"`
			LastUsedIP string     `json:"last_used_ip"`
			RevokedAt  *time.Time `json:"revoked_at"`
			ExpiresAt  *time.Time `json:"expires_at"`
		} `json:"tokens"`
	}
	expectJSON(t, r, http.StatusOK, &list)
	if len(list.Tokens) != 2 {
		t.Fatalf("%d tokens, want 2: %s", len(list.Tokens), r.Body)
	}
	for _, tk := range list.Tokens {
		switch tk.UserEmail {
		case user.Email:
			if tk.ID != tokenID || tk.RevokedAt == nil || tk.LastUsedIP != "127.0.0.1" {
				t.Errorf("the administrator's token: %+v", tk)
			}
		case member.Email:
			if tk.Name != "member read" || tk.RevokedAt != nil || !slices.Equal(tk.Scopes, []string{"read"}) || tk.ExpiresAt == nil {
				t.Errorf("the member's token: %+v", tk)
			}
		default:
			t.Errorf("a token of %s", tk.UserEmail)
		}
	}

	// The audit log: both made, the first use recorded, one revoked.
	if n := len(auditEntries(t, f.ControlPlane, f.Token, "token.created")); n != 2 {
		t.Errorf("%d token.created entries, want 2", n)
	}
	revoked := auditEntries(t, f.ControlPlane, f.Token, "token.revoked")
	if len(revoked) != 1 || revoked[0].Actor.Email != user.Email || revoked[0].Target.ID != tokenID {
		t.Errorf("token.revoked entries: %+v", revoked)
	}
	used := auditEntries(t, f.ControlPlane, f.Token, "token.new_address")
	if len(used) != 1 || used[0].Target.ID != tokenID || used[0].Details["previous_ip"] != "" {
		t.Errorf("token.new_address entries: %+v", used)
	}
}
