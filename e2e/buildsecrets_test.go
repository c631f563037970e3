package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestGitDeployBuildSecrets builds an application from git whose
// Dockerfile reads a build secret, on the real stack: the agent builds
// with BuildKit, the step that mounts the secret writes its SHA-256 into
// the image (it matches: the value reached the build), and the value is
// in neither the image's history nor any of its layers, nor in any API
// reply (the administrator's revealing read included), the job's
// payload, the events, the logs of the control plane and the agent, the
// agent's disk or the control plane's store in clear. A bad key is
// refused naming it.
func TestGitDeployBuildSecrets(t *testing.T) {
	t.Parallel()
	g := newGitStack(t)
	const marker = "npm_build-secret-marker-30517"
	// The run's file comes before the step: BuildKit's cache does not
	// depend on the secret's value, and this build must be a cold one.
	dockerfile := "FROM scratch\nCOPY run /run-id\nCOPY web /web\n" +
		"RUN --mount=type=secret,id=NPM_TOKEN [\"/web\", \"digest\", \"/run/secrets/NPM_TOKEN\", \"/secret.sha256\"]\n" +
		"ENV VERSION=one\nENTRYPOINT [\"/web\"]\n"
	sha := g.Host.Push(t, g.Repo, "main", map[string][]byte{"web": g.Prog, "run": []byte(g.Run), "Dockerfile": []byte(dockerfile)}, "Release one")

	var replies []string
	resp := g.Post(t, "/api/v1/applications", g.Token, map[string]any{
		"name": "web", "server_id": g.serverID, "container_port": 8080, "health_path": "/health",
		"source":        map[string]any{"type": "git", "installation_id": g.Inst, "repo_id": g.Repo.ID, "branch": "main"},
		"build_secrets": []map[string]string{{"key": "NPM_TOKEN", "value": marker}},
	})
	expectStatus(t, resp, http.StatusCreated)
	replies = append(replies, string(resp.Body))
	var app AppInfo
	resp.JSON(t, &app)
	if !strings.Contains(string(resp.Body), `"build_secret_keys":["NPM_TOKEN"]`) || app.Latest == nil {
		t.Fatalf("created application: %s", resp.Body)
	}
	d, _ := g.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	if d.Spec.Git == nil || d.Spec.Git.CommitSHA != sha || d.ImageID == "" || d.Result.Build == nil || d.Result.Build.Steps != 3 {
		t.Fatalf("deployment: %+v, result %+v", d.Spec.Git, d.Result)
	}
	if _, ok := findEvent(d.Events, "with BuildKit and 1 build secrets"); !ok {
		t.Errorf("the events do not say the build used BuildKit:\n%s", eventsText(d.Events))
	}
	if d.Job == nil || !strings.Contains(string(d.Job.Payload), `"build_secret_keys":["NPM_TOKEN"]`) {
		t.Fatalf("the job's payload does not name the build secret: %+v", d.Job)
	}

	img := testlab.SaveImage(t, g.Docker, d.ImageID)
	sum := sha256.Sum256([]byte(marker))
	if got, want := string(img.Files["secret.sha256"]), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("the build step read a secret of SHA-256 %q, want %q", got, want)
	}
	if at := img.Holding(marker); at != nil {
		t.Errorf("the image holds the build secret: %v", at)
	}

	for _, path := range []string{"/api/v1/applications/" + app.ID, "/api/v1/applications/" + app.ID + "?reveal=true",
		"/api/v1/applications", "/api/v1/applications/" + app.ID + "/deployments", "/api/v1/deployments/" + d.ID,
		"/api/v1/jobs/" + *d.JobID} {
		r := g.Get(t, path, g.Token)
		expectStatus(t, r, http.StatusOK)
		replies = append(replies, string(r.Body))
	}
	bad := g.patch(t, "/api/v1/applications/"+app.ID, map[string]any{
		"build_secrets": []map[string]string{{"key": "../npmrc", "value": marker}}})
	p := expectProblem(t, bad, http.StatusUnprocessableEntity, "validation-failed")
	if len(p.Errors) != 1 || p.Errors[0].Field != "body.build_secrets[0].key" && p.Errors[0].Field != "build_secrets[0].key" {
		t.Errorf("problem %+v, want build_secrets[0].key named", p)
	}
	replies = append(replies, string(bad.Body))
	for i, r := range replies {
		if strings.Contains(r, marker) {
			t.Errorf("reply %d holds the build secret: %s", i, r)
		}
	}
	if strings.Contains(eventsText(d.Events), marker) {
		t.Error("the deployment's events hold the build secret")
	}
	if strings.Contains(g.Logs()+g.Agent.Logs(), marker) {
		t.Error("a log holds the build secret")
	}
	noSecretOnDisk(t, marker, g.TmpDir, g.StateDir, filepath.Dir(g.Agent.Config))
	if found := dataDirHolds(t, g.DataDir, []byte(marker)); len(found) > 0 {
		t.Errorf("the control plane's data holds the build secret in clear: %v", found)
	}
}
