package apps_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// rig is the control plane's application side on a real SQLite store and
// a fake clock, with one enrolled server whose agent the test plays.
type rig struct {
	t        *testing.T
	ctx      context.Context
	st       *store.Store
	clock    *testlab.Clock
	jobs     *jobs.Service
	servers  *servers.Service
	apps     *apps.Service
	domains  *domains.Service
	serverID string
	admin    audit.Caller
	// gh is the git host applications deploy from; nil unless made by
	// newRigWith.
	gh    *githost.Service
	plane *planetest.Plane
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigOn(t, storetest.Open(t, store.SQLite))
}

// newRigOn is newRig on st.
func newRigOn(t *testing.T, st *store.Store) *rig {
	t.Helper()
	return newRigWith(t, st, nil)
}

// newRigWith is newRigOn with the git host git makes (nil: none).
func newRigWith(t *testing.T, st *store.Store, git func(st *store.Store, now func() time.Time) *githost.Service) *rig {
	t.Helper()
	p := planetest.New(t, st, planetest.Options{})
	d := apps.Deps{Store: st, Jobs: p.Jobs, Servers: p.Servers, Audit: p.Audit, Key: p.Key, Now: p.Now, Log: p.Log}
	var gh *githost.Service
	if git != nil {
		gh = git(st, p.Now)
		d.GitHost = gh
	}
	as := apps.NewService(d)
	ds := domains.NewService(domains.Deps{Store: st, Apps: as, Jobs: p.Jobs, Servers: p.Servers, Audit: p.Audit, Now: p.Now, Log: p.Log})
	r := &rig{t: t, ctx: p.Ctx, st: st, clock: p.Clock, jobs: p.Jobs, servers: p.Servers, apps: as, domains: ds, gh: gh,
		admin: p.Admin, plane: p}
	r.serverID = r.enroll("web-1", agentproto.Facts{Hostname: "web-1", PublicAddresses: []string{"203.0.113.10"}})
	return r
}

// enroll creates and enrolls a server.
func (r *rig) enroll(name string, facts agentproto.Facts) string {
	r.t.Helper()
	return r.plane.Enroll(name, facts)
}

func (r *rig) createApp(name string, env []apps.EnvVar, deploy bool) apps.ApplicationDetail {
	r.t.Helper()
	d, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: name, ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "ghcr.io/acme/" + name + ":v1"}, ContainerPort: 8080,
		HealthPath: ptr("/healthz"), Env: env, MemoryLimit: "512m", Deploy: deploy})
	if err != nil {
		r.t.Fatalf("create application: %v", err)
	}
	return d
}

func (r *rig) deploy(appID, ref string) apps.DeploymentDetail {
	r.t.Helper()
	d, err := r.apps.Deploy(r.ctx, r.admin, appID, ref)
	if err != nil {
		r.t.Fatalf("deploy: %v", err)
	}
	return d
}

// claim takes the server's next job as the agent, which must be of type
// typ; ok false when none is queued.
func (r *rig) claim(typ string) jobs.Job {
	r.t.Helper()
	j, ok, err := r.jobs.Claim(r.ctx, r.serverID, 0)
	if err != nil {
		r.t.Fatalf("claim: %v", err)
	}
	if !ok {
		r.t.Fatalf("claim: no job queued, want %s", typ)
	}
	if j.Type != typ {
		r.t.Fatalf("claimed a %s job, want %s", j.Type, typ)
	}
	// The agent names the job in its next heartbeat: the claim reached it.
	if err := r.jobs.Heartbeat(r.ctx, r.serverID, []string{j.ID}); err != nil {
		r.t.Fatalf("heartbeat: %v", err)
	}
	return j
}

// noJob checks that no job is queued for the server.
func (r *rig) noJob() {
	r.t.Helper()
	if j, ok, err := r.jobs.Claim(r.ctx, r.serverID, 0); err != nil || ok {
		r.t.Fatalf("claimed %s %s (err %v), want no queued job", j.Type, j.ID, err)
	}
}

func (r *rig) complete(j jobs.Job, status string, data any, errText string) {
	r.t.Helper()
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			r.t.Fatal(err)
		}
		raw = b
	}
	if _, err := r.jobs.Complete(r.ctx, r.serverID, j.ID, agentproto.CompleteRequest{Status: status, Data: raw, Error: errText}); err != nil {
		r.t.Fatalf("complete %s: %v", j.ID, err)
	}
}

func (r *rig) succeed(j jobs.Job, imageID string) {
	r.t.Helper()
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ContainerID: "c-" + imageID, ImageID: imageID, Pulled: true, HealthStatus: 200}, "")
}

func (r *rig) deployment(id string) apps.DeploymentDetail {
	r.t.Helper()
	d, err := r.apps.GetDeployment(r.ctx, id, jobs.AdminReader)
	if err != nil {
		r.t.Fatalf("get deployment %s: %v", id, err)
	}
	return d
}

func (r *rig) app(id string) apps.ApplicationDetail {
	r.t.Helper()
	d, err := r.apps.Get(r.ctx, id, apps.Reading{Reader: jobs.AdminReader, Reveal: true, By: r.admin})
	if err != nil {
		r.t.Fatalf("get application %s: %v", id, err)
	}
	return d
}

func payloadOf(t *testing.T, j jobs.Job) agentproto.DeployPayload {
	t.Helper()
	var p agentproto.DeployPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (r *rig) secrets(j jobs.Job) map[string]string {
	r.t.Helper()
	s, err := r.jobs.Secrets(r.ctx, r.serverID, j.ID)
	if err != nil {
		r.t.Fatalf("secrets of %s: %v", j.ID, err)
	}
	return s
}

func wantStatus(t *testing.T, d apps.DeploymentDetail, status string) {
	t.Helper()
	if d.Status != status {
		t.Fatalf("deployment %s: status %s, want %s (error %v)", d.ID, d.Status, status, d.Error)
	}
}

func wantConflict(t *testing.T, err error, code string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Conflict || fe.Code != code {
		t.Fatalf("got %v, want a %s conflict", err, code)
	}
}

func wantInvalid(t *testing.T, err error, fields ...string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Invalid {
		t.Fatalf("got %v, want invalid fields %v", err, fields)
	}
	var got []string
	for _, f := range fe.Fields {
		got = append(got, f.Field)
	}
	for _, want := range fields {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Fatalf("invalid fields %v, want %v", fe.Fields, fields)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func ptr[T any](v T) *T { return &v }
