package apps_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

func TestDeploymentQueueOneAtATime(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", []apps.EnvVar{{Key: "DATABASE_URL", Value: "postgres://db/one"}, {Key: "MODE", Value: "prod"}}, true)
	if app.Latest == nil || app.Latest.JobID == nil {
		t.Fatalf("create did not dispatch the first deployment: %+v", app.Latest)
	}
	if got, want := app.Status, apps.AppDeploying; got != want {
		t.Fatalf("app status %s, want %s", got, want)
	}
	first := app.Latest
	wantStatus(t, r.deployment(first.ID), apps.Queued) // the agent has not taken it

	j1 := r.claim(agentproto.JobAppDeploy)
	if j1.ID != *first.JobID {
		t.Fatalf("claimed %s, want the first deployment's job %s", j1.ID, *first.JobID)
	}
	if j1.TimeoutSeconds != 15*60 {
		t.Fatalf("app.deploy timeout %d s, want 900", j1.TimeoutSeconds)
	}
	p := payloadOf(t, j1)
	if p.AppID != app.ID || p.AppName != "web" || p.DeploymentID != first.ID || p.Image != "ghcr.io/acme/web:v1" ||
		p.ImageID != "" || p.ContainerPort != 8080 || p.HealthPath != "/healthz" || p.MemoryLimitBytes != 512<<20 ||
		p.HealthTimeoutSeconds != apps.HealthTimeoutSeconds || !slices.Equal(p.EnvKeys, []string{"DATABASE_URL", "MODE"}) ||
		len(p.KeepImageIDs) != 0 || p.KeepImageIDs == nil {
		t.Fatalf("deploy payload: %+v", p)
	}
	if strings.Contains(string(j1.Payload), "postgres://") {
		t.Fatalf("an env value is in the job payload: %s", j1.Payload)
	}
	if got := r.secrets(j1); got["DATABASE_URL"] != "postgres://db/one" || got["MODE"] != "prod" || len(got) != 2 {
		t.Fatalf("secrets: %v", got)
	}
	wantStatus(t, r.deployment(first.ID), apps.Running)

	// A second deployment waits: no job while the first runs.
	second := r.deploy(app.ID, "")
	wantStatus(t, second, apps.Queued)
	if second.JobID != nil || second.Job != nil {
		t.Fatalf("second deployment got job %v while the first runs", *second.JobID)
	}
	r.noJob()

	r.succeed(j1, "sha256:aaa")
	d1 := r.deployment(first.ID)
	wantStatus(t, d1, apps.Succeeded)
	if d1.ImageID != "sha256:aaa" || d1.Result == nil || d1.Result.ContainerID != "c-sha256:aaa" || d1.FinishedAt == nil || d1.StartedAt == nil {
		t.Fatalf("succeeded deployment: %+v", d1.Deployment)
	}
	got := r.app(app.ID)
	if got.Current == nil || got.Current.ID != first.ID {
		t.Fatalf("current deployment %+v, want %s", got.Current, first.ID)
	}
	// The first's completion dispatched the second.
	d2 := r.deployment(second.ID)
	if d2.JobID == nil {
		t.Fatalf("second deployment not dispatched after the first finished: %+v", d2.Deployment)
	}
	if got.Latest == nil || got.Latest.ID != second.ID || got.Status != apps.AppDeploying {
		t.Fatalf("app: status %s, latest %+v", got.Status, got.Latest)
	}
	j2 := r.claim(agentproto.JobAppDeploy)
	if j2.ID != *d2.JobID {
		t.Fatalf("claimed %s, want %s", j2.ID, *d2.JobID)
	}
	if p := payloadOf(t, j2); !slices.Equal(p.KeepImageIDs, []string{"sha256:aaa"}) {
		t.Fatalf("keep image ids %v, want the first deployment's image", p.KeepImageIDs)
	}

	// A failed deployment leaves the current one in place.
	r.complete(j2, agentproto.StatusFailed, nil, "health check: GET /healthz answered 500")
	d2 = r.deployment(second.ID)
	wantStatus(t, d2, apps.Failed)
	if deref(d2.Error) != "health check: GET /healthz answered 500" || d2.ImageID != "" || d2.Result != nil {
		t.Fatalf("failed deployment: %+v", d2.Deployment)
	}
	got = r.app(app.ID)
	if got.Current == nil || got.Current.ID != first.ID || got.Status != apps.AppRunning {
		t.Fatalf("after a failed deployment: status %s, current %+v", got.Status, got.Current)
	}
	r.noJob()

	list, err := r.apps.ListDeployments(r.ctx, app.ID, 0, jobs.AdminReader)
	if err != nil || len(list) != 2 || list[0].ID != second.ID || list[1].ID != first.ID {
		t.Fatalf("deployments newest first: %v %v", list, err)
	}
	all, err := r.apps.ListDeployments(r.ctx, "", 1, jobs.AdminReader)
	if err != nil || len(all) != 1 || all[0].ID != second.ID {
		t.Fatalf("recent deployments limit 1: %v %v", all, err)
	}
	if _, err := r.apps.ListDeployments(r.ctx, "", 101, jobs.AdminReader); fault.KindOf(err) != fault.Invalid {
		t.Fatalf("limit 101: %v", err)
	}
}

func TestDeploymentsQueuedBehindOneAreSuperseded(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	j1 := r.claim(agentproto.JobAppDeploy)
	a := r.deploy(app.ID, "ghcr.io/acme/web:v2")
	b := r.deploy(app.ID, "ghcr.io/acme/web:v3")
	c := r.deploy(app.ID, "ghcr.io/acme/web:v4")
	for _, d := range []apps.DeploymentDetail{a, b, c} {
		wantStatus(t, d, apps.Queued)
	}
	if c.Spec.Image != "ghcr.io/acme/web:v4" || c.Ref != "ghcr.io/acme/web:v4" {
		t.Fatalf("ref did not override the image: %+v", c.Spec)
	}
	r.complete(j1, agentproto.StatusFailed, nil, "pull failed")

	// The newest runs; the older queued ones are superseded.
	for _, d := range []apps.DeploymentDetail{a, b} {
		got := r.deployment(d.ID)
		wantStatus(t, got, apps.Superseded)
		if got.JobID != nil || got.FinishedAt == nil || !strings.Contains(deref(got.Error), c.ID) {
			t.Fatalf("superseded deployment: %+v", got.Deployment)
		}
	}
	j := r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); p.DeploymentID != c.ID || p.Image != "ghcr.io/acme/web:v4" {
		t.Fatalf("dispatched %+v, want the newest deployment", p)
	}
	r.succeed(j, "sha256:v4")
	if got := r.app(app.ID); got.Status != apps.AppRunning || got.Current.ID != c.ID {
		t.Fatalf("app after the newest succeeded: %s %+v", got.Status, got.Current)
	}
}

func TestCancelDeployments(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	first := r.app(app.ID).Latest
	j1 := r.claim(agentproto.JobAppDeploy)

	// A running deployment cannot be cancelled.
	_, err := r.apps.CancelDeployment(r.ctx, r.admin, first.ID)
	wantConflict(t, err, "deployment-not-queued")

	// A queued deployment without a job is cancelled directly.
	waiting := r.deploy(app.ID, "")
	got, err := r.apps.CancelDeployment(r.ctx, r.admin, waiting.ID)
	if err != nil {
		t.Fatalf("cancel a waiting deployment: %v", err)
	}
	wantStatus(t, got, apps.Cancelled)
	_, err = r.apps.CancelDeployment(r.ctx, r.admin, waiting.ID)
	wantConflict(t, err, "deployment-not-queued")

	// The cancelled one is not dispatched when the first ends.
	r.succeed(j1, "sha256:one")
	r.noJob()

	// A dispatched deployment whose job is queued is cancelled through
	// its job (POST /api/v1/jobs/{id}/cancel): the hook cancels the
	// deployment and starts the next.
	next := r.deploy(app.ID, "")
	if next.JobID == nil {
		t.Fatalf("deployment not dispatched on a free slot")
	}
	after := r.deploy(app.ID, "ghcr.io/acme/web:v9")
	if after.JobID != nil {
		t.Fatalf("second deployment dispatched while the first holds the slot")
	}
	if _, err := r.jobs.Cancel(r.ctx, *next.JobID); err != nil {
		t.Fatalf("cancel job: %v", err)
	}
	wantStatus(t, r.deployment(next.ID), apps.Cancelled)
	d := r.deployment(after.ID)
	if d.JobID == nil {
		t.Fatalf("the next deployment was not dispatched after the cancel")
	}
	// POST /deployments/{id}/cancel on a dispatched, unclaimed one
	// cancels its job too.
	got, err = r.apps.CancelDeployment(r.ctx, r.admin, after.ID)
	if err != nil {
		t.Fatalf("cancel dispatched deployment: %v", err)
	}
	wantStatus(t, got, apps.Cancelled)
	if got.Job == nil || got.Job.Status != jobs.Cancelled {
		t.Fatalf("its job: %+v", got.Job)
	}
	r.noJob()
	if a := r.app(app.ID); a.Status != apps.AppRunning || a.Current == nil || a.Current.ID != first.ID {
		t.Fatalf("app after cancels: %s %+v", a.Status, a.Current)
	}
}

func TestRollbackCreatesADeploymentWithTheOldImageID(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", []apps.EnvVar{{Key: "SECRET", Value: "old"}}, true)
	first := r.app(app.ID).Latest
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")

	// Change the settings, deploy them, and fail one more.
	v2 := []apps.EnvVar{{Key: "SECRET", Value: "new"}, {Key: "EXTRA", Value: "x"}}
	img := "ghcr.io/acme/web:v2"
	if _, err := r.apps.Update(r.ctx, r.admin, app.ID, apps.Patch{Image: &img, Env: &v2}); err != nil {
		t.Fatal(err)
	}
	second := r.deploy(app.ID, "")
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:two")
	third := r.deploy(app.ID, "")
	r.complete(r.claim(agentproto.JobAppDeploy), agentproto.StatusFailed, nil, "boom")

	_, err := r.apps.Rollback(r.ctx, r.admin, third.ID)
	wantConflict(t, err, "deployment-not-succeeded")
	if _, err := r.apps.Rollback(r.ctx, r.admin, "dep_nope"); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("rollback of an unknown deployment: %v", err)
	}

	rb, err := r.apps.Rollback(r.ctx, r.admin, first.ID)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if rb.ID == first.ID || deref(rb.RollbackOf) != first.ID || rb.Spec.ImageID != "sha256:one" || rb.Spec.Image != "ghcr.io/acme/web:v1" {
		t.Fatalf("rollback deployment: %+v", rb.Deployment)
	}
	j := r.claim(agentproto.JobAppDeploy)
	p := payloadOf(t, j)
	if p.DeploymentID != rb.ID || p.ImageID != "sha256:one" || p.Image != "ghcr.io/acme/web:v1" || !slices.Equal(p.EnvKeys, []string{"SECRET"}) {
		t.Fatalf("rollback payload: %+v", p)
	}
	if !slices.Contains(p.KeepImageIDs, "sha256:one") || !slices.Contains(p.KeepImageIDs, "sha256:two") {
		t.Fatalf("keep image ids %v", p.KeepImageIDs)
	}
	// The environment is the old deployment's, frozen.
	if s := r.secrets(j); s["SECRET"] != "old" || len(s) != 1 {
		t.Fatalf("rollback secrets %v, want the first deployment's", s)
	}
	// The image is gone on the server: the agent fails the job; the
	// deployment fails with its error and the current one stays.
	r.complete(j, agentproto.StatusFailed, nil, "image sha256:one is no longer on the server")
	got := r.deployment(rb.ID)
	wantStatus(t, got, apps.Failed)
	if !strings.Contains(deref(got.Error), "no longer on the server") {
		t.Fatalf("error %q", deref(got.Error))
	}
	if a := r.app(app.ID); a.Current == nil || a.Current.ID != second.ID {
		t.Fatalf("current after a failed rollback: %+v", a.Current)
	}
	// Rolling back again succeeds: it becomes current.
	rb2, err := r.apps.Rollback(r.ctx, r.admin, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")
	if a := r.app(app.ID); a.Current == nil || a.Current.ID != rb2.ID || a.Current.ImageID != "sha256:one" {
		t.Fatalf("current after a rollback: %+v", a.Current)
	}
}

func TestSettingsApplyToTheNextDeployment(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", []apps.EnvVar{{Key: "TOKEN", Value: "v1"}}, false)
	if app.Latest != nil || app.Status != apps.AppNew {
		t.Fatalf("deploy false deployed: %s %+v", app.Status, app.Latest)
	}
	r.noJob()
	first := r.deploy(app.ID, "")
	// Queued behind nothing: it was dispatched; the env of its job is
	// frozen even when the app changes before the agent takes it.
	newEnv := []apps.EnvVar{{Key: "TOKEN", Value: "v2"}}
	port, mem := 9000, ""
	d, err := r.apps.Update(r.ctx, r.admin, app.ID, apps.Patch{Env: &newEnv, ContainerPort: &port, MemoryLimit: &mem})
	if err != nil {
		t.Fatal(err)
	}
	if d.ContainerPort != 9000 || d.MemoryLimit != "" || len(d.Env) != 1 || d.Env[0].Value != nil || !d.Env[0].ValueSet {
		t.Fatalf("updated app: %+v", d)
	}
	if d := r.app(app.ID); len(d.Env) != 1 || deref(d.Env[0].Value) != "v2" {
		t.Fatalf("updated app's env, revealed: %+v", d.Env)
	}
	j := r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); p.DeploymentID != first.ID || p.ContainerPort != 8080 || p.MemoryLimitBytes != 512<<20 {
		t.Fatalf("the queued deployment changed with the app: %+v", p)
	}
	if s := r.secrets(j); s["TOKEN"] != "v1" {
		t.Fatalf("queued deployment's secret %q, want v1", s["TOKEN"])
	}
	r.succeed(j, "sha256:1")
	next := r.deploy(app.ID, "")
	j = r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); p.DeploymentID != next.ID || p.ContainerPort != 9000 || p.MemoryLimitBytes != 0 {
		t.Fatalf("next deployment: %+v", p)
	}
	if s := r.secrets(j); s["TOKEN"] != "v2" {
		t.Fatalf("next deployment's secret %q, want v2", s["TOKEN"])
	}
	if next.Spec.ContainerPort != 9000 || !slices.Equal(next.Spec.EnvKeys, []string{"TOKEN"}) {
		t.Fatalf("frozen spec: %+v", next.Spec)
	}

	// Env values: decrypted for administrators only, never in lists.
	hidden, err := r.apps.Get(r.ctx, app.ID, apps.Reading{Reader: jobs.MemberReader, Reveal: true})
	if err != nil || len(hidden.Env) != 1 || hidden.Env[0].Value != nil || hidden.Env[0].Key != "TOKEN" || !hidden.Env[0].ValueSet {
		t.Fatalf("detail for a non-admin: %+v %v", hidden.Env, err)
	}
	list, err := r.apps.List(r.ctx, "", jobs.MemberReader)
	if err != nil || len(list) != 1 || !slices.Equal(list[0].EnvKeys, []string{"TOKEN"}) {
		t.Fatalf("list: %+v %v", list, err)
	}
}

func TestCreateAndUpdateValidation(t *testing.T) {
	r := newRig(t)
	_, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "Bad_Name", ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "Nginx"}, ContainerPort: 70000, HealthPath: ptr("health"),
		Env: []apps.EnvVar{{Key: "OK", Value: "1"}, {Key: "OK", Value: "2"}, {Key: "9X", Value: ""}}, MemoryLimit: "1m"})
	wantInvalid(t, err, "name", "source.image", "container_port", "health_path", "env[1].key", "env[2].key", "memory_limit")

	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "web", ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceGit, InstallationID: 1, RepoID: 2, Branch: "main"}, ContainerPort: 80})
	wantInvalid(t, err, "source.type")
	if !strings.Contains(fault.As(err).Fields[0].Message, "need the git host integration") {
		t.Fatalf("git source: %v", fault.As(err).Fields)
	}

	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "web", ServerID: "srv_nope",
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 80})
	wantInvalid(t, err, "server_id")

	pending, err := r.servers.CreateEnrollment(r.ctx, r.admin, "pending-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "web", ServerID: pending.Server.ID,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 80})
	wantInvalid(t, err, "server_id")

	app := r.createApp("web", nil, false)
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "web", ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 80})
	wantConflict(t, err, "application-name-taken")
	// The same name on another server is fine.
	other := r.enroll("web-2", agentproto.Facts{})
	if _, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "web", ServerID: other,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 80}); err != nil {
		t.Fatalf("same name on another server: %v", err)
	}

	if app.Kind != apps.KindContainer {
		t.Fatalf("default kind %q, want container", app.Kind)
	}
	// A service application is built from git and needs a start command;
	// the other kinds take no service settings.
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "k-svc", ServerID: r.serverID, Kind: apps.KindService,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, Service: &apps.ServiceSettings{BuildCommand: "make\nrm -rf /", BuildTimeoutSeconds: 9000}})
	wantInvalid(t, err, "source.type", "start_command", "build_command", "build_timeout_seconds")
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "k-img", ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 80, Service: &apps.ServiceSettings{StartCommand: "./run"}})
	wantInvalid(t, err, "build_command")
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "k-vm", ServerID: r.serverID, Kind: "vm",
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 80})
	wantInvalid(t, err, "kind")
	same, otherKind := apps.KindContainer, apps.KindCompose
	if _, err := r.apps.Update(r.ctx, r.admin, app.ID, apps.Patch{Kind: &same}); err != nil {
		t.Fatalf("patch with the same kind: %v", err)
	}
	_, err = r.apps.Update(r.ctx, r.admin, app.ID, apps.Patch{Kind: &otherKind})
	wantInvalid(t, err, "kind")

	bad, port, path, mem, img := "-x", 0, "/a b", "10x", "UPPER"
	_, err = r.apps.Update(r.ctx, r.admin, app.ID, apps.Patch{Name: &bad, ContainerPort: &port, HealthPath: &path,
		MemoryLimit: &mem, Image: &img, Env: &[]apps.EnvVar{{Key: "A-B"}}})
	wantInvalid(t, err, "name", "container_port", "health_path", "memory_limit", "image", "env[0].key")
	other2 := r.createApp("api", nil, false)
	name := "web"
	_, err = r.apps.Update(r.ctx, r.admin, other2.ID, apps.Patch{Name: &name})
	wantConflict(t, err, "application-name-taken")

	_, err = r.apps.Deploy(r.ctx, r.admin, app.ID, "not a ref")
	wantInvalid(t, err, "ref")
	r.noJob()
	if list, _ := r.apps.ListDeployments(r.ctx, app.ID, 0, jobs.AdminReader); len(list) != 0 {
		t.Fatalf("invalid deploys created deployments: %v", list)
	}
}

func TestDeleteApplication(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	other := r.createApp("api", nil, false)
	for _, d := range []domains.NewDomain{
		{Hostname: "web.example.com", ApplicationID: app.ID, TLSMode: "auto"},
		{Hostname: "api.example.com", ApplicationID: other.ID, TLSMode: "internal", RedirectWWW: true},
	} {
		if _, err := r.domains.Create(r.ctx, r.admin, d); err != nil {
			t.Fatal(err)
		}
	}
	j := r.claim(agentproto.JobAppDeploy)
	r.claim(agentproto.JobProxyApply)
	r.claim(agentproto.JobProxyApply)
	waiting := r.deploy(app.ID, "")

	// Refused while a deployment runs; nothing changes.
	_, err := r.apps.Delete(r.ctx, r.admin, app.ID)
	wantConflict(t, err, "deployment-running")
	wantStatus(t, r.deployment(waiting.ID), apps.Queued)
	r.succeed(j, "sha256:1")
	// The waiting deployment got the slot; deleting cancels it and its
	// unclaimed job.
	rm, err := r.apps.Delete(r.ctx, r.admin, app.ID)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantStatus(t, r.deployment(waiting.ID), apps.Cancelled)
	if rm.Status != "removing" || rm.Job == nil || rm.Job.Type != agentproto.JobAppRemove {
		t.Fatalf("removal: %+v", rm)
	}
	if a := r.app(app.ID); a.Status != apps.AppRemoving || deref(a.RemoveJobID) != rm.Job.ID {
		t.Fatalf("app while removing: %+v", a.Application)
	}
	_, err = r.apps.Deploy(r.ctx, r.admin, app.ID, "")
	wantConflict(t, err, "application-removing")
	_, err = r.apps.Delete(r.ctx, r.admin, app.ID)
	wantConflict(t, err, "application-removing")

	rj := r.claim(agentproto.JobAppRemove)
	if rj.TimeoutSeconds != 300 {
		t.Fatalf("app.remove timeout %d", rj.TimeoutSeconds)
	}
	var p agentproto.RemovePayload
	if err := jsonUnmarshal(rj.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.AppID != app.ID || len(p.Proxy.Sites) != 1 || p.Proxy.Sites[0].Hostname != "api.example.com" || !p.Proxy.Sites[0].RedirectWWW {
		t.Fatalf("remove payload: %+v", p)
	}
	// A failed removal keeps the application, saying so.
	r.complete(rj, agentproto.StatusFailed, nil, "docker: permission denied")
	a := r.app(app.ID)
	if a.Status != apps.AppRemovalFailed || deref(a.RemoveError) != "docker: permission denied" {
		t.Fatalf("after a failed removal: %+v", a.Application)
	}
	// Its sites are back in the proxy state.
	cfg, _ := r.apps.ProxyConfig(r.ctx, r.serverID)
	if len(cfg.Sites) != 2 {
		t.Fatalf("proxy sites after a failed removal: %+v", cfg.Sites)
	}
	// Retry, and succeed: the application, its deployments and domains go.
	rm, err = r.apps.Delete(r.ctx, r.admin, app.ID)
	if err != nil {
		t.Fatal(err)
	}
	r.complete(r.claim(agentproto.JobAppRemove), agentproto.StatusSucceeded, nil, "")
	if _, err := r.apps.Get(r.ctx, app.ID, apps.Reading{Reader: jobs.AdminReader}); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("deleted app: %v", err)
	}
	if _, err := r.apps.GetDeployment(r.ctx, waiting.ID, jobs.AdminReader); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("deployment of a deleted app: %v", err)
	}
	list, err := r.domains.List(r.ctx, "")
	if err != nil || len(list) != 1 || list[0].Hostname != "api.example.com" {
		t.Fatalf("domains after delete: %+v %v", list, err)
	}
	// Its hostname is free again.
	if _, err := r.domains.Create(r.ctx, r.admin, domains.NewDomain{Hostname: "web.example.com", ApplicationID: other.ID, TLSMode: "off"}); err != nil {
		t.Fatalf("reuse a deleted app's hostname: %v", err)
	}

	// A removal cancelled before the agent takes it leaves the app active.
	rm, err = r.apps.Delete(r.ctx, r.admin, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.jobs.Cancel(r.ctx, rm.Job.ID); err != nil {
		t.Fatal(err)
	}
	if a := r.app(other.ID); a.Status != apps.AppNew {
		t.Fatalf("after a cancelled removal: %s", a.Status)
	}
}

func TestDeleteOnRevokedServerIsImmediate(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	r.claim(agentproto.JobAppDeploy)
	if _, err := r.servers.Revoke(r.ctx, r.admin, r.serverID); err != nil {
		t.Fatal(err)
	}
	// Revocation fails the running job without its hook; reads settle
	// the deployment.
	d := r.app(app.ID)
	if d.Latest == nil || d.Latest.Status != apps.Failed || deref(d.Latest.Error) != jobs.ErrServerRevoked {
		t.Fatalf("deployment after revoke: %+v", d.Latest)
	}
	_, err := r.apps.Deploy(r.ctx, r.admin, app.ID, "")
	wantConflict(t, err, "server-not-enrolled")
	rm, err := r.apps.Delete(r.ctx, r.admin, app.ID)
	if err != nil || rm.Status != "deleted" || rm.Job != nil {
		t.Fatalf("delete on a revoked server: %+v %v", rm, err)
	}
	if _, err := r.apps.App(r.ctx, app.ID); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("app still there: %v", err)
	}
}

func TestInterruptedDispatchIsRecovered(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, false)
	first := r.deploy(app.ID, "")
	r.claim(agentproto.JobAppDeploy) // running
	second := r.deploy(app.ID, "")
	// A control plane ends the first deployment and claims the slot for
	// the second, then stops before it enqueues the job.
	if _, err := r.st.FinishDeployment(r.ctx, first.ID, apps.Finish{Status: apps.Failed, Error: "x", At: r.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	claimed, _, ok, err := r.st.ClaimDeployment(r.ctx, app.ID, r.clock.Now())
	if err != nil || !ok || claimed.ID != second.ID {
		t.Fatalf("claim: %+v %v %v", claimed, ok, err)
	}
	// Within the grace period a read leaves it alone (the dispatcher may
	// still be at work) …
	if got := r.deployment(second.ID); got.JobID != nil || got.Status != apps.Queued {
		t.Fatalf("within the grace: %+v", got.Deployment)
	}
	r.noJob()
	// … after it, a read enqueues the job.
	r.clock.Advance(time.Minute)
	got := r.deployment(second.ID)
	if got.JobID == nil {
		t.Fatalf("interrupted dispatch not recovered: %+v", got.Deployment)
	}
	if p := payloadOf(t, r.claim(agentproto.JobAppDeploy)); p.DeploymentID != second.ID {
		t.Fatalf("recovered job is for %s", p.DeploymentID)
	}

	// Stopped after the job was enqueued but before it was recorded: the
	// recovery finds the job by the deployment's idempotency key, even
	// though the payload it would build now differs.
	third := r.deploy(app.ID, "")
	if _, err := r.st.FinishDeployment(r.ctx, second.ID, apps.Finish{Status: apps.Failed, Error: "x", At: r.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if claimed, _, ok, err := r.st.ClaimDeployment(r.ctx, app.ID, r.clock.Now()); err != nil || !ok || claimed.ID != third.ID {
		t.Fatalf("claim: %+v %v %v", claimed, ok, err)
	}
	made, _, err := r.jobs.Enqueue(r.ctx, jobs.NewJob{ServerID: r.serverID, IdempotencyKey: "deployment:" + third.ID,
		Work: jobs.Of(agentproto.AppDeploy, agentproto.DeployPayload{AppID: app.ID, DeploymentID: third.ID, Image: "stale"})})
	if err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Minute)
	if got := r.deployment(third.ID); deref(got.JobID) != made.ID {
		t.Fatalf("recovered job %v, want the one enqueued before the stop %s", deref(got.JobID), made.ID)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:3")
	wantStatus(t, r.deployment(third.ID), apps.Succeeded)
}

func TestAppLogs(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, false)
	for _, n := range []int{0, -1, 1001} {
		_, err := r.apps.QueueLogs(r.ctx, "usr_admin", app.ID, &n, "yesterday")
		wantInvalid(t, err, "lines", "since")
	}
	r.noJob()
	j, err := r.apps.QueueLogs(r.ctx, "usr_admin", app.ID, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var p agentproto.AppLogsPayload
	if err := jsonUnmarshal(r.claim(agentproto.JobAppLogs).Payload, &p); err != nil || p.Lines != apps.DefaultLogLines || p.Since != nil {
		t.Fatalf("payload without lines: %+v %v", p, err)
	}
	fifty := 50
	j, err = r.apps.QueueLogs(r.ctx, "usr_admin", app.ID, &fifty, "2030-01-02T03:04:05Z")
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.apps.Logs(r.ctx, app.ID, j.ID, jobs.AdminReader)
	if err != nil || res.Status != jobs.Queued || len(res.Lines) != 0 {
		t.Fatalf("queued read: %+v %v", res, err)
	}
	c := r.claim(agentproto.JobAppLogs)
	if err := jsonUnmarshal(c.Payload, &p); err != nil || p.AppID != app.ID || p.Lines != 50 || p.Since == nil || p.Since.Year() != 2030 {
		t.Fatalf("payload %+v %v", p, err)
	}
	started := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	r.complete(c, agentproto.StatusSucceeded, agentproto.AppLogsResult{Lines: []agentproto.LogLine{{At: started, Priority: 6, Message: "hello", Stream: "stdout"}},
		State: "running", StartedAt: started, RestartCount: 2, ContainerID: "abc"}, "")
	res, err = r.apps.Logs(r.ctx, app.ID, j.ID, jobs.AdminReader)
	if err != nil || res.Status != jobs.Succeeded || len(res.Lines) != 1 || res.Lines[0].Message != "hello" || res.State != "running" ||
		res.RestartCount != 2 || res.StartedAt == nil || !res.StartedAt.Equal(started) || res.Redacted {
		t.Fatalf("log result: %+v %v", res, err)
	}
	// A member reads that the read succeeded, not what it returned.
	res, err = r.apps.Logs(r.ctx, app.ID, j.ID, jobs.MemberReader)
	if err != nil || res.Status != jobs.Succeeded || len(res.Lines) != 0 || res.State != "" || res.StartedAt != nil ||
		res.RestartCount != 0 || res.ContainerID != "" || !res.Redacted {
		t.Fatalf("log result for a member: %+v %v", res, err)
	}
	other := r.createApp("api", nil, false)
	if _, err := r.apps.Logs(r.ctx, other.ID, j.ID, jobs.MemberReader); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("another app's read: %v", err)
	}
	ping, _, err := r.jobs.Enqueue(r.ctx, jobs.NewJob{ServerID: r.serverID, Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.apps.Logs(r.ctx, app.ID, ping.ID, jobs.AdminReader); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("a ping job as a log read: %v", err)
	}
}
