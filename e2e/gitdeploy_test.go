package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// gitStack is an application stack (real agent, Docker, Caddy) whose
// control plane is connected to the git host stand-in, with an
// installation on acme and a real repository acme/web served over smart
// HTTP.
type gitStack struct {
	*appStack
	Host   *testlab.GitHost
	Repo   *testlab.HostedRepo
	Inst   int64
	Prog   []byte
	TmpDir string // the agent's TMPDIR, where it fetches and builds
	Run    string // unique to the test run
}

func newGitStack(t *testing.T) *gitStack {
	t.Helper()
	testlab.GitBinary(t)
	host := testlab.StartGitHost(t)
	tmp := t.TempDir()
	// git on Debian uses GnuTLS, which ignores SSL_CERT_FILE: the agent's
	// git trusts the stand-in's CA through GIT_SSL_CAINFO, as an operator
	// of a GitHub Enterprise Server with a private CA would set it.
	s := newAppStack(t, appStackOptions{Plane: gitHostOptions(store.SQLite, host), DNS: map[string]string{},
		AgentEnv: []string{"GIT_SSL_CAINFO=" + host.CAFile, "TMPDIR=" + tmp}})
	repo := host.AddGitRepo(t, "acme", "web", true)
	inst := connectGitHost(t, s.ControlPlane, host, s.Token, "acme")
	return &gitStack{appStack: s, Host: host, Repo: repo, Inst: inst, Prog: testlab.GoProgram(t, "../internal/agent/deploy/testdata/web"),
		TmpDir: tmp, Run: testlab.UniqueName("run")}
}

// push commits a version of the web program: it answers "<version> <GREETING>",
// GREETING coming from the build argument of that name.
func (g *gitStack) push(t testing.TB, version string) string {
	t.Helper()
	// The run's label makes the first build of the test a cold one, whatever
	// the engine built before.
	dockerfile := fmt.Sprintf("FROM scratch\nLABEL dev.capstan.e2e.run=%s\nCOPY web /web\nARG GREETING\nENV VERSION=%s GREETING=$GREETING\nENTRYPOINT [\"/web\"]\n",
		g.Run, version)
	return g.Host.Push(t, g.Repo, "main", map[string][]byte{"web": g.Prog, "Dockerfile": []byte(dockerfile)}, "Release "+version)
}

// noSecretOnDisk fails the test if secret is in a file under one of dirs.
func noSecretOnDisk(t testing.TB, secret string, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error { //nolint:errcheck // best effort walk
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), secret) {
				t.Errorf("%s holds a secret", p)
			}
			return nil
		})
	}
}

// TestGitDeploy runs an application from git on the real stack: the
// repositories and branches are listed through the API, the application
// is created from a branch, the agent fetches the exact commit with an
// installation token and builds it, the site serves commit 1; commit 2 is
// pushed and its signed push webhook deploys it; the replayed delivery
// (under its id or a new one), a signed push of the older commit 1 and a
// forged one deploy nothing; commit 2 deployed again by ref builds from
// the cache; a rollback serves commit 1 again without a build.
// The installation token and the build argument never appear in logs,
// job payloads or on the agent's disk.
func TestGitDeploy(t *testing.T) {
	t.Parallel()
	const hostname = "git.test"
	g := newGitStack(t)
	sha1 := g.push(t, "one")

	r := g.Get(t, "/api/v1/githost/repositories", g.Token)
	expectStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"full_name":"acme/web"`) {
		t.Fatalf("repositories: %s", r.Body)
	}
	r = g.Get(t, fmt.Sprintf("/api/v1/githost/repositories/%d/%d/branches", g.Inst, g.Repo.ID), g.Token)
	expectStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"commit_sha":"`+sha1+`"`) {
		t.Fatalf("branches: %s, want main at %s", r.Body, sha1)
	}

	const buildArg = "build-arg-s3cret-0453"
	app := g.createApp(t, map[string]any{
		"name": "web", "container_port": 8080, "health_path": "/health", "auto_deploy": true,
		"source":     map[string]any{"type": "git", "installation_id": g.Inst, "repo_id": g.Repo.ID, "branch": "main"},
		"build_args": []map[string]string{{"key": "GREETING", "value": buildArg}},
	})
	if app.Latest == nil {
		t.Fatalf("created application: %+v", app)
	}
	d1, _ := g.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	if d1.Spec.Git == nil || d1.Spec.Git.CommitSHA != sha1 || d1.Spec.Git.CommitMessage != "Release one" ||
		d1.Spec.Git.CommitAuthor != "Ada Lovelace <ada@example.com>" || d1.Spec.Image != "capstan/web:"+sha1[:12] {
		t.Fatalf("first deployment's spec: %+v %+v", d1.Spec, d1.Spec.Git)
	}
	if d1.Result == nil || d1.Result.Build == nil || d1.Result.Build.Commit != sha1 || d1.ImageID == "" || d1.Result.Build.ImageID != d1.ImageID {
		t.Fatalf("first deployment's result: %+v", d1.Result)
	}
	if _, ok := findEvent(d1.Events, "Step 1/"); !ok {
		t.Fatalf("no build output in the events:\n%s", eventsText(d1.Events))
	}

	g.addDomain(t, app.ID, hostname, "internal", "succeeded")
	hc := g.Client(t)
	url := g.Caddy.URL("https", hostname, "/")
	g.waitSite(t, hc, url, "one "+buildArg, time.Minute)

	// Commit 2 is pushed: the signed push webhook deploys it.
	sha2 := g.push(t, "two")
	hook := g.URL + "/api/v1/githost/webhook"
	push := g.Host.PushEvent(g.Inst, g.Repo, "main", sha1, sha2)
	delivery := testlab.DeliveryID()
	sent := time.Now()
	status, body := g.Host.Deliver(t, hook, "push", delivery, push, "")
	var res struct {
		Result        string   `json:"result"`
		DeploymentIDs []string `json:"deployment_ids"`
	}
	if err := json.Unmarshal(body, &res); err != nil || status != http.StatusOK || res.Result != "handled" || len(res.DeploymentIDs) != 1 {
		t.Fatalf("push delivery: %d %s", status, body)
	}
	g.waitSite(t, hc, url, "two "+buildArg, deployTimeout)
	serving := time.Since(sent)
	// The site serves commit 2 from the proxy's switch on; the job
	// finishes after the old container is drained and removed.
	d2, _ := g.waitDeployment(t, res.DeploymentIDs[0], "succeeded", pollInterval, deployTimeout)
	if d2.Spec.Git.CommitSHA != sha2 || d2.Ref != sha2 {
		t.Fatalf("auto deployment: %s %+v", d2.Status, d2.Spec.Git)
	}
	deployments := func() int {
		var list struct {
			Deployments []AppDeployment `json:"deployments"`
		}
		expectJSON(t, g.Get(t, "/api/v1/applications/"+app.ID+"/deployments", g.Token), http.StatusOK, &list)
		return len(list.Deployments)
	}
	count := deployments()

	// The same delivery again does nothing, and so does its body under a
	// new delivery id (the signature does not cover the id).
	status, body = g.Host.Deliver(t, hook, "push", delivery, push, "")
	if status != http.StatusOK || !strings.Contains(string(body), `"result":"duplicate"`) {
		t.Fatalf("replayed delivery: %d %s", status, body)
	}
	status, body = g.Host.Deliver(t, hook, "push", testlab.DeliveryID(), push, "")
	if status != http.StatusOK || !strings.Contains(string(body), `"result":"duplicate"`) {
		t.Fatalf("replayed body under a new delivery id: %d %s", status, body)
	}
	// A push of commit 1, validly signed, after commit 2 is deployed: it
	// is older, and the branch is at commit 2, so it is skipped, saying
	// why.
	old := g.Host.PushEvent(g.Inst, g.Repo, "main", sha2, sha1)
	status, body = g.Host.Deliver(t, hook, "push", testlab.DeliveryID(), old, "")
	var skipped struct {
		Result        string   `json:"result"`
		DeploymentIDs []string `json:"deployment_ids"`
		Skipped       []struct {
			ApplicationID string `json:"application_id"`
			Reason        string `json:"reason"`
		} `json:"skipped"`
	}
	if err := json.Unmarshal(body, &skipped); err != nil || status != http.StatusOK || skipped.Result != "skipped" ||
		len(skipped.DeploymentIDs) != 0 || len(skipped.Skipped) != 1 || skipped.Skipped[0].ApplicationID != app.ID ||
		!strings.Contains(skipped.Skipped[0].Reason, "commit "+sha1[:12]+" is older than commit "+sha2[:12]) {
		t.Fatalf("push of the older commit: %d %s", status, body)
	}
	// A forged signature is refused and deploys nothing.
	forged := g.Host.PushEvent(g.Inst, g.Repo, "main", sha2, sha1)
	status, body = g.Host.Deliver(t, hook, "push", testlab.DeliveryID(), forged, "sha256="+strings.Repeat("ab", 32))
	if status != http.StatusUnauthorized || !strings.Contains(string(body), "invalid-signature") {
		t.Fatalf("forged delivery: %d %s", status, body)
	}
	if got := deployments(); got != count {
		t.Fatalf("%d deployments after the replays, the older push and the forgery, want %d", got, count)
	}

	// Commit 2 again, by ref through the API: a build from the cache.
	id2b := g.deploy(t, app.ID, map[string]string{"ref": sha2})
	d2b, _ := g.waitDeployment(t, id2b, "succeeded", pollInterval, deployTimeout)
	if d2b.Result.Build == nil || d2b.Result.Build.CachedSteps != d2b.Result.Build.Steps-1 || d2b.ImageID != d2.ImageID {
		t.Fatalf("rebuild of commit 2: %+v (image %s, want %s)", d2b.Result.Build, d2b.ImageID, d2.ImageID)
	}

	// A ref the repository does not have is refused and queues nothing.
	p := expectProblem(t, g.Post(t, "/api/v1/applications/"+app.ID+"/deployments", g.Token, map[string]string{"ref": "no-such-branch"}),
		http.StatusUnprocessableEntity, "validation-failed")
	if p.Errors[0].Field != "ref" || !strings.Contains(p.Errors[0].Message, "no branch, tag or commit") {
		t.Fatalf("problem %+v", p)
	}

	// Rollback to commit 1: its image, no fetch, no build.
	fetches := g.Host.GitFetches(g.Repo)
	var rb deployAccepted
	expectJSON(t, g.Post(t, "/api/v1/deployments/"+d1.ID+"/rollback", g.Token, nil), http.StatusAccepted, &rb)
	d3, _ := g.waitDeployment(t, rb.DeploymentID, "succeeded", pollInterval, deployTimeout)
	if d3.ImageID != d1.ImageID || d3.Result.Build != nil {
		t.Fatalf("rollback: image %s, build %+v; want image %s and no build", d3.ImageID, d3.Result.Build, d1.ImageID)
	}
	if got := g.Host.GitFetches(g.Repo); got != fetches {
		t.Fatalf("the rollback fetched the repository (%d fetches, then %d)", fetches, got)
	}
	g.waitSite(t, hc, url, "one "+buildArg, time.Minute)

	// The token and the build argument: only in the job's secrets.
	tokens := g.Host.IssuedTokens()
	if len(tokens) == 0 {
		t.Fatal("no installation token was minted")
	}
	logs := g.Logs() + g.Agent.Logs()
	for _, secret := range append(tokens, buildArg) {
		if strings.Contains(logs, secret) {
			t.Errorf("a secret is in the logs")
		}
		for _, d := range []AppDeployment{d1, d2, d2b, d3} {
			if d.Job != nil && strings.Contains(string(mustJSON(t, d.Job)), secret) {
				t.Errorf("deployment %s's job shows a secret", d.ID)
			}
			if strings.Contains(eventsText(d.Events), secret) {
				t.Errorf("deployment %s's events show a secret", d.ID)
			}
		}
		noSecretOnDisk(t, secret, g.TmpDir, g.StateDir, filepath.Dir(g.Agent.Config))
	}
	entries, _ := os.ReadDir(g.TmpDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "capstan-build-") {
			t.Errorf("the agent left its build directory %s", e.Name())
		}
	}
	// Figures: push webhook → commit 2 serving, and its parts.
	if d2.StartedAt == nil || d2.FinishedAt == nil {
		t.Fatalf("the auto deployment has no start or end: %+v, %+v", d2.StartedAt, d2.FinishedAt)
	}
	run := d2.FinishedAt.Sub(*d2.StartedAt)
	b2 := d2.Result.Build
	t.Logf("BENCH push webhook → serving commit 2: %s; the job ran %s: fetch %d ms, build %d ms (%d of %d steps cached), release %d ms",
		serving.Round(time.Millisecond), run.Round(time.Millisecond), b2.FetchMillis, b2.BuildMillis, b2.CachedSteps, b2.Steps,
		run.Milliseconds()-b2.FetchMillis-b2.BuildMillis)
	t.Logf("BENCH first build of commit 1: fetch %d ms, build %d ms (%d of %d cached); rebuild of commit 2: fetch %d ms, build %d ms (%d of %d cached)",
		d1.Result.Build.FetchMillis, d1.Result.Build.BuildMillis, d1.Result.Build.CachedSteps, d1.Result.Build.Steps,
		d2b.Result.Build.FetchMillis, d2b.Result.Build.BuildMillis, d2b.Result.Build.CachedSteps, d2b.Result.Build.Steps)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
