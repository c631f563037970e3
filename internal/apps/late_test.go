package apps_test

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// TestLateDeploySuccessBecomesCurrent: a deployment whose job was failed
// with agent_lost (the agent was cut off, or the control plane was down
// past the lease) and whose agent then reports success is recorded as
// succeeded and becomes current: its container is what serves. A late
// success of an older deployment does not displace a later current one.
func TestLateDeploySuccessBecomesCurrent(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	first := app.Latest
	j1 := r.claim(agentproto.JobAppDeploy)
	r.clock.Advance(time.Duration(j1.LeaseSeconds+1) * time.Second)
	if n, err := r.jobs.Expire(r.ctx); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	d1 := r.deployment(first.ID)
	wantStatus(t, d1, apps.Failed)
	if deref(d1.Error) != jobs.ErrAgentLost {
		t.Fatalf("deployment error %q, want %s", deref(d1.Error), jobs.ErrAgentLost)
	}
	if got := r.app(app.ID); got.Current != nil {
		t.Fatalf("current deployment %s after the lost one", got.Current.ID)
	}

	r.succeed(j1, "sha256:aaa")
	d1 = r.deployment(first.ID)
	wantStatus(t, d1, apps.Succeeded)
	if d1.ImageID != "sha256:aaa" || d1.Error != nil {
		t.Fatalf("reconciled deployment: image %q error %v", d1.ImageID, deref(d1.Error))
	}
	if got := r.app(app.ID); got.Current == nil || got.Current.ID != first.ID {
		t.Fatalf("current deployment %+v, want %s", got.Current, first.ID)
	}

	// A second deployment is lost too; a third succeeds; the second's
	// late success comes last and leaves the third current.
	second := r.deploy(app.ID, "")
	j2 := r.claim(agentproto.JobAppDeploy)
	r.clock.Advance(time.Duration(j2.LeaseSeconds+1) * time.Second)
	if n, err := r.jobs.Expire(r.ctx); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	third := r.deploy(app.ID, "")
	j3 := r.claim(agentproto.JobAppDeploy)
	r.succeed(j3, "sha256:ccc")
	r.succeed(j2, "sha256:bbb")
	wantStatus(t, r.deployment(second.ID), apps.Succeeded)
	if got := r.app(app.ID); got.Current == nil || got.Current.ID != third.ID {
		t.Fatalf("current deployment %+v, want the later %s", got.Current, third.ID)
	}
}
