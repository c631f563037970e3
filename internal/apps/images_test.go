package apps_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/metrics"
)

// putImages stores an inventory of the rig's server listing images,
// collected at the clock's now.
func (r *rig) putImages(ids ...string) {
	r.t.Helper()
	images := []agentproto.ImageInfo{}
	for _, id := range ids {
		images = append(images, agentproto.ImageInfo{ID: id, Tags: []string{}, SizeBytes: 1, Created: r.clock.Now()})
	}
	if err := r.st.PutInventory(r.ctx, r.serverID, metrics.Inventory{CollectedAt: r.clock.Now(), ReceivedAt: r.clock.Now(), Images: images}); err != nil {
		r.t.Fatal(err)
	}
}

// A rollback to an image the server's latest inventory no longer lists is
// a 409 "image-gone", and no deployment or job is queued. An inventory
// collected before the deployment finished, or one without images, says
// nothing about the image.
func TestRollbackToAPrunedImageIsAConflict(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	first := r.app(app.ID).Latest
	r.clock.Advance(time.Second)
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")
	r.clock.Advance(time.Second)
	r.deploy(app.ID, "")
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:two")
	before := len(r.deployments(app.ID))

	// Collected after the first deployment finished, without its image.
	r.clock.Advance(time.Minute)
	r.putImages("sha256:two", "sha256:other")
	_, err := r.apps.Rollback(r.ctx, r.admin, first.ID)
	wantConflict(t, err, "image-gone")
	r.noJob()
	if got := len(r.deployments(app.ID)); got != before {
		t.Fatalf("deployments after a refused rollback: %d, want %d", got, before)
	}

	// An inventory without images (an older agent, or no Docker) and
	// one that lists the image let the rollback through.
	if err := r.st.PutInventory(r.ctx, r.serverID, metrics.Inventory{CollectedAt: r.clock.Now(), ReceivedAt: r.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apps.Rollback(r.ctx, r.admin, first.ID); err != nil {
		t.Fatalf("rollback without images in the inventory: %v", err)
	}
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:one")
	r.putImages("sha256:one", "sha256:two")
	if _, err := r.apps.Rollback(r.ctx, r.admin, first.ID); err != nil {
		t.Fatalf("rollback to a listed image: %v", err)
	}
	r.complete(r.claim(agentproto.JobAppDeploy), agentproto.StatusFailed, nil, "test")

	// An inventory collected before the deployment it would roll back to
	// finished does not know its image yet.
	stale := r.clock.Now()
	r.clock.Advance(time.Minute)
	r.deploy(app.ID, "")
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:three")
	third := r.app(app.ID).Current
	r.clock.Advance(time.Minute)
	r.deploy(app.ID, "")
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:four")
	if err := r.st.PutInventory(r.ctx, r.serverID, metrics.Inventory{CollectedAt: stale, ReceivedAt: stale,
		Images: []agentproto.ImageInfo{{ID: "sha256:two", Tags: []string{}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apps.Rollback(r.ctx, r.admin, third.ID); err != nil {
		t.Fatalf("rollback with an inventory older than the deployment: %v", err)
	}
}

// A deploy names for pruning the images of the deployments that fell out
// of the last five, never one of the last five nor one another
// application on the server ran.
func TestDeployNamesImagesToPrune(t *testing.T) {
	r := newRig(t)
	app := r.createApp("web", nil, true)
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:img0")
	r.createApp("api", nil, true)
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:img1") // shared with web's second
	for i := 1; i <= 6; i++ {
		r.deploy(app.ID, "")
		j := r.claim(agentproto.JobAppDeploy)
		p := payloadOf(t, j)
		// Before this deploy, web has succeeded i times (img0…img(i-1)).
		var want []string
		if i > apps.KeepImages {
			want = []string{"sha256:img0"}
		}
		if !slices.Equal(p.PruneImageIDs, want) {
			t.Fatalf("deploy %d: prune %v, want %v (keep %v)", i, p.PruneImageIDs, want, p.KeepImageIDs)
		}
		for _, id := range p.PruneImageIDs {
			if slices.Contains(p.KeepImageIDs, id) {
				t.Fatalf("deploy %d: %s is both kept and pruned", i, id)
			}
		}
		r.succeed(j, fmt.Sprintf("sha256:img%d", i))
	}
	// web: img0…img6. Past the newest five: img1 and img0; img1 is the
	// api's too, so only img0.
	r.deploy(app.ID, "")
	p := payloadOf(t, r.claim(agentproto.JobAppDeploy))
	if !slices.Equal(p.PruneImageIDs, []string{"sha256:img0"}) || len(p.KeepImageIDs) != apps.KeepImages {
		t.Fatalf("prune %v, keep %v; want img0 pruned and five kept", p.PruneImageIDs, p.KeepImageIDs)
	}
}

// deployments lists an application's deployments.
func (r *rig) deployments(appID string) []apps.Deployment {
	r.t.Helper()
	list, err := r.apps.ListDeployments(r.ctx, appID, apps.MaxDeploymentLimit, jobs.AdminReader)
	if err != nil {
		r.t.Fatal(err)
	}
	return list
}
