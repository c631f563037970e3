package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestComposeAppFromGit deploys a compose application from a repository
// on the git host stand-in through the real agent and Docker: the agent
// fetches the commit, reads its compose.yaml and builds the web service
// from its build context in the commit (the output streamed as events),
// next to a worker pulled by image; the release keeps the built image, so
// a rollback re-creates it without building; a build context leaving the
// repository fails the deployment with the old release serving; an
// inline document with build is refused.
func TestComposeAppFromGit(t *testing.T) {
	t.Parallel()
	g := newGitStack(t)
	worker := testlab.ProgramImage(t, g.Docker, fmt.Sprintf("127.0.0.1:1/capstan-e2e/worker:%s", g.Run), "../internal/agent/deploy/testdata/web",
		"ENV VERSION=worker", "LABEL dev.capstan.e2e.run="+g.Run)
	doc := func(context string) string {
		return fmt.Sprintf("services:\n  web:\n    build:\n      context: %s\n    expose: [\"8080\"]\n    depends_on: [worker]\n  worker:\n    image: %s\n",
			context, worker.Ref)
	}
	push := func(version, compose string) string {
		t.Helper()
		dockerfile := fmt.Sprintf("FROM scratch\nLABEL dev.capstan.e2e.run=%s\nCOPY web /web\nENV VERSION=%s\nENTRYPOINT [\"/web\"]\n", g.Run, version)
		return g.Host.Push(t, g.Repo, "main", map[string][]byte{"compose.yaml": []byte(compose), "site/web": g.Prog,
			"site/Dockerfile": []byte(dockerfile)}, "Release "+version)
	}
	serves := func(d AppDeployment, want string) {
		t.Helper()
		url := fmt.Sprintf("http://127.0.0.1:%d/", d.Result.HostPort)
		testlab.Eventually(t, time.Minute, url+" answers "+want, func() bool {
			a, err := fetch(http.DefaultClient, url)
			return err == nil && a.Body == want
		})
	}
	sha1 := push("one", doc("site"))

	app := g.createApp(t, map[string]any{"name": "stack", "kind": "compose", "web_service": "web", "container_port": 8080,
		"health_path": "/health", "source": map[string]any{"type": "git", "installation_id": g.Inst, "repo_id": g.Repo.ID, "branch": "main"}})
	t.Cleanup(func() { (&composeStack{appStack: g.appStack}).removeCompose(t, app.ID) })
	d1, _ := g.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	if d1.Spec.Git == nil || d1.Spec.Git.CommitSHA != sha1 {
		t.Fatalf("first deployment's spec: %+v", d1.Spec)
	}
	if d1.Result == nil || d1.Result.Services["web"] != d1.ImageID || d1.Result.Services["worker"] != worker.ID ||
		d1.Result.Build == nil || d1.Result.Build.Commit != sha1 || !strings.Contains(d1.Result.ComposeDocument, "context: site") {
		t.Fatalf("first deployment's result: %+v", d1.Result)
	}
	if _, ok := findEvent(d1.Events, "Step 1/"); !ok {
		t.Fatalf("no build output in the events:\n%s", eventsText(d1.Events))
	}
	tag := "capstan/stack-web:" + sha1[:12]
	if insp, err := g.Docker.ImageInspect(t.Context(), tag); err != nil || insp.ID != d1.ImageID {
		t.Fatalf("the built image %s: %v, id %s; want %s", tag, err, insp.ID, d1.ImageID)
	}
	serves(d1, "one ")

	sha2 := push("two", doc("./site"))
	d2, _ := g.waitDeployment(t, g.deploy(t, app.ID, nil), "succeeded", pollInterval, deployTimeout)
	if d2.Spec.Git.CommitSHA != sha2 || d2.ImageID == d1.ImageID {
		t.Fatalf("second deployment: commit %s image %s; want %s and a new image", d2.Spec.Git.CommitSHA, d2.ImageID, sha2)
	}
	serves(d2, "two ")
	for _, d := range []AppDeployment{d1, d2} {
		if d.StartedAt != nil && d.FinishedAt != nil && d.Result.Build != nil {
			t.Logf("deployment of commit %s: %s on the agent (fetch %d ms, build %d ms, %d of %d steps cached)", d.Spec.Git.CommitSHA[:12],
				d.FinishedAt.Sub(*d.StartedAt), d.Result.Build.FetchMillis, d.Result.Build.BuildMillis, d.Result.Build.CachedSteps, d.Result.Build.Steps)
		}
	}

	// The rollback re-creates the first release: its document and the
	// image it built, without fetching or building.
	r := g.Post(t, "/api/v1/deployments/"+d1.ID+"/rollback", g.Token, nil)
	var rb deployAccepted
	expectJSON(t, r, http.StatusAccepted, &rb)
	d3, _ := g.waitDeployment(t, rb.DeploymentID, "succeeded", pollInterval, deployTimeout)
	if d3.Result.Services["web"] != d1.ImageID || d3.Result.Build != nil {
		t.Fatalf("rollback result: %+v", d3.Result)
	}
	if _, ok := findEvent(d3.Events, "Step 1/"); ok {
		t.Fatalf("the rollback built:\n%s", eventsText(d3.Events))
	}
	serves(d3, "one ")

	// A build context outside the repository fails the deployment; the
	// rolled back release keeps serving.
	push("three", doc("../outside"))
	d4, _ := g.waitDeployment(t, g.deploy(t, app.ID, nil), "failed", pollInterval, deployTimeout)
	if e := deref(d4.Error); !strings.Contains(e, "services.web.build.context must be a directory inside the repository") {
		t.Errorf("deployment with a build context outside the repository: error %q", e)
	}
	serves(d3, "one ")

	// An inline document cannot build: there is no repository.
	r = g.Post(t, "/api/v1/applications", g.Token, map[string]any{"name": "inline", "server_id": g.serverID, "kind": "compose",
		"web_service": "web", "container_port": 8080, "source": map[string]any{"type": "inline"}, "compose": doc("site")})
	expectStatus(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.Body), "only applications from git build services") {
		t.Errorf("inline document with build: %s", r.Body)
	}
}
