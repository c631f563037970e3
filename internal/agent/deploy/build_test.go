package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// webDockerfile builds testdata/web's binary into an image whose VERSION
// is version and whose GREETING comes from the build argument GREETING.
func webDockerfile(version string) []byte {
	return []byte(fmt.Sprintf("FROM scratch\nCOPY web /web\nARG GREETING\nENV VERSION=%s GREETING=$GREETING\nENTRYPOINT [\"/web\"]\n", version))
}

// TestBuildFromGit deploys commits of a real repository served over smart
// HTTP by the git host stand-in: the agent fetches exactly the commit with
// the installation token (never written to disk), builds the image through
// the engine's API with a build argument from the job's secrets, releases
// it, and a second build of the same commit comes from the builder's cache.
// A wrong token, an unknown commit and a missing Dockerfile fail clearly.
func TestBuildFromGit(t *testing.T) {
	cli := testlab.Docker(t)
	host := testlab.StartGitHost(t)
	t.Setenv("GIT_SSL_CAINFO", host.CAFile)
	repo := host.AddGitRepo(t, "acme", "web", true)
	prog := testlab.GoProgram(t, "./testdata/web")
	sha1 := host.Push(t, repo, "main", map[string][]byte{"web": prog, "Dockerfile": webDockerfile("one")}, "first")
	sha2 := host.Push(t, repo, "main", map[string][]byte{"docs/README": []byte("docs"), "app/Dockerfile": webDockerfile("two"), "app/web": prog}, "second")
	token := host.TokenFor(t, repo)

	buildDir := t.TempDir()
	d := New(Options{Drain: -1, BuildDir: buildDir})
	t.Cleanup(func() { d.Close() })
	app := testlab.UniqueName("app_build")
	t.Cleanup(func() { removeAppContainers(t, cli, app) })
	t.Cleanup(func() {
		list, _ := cli.ImageList(context.Background(), client.ImageListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelApp+"="+app)})
		for _, im := range list.Items {
			cli.ImageRemove(context.Background(), im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true}) //nolint:errcheck // cleanup
		}
	})
	payload := func(dep, sha, dockerfile, context string) agentproto.DeployPayload {
		return agentproto.DeployPayload{AppID: app, AppName: "web", DeploymentID: dep, Image: "capstan/" + app + ":" + sha[:12],
			ContainerPort: 8080, HealthPath: "/health", HealthTimeoutSeconds: 30,
			Build: &agentproto.BuildSpec{CloneURL: host.URL + "/acme/web.git", Repository: "acme/web", Commit: sha,
				Dockerfile: dockerfile, Context: context, BuildArgKeys: []string{"GREETING"}}}
	}
	secrets := map[string]string{agentproto.SecretGitToken: token, agentproto.SecretBuildArgPrefix + "GREETING": "hello"}

	res1, rec := deployOK(t, d, payload("dep_1", sha1, "", ""), secrets)
	mustGet(t, fmt.Sprintf("127.0.0.1:%d", res1.HostPort), "one hello")
	if res1.Build == nil || res1.Build.Commit != sha1 || res1.Build.ImageID != res1.ImageID || res1.Build.Steps != 7 {
		// Five of the Dockerfile, one per label.
		t.Fatalf("build result %+v, want commit %s, image %s, 7 steps", res1.Build, sha1, res1.ImageID)
	}
	if !rec.has("info: Step 1/7 : FROM scratch") {
		t.Errorf("the build output is not in the events:\n%s", strings.Join(rec.events, "\n"))
	}
	if got := host.GitFetches(repo); got != 1 {
		t.Errorf("%d fetches served, want 1", got)
	}
	insp, err := cli.ImageInspect(context.Background(), "capstan/"+app+":"+sha1[:12])
	if err != nil || insp.Config.Labels[agentproto.LabelCommit] != sha1 {
		t.Fatalf("the image's labels %v, %v; want the commit", insp.Config.Labels, err)
	}
	t.Logf("first build: fetch %d ms, build %d ms", res1.Build.FetchMillis, res1.Build.BuildMillis)

	// The same commit again: every step after FROM comes from the cache.
	res1b, _ := deployOK(t, d, payload("dep_1b", sha1, "", ""), secrets)
	if res1b.Build.CachedSteps != 6 || res1b.ImageID != res1.ImageID {
		t.Errorf("second build of the same commit: %+v (image %s), want 6 cached steps and image %s", res1b.Build, res1b.ImageID, res1.ImageID)
	}
	t.Logf("cached build: fetch %d ms, build %d ms", res1b.Build.FetchMillis, res1b.Build.BuildMillis)

	// A build context below the root, with its Dockerfile.
	res2, _ := deployOK(t, d, payload("dep_2", sha2, "Dockerfile", "app"), secrets)
	mustGet(t, fmt.Sprintf("127.0.0.1:%d", res2.HostPort), "two hello")

	// Nothing of the builds is left on disk, and so neither is the token.
	entries, err := os.ReadDir(buildDir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("build directory holds %v, %v; want nothing", entries, err)
	}

	// Failures leave the live container serving.
	bad := map[string]string{agentproto.SecretGitToken: "ghs_not_a_token_000000000", agentproto.SecretBuildArgPrefix + "GREETING": "x"}
	refused := host.GitRefused(repo)
	_, err = deployFails(t, d, payload("dep_bad_token", sha1, "", ""), bad, "fetching commit", "the git host refused the credentials")
	if strings.Contains(err.Error(), "ghs_not_a_token") {
		t.Errorf("the error shows the token: %v", err)
	}
	if host.GitRefused(repo) == refused {
		t.Error("the git server refused nothing with a wrong token")
	}
	deployFails(t, d, payload("dep_unknown", strings.Repeat("0", 40), "", ""), secrets, "fetching commit 000000000000")
	deployFails(t, d, payload("dep_nodockerfile", sha2, "missing.Dockerfile", ""), secrets, "has no Dockerfile at missing.Dockerfile")
	deployFails(t, d, payload("dep_escape", sha2, "", "../x"), secrets, "relative paths inside the repository")
	mustGet(t, fmt.Sprintf("127.0.0.1:%d", res2.HostPort), "two hello")
	entries, _ = os.ReadDir(buildDir)
	if len(entries) != 0 {
		t.Fatalf("failed builds left %v behind", entries)
	}
}

// secretDockerfile builds testdata/web's binary into an image with a
// step that reads the build secret NPM_TOKEN and writes its SHA-256 to
// /secret.sha256; then the image is webDockerfile's. The file run comes
// first: the steps' cache does not depend on the secret's value.
func secretDockerfile(version, mount string) []byte {
	return []byte(fmt.Sprintf("FROM scratch\nCOPY run /run-id\nCOPY web /web\nRUN --mount=type=secret,%s [\"/web\", \"digest\", \"/run/secrets/NPM_TOKEN\", \"/secret.sha256\"]\n"+
		"ARG GREETING\nENV VERSION=%s GREETING=$GREETING\nENTRYPOINT [\"/web\"]\n", mount, version))
}

// TestBuildWithSecrets builds a commit whose Dockerfile mounts a build
// secret: the agent builds with BuildKit, serving the secret through a
// session; the step reads the value (the digest it wrote matches), and
// the value is in neither the image's history nor any of its layers nor
// the job's events. The same commit again comes from the cache. A
// Dockerfile that requires a secret the application lacks fails saying
// which.
func TestBuildWithSecrets(t *testing.T) {
	cli := testlab.Docker(t)
	host := testlab.StartGitHost(t)
	t.Setenv("GIT_SSL_CAINFO", host.CAFile)
	repo := host.AddGitRepo(t, "acme", "web", true)
	prog := testlab.GoProgram(t, "./testdata/web")
	run := testlab.UniqueName("run")
	// The run's id in the image makes the first build a cold one.
	sha1 := host.Push(t, repo, "main", map[string][]byte{"web": prog, "run": []byte(run),
		"Dockerfile": secretDockerfile("one", "id=NPM_TOKEN")}, "first")
	sha2 := host.Push(t, repo, "main", map[string][]byte{"web": prog, "run": []byte(run),
		"Dockerfile": secretDockerfile("two", "id=MISSING,required=true,target=/run/secrets/NPM_TOKEN")}, "second")
	token := host.TokenFor(t, repo)

	d := New(Options{Drain: -1, BuildDir: t.TempDir()})
	t.Cleanup(func() { d.Close() })
	app := testlab.UniqueName("app_secret")
	t.Cleanup(func() { removeAppContainers(t, cli, app) })
	t.Cleanup(func() {
		list, _ := cli.ImageList(context.Background(), client.ImageListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelApp+"="+app)})
		for _, im := range list.Items {
			cli.ImageRemove(context.Background(), im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true}) //nolint:errcheck // cleanup
		}
	})
	payload := func(dep, sha string) agentproto.DeployPayload {
		return agentproto.DeployPayload{AppID: app, AppName: "web", DeploymentID: dep, Image: "capstan/" + app + ":" + sha[:12],
			ContainerPort: 8080, HealthPath: "/health", HealthTimeoutSeconds: 30,
			Build: &agentproto.BuildSpec{CloneURL: host.URL + "/acme/web.git", Repository: "acme/web", Commit: sha,
				BuildArgKeys: []string{"GREETING"}, BuildSecretKeys: []string{"NPM_TOKEN"}}}
	}
	const secret = "npm_s3cret-build-secret-7781"
	secrets := map[string]string{agentproto.SecretGitToken: token, agentproto.SecretBuildArgPrefix + "GREETING": "hello",
		agentproto.SecretBuildSecretPrefix + "NPM_TOKEN": secret}

	res, rec := deployOK(t, d, payload("dep_1", sha1), secrets)
	mustGet(t, fmt.Sprintf("127.0.0.1:%d", res.HostPort), "one hello")
	if res.Build == nil || res.Build.ImageID != res.ImageID || res.Build.Steps != 3 || res.Build.CachedSteps != 0 {
		t.Errorf("build result %+v, want image %s and 3 steps, none from the cache", res.Build, res.ImageID)
	}
	if !rec.has("info: building capstan/"+app) || !rec.has("info: [3/3] RUN --mount=type=secret,id=NPM_TOKEN") || !rec.has("info: digest written") {
		t.Errorf("the build's steps and output are not in the events:\n%s", strings.Join(rec.events, "\n"))
	}
	insp, err := cli.ImageInspect(context.Background(), res.ImageID)
	if err != nil || insp.Config.Labels[agentproto.LabelCommit] != sha1 || insp.Config.Labels[agentproto.LabelApp] != app {
		t.Fatalf("the image's labels %v, %v; want the application and the commit", insp.Config.Labels, err)
	}
	img := testlab.SaveImage(t, cli, res.ImageID)
	sum := sha256.Sum256([]byte(secret))
	if got, want := string(img.Files["secret.sha256"]), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("the step read a secret of SHA-256 %q, want %q", got, want)
	}
	if at := img.Holding(secret); at != nil {
		t.Errorf("the image holds the build secret in %v", at)
	}
	for _, e := range rec.events {
		if strings.Contains(e, secret) {
			t.Errorf("an event holds the build secret: %s", e)
		}
	}

	again, _ := deployOK(t, d, payload("dep_1b", sha1), secrets)
	if again.ImageID != res.ImageID || again.Build.CachedSteps != 3 {
		t.Errorf("the same commit again: %+v (image %s), want every step from the cache and image %s", again.Build, again.ImageID, res.ImageID)
	}

	rec, _ = deployFails(t, d, payload("dep_2", sha2), secrets, "building capstan/"+app, "MISSING")
	if !rec.has("error: ") {
		t.Errorf("the failed step is not in the events:\n%s", strings.Join(rec.events, "\n"))
	}
	mustGet(t, fmt.Sprintf("127.0.0.1:%d", again.HostPort), "one hello")
}
