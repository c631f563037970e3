package apps_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// envReads returns the application.env.read audit entries.
func (r *rig) envReads() []audit.Entry {
	r.t.Helper()
	list, _, err := audit.NewLog(r.st, r.clock.Now).List(r.ctx, 200, "", apps.ActionEnvRead)
	if err != nil {
		r.t.Fatal(err)
	}
	return list
}

func TestEnvValuesOnRead(t *testing.T) {
	r := newRig(t)
	created := r.createApp("web", []apps.EnvVar{{Key: "DATABASE_URL", Value: "postgres://u:hunter2@db/app"}, {Key: "MODE", Value: ""}}, false)
	if len(created.Env) != 2 || created.Env[0].Value != nil || !created.Env[0].ValueSet || !created.Env[1].ValueSet {
		t.Fatalf("create reply env: %+v", created.Env)
	}
	if got := r.envReads(); len(got) != 0 {
		t.Fatalf("env reads after create: %+v", got)
	}

	// An administrator's read with reveal returns the values and is audited.
	member := audit.Actor{Type: audit.ActorUser, ID: "usr_member", Email: "member@example.com"}
	d, err := r.apps.Get(r.ctx, created.ID, apps.Reading{Reader: jobs.AdminReader, Reveal: true, By: r.admin})
	if err != nil || len(d.Env) != 2 || deref(d.Env[0].Value) != "postgres://u:hunter2@db/app" || d.Env[1].Value == nil ||
		*d.Env[1].Value != "" || !d.Env[0].ValueSet {
		t.Fatalf("revealed env: %+v %v", d.Env, err)
	}
	reads := r.envReads()
	if len(reads) != 1 || reads[0].Actor.ID != r.admin.Actor.ID || reads[0].Target.ID != created.ID || reads[0].IP != r.admin.IP {
		t.Fatalf("env read audit entries: %+v", reads)
	}
	if b, _ := json.Marshal(reads[0]); strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), "DATABASE_URL") {
		t.Fatalf("audit entry: %s", b)
	}

	// Without reveal: keys and value_set, nothing audited.
	d, err = r.apps.Get(r.ctx, created.ID, apps.Reading{Reader: jobs.AdminReader, Reveal: false, By: r.admin})
	if err != nil || len(d.Env) != 2 || d.Env[0].Value != nil || d.Env[1].Value != nil || !d.Env[0].ValueSet || !d.Env[1].ValueSet {
		t.Fatalf("unrevealed env: %+v %v", d.Env, err)
	}
	// A member asking for values gets none, and nothing is audited.
	d, err = r.apps.Get(r.ctx, created.ID, apps.Reading{Reader: jobs.MemberReader, Reveal: true, By: audit.Caller{Actor: member, IP: r.admin.IP}})
	if err != nil || len(d.Env) != 2 || d.Env[0].Value != nil || d.Env[0].Key != "DATABASE_URL" || !d.Env[0].ValueSet {
		t.Fatalf("member's env: %+v %v", d.Env, err)
	}
	if got := r.envReads(); len(got) != 1 {
		t.Fatalf("env read audit entries after unrevealed reads: got %d, want 1", len(got))
	}
}

func TestDeploymentForMember(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", []apps.EnvVar{{Key: "TOKEN", Value: "v1"}}, false)
	dep := r.deploy(app.ID, "")
	j := r.claim(agentproto.JobAppDeploy)
	tail := "stderr: password=hunter2 rejected"
	if err := r.jobs.AddEvents(r.ctx, r.serverID, j.ID, []agentproto.Event{{Level: agentproto.LevelWarn,
		Message: "the last 1 lines of the log of container web", Data: json.RawMessage(`{"lines":["` + tail + `"]}`)}}); err != nil {
		t.Fatal(err)
	}
	r.complete(j, agentproto.StatusFailed, nil, "health check failed: "+tail)

	admin, err := r.apps.GetDeployment(r.ctx, dep.ID, jobs.AdminReader)
	if err != nil || len(admin.Events) != 1 || admin.Job == nil || !strings.Contains(deref(admin.Error), "hunter2") ||
		!strings.Contains(deref(admin.Job.Error), "hunter2") || deref(admin.Job.ErrorClass) != "failed" || admin.Job.Redacted {
		t.Fatalf("administrator's view: %+v %v", admin, err)
	}
	member, err := r.apps.GetDeployment(r.ctx, dep.ID, jobs.MemberReader)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(member); strings.Contains(string(b), "hunter2") {
		t.Fatalf("a member reads the job's output: %s", b)
	}
	if member.Status != apps.Failed || deref(member.Error) != "failed" || len(member.Events) != 0 || member.Job == nil ||
		member.Job.Status != jobs.Failed || deref(member.Job.Error) != "failed" || deref(member.Job.ErrorClass) != "failed" ||
		!member.Job.Redacted || member.Job.Data != nil || member.Job.Output != nil || member.Job.Payload != nil {
		t.Fatalf("member's view: %+v / job %+v", member, member.Job)
	}
	list, err := r.apps.ListDeployments(r.ctx, app.ID, 0, jobs.MemberReader)
	if err != nil || len(list) != 1 || deref(list[0].Error) != "failed" {
		t.Fatalf("member's list: %+v %v", list, err)
	}
	d, err := r.apps.Get(r.ctx, app.ID, apps.Reading{})
	if err != nil || d.Latest == nil || deref(d.Latest.Error) != "failed" {
		t.Fatalf("member's detail: %+v %v", d.Latest, err)
	}

	// A succeeded deployment's result (the agent's data) is for administrators.
	next := r.deploy(app.ID, "")
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:1")
	if got, err := r.apps.GetDeployment(r.ctx, next.ID, jobs.AdminReader); err != nil || got.Result == nil {
		t.Fatalf("administrator's result: %+v %v", got.Result, err)
	}
	if got, err := r.apps.GetDeployment(r.ctx, next.ID, jobs.MemberReader); err != nil || got.Result != nil || got.Status != apps.Succeeded {
		t.Fatalf("member's result: %+v %v", got.Result, err)
	}
}

func TestRemovalErrorForMember(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, false)
	if _, err := r.apps.Delete(r.ctx, r.admin, app.ID); err != nil {
		t.Fatal(err)
	}
	r.complete(r.claim(agentproto.JobAppRemove), agentproto.StatusFailed, nil, "rm: token=hunter2 busy")
	if d := r.app(app.ID); deref(d.RemoveError) != "rm: token=hunter2 busy" {
		t.Fatalf("administrator's remove_error: %v", deref(d.RemoveError))
	}
	d, err := r.apps.Get(r.ctx, app.ID, apps.Reading{Reader: jobs.MemberReader})
	if err != nil || d.Status != apps.AppRemovalFailed || deref(d.RemoveError) != "failed" {
		t.Fatalf("member's detail: %+v %v", d.Application, err)
	}
	list, err := r.apps.List(r.ctx, "", jobs.MemberReader)
	if err != nil || len(list) != 1 || deref(list[0].RemoveError) != "failed" {
		t.Fatalf("member's list: %+v %v", list, err)
	}
}
