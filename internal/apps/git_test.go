package apps_test

import (
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// gitRig is the rig with the git host integration connected to the
// stand-in, an installation on acme and a repository with a branch.
type gitRig struct {
	*rig
	host *testlab.GitHost
	inst int64
	repo *testlab.HostedRepo
}

const (
	shaMain = "1111111111111111111111111111111111111111"
	shaTag  = "2222222222222222222222222222222222222222"
)

func newGitRig(t *testing.T) *gitRig {
	host := testlab.StartGitHost(t)
	p, err := githost.NewGitHubClient(host.APIURL, host.URL, host.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, storetest.Open(t, store.SQLite), func(st *store.Store, now func() time.Time) *githost.Service {
		return githost.NewService(st, p, secrets.GenerateKey(), audit.NewLog(st, now), "https://capstan.test", now, nil)
	})
	gh := r.gh
	caller := audit.Caller{Actor: r.admin.Actor, SessionID: "ses_1"}
	m, err := gh.StartManifest(r.ctx, caller, "")
	if err != nil {
		t.Fatal(err)
	}
	code, state := host.PostManifest(t, m.PostURL, m.Manifest, "https://capstan.test"+githost.ManifestRedirectPath)
	if _, err := gh.CompleteManifest(r.ctx, caller, code, state); err != nil {
		t.Fatal(err)
	}
	repo := host.AddRepo("acme", "web", true, map[string]string{"main": shaMain})
	host.UpdateRepo(repo, func(hr *testlab.HostedRepo) {
		hr.Commits[shaMain] = testlab.HostedCommit{SHA: shaMain, Message: "Serve the home page", AuthorName: "Ada", AuthorEmail: "ada@example.com"}
		hr.Commits[shaTag] = testlab.HostedCommit{SHA: shaTag, Message: "v1.0.0", AuthorName: "Ada", AuthorEmail: "ada@example.com"}
		hr.Branches["v1.0.0"] = shaTag // resolves like a tag
	})
	inst := host.Install(t, "acme")
	if _, err := gh.AddInstallation(r.ctx, caller, inst, githost.SetupInstall); err != nil {
		t.Fatal(err)
	}
	return &gitRig{rig: r, host: host, inst: inst, repo: repo}
}

func (r *gitRig) gitApp(name string, deploy bool) apps.ApplicationDetail {
	r.t.Helper()
	d, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: name, ServerID: r.serverID,
		Source:        apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "main"},
		ContainerPort: 8080, Env: []apps.EnvVar{{Key: "MODE", Value: "production"}},
		BuildArgs: []apps.EnvVar{{Key: "NPM_TOKEN", Value: "npm-s3cret-build-arg"}}, Deploy: deploy})
	if err != nil {
		r.t.Fatalf("create git application: %v", err)
	}
	return d
}

// TestGitApplications creates applications from git (the repository must
// be readable by the installation and the branch must exist), deploys the
// branch's exact commit with a token and the build arguments in the job's
// secrets only, deploys tags and commits by ref, refuses refs the
// repository does not have, and rolls back without building.
func TestGitApplications(t *testing.T) {
	r := newGitRig(t)
	other := r.host.AddRepo("elsewhere", "secret", true, nil)
	base := apps.NewApp{Name: "web", ServerID: r.serverID, ContainerPort: 8080}

	bad := base
	bad.Source = apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: other.ID, Branch: "main"}
	_, err := r.apps.Create(r.ctx, r.admin, bad)
	wantInvalid(t, err, "source.repo_id")
	bad.Source = apps.Source{Type: apps.SourceGit, InstallationID: 999, RepoID: r.repo.ID, Branch: "main"}
	_, err = r.apps.Create(r.ctx, r.admin, bad)
	wantInvalid(t, err, "source.installation_id")
	bad.Source = apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "nope"}
	_, err = r.apps.Create(r.ctx, r.admin, bad)
	wantInvalid(t, err, "source.branch")
	bad.Source = apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "main"}
	bad.Dockerfile, bad.BuildContext = ptr("../Dockerfile"), ptr("/abs")
	_, err = r.apps.Create(r.ctx, r.admin, bad)
	wantInvalid(t, err, "dockerfile", "build_context")
	img := base
	img.Source = apps.Source{Type: apps.SourceImage, Image: "nginx"}
	img.BuildArgs = []apps.EnvVar{{Key: "X", Value: "y"}}
	_, err = r.apps.Create(r.ctx, r.admin, img)
	wantInvalid(t, err, "dockerfile")
	if list, _ := r.apps.List(r.ctx, "", jobs.AdminReader); len(list) != 0 {
		t.Fatalf("refused creations stored %d applications", len(list))
	}

	a := r.gitApp("web", true)
	if a.Dockerfile != "Dockerfile" || a.BuildContext != "." || len(a.BuildArgKeys) != 1 || a.BuildArgKeys[0] != "NPM_TOKEN" {
		t.Fatalf("application %+v, want the default build settings and the build argument's key", a.Application)
	}
	j := r.claim(agentproto.JobAppDeploy)
	p := payloadOf(t, j)
	if p.Build == nil || p.Build.Commit != shaMain || p.Build.Repository != "acme/web" || p.Build.CloneURL != r.host.URL+"/acme/web.git" ||
		p.Build.Dockerfile != "Dockerfile" || p.Build.Context != "" || len(p.Build.BuildArgKeys) != 1 {
		t.Fatalf("build %+v", p.Build)
	}
	if p.Image != "capstan/web:"+shaMain[:12] || p.ImageID != "" {
		t.Fatalf("image %q (id %q), want capstan/web:<short sha>", p.Image, p.ImageID)
	}
	sec := r.secrets(j)
	token := sec[agentproto.SecretGitToken]
	if !r.host.TokenAllows(token, r.repo.ID) || r.host.TokenAllows(token, other.ID) {
		t.Fatal("the job's token does not read exactly the repository")
	}
	if sec[agentproto.SecretBuildArgPrefix+"NPM_TOKEN"] != "npm-s3cret-build-arg" || sec["MODE"] != "production" {
		t.Fatalf("job secrets %v", keys(sec))
	}
	if strings.Contains(string(j.Payload), token) || strings.Contains(string(j.Payload), "npm-s3cret") {
		t.Fatal("the job's payload holds a secret")
	}
	dep := r.deployment(a.Latest.ID)
	g := dep.Spec.Git
	if g == nil || g.CommitSHA != shaMain || g.CommitMessage != "Serve the home page" || g.CommitAuthor != "Ada <ada@example.com>" ||
		g.Ref != "main" || g.Repository != "acme/web" {
		t.Fatalf("deployment spec %+v", g)
	}
	r.succeed(j, "sha256:built1")

	// A tag by ref; a ref the repository does not have changes nothing.
	d2 := r.deploy(a.ID, "v1.0.0")
	if d2.Spec.Git.CommitSHA != shaTag || d2.Ref != "v1.0.0" || d2.Spec.Image != "capstan/web:"+shaTag[:12] {
		t.Fatalf("deployment of the tag: %+v", d2.Spec)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:built2")
	before, _ := r.apps.ListDeployments(r.ctx, a.ID, 100, jobs.AdminReader)
	_, err = r.apps.Deploy(r.ctx, r.admin, a.ID, "no-such-branch")
	wantInvalid(t, err, "ref")
	_, err = r.apps.Deploy(r.ctx, r.admin, a.ID, "bad..ref")
	wantInvalid(t, err, "ref")
	after, _ := r.apps.ListDeployments(r.ctx, a.ID, 100, jobs.AdminReader)
	if len(after) != len(before) {
		t.Fatalf("refused deploys stored deployments: %d, then %d", len(before), len(after))
	}

	// Rollback to the first: its image, no build, no token.
	rb, err := r.apps.Rollback(r.ctx, r.admin, a.Latest.ID)
	if err != nil {
		t.Fatal(err)
	}
	j = r.claim(agentproto.JobAppDeploy)
	p = payloadOf(t, j)
	if p.Build != nil || p.ImageID != "sha256:built1" || rb.Spec.Git.CommitSHA != shaMain {
		t.Fatalf("rollback payload build %+v, image id %q", p.Build, p.ImageID)
	}
	if _, ok := r.secrets(j)[agentproto.SecretGitToken]; ok {
		t.Fatal("a rollback carries a git token")
	}
	r.succeed(j, "sha256:built1")

	// Disconnected: the application keeps running; new deploys are refused.
	if _, err := r.gh.Disconnect(r.ctx, r.admin); err != nil {
		t.Fatal(err)
	}
	_, err = r.apps.Deploy(r.ctx, r.admin, a.ID, "")
	wantConflict(t, err, "repository-unavailable")
	if got := r.app(a.ID); got.Status != apps.AppRunning {
		t.Fatalf("status after disconnecting %s, want running", got.Status)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestAutoDeployCoalesces: a push queues a deploy of the pushed commit for
// the applications that follow its branch with auto_deploy, and only
// them; pushes that arrive while a deployment runs coalesce into the
// newest.
func TestAutoDeployCoalesces(t *testing.T) {
	r := newGitRig(t)
	shaB, shaC := strings.Repeat("b", 40), strings.Repeat("c", 40)
	r.host.UpdateRepo(r.repo, func(hr *testlab.HostedRepo) {
		hr.Commits[shaB] = testlab.HostedCommit{SHA: shaB, Message: "B", AuthorName: "Ada", Parents: []string{shaMain}}
		hr.Commits[shaC] = testlab.HostedCommit{SHA: shaC, Message: "C", AuthorName: "Ada", Parents: []string{shaB}}
		hr.Branches["next"] = shaB
	})
	mk := func(name, branch string, auto bool) apps.ApplicationDetail {
		d, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: name, ServerID: r.serverID, ContainerPort: 8080,
			Source:     apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: branch},
			AutoDeploy: auto, Deploy: name == "web"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	web := mk("web", "main", true)
	mk("manual", "main", false)
	mk("preview", "next", true)
	running := r.claim(agentproto.JobAppDeploy) // web's first deployment runs

	push := func(sha string) []string {
		out, err := r.apps.AutoDeploy(r.ctx, githost.Push{InstallationID: r.inst, RepoID: r.repo.ID, Repository: "acme/web", Branch: "main", CommitSHA: sha})
		if err != nil || len(out.Skipped) != 0 {
			t.Fatalf("push of %.6s: %+v, %v", sha, out, err)
		}
		return out.DeploymentIDs
	}
	idsB, idsC := push(shaB), push(shaC)
	if len(idsB) != 1 || len(idsC) != 1 {
		t.Fatalf("pushes queued %v and %v, want one deployment each (of web only)", idsB, idsC)
	}
	if d := r.deployment(idsC[0]); d.ApplicationID != web.ID || d.Spec.Git.CommitSHA != shaC || d.Ref != shaC || d.CreatedBy != "" {
		t.Fatalf("auto deployment %+v", d.Deployment)
	}
	r.succeed(running, "sha256:first")
	j := r.claim(agentproto.JobAppDeploy)
	if got := payloadOf(t, j).Build.Commit; got != shaC {
		t.Fatalf("the deployment after the burst builds %s, want the newest push %s", got, shaC)
	}
	wantStatus(t, r.deployment(idsB[0]), apps.Superseded)
	r.succeed(j, "sha256:c")
	r.noJob()
	// Other repositories, installations and branches deploy nothing.
	if out, _ := r.apps.AutoDeploy(r.ctx, githost.Push{InstallationID: r.inst, RepoID: r.repo.ID + 1000, Branch: "main", CommitSHA: shaB}); len(out.DeploymentIDs) != 0 {
		t.Fatalf("a push to another repository deployed %v", out.DeploymentIDs)
	}
}

// TestAutoDeployOlderPush: a push whose commit is older than the one the
// application deploys already (an ancestor of it), or the same, or
// diverged from it, is skipped with the reason, unless the branch's head
// is that commit now (a reset or force-push). Rollbacks are looked past.
// A deploy by ref of an older commit through the API still works. Pushes
// of two new commits handled at once never leave the older one queued
// last.
func TestAutoDeployOlderPush(t *testing.T) {
	r := newGitRig(t)
	sha := func(c byte) string { return strings.Repeat(string(c), 40) }
	// main: 1111 ← b ← c ← d…; x forks from 1111.
	chain := []string{shaMain}
	r.host.UpdateRepo(r.repo, func(hr *testlab.HostedRepo) {
		for _, c := range []byte("bcdefghijklmn") {
			hr.Commits[sha(c)] = testlab.HostedCommit{SHA: sha(c), Message: string(c), AuthorName: "Ada", Parents: []string{chain[len(chain)-1]}}
			chain = append(chain, sha(c))
		}
		hr.Commits[sha('x')] = testlab.HostedCommit{SHA: sha('x'), Message: "x", AuthorName: "Ada", Parents: []string{shaMain}}
	})
	head := func(s string) { r.host.UpdateRepo(r.repo, func(hr *testlab.HostedRepo) { hr.Branches["main"] = s }) }
	a, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "web", ServerID: r.serverID, ContainerPort: 8080,
		Source: apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "main"}, AutoDeploy: true, Deploy: true})
	if err != nil {
		t.Fatal(err)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")
	push := func(s string) githost.PushOutcome {
		t.Helper()
		out, err := r.apps.AutoDeploy(r.ctx, githost.Push{InstallationID: r.inst, RepoID: r.repo.ID, Repository: "acme/web", Branch: "main", CommitSHA: s})
		if err != nil {
			t.Fatalf("push of %.6s: %v", s, err)
		}
		return out
	}
	deployed := func(s string) string {
		t.Helper()
		out := push(s)
		if len(out.DeploymentIDs) != 1 || len(out.Skipped) != 0 {
			t.Fatalf("push of %.6s: %+v, want it deployed", s, out)
		}
		return out.DeploymentIDs[0]
	}
	skipped := func(s, why string) {
		t.Helper()
		before, _ := r.apps.ListDeployments(r.ctx, a.ID, 100, jobs.AdminReader)
		out := push(s)
		if len(out.DeploymentIDs) != 0 || len(out.Skipped) != 1 || out.Skipped[0].ApplicationID != a.ID || !strings.Contains(out.Skipped[0].Reason, why) {
			t.Fatalf("push of %.6s: %+v, want it skipped because it %s", s, out, why)
		}
		if after, _ := r.apps.ListDeployments(r.ctx, a.ID, 100, jobs.AdminReader); len(after) != len(before) {
			t.Fatalf("a skipped push of %.6s queued a deployment", s)
		}
	}

	// v2 (b) is pushed and deployed; v1 (1111) pushed again is older.
	head(sha('b'))
	idB := deployed(sha('b'))
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:b")
	skipped(shaMain, "is older than commit "+sha('b')[:12])
	skipped(sha('b'), "is the commit of deployment "+idB)
	// A rollback to v1 does not make v2 new again.
	if _, err := r.apps.Rollback(r.ctx, r.admin, a.Latest.ID); err != nil {
		t.Fatal(err)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")
	skipped(sha('b'), "is the commit of deployment "+idB)
	// Diverged: skipped while the branch is elsewhere, deployed once the
	// branch was force-pushed to it; then the branch is reset to b.
	skipped(sha('x'), "is not a descendant of commit "+sha('b')[:12])
	head(sha('x'))
	deployed(sha('x'))
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:x")
	head(sha('b'))
	deployed(sha('b'))
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:b")
	// Asked for by ref, an older commit deploys.
	if d := r.deploy(a.ID, shaMain); d.Spec.Git.CommitSHA != shaMain {
		t.Fatalf("deploy of an older commit by ref: %+v", d.Spec.Git)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")

	// Two new commits pushed at once, round after round: the newer is
	// always the newest deployment, the older never queued after it.
	for i := 2; i+1 < len(chain); i += 2 {
		older, newer := chain[i], chain[i+1]
		head(newer)
		testlab.InParallel(4, func(k int) {
			s := []string{older, newer}[k%2]
			if _, err := r.apps.AutoDeploy(r.ctx, githost.Push{InstallationID: r.inst, RepoID: r.repo.ID, Repository: "acme/web",
				Branch: "main", CommitSHA: s}); err != nil {
				t.Errorf("push of %.6s: %v", s, err)
			}
		})
		list, _ := r.apps.ListDeployments(r.ctx, a.ID, 100, jobs.AdminReader)
		if got := list[0].Spec.Git.CommitSHA; got != newer {
			t.Fatalf("after pushes of %.6s and %.6s at once, the newest deployment is of %.6s", older, newer, got)
		}
		n := 0
		for _, d := range list {
			if d.Spec.Git.CommitSHA == newer && d.RollbackOf == nil {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d deployments of %.6s, want 1", n, newer)
		}
	}
}

// TestGitApplicationUpdate: the build settings change for the next
// deployment, are checked like on create, and go when the source becomes
// an image.
func TestGitApplicationUpdate(t *testing.T) {
	r := newGitRig(t)
	a := r.gitApp("web", false)
	d, err := r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{Dockerfile: ptr("deploy/Dockerfile"), BuildContext: ptr("services/web"),
		BuildArgs: &[]apps.EnvVar{{Key: "A", Value: "1"}, {Key: "B", Value: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Dockerfile != "deploy/Dockerfile" || d.BuildContext != "services/web" || strings.Join(d.BuildArgKeys, ",") != "A,B" {
		t.Fatalf("after the patch: %+v", d.Application)
	}
	dep := r.deploy(a.ID, "")
	j := r.claim(agentproto.JobAppDeploy)
	p := payloadOf(t, j)
	if p.Build.Dockerfile != "deploy/Dockerfile" || p.Build.Context != "services/web" || dep.Spec.Git.BuildContext != "services/web" {
		t.Fatalf("build %+v", p.Build)
	}
	if s := r.secrets(j); s[agentproto.SecretBuildArgPrefix+"A"] != "1" || s[agentproto.SecretBuildArgPrefix+"NPM_TOKEN"] != "" {
		t.Fatalf("build arguments in the secrets: %v", keys(s))
	}
	r.succeed(j, "sha256:x")

	_, err = r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{BuildContext: ptr("../up"), Dockerfile: ptr("a//b")})
	wantInvalid(t, err, "build_context", "dockerfile")
	_, err = r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{Source: &apps.Source{Type: apps.SourceGit, InstallationID: r.inst,
		RepoID: r.repo.ID, Branch: "gone"}})
	wantInvalid(t, err, "source.branch")
	if got := r.app(a.ID); got.Source.Branch != "main" || got.BuildContext != "services/web" {
		t.Fatalf("refused patches changed the application: %+v", got.Application)
	}

	d, err = r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{Image: ptr("nginx:1.27")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Source.Type != apps.SourceImage || d.Dockerfile != "" || d.BuildArgKeys != nil {
		t.Fatalf("after switching to an image: %+v", d.Application)
	}
	_, err = r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{Dockerfile: ptr("Dockerfile")})
	wantInvalid(t, err, "dockerfile")
}
