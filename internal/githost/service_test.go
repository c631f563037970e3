package githost_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"encoding/json"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

type rig struct {
	t      *testing.T
	ctx    context.Context
	st     *store.Store
	host   *testlab.GitHost
	clock  *testlab.Clock
	svc    *githost.Service
	caller audit.Caller
}

const publicURL = "https://capstan.example.test"

func newRig(t *testing.T, st *store.Store) *rig {
	host := testlab.StartGitHost(t)
	c := testlab.NewClock(time.Now().UTC())
	host.UseClock(c.Now)
	p, err := githost.NewGitHubClient(host.APIURL, host.URL, host.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := githost.NewService(st, p, secrets.GenerateKey(), audit.NewLog(st, c.Now), publicURL, c.Now, nil)
	return &rig{t: t, ctx: context.Background(), st: st, host: host, clock: c, svc: svc,
		caller: audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: "usr_admin"}, SessionID: "ses_one"}}
}

// browse posts the manifest to the provider's page as a browser does and
// returns the code and state of the redirect back.
func (r *rig) browse(m githost.Manifest) (code, state string) {
	r.t.Helper()
	raw, err := json.Marshal(m.Manifest)
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.host.Client.PostForm(m.PostURL, url.Values{"manifest": {string(raw)}})
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusFound; got != want {
		r.t.Fatalf("posting the manifest: status %d, want %d", got, want)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		r.t.Fatal(err)
	}
	if got, want := loc.Scheme+"://"+loc.Host+loc.Path, publicURL+githost.ManifestRedirectPath; got != want {
		r.t.Fatalf("redirect to %s, want %s", got, want)
	}
	return loc.Query().Get("code"), loc.Query().Get("state")
}

// connect runs the manifest flow to the end.
func (r *rig) connect() githost.Status {
	r.t.Helper()
	m, err := r.svc.StartManifest(r.ctx, r.caller, "")
	if err != nil {
		r.t.Fatal(err)
	}
	code, state := r.browse(m)
	st, err := r.svc.CompleteManifest(r.ctx, r.caller, code, state)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

func wantFault(t *testing.T, err error, kind fault.Kind, field string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != kind {
		t.Fatalf("got %v, want a fault of kind %d", err, kind)
	}
	if field != "" && (len(fe.Fields) != 1 || fe.Fields[0].Field != field) {
		t.Fatalf("got fields %+v, want one on %s", fe.Fields, field)
	}
}

// TestManifestFlow connects an app through the manifest flow: the manifest
// asks for read access and push events to the webhook URL, the code is
// exchanged once, and a state works once, for its own session, until it
// expires.
func TestManifestFlow(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		r := newRig(t, st)
		m, err := r.svc.StartManifest(r.ctx, r.caller, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.PostURL, r.host.URL+"/organizations/acme/settings/apps/new?state="+m.State; got != want {
			t.Errorf("post_url %s, want %s", got, want)
		}
		code, state := r.browse(m)
		if got, want := state, m.State; got != want {
			t.Fatalf("state back %q, want %q", got, want)
		}
		sent := r.host.Manifest()
		hook, _ := sent["hook_attributes"].(map[string]any)
		if got, want := hook["url"], publicURL+githost.WebhookPath; got != want {
			t.Errorf("hook_attributes.url %v, want %v", got, want)
		}
		perms, _ := sent["default_permissions"].(map[string]any)
		if perms["contents"] != "read" || perms["metadata"] != "read" || len(perms) != 2 {
			t.Errorf("default_permissions %v, want contents and metadata read", perms)
		}
		if got := fmt.Sprint(sent["default_events"]); got != "[push]" {
			t.Errorf("default_events %s, want [push]", got)
		}
		if got, want := sent["setup_url"], publicURL+githost.SetupPath; got != want {
			t.Errorf("setup_url %v, want %v", got, want)
		}

		// Another session cannot use the state, and that does not use it up.
		other := r.caller
		other.SessionID = "ses_two"
		_, err = r.svc.CompleteManifest(r.ctx, other, code, state)
		wantFault(t, err, fault.Invalid, "state")

		st1, err := r.svc.CompleteManifest(r.ctx, r.caller, code, state)
		if err != nil {
			t.Fatal(err)
		}
		if !st1.Connected || st1.App == nil || st1.App.ID != r.host.AppID() || st1.App.Owner != "acme" {
			t.Fatalf("status %+v, want connected to app %d owned by acme", st1, r.host.AppID())
		}
		if got, want := st1.WebhookURL, publicURL+githost.WebhookPath; got != want {
			t.Errorf("webhook_url %s, want %s", got, want)
		}
		if got, want := st1.App.InstallURL, r.host.URL+"/apps/"+st1.App.Slug+"/installations/new"; got != want {
			t.Errorf("install_url %s, want %s", got, want)
		}
		// The secrets are sealed at rest.
		a, err := st.GitHostApp(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(a.SealedPrivateKey, "PRIVATE KEY") || strings.Contains(a.SealedWebhookSecret, r.host.WebhookSecret()) {
			t.Error("the app's private key or webhook secret is stored in clear")
		}
		secret, err := r.svc.WebhookSecret(r.ctx)
		if err != nil || string(secret) != r.host.WebhookSecret() {
			t.Errorf("webhook secret %q, %v; want the provider's", secret, err)
		}

		// Used: the state works once.
		_, err = r.svc.CompleteManifest(r.ctx, r.caller, code, state)
		wantFault(t, err, fault.Invalid, "state")
		// While connected, no new flow starts.
		_, err = r.svc.StartManifest(r.ctx, r.caller, "")
		wantFault(t, err, fault.Conflict, "")
	})
}

// TestManifestBadInput: a wrong code, an expired state and malformed input
// are refused and store nothing.
func TestManifestBadInput(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		r := newRig(t, st)
		m, err := r.svc.StartManifest(r.ctx, r.caller, "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.svc.CompleteManifest(r.ctx, r.caller, "0123456789abcdef", m.State)
		wantFault(t, err, fault.Invalid, "code")
		status, err := r.svc.Status(r.ctx)
		if err != nil || status.Connected {
			t.Fatalf("status %+v, %v after a wrong code; want not connected", status, err)
		}
		_, err = r.svc.CompleteManifest(r.ctx, r.caller, "bad code!", m.State)
		wantFault(t, err, fault.Invalid, "code")
		_, err = r.svc.StartManifest(r.ctx, r.caller, "-not-a-login")
		wantFault(t, err, fault.Invalid, "organization")

		m2, err := r.svc.StartManifest(r.ctx, r.caller, "")
		if err != nil {
			t.Fatal(err)
		}
		code, state := r.browse(m2)
		r.clock.Advance(githost.StateTTL + time.Second)
		_, err = r.svc.CompleteManifest(r.ctx, r.caller, code, state)
		wantFault(t, err, fault.Invalid, "state")
		if status, _ := r.svc.Status(r.ctx); status.Connected {
			t.Fatal("connected with an expired state")
		}
	})
}

// TestManifestStateUsedOnce fires the completion with one state in
// parallel: exactly one caller gets past the state.
func TestManifestStateUsedOnce(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		r := newRig(t, st)
		m, err := r.svc.StartManifest(r.ctx, r.caller, "")
		if err != nil {
			t.Fatal(err)
		}
		code, state := r.browse(m)
		var ok, refused atomic.Int64
		testlab.InParallel(8, func(int) {
			_, err := r.svc.CompleteManifest(r.ctx, r.caller, code, state)
			switch fe := fault.As(err); {
			case err == nil:
				ok.Add(1)
			case fe != nil && fe.Kind == fault.Invalid && fe.Fields[0].Field == "state":
				refused.Add(1)
			default:
				t.Errorf("unexpected error %v", err)
			}
		})
		if ok.Load() != 1 || refused.Load() != 7 {
			t.Fatalf("%d completions succeeded and %d were refused; want 1 and 7", ok.Load(), refused.Load())
		}
		if got := r.host.Requests("POST /app-manifests/" + code + "/conversions"); got != 1 {
			t.Fatalf("the code was exchanged %d times, want 1", got)
		}
	})
}

// TestInstallationsRepositoriesBranches records installations verified with
// the provider, lists every page of their repositories and a repository's
// branches, and reuses installation tokens until shortly before they expire.
func TestInstallationsRepositoriesBranches(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		r := newRig(t, st)
		r.connect()
		const many = 130 // more than one page of 100
		var first *testlab.HostedRepo
		for i := range many {
			repo := r.host.AddRepo("acme", fmt.Sprintf("svc-%03d", i), i%2 == 0, map[string]string{"main": strings.Repeat("a", 40)})
			if i == 0 {
				first = repo
			}
		}
		web := r.host.AddRepo("solo", "web", true, map[string]string{"main": strings.Repeat("b", 40), "next": strings.Repeat("c", 40)})
		hidden := r.host.AddRepo("solo", "hidden", true, nil)
		all := r.host.Install(t, "acme")
		selected := r.host.Install(t, "solo", web)

		_, err := r.svc.AddInstallation(r.ctx, r.caller, 999999, githost.SetupInstall)
		wantFault(t, err, fault.Invalid, "installation_id")
		if list, _ := st.GitHostInstallations(r.ctx); len(list) != 0 {
			t.Fatalf("an unknown installation was recorded: %+v", list)
		}
		for _, id := range []int64{all, selected} {
			if _, err := r.svc.AddInstallation(r.ctx, r.caller, id, githost.SetupInstall); err != nil {
				t.Fatal(err)
			}
		}
		status, err := r.svc.Status(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(status.Installations) != 2 || status.Installations[0].Account != "acme" || status.Installations[0].RepositorySelection != "all" ||
			status.Installations[1].RepositorySelection != "selected" {
			t.Fatalf("installations %+v", status.Installations)
		}

		repos, err := r.svc.Repositories(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(repos), many+1; got != want {
			t.Fatalf("%d repositories, want %d", got, want)
		}
		if got := r.host.Requests("GET /installation/repositories"); got != 3 {
			t.Errorf("%d repository pages read, want 3 (two of one installation, one of the other)", got)
		}
		if repos[0].FullName != first.FullName() || repos[0].InstallationID != all || repos[0].ID != first.ID || !repos[0].Private {
			t.Errorf("first repository %+v", repos[0])
		}
		if last := repos[len(repos)-1]; last.FullName != "solo/web" || last.InstallationID != selected || last.DefaultBranch != "main" {
			t.Errorf("last repository %+v", last)
		}
		mints := r.host.Mints()
		if _, err := r.svc.Repositories(r.ctx); err != nil {
			t.Fatal(err)
		}
		if got := r.host.Mints(); got != mints {
			t.Errorf("listing again minted %d tokens, want the cached ones", got-mints)
		}

		branches, err := r.svc.Branches(r.ctx, selected, web.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(branches) != 2 || branches[0].Name != "main" || branches[0].CommitSHA != strings.Repeat("b", 40) || branches[1].Name != "next" {
			t.Fatalf("branches %+v", branches)
		}
		_, err = r.svc.Branches(r.ctx, selected, hidden.ID)
		wantFault(t, err, fault.NotFound, "")
		_, err = r.svc.Branches(r.ctx, 424242, web.ID)
		wantFault(t, err, fault.NotFound, "")
		_, err = r.svc.Access(r.ctx, selected, first.ID, "source.repo_id")
		wantFault(t, err, fault.Invalid, "source.repo_id")
		_, err = r.svc.Access(r.ctx, 424242, first.ID, "source.repo_id")
		wantFault(t, err, fault.Invalid, "source.installation_id")

		// Revoked tokens are replaced at their first refusal.
		r.host.RevokeTokens()
		mints = r.host.Mints()
		if _, err := r.svc.Repositories(r.ctx); err != nil {
			t.Fatalf("listing with revoked tokens: %v", err)
		}
		if _, err := r.svc.Branches(r.ctx, selected, web.ID); err != nil {
			t.Fatalf("branches with revoked tokens: %v", err)
		}
		if got := r.host.Mints() - mints; got != 3 {
			t.Fatalf("%d tokens minted after the revocation, want 3 (two installations, one repository)", got)
		}

		// A token is used until it has less than TokenMargin left.
		mints = r.host.Mints()
		if _, err := r.svc.Branches(r.ctx, selected, web.ID); err != nil {
			t.Fatal(err)
		}
		if got := r.host.Mints(); got != mints {
			t.Fatalf("a fresh token was not reused (%d minted)", got-mints)
		}
		r.clock.Advance(time.Hour - githost.TokenMargin + time.Second)
		if _, err := r.svc.Branches(r.ctx, selected, web.ID); err != nil {
			t.Fatal(err)
		}
		if got := r.host.Mints(); got != mints+1 {
			t.Fatalf("%d tokens minted for a token close to its expiry, want 1", got-mints)
		}

		// Uninstalled on the provider without a webhook: forgotten by the
		// next listing, which goes on with the other installation.
		r.host.Uninstall(all)
		repos, err = r.svc.Repositories(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(repos) != 1 || repos[0].FullName != "solo/web" {
			t.Fatalf("repositories after an uninstall: %+v", repos)
		}
		if _, err := st.GitHostInstallation(r.ctx, all); !fault.Is(err, fault.NotFound) {
			t.Fatalf("the uninstalled installation is still recorded: %v", err)
		}

		d, err := r.svc.Disconnect(r.ctx, r.caller)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Disconnected || !strings.HasPrefix(d.SettingsURL, r.host.URL+"/settings/apps/") {
			t.Errorf("disconnection %+v", d)
		}
		status, err = r.svc.Status(r.ctx)
		if err != nil || status.Connected || len(status.Installations) != 0 {
			t.Fatalf("status after disconnecting %+v, %v", status, err)
		}
		_, err = r.svc.Repositories(r.ctx)
		wantFault(t, err, fault.Conflict, "")
		_, err = r.svc.Disconnect(r.ctx, r.caller)
		wantFault(t, err, fault.NotFound, "")
	})
}

// TestCompareCommits: the provider's comparison of two commits says where
// the second stands relative to the first (identical, ahead, behind,
// diverged); a commit the repository does not have, or two without a
// common ancestor, is NotFound.
func TestCompareCommits(t *testing.T) {
	r := newRig(t, storetest.Open(t, store.SQLite))
	r.connect()
	sha := func(c string) string { return strings.Repeat(c, 40) }
	repo := r.host.AddRepo("acme", "web", true, map[string]string{"main": sha("c")})
	r.host.UpdateRepo(repo, func(hr *testlab.HostedRepo) {
		// a ← b ← c on main; d forks from a; e is unrelated.
		for c, parents := range map[string][]string{"a": nil, "b": {sha("a")}, "c": {sha("b")}, "d": {sha("a")}, "e": nil} {
			hr.Commits[sha(c)] = testlab.HostedCommit{SHA: sha(c), Message: c, AuthorName: "Ada", Parents: parents}
		}
	})
	inst := r.host.Install(t, "acme")
	if _, err := r.svc.AddInstallation(r.ctx, r.caller, inst, githost.SetupInstall); err != nil {
		t.Fatal(err)
	}
	ra, err := r.svc.Access(r.ctx, inst, repo.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		base, head    string
		want          string
		ahead, behind int
	}{
		{sha("b"), sha("b"), githost.CompareIdentical, 0, 0},
		{sha("a"), sha("c"), githost.CompareAhead, 2, 0},
		{sha("c"), sha("a"), githost.CompareBehind, 0, 2},
		{sha("c"), sha("d"), githost.CompareDiverged, 1, 2},
		{sha("b"), "main", githost.CompareAhead, 1, 0},
	} {
		got, err := r.svc.Compare(r.ctx, ra, c.base, c.head)
		if err != nil || got != (githost.Comparison{Status: c.want, AheadBy: c.ahead, BehindBy: c.behind}) {
			t.Errorf("compare %.6s...%.6s: %+v, %v; want %s, ahead by %d, behind by %d", c.base, c.head, got, err, c.want, c.ahead, c.behind)
		}
	}
	for _, head := range []string{sha("e"), sha("f")} {
		_, err := r.svc.Compare(r.ctx, ra, sha("c"), head)
		wantFault(t, err, fault.NotFound, "")
	}
}
