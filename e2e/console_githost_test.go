package e2e

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestConsoleGitHost connects the git host from the console
// (web/e2e/githost.mjs) in headless Chromium, with the GitHub stand-in as
// the control plane's git host: the console posts the app manifest to the
// stand-in, which creates the app and sends the browser back; the console
// completes the connection, the app is installed on the stand-in's page,
// which returns through the setup path, and the console records the
// installation; the git source picker then lists the installation's
// repositories. This test checks through the API that the app's
// credentials work and the installation exists, and that a member, who
// sees no connect control, is refused by the API; disconnecting forgets
// the app.
func TestConsoleGitHost(t *testing.T) {
	t.Parallel()
	host := testlab.StartGitHost(t)
	const owner = "capstan-admin" // the stand-in's account of the admin who creates the app
	shop := host.AddRepo(owner, "shop", true, map[string]string{"main": strings.Repeat("a", 40)})
	hidden := host.AddRepo("someone-else", "private-things", true, map[string]string{"main": strings.Repeat("b", 40)})
	f := newFleet(t, gitHostOptions(store.SQLite, host))
	member := createUser(t, f.ControlPlane, "member-githost@example.com", testPassword, false)
	// Another member for the API's checks: a TOTP code signs in once, and
	// the browser signs the first member in.
	memberToken := signInUser(t, f.ControlPlane, createUser(t, f.ControlPlane, "member-api@example.com", testPassword, false)).AccessToken

	status := func() GitHostStatus {
		t.Helper()
		var st GitHostStatus
		expectJSON(t, f.Get(t, "/api/v1/githost/status", f.Token), http.StatusOK, &st)
		return st
	}
	steps := runConsoleScript(t, f, "githost.mjs", []string{
		"CAPSTAN_REPO=" + shop.FullName(), "CAPSTAN_HIDDEN_REPO=" + hidden.FullName(),
		"CAPSTAN_MEMBER_EMAIL=" + member.Email, "CAPSTAN_MEMBER_PASSWORD=" + member.Password, "CAPSTAN_MEMBER_TOTP_SECRET=" + member.TOTPSecret,
	}, func(line string, fields []string) {
		switch fields[0] {
		case "field-error":
			if st := status(); st.Connected || host.AppID() != 0 {
				t.Errorf("after a refused manifest: connected %v, the stand-in's app %d; want nothing created", st.Connected, host.AppID())
			}
		case "connected":
			// The app the stand-in created from the console's manifest is
			// the one connected, and its credentials were stored: the
			// manifest named this control plane's return paths.
			st := status()
			if !st.Connected || st.App == nil || st.App.ID == 0 || st.App.ID != host.AppID() || st.App.Owner != owner {
				t.Errorf("status after the console connected: %+v, want the stand-in's app %d of %s", st, host.AppID(), owner)
			}
			m := host.Manifest()
			if m["redirect_url"] != f.URL+"/githost/manifest/callback" || m["setup_url"] != f.URL+"/githost/setup" {
				t.Errorf("the manifest the console posted: redirect_url %v, setup_url %v", m["redirect_url"], m["setup_url"])
			}
		case "installed":
			id, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
			if err != nil {
				t.Errorf("line %q: %v", line, err)
				return
			}
			st := status()
			if len(st.Installations) != 1 || st.Installations[0].ID != id || st.Installations[0].Account != owner ||
				st.Installations[0].RepositorySelection != "all" {
				t.Errorf("installations after the console recorded %d: %+v", id, st.Installations)
			}
		case "repos-listed":
			// Listing mints an installation token with the app's stored
			// private key: the credentials work.
			mints := host.Mints()
			var list struct {
				Repositories []struct {
					FullName string `json:"full_name"`
				} `json:"repositories"`
			}
			expectJSON(t, f.Get(t, "/api/v1/githost/repositories", f.Token), http.StatusOK, &list)
			var names []string
			for _, x := range list.Repositories {
				names = append(names, x.FullName)
			}
			if !slices.Equal(names, []string{shop.FullName()}) {
				t.Errorf("repositories through the API: %v, want [%s]", names, shop.FullName())
			}
			if mints == 0 {
				t.Errorf("the console listed repositories without an installation token minted")
			}
			if got := fields[len(fields)-1]; got != "1" {
				t.Errorf("the picker listed %s repositories, want 1", got)
			}
		case "member-refused":
			tok := memberToken
			expectProblem(t, f.Post(t, "/api/v1/githost/manifest", tok, map[string]any{}), http.StatusForbidden, "admin-required")
			expectProblem(t, f.Post(t, "/api/v1/githost/installations", tok, map[string]any{"installation_id": 1, "setup_action": "install"}),
				http.StatusForbidden, "admin-required")
			expectProblem(t, f.Get(t, "/api/v1/githost/status", tok), http.StatusForbidden, "admin-required")
			if st := status(); len(st.Installations) != 1 {
				t.Errorf("installations after the member's return: %+v, want the one recorded", st.Installations)
			}
		case "disconnected":
			if st := status(); st.Connected || st.App != nil || len(st.Installations) != 0 {
				t.Errorf("status after the console disconnected: %+v", st)
			}
		}
	}, nil)
	want := "field-error connected installed failed-shown repos-listed member-refused disconnected done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("githost.mjs steps %v, want %s", steps, want)
	}
}
