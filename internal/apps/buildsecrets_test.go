package apps_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// announce has the rig's agent report capabilities in a heartbeat.
func (r *rig) announce(capabilities ...string) {
	r.t.Helper()
	srv, err := r.servers.Get(r.ctx, r.serverID)
	if err != nil {
		r.t.Fatal(err)
	}
	facts := agentproto.Facts{Hostname: "web-1", AgentVersion: "1.2.3", Capabilities: capabilities}
	if _, err := r.servers.Heartbeat(r.ctx, srv, agentproto.HeartbeatRequest{AgentVersion: "1.2.3", Facts: &facts}); err != nil {
		r.t.Fatal(err)
	}
}

// TestBuildSecrets: a container application from git takes build
// secrets, which are checked like Docker's secret names, listed by key
// only (to administrators too, revealing or not) and handed to the
// agent in the deploy job's secrets, never its payload; a patch replaces
// them for the next deployment. They are refused for other kinds and
// sources, and for an agent that would build without them.
func TestBuildSecrets(t *testing.T) {
	r := newGitRig(t)
	const value = "npm_s3cret-value-for-the-build"
	git := apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "main"}
	n := apps.NewApp{Name: "web", ServerID: r.serverID, ContainerPort: 8080, Source: git, Deploy: true,
		BuildArgs: []apps.EnvVar{{Key: "VERSION", Value: "1"}}, BuildSecrets: []apps.BuildSecret{{Key: "NPM_TOKEN", Value: value}}}

	// The agent has not said it builds with secrets.
	_, err := r.apps.Create(r.ctx, r.admin, n)
	wantConflict(t, err, "agent-upgrade-required")
	r.announce(agentproto.CapabilityStorageGrants, agentproto.CapabilityBuildSecrets)

	for _, tc := range []struct {
		name    string
		secrets []apps.BuildSecret
		field   string
	}{
		{"path", []apps.BuildSecret{{Key: "../x", Value: "v"}}, "build_secrets[0].key"},
		{"dot first", []apps.BuildSecret{{Key: ".npmrc", Value: "v"}}, "build_secrets[0].key"},
		{"dash last", []apps.BuildSecret{{Key: "a", Value: "v"}, {Key: "b-", Value: "v"}}, "build_secrets[1].key"},
		{"too long", []apps.BuildSecret{{Key: strings.Repeat("k", apps.MaxBuildSecretKeyLen+1), Value: "v"}}, "build_secrets[0].key"},
		{"duplicate", []apps.BuildSecret{{Key: "A", Value: "v"}, {Key: "A", Value: "w"}}, "build_secrets[1].key"},
		{"no value", []apps.BuildSecret{{Key: "A"}}, "build_secrets[0].value"},
		{"value too big", []apps.BuildSecret{{Key: "A", Value: strings.Repeat("x", apps.MaxEnvValueBytes+1)}}, "build_secrets[0].value"},
		{"too many", make([]apps.BuildSecret, apps.MaxBuildSecrets+1), "build_secrets"},
	} {
		bad := n
		bad.BuildSecrets = tc.secrets
		_, err := r.apps.Create(r.ctx, r.admin, bad)
		wantInvalid(t, err, tc.field)
	}
	img := n
	img.Source = apps.Source{Type: apps.SourceImage, Image: "nginx"}
	img.BuildArgs = nil
	_, err = r.apps.Create(r.ctx, r.admin, img)
	wantInvalid(t, err, "build_secrets")
	svc := n
	svc.Kind, svc.BuildArgs, svc.Service = apps.KindService, nil, &apps.ServiceSettings{StartCommand: "./run"}
	_, err = r.apps.Create(r.ctx, r.admin, svc)
	wantInvalid(t, err, "build_secrets")
	if list, _ := r.apps.List(r.ctx, "", jobs.AdminReader); len(list) != 0 {
		t.Fatalf("refused creations stored %d applications", len(list))
	}

	created, err := r.apps.Create(r.ctx, r.admin, n)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(created.BuildSecretKeys, ","); got != "NPM_TOKEN" {
		t.Fatalf("build secret keys %q, want NPM_TOKEN", got)
	}
	j := r.claim(agentproto.JobAppDeploy)
	p := payloadOf(t, j)
	if p.Build == nil || !slices.Equal(p.Build.BuildSecretKeys, []string{"NPM_TOKEN"}) || !slices.Equal(p.Build.BuildArgKeys, []string{"VERSION"}) {
		t.Fatalf("build %+v, want the build secret's and argument's keys", p.Build)
	}
	if sec := r.secrets(j); sec[agentproto.SecretBuildSecretPrefix+"NPM_TOKEN"] != value || sec[agentproto.SecretBuildArgPrefix+"VERSION"] != "1" {
		t.Fatalf("job secrets %v", keys(sec))
	}
	if strings.Contains(string(j.Payload), value) {
		t.Fatal("the job's payload holds the build secret")
	}
	dep := r.deployment(created.Latest.ID)
	if g := dep.Spec.Git; g == nil || !slices.Equal(g.BuildSecretKeys, []string{"NPM_TOKEN"}) {
		t.Fatalf("deployment spec %+v", g)
	}
	r.succeed(j, "sha256:built1")

	// No read shows the value: an administrator's revealing one, a
	// member's, the deployment, the audit log.
	for _, reading := range []apps.Reading{{Reader: jobs.AdminReader, Reveal: true, By: r.admin}, {Reader: jobs.MemberReader}} {
		d, err := r.apps.Get(r.ctx, created.ID, reading)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(d)
		if strings.Contains(string(b), value) || !strings.Contains(string(b), `"build_secret_keys":["NPM_TOKEN"]`) {
			t.Fatalf("the application as %v reads it: %s", reading.Reader, b)
		}
	}
	for _, v := range []any{created, dep} {
		if b, _ := json.Marshal(v); strings.Contains(string(b), value) {
			t.Fatalf("a reply holds the build secret: %s", b)
		}
	}

	// A patch replaces the list for the next deployment; an empty list
	// removes them.
	d, err := r.apps.Update(r.ctx, r.admin, created.ID, apps.Patch{BuildSecrets: &[]apps.BuildSecret{{Key: "pip.conf", Value: "index"}, {Key: "B", Value: "2"}}})
	if err != nil || strings.Join(d.BuildSecretKeys, ",") != "pip.conf,B" {
		t.Fatalf("after the patch: %v %v", d.BuildSecretKeys, err)
	}
	_, err = r.apps.Update(r.ctx, r.admin, created.ID, apps.Patch{BuildSecrets: &[]apps.BuildSecret{{Key: "x/y", Value: "v"}}})
	wantInvalid(t, err, "build_secrets[0].key")
	r.deploy(created.ID, "")
	j = r.claim(agentproto.JobAppDeploy)
	if s := r.secrets(j); s[agentproto.SecretBuildSecretPrefix+"pip.conf"] != "index" || s[agentproto.SecretBuildSecretPrefix+"NPM_TOKEN"] != "" {
		t.Fatalf("build secrets in the job's secrets: %v", keys(s))
	}
	r.succeed(j, "sha256:built2")
	if d, err = r.apps.Update(r.ctx, r.admin, created.ID, apps.Patch{BuildSecrets: &[]apps.BuildSecret{}}); err != nil || d.BuildSecretKeys != nil {
		t.Fatalf("after removing them: %v %v", d.BuildSecretKeys, err)
	}
	r.deploy(created.ID, "")
	j = r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); p.Build.BuildSecretKeys != nil {
		t.Fatalf("build secret keys %v after removing them", p.Build.BuildSecretKeys)
	}
	r.succeed(j, "sha256:built3")

	entries, _, err := audit.NewLog(r.st, r.clock.Now).List(r.ctx, 200, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if b, _ := json.Marshal(e); strings.Contains(string(b), value) || strings.Contains(string(b), "index") {
			t.Fatalf("an audit entry holds a build secret: %s", b)
		}
	}
	if !slices.ContainsFunc(entries, func(e audit.Entry) bool {
		return e.Action == apps.ActionUpdated && fmt.Sprint(e.Details["build_secret_keys"]) == "[pip.conf B]"
	}) {
		t.Error("no audit entry names the build secrets' keys of the patch")
	}

	// An agent that no longer builds with secrets: the deployment fails,
	// saying why, and no job is queued.
	if _, err := r.apps.Update(r.ctx, r.admin, created.ID, apps.Patch{BuildSecrets: &[]apps.BuildSecret{{Key: "A", Value: "1"}}}); err != nil {
		t.Fatal(err)
	}
	r.announce(agentproto.CapabilityStorageGrants)
	_, err = r.apps.Update(r.ctx, r.admin, created.ID, apps.Patch{BuildSecrets: &[]apps.BuildSecret{{Key: "B", Value: "1"}}})
	wantConflict(t, err, "agent-upgrade-required")
	failed := r.deploy(created.ID, "")
	if failed.Status != apps.Failed || failed.Error == nil || !strings.Contains(*failed.Error, "does not build with build secrets") {
		t.Fatalf("deployment for an agent without build secrets: %s %v", failed.Status, failed.Error)
	}
	r.noJob()
}
