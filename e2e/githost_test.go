package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// gitHostOptions configure a control plane whose git host is the
// stand-in, trusted through SSL_CERT_FILE as an operator would trust a
// GitHub Enterprise Server's CA.
func gitHostOptions(d store.Dialect, host *testlab.GitHost) Options {
	return Options{Dialect: d,
		Args: []string{"--githost-api-url", host.APIURL, "--githost-web-url", host.URL},
		Env:  []string{"SSL_CERT_FILE=" + host.CAFile}}
}

// gitHostPlane starts a control plane whose git host is the stand-in.
func gitHostPlane(t *testing.T, d store.Dialect, host *testlab.GitHost) *ControlPlane {
	t.Helper()
	return startControlPlane(t, gitHostOptions(d, host))
}

// newAppRigWith is newAppRig on a control plane started with opts.
func newAppRigWith(t *testing.T, opts Options) *appRig {
	t.Helper()
	f := newFleet(t, opts)
	e := f.createEnrollment(t, "app-host")
	res := f.enrollHTTP(t, e.Token)
	return &appRig{Fleet: f, serverID: res.ServerID, agent: res.AgentToken}
}

// GitHostStatus is GET /api/v1/githost/status.
type GitHostStatus struct {
	Connected bool `json:"connected"`
	App       *struct {
		ID         int64  `json:"id"`
		Slug       string `json:"slug"`
		Owner      string `json:"owner"`
		HTMLURL    string `json:"html_url"`
		InstallURL string `json:"install_url"`
	} `json:"app"`
	Installations []struct {
		ID                  int64  `json:"id"`
		Account             string `json:"account"`
		RepositorySelection string `json:"repository_selection"`
	} `json:"installations"`
	WebhookURL string `json:"webhook_url"`
}

// startManifest starts the manifest flow and posts the manifest to the
// provider as the admin's browser does; it returns the code and state the
// provider redirected back with.
func startManifest(t testing.TB, cp *ControlPlane, host *testlab.GitHost, token, org string) (code, state string) {
	t.Helper()
	body := map[string]any{}
	if org != "" {
		body["organization"] = org
	}
	var m struct {
		Manifest map[string]any `json:"manifest"`
		PostURL  string         `json:"post_url"`
		State    string         `json:"state"`
	}
	expectJSON(t, cp.Post(t, "/api/v1/githost/manifest", token, body), http.StatusOK, &m)
	raw, err := json.Marshal(m.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := host.Client.PostForm(m.PostURL, url.Values{"manifest": {string(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("posting the manifest to %s: status %d", m.PostURL, resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loc.Scheme+"://"+loc.Host+loc.Path, cp.URL+"/githost/manifest/callback"; got != want {
		t.Fatalf("the provider redirected to %s, want %s", got, want)
	}
	if got := loc.Query().Get("state"); got != m.State {
		t.Fatalf("state back %q, want %q", got, m.State)
	}
	return loc.Query().Get("code"), m.State
}

// connectGitHost connects the stand-in's app to cp and records an
// installation of it on account, for repos (all of the account's when
// none); it returns the installation id.
func connectGitHost(t testing.TB, cp *ControlPlane, host *testlab.GitHost, token, account string, repos ...*testlab.HostedRepo) int64 {
	t.Helper()
	code, state := startManifest(t, cp, host, token, "")
	r := cp.Post(t, "/api/v1/githost/manifest/complete", token, map[string]string{"code": code, "state": state})
	expectStatus(t, r, http.StatusOK)
	id := host.Install(t, account, repos...)
	r = cp.Post(t, "/api/v1/githost/installations", token, map[string]any{"installation_id": id, "setup_action": "install"})
	expectStatus(t, r, http.StatusOK)
	return id
}

// TestGitHostConnect connects a GitHub App through the manifest flow
// against the stand-in over HTTPS (trusted through SSL_CERT_FILE), records
// installations verified with the provider, lists every page of
// repositories and a repository's branches, refuses bad input without
// storing anything, never shows or logs the app's secrets or tokens, and
// disconnects.
func TestGitHostConnect(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		host := testlab.StartGitHost(t)
		cp := gitHostPlane(t, d, host)
		admin := signInUser(t, cp, newAdmin(t, cp, "admin@example.com")).AccessToken

		r := cp.Get(t, "/api/v1/githost/status", admin)
		var st GitHostStatus
		expectJSON(t, r, http.StatusOK, &st)
		if st.Connected || st.App != nil || st.WebhookURL != cp.URL+"/api/v1/githost/webhook" {
			t.Fatalf("status before connecting: %s", r.Body)
		}

		code, state := startManifest(t, cp, host, admin, "acme")
		// A state of another session is refused.
		other := signInUser(t, cp, newAdmin(t, cp, "other@example.com")).AccessToken
		p := expectProblem(t, cp.Post(t, "/api/v1/githost/manifest/complete", other, map[string]string{"code": code, "state": state}),
			http.StatusUnprocessableEntity, "validation-failed")
		if p.Errors[0].Field != "state" {
			t.Fatalf("problem %+v, want one on state", p)
		}
		// A wrong code is refused (and the state is used up by it).
		p = expectProblem(t, cp.Post(t, "/api/v1/githost/manifest/complete", admin, map[string]string{"code": "0123456789abcdef", "state": state}),
			http.StatusUnprocessableEntity, "validation-failed")
		if p.Errors[0].Field != "code" {
			t.Fatalf("problem %+v, want one on code", p)
		}
		r = cp.Post(t, "/api/v1/githost/manifest/complete", admin, map[string]string{"code": code, "state": state})
		expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
		r = cp.Get(t, "/api/v1/githost/status", admin)
		r.JSON(t, &st)
		if st.Connected {
			t.Fatal("connected after refused completions")
		}

		code, state = startManifest(t, cp, host, admin, "acme")
		r = cp.Post(t, "/api/v1/githost/manifest/complete", admin, map[string]string{"code": code, "state": state})
		expectJSON(t, r, http.StatusOK, &st)
		if !st.Connected || st.App == nil || st.App.ID != host.AppID() || st.App.Owner != "acme" ||
			st.App.InstallURL != host.URL+"/apps/"+st.App.Slug+"/installations/new" {
			t.Fatalf("status after connecting: %s", r.Body)
		}
		secret := host.WebhookSecret()
		if strings.Contains(string(r.Body), secret) || strings.Contains(string(r.Body), "PRIVATE KEY") {
			t.Fatalf("the status shows the app's secrets: %s", r.Body)
		}
		expectProblem(t, cp.Post(t, "/api/v1/githost/manifest/complete", admin, map[string]string{"code": code, "state": state}),
			http.StatusUnprocessableEntity, "validation-failed")
		expectProblem(t, cp.Post(t, "/api/v1/githost/manifest", admin, map[string]any{}), http.StatusConflict, "app-connected")
		if got := len(auditEntries(t, cp, admin, "githost.app.connected")); got != 1 {
			t.Errorf("%d githost.app.connected audit entries, want 1", got)
		}

		// Installations are verified with the provider before they are
		// recorded.
		var web *testlab.HostedRepo
		for i := range 105 {
			repo := host.AddRepo("acme", fmt.Sprintf("svc-%03d", i), true, map[string]string{"main": strings.Repeat("1", 40)})
			if i == 7 {
				web = repo
				host.UpdateRepo(repo, func(r *testlab.HostedRepo) { r.Branches["release"] = strings.Repeat("2", 40) })
			}
		}
		expectProblem(t, cp.Post(t, "/api/v1/githost/installations", admin, map[string]any{"installation_id": 987654, "setup_action": "install"}),
			http.StatusUnprocessableEntity, "validation-failed")
		inst := host.Install(t, "acme")
		r = cp.Post(t, "/api/v1/githost/installations", admin, map[string]any{"installation_id": inst, "setup_action": "install"})
		expectJSON(t, r, http.StatusOK, &st)
		if len(st.Installations) != 1 || st.Installations[0].ID != inst || st.Installations[0].Account != "acme" ||
			st.Installations[0].RepositorySelection != "all" {
			t.Fatalf("installations: %s", r.Body)
		}

		var repos struct {
			Repositories []struct {
				InstallationID int64  `json:"installation_id"`
				RepoID         int64  `json:"repo_id"`
				FullName       string `json:"full_name"`
				DefaultBranch  string `json:"default_branch"`
				Private        bool   `json:"private"`
			} `json:"repositories"`
		}
		expectJSON(t, cp.Get(t, "/api/v1/githost/repositories", admin), http.StatusOK, &repos)
		if got, want := len(repos.Repositories), 105; got != want {
			t.Fatalf("%d repositories, want %d", got, want)
		}
		if got := host.Requests("GET /installation/repositories"); got != 2 {
			t.Errorf("%d pages read, want 2", got)
		}
		if r0 := repos.Repositories[0]; r0.FullName != "acme/svc-000" || r0.InstallationID != inst || !r0.Private || r0.DefaultBranch != "main" {
			t.Errorf("first repository %+v", r0)
		}

		r = cp.Get(t, "/api/v1/githost/repositories/"+strconv.FormatInt(inst, 10)+"/"+strconv.FormatInt(web.ID, 10)+"/branches", admin)
		var br struct {
			Branches []struct {
				Name      string `json:"name"`
				CommitSHA string `json:"commit_sha"`
			} `json:"branches"`
		}
		expectJSON(t, r, http.StatusOK, &br)
		if len(br.Branches) != 2 || br.Branches[1].Name != "release" || br.Branches[1].CommitSHA != strings.Repeat("2", 40) {
			t.Fatalf("branches: %s", r.Body)
		}
		other2 := host.AddRepo("elsewhere", "private", true, nil)
		expectProblem(t, cp.Get(t, "/api/v1/githost/repositories/"+strconv.FormatInt(inst, 10)+"/"+strconv.FormatInt(other2.ID, 10)+"/branches", admin),
			http.StatusNotFound, "not-found")
		if got := host.Mints(); got != 2 {
			t.Errorf("%d installation tokens minted, want 2 (one for the installation, one scoped to the repository)", got)
		}

		// Neither the app's secrets nor installation tokens are logged.
		logs := cp.Logs()
		for _, tok := range host.IssuedTokens() {
			if strings.Contains(logs, tok) {
				t.Fatal("an installation token is in the control plane's log")
			}
		}
		if strings.Contains(logs, secret) {
			t.Fatal("the webhook secret is in the control plane's log")
		}

		r = cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/githost/app", Token: admin})
		var disc struct {
			Disconnected bool   `json:"disconnected"`
			SettingsURL  string `json:"settings_url"`
		}
		expectJSON(t, r, http.StatusOK, &disc)
		if !disc.Disconnected || disc.SettingsURL != host.URL+"/organizations/acme/settings/apps/"+st.App.Slug {
			t.Fatalf("disconnection: %s", r.Body)
		}
		r = cp.Get(t, "/api/v1/githost/status", admin)
		st = GitHostStatus{}
		r.JSON(t, &st)
		if st.Connected || len(st.Installations) != 0 {
			t.Fatalf("status after disconnecting: %s", r.Body)
		}
		expectProblem(t, cp.Get(t, "/api/v1/githost/repositories", admin), http.StatusConflict, "app-not-connected")
	})
}

// TestGitHostSettings: the provider's URLs are serve flags with CAPSTAN_
// environment equivalents, shown in --help, and must be https URLs.
func TestGitHostSettings(t *testing.T) {
	res := runCLI(t, nil, "", "serve", "--help")
	for _, want := range []string{"--githost-api-url", "CAPSTAN_GITHOST_API_URL", "--githost-web-url", "CAPSTAN_GITHOST_WEB_URL", "https://api.github.com"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("capstan serve --help does not mention %s:\n%s", want, res.Stdout)
		}
	}
	res = runCLI(t, []string{"CAPSTAN_GITHOST_API_URL=ftp://example.test"}, "", "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "git host API URL") {
		t.Fatalf("serve with an ftp:// API URL: exit %d, stderr %s", res.ExitCode, res.Stderr)
	}
}
