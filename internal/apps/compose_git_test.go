package apps_test

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
)

// A compose application from git: each deployment builds the commit of
// its ref, the agent reading the compose file from it; the release keeps
// the document read and every service's image, so a rollback re-creates
// it without building.
func TestComposeApplicationFromGit(t *testing.T) {
	r := newGitRig(t)
	src := apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "main"}
	create := func(n apps.NewApp) (apps.ApplicationDetail, error) {
		n.Name, n.ServerID, n.Kind, n.ContainerPort = "stack", r.serverID, apps.KindCompose, 8080
		if n.WebService == "" {
			n.WebService = "web"
		}
		return r.apps.Create(r.ctx, r.admin, n)
	}
	_, err := create(apps.NewApp{Source: src, Compose: stackDoc})
	wantInvalid(t, err, "compose")
	_, err = create(apps.NewApp{Source: src, ComposeFile: "../compose.yaml"})
	wantInvalid(t, err, "compose_file")
	_, err = create(apps.NewApp{Source: apps.Source{Type: apps.SourceInline}, ComposeFile: "compose.yaml", Compose: stackDoc})
	wantInvalid(t, err, "compose_file")
	_, err = create(apps.NewApp{Source: apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "nope"}})
	wantInvalid(t, err, "source.branch")
	r.noJob()

	a, err := create(apps.NewApp{Source: src, ComposeFile: "deploy/compose.yaml", Deploy: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.ComposeFile != "deploy/compose.yaml" || a.Compose != "" || a.WebService != "web" {
		t.Fatalf("created %+v", a.Application)
	}
	j := r.claim(agentproto.JobAppDeploy)
	p := payloadOf(t, j)
	if p.Compose == nil || p.Compose.Document != "" || p.Compose.File != "deploy/compose.yaml" || p.Build == nil ||
		p.Build.Commit != shaMain || p.Image != "capstan/stack:"+shaMain[:12] {
		t.Fatalf("payload %+v compose %+v build %+v", p, p.Compose, p.Build)
	}
	if r.secrets(j)[agentproto.SecretGitToken] == "" {
		t.Fatal("no git token in the job's secrets")
	}
	const doc = "services:\n  web:\n    build: {context: site}\n"
	release := map[string]string{"web": "sha256:built1"}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:built1", Services: release, ComposeDocument: doc,
		Build: &agentproto.BuildResult{Commit: shaMain, ImageID: "sha256:built1"}}, "")
	first := a.Latest.ID
	wantStatus(t, r.deployment(first), apps.Succeeded)

	// A ref deploys another commit; the default compose file.
	empty := ""
	if _, err := r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{ComposeFile: &empty}); err != nil {
		t.Fatal(err)
	}
	second := r.deploy(a.ID, "v1.0.0")
	j = r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); p.Build == nil || p.Build.Commit != shaTag || p.Compose.File != "" || second.Spec.Compose.File != apps.DefaultComposeFile {
		t.Fatalf("payload of a ref: %+v %+v, spec %+v", p.Build, p.Compose, second.Spec.Compose)
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:built2",
		Services: map[string]string{"web": "sha256:built2"}, ComposeDocument: doc}, "")

	// The rollback runs the first release: the document it read and its
	// built image, nothing fetched or built.
	rb, err := r.apps.Rollback(r.ctx, r.admin, first)
	if err != nil {
		t.Fatal(err)
	}
	p = payloadOf(t, r.claim(agentproto.JobAppDeploy))
	if p.Build != nil || p.Compose.Document != doc || p.Compose.ImageIDs["web"] != "sha256:built1" || p.Compose.File != "" {
		t.Fatalf("rollback payload: build %+v compose %+v", p.Build, p.Compose)
	}
	if rb.Spec.Compose.Document != doc {
		t.Fatalf("rollback spec %+v", rb.Spec.Compose)
	}
}
