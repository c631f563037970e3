package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestDockerHousekeeping: a server's inventory lists the engine's volumes
// (with their sizes) and networks; a prune's dry run lists an unused image
// and network but keeps every image of the application's releases; the
// removal removes exactly what it is given and is still unused, skipping a
// kept image; an inspection hides every environment value.
func TestDockerHousekeeping(t *testing.T) {
	t.Parallel()
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0, "v2": 0, "stray": 0}})
	const secret = "s3cr3t-value-for-housekeeping"
	app := s.createApp(t, map[string]any{
		"name": "tidy", "source": map[string]any{"type": "image", "image": s.Images["v1"].Ref},
		"container_port": 8080, "health_path": "/health",
		"env": []map[string]string{{"key": "DATABASE_URL", "value": secret}},
	})
	s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	s.waitDeployment(t, s.deploy(t, app.ID, map[string]any{"ref": s.Images["v2"].Ref}), "succeeded", pollInterval, deployTimeout)
	v1, v2, stray := s.Images["v1"].ID, s.Images["v2"].ID, s.Images["stray"].ID

	// A volume with data and a network, neither used by a container.
	ctx := t.Context()
	run := fmt.Sprintf("capstan-e2e-tidy-%d-%d", os.Getpid(), time.Now().UnixNano())
	if _, err := s.Docker.VolumeCreate(ctx, client.VolumeCreateOptions{Name: run}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = s.Docker.VolumeRemove(context.Background(), run, client.VolumeRemoveOptions{Force: true})
	})
	nw, err := s.Docker.NetworkCreate(ctx, run, client.NetworkCreateOptions{Driver: "bridge"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.Docker.NetworkRemove(context.Background(), nw.ID, client.NetworkRemoveOptions{}) })

	type inventory struct {
		Inventory *struct {
			Volumes  []agentproto.VolumeInfo  `json:"volumes"`
			Networks []agentproto.NetworkInfo `json:"networks"`
		} `json:"inventory"`
	}
	waitFor(t, 2*time.Minute, "the inventory lists the new volume and network", func() (bool, string) {
		var inv inventory
		s.Get(t, "/api/v1/servers/"+s.serverID, s.Token).JSON(t, &inv)
		if inv.Inventory == nil {
			return false, "no inventory"
		}
		vi := slices.IndexFunc(inv.Inventory.Volumes, func(v agentproto.VolumeInfo) bool { return v.Name == run })
		ni := slices.IndexFunc(inv.Inventory.Networks, func(n agentproto.NetworkInfo) bool { return n.ID == nw.ID })
		if vi < 0 || ni < 0 {
			return false, fmt.Sprintf("volumes %d, networks %d", len(inv.Inventory.Volumes), len(inv.Inventory.Networks))
		}
		v, n := inv.Inventory.Volumes[vi], inv.Inventory.Networks[ni]
		if v.Driver != "local" || v.Containers != 0 || n.Name != run || n.Containers != 0 || n.Driver != "bridge" {
			t.Fatalf("the volume %+v and network %+v", v, n)
		}
		// Sizes come from a measurement every few minutes; a volume made
		// after the last one is unknown until the next.
		return true, ""
	})

	queue := func(payload map[string]any) string {
		t.Helper()
		r := s.action(t, s.serverID, map[string]any{"type": agentproto.JobDockerPrune, "payload": payload})
		expectStatus(t, r, http.StatusAccepted)
		var a Accepted
		r.JSON(t, &a)
		return a.JobID
	}
	result := func(id string) agentproto.DockerPruneResult {
		t.Helper()
		j := s.waitJob(t, id, "succeeded", jobTimeout)
		var res agentproto.DockerPruneResult
		if err := json.Unmarshal(j.Data, &res); err != nil {
			t.Fatalf("prune result %s: %v", j.Data, err)
		}
		return res
	}

	// Bad requests change nothing.
	jobsBefore := len(s.listJobs(t, "?server_id="+s.serverID))
	for _, p := range []map[string]any{
		{"dry_run": true, "image_ids": []string{stray}},
		{"image_ids": []string{"web:v1"}},
		{},
		{"image_ids": []string{stray, stray}},
		{"dry_run": true, "keep_image_ids": []string{}},
	} {
		expectProblem(t, s.action(t, s.serverID, map[string]any{"type": agentproto.JobDockerPrune, "payload": p}), http.StatusUnprocessableEntity, "validation-failed")
	}
	if got := len(s.listJobs(t, "?server_id="+s.serverID)); got != jobsBefore {
		t.Fatalf("jobs after refused prunes: %d, want %d", got, jobsBefore)
	}

	// The dry run.
	plan := result(queue(map[string]any{"dry_run": true}))
	if !plan.DryRun {
		t.Errorf("a dry run's result says dry_run false")
	}
	listed := func(id string) bool {
		return slices.ContainsFunc(plan.Images, func(im agentproto.PruneImage) bool { return im.ID == id })
	}
	keptFor := func(id string) string {
		if i := slices.IndexFunc(plan.Kept, func(k agentproto.PruneKept) bool { return k.ID == id }); i >= 0 {
			return plan.Kept[i].Reason
		}
		return ""
	}
	if !listed(stray) || listed(v1) || listed(v2) {
		t.Fatalf("the dry run lists stray %v, v1 %v, v2 %v; want only stray", listed(stray), listed(v1), listed(v2))
	}
	if keptFor(v1) != agentproto.KeptByApplication || keptFor(v2) != agentproto.KeptByApplication {
		t.Fatalf("kept: v1 %q, v2 %q; want both kept for the application", keptFor(v1), keptFor(v2))
	}
	if !slices.ContainsFunc(plan.Networks, func(n agentproto.PruneNetwork) bool { return n.ID == nw.ID && n.Name == run }) {
		t.Fatalf("the dry run does not list the unused network %s: %+v", run, plan.Networks)
	}
	if slices.ContainsFunc(plan.Networks, func(n agentproto.PruneNetwork) bool {
		return n.Name == "bridge" || n.Name == "host" || n.Name == "none"
	}) {
		t.Fatalf("the dry run lists one of the engine's own networks: %+v", plan.Networks)
	}
	if plan.ReclaimBytes <= 0 {
		t.Errorf("reclaim_bytes %d", plan.ReclaimBytes)
	}
	present := func(id string) bool {
		_, err := s.Docker.ImageInspect(ctx, id)
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	if !present(stray) {
		t.Fatalf("a dry run removed the stray image")
	}

	// The removal: the stray image and the network go; v1, asked for
	// too, is kept for the application.
	done := result(queue(map[string]any{"image_ids": []string{stray, v1}, "network_ids": []string{nw.ID}}))
	if done.DryRun || len(done.Images) != 1 || done.Images[0].ID != stray || len(done.Networks) != 1 || done.Networks[0].ID != nw.ID {
		t.Fatalf("removed %+v and %+v; want the stray image and the network", done.Images, done.Networks)
	}
	if len(done.Skipped) != 1 || done.Skipped[0].ID != v1 || !strings.Contains(done.Skipped[0].Reason, "application") {
		t.Fatalf("skipped %+v; want v1, kept for the application", done.Skipped)
	}
	if present(stray) || !present(v1) || !present(v2) {
		t.Fatalf("after the prune: stray %v, v1 %v, v2 %v; want only the stray image gone", present(stray), present(v1), present(v2))
	}
	if _, err := s.Docker.NetworkInspect(ctx, nw.ID, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the pruned network: %v", err)
	}
	if _, err := s.Docker.VolumeInspect(ctx, run, client.VolumeInspectOptions{}); err != nil {
		t.Fatalf("the volume after the prune: %v", err)
	}
	// The rollback to v1 still works.
	first := s.deployments(t, app.ID, v1)
	var a deployAccepted
	expectJSON(t, s.Post(t, "/api/v1/deployments/"+first+"/rollback", s.Token, nil), http.StatusAccepted, &a)
	s.waitDeployment(t, a.DeploymentID, "succeeded", pollInterval, deployTimeout)

	// An inspection of the application's container hides its secret.
	names := s.appContainers(t, app.ID)
	if len(names) == 0 {
		t.Fatal("the application has no container")
	}
	name, _, _ := strings.Cut(names[0], " ")
	r := s.action(t, s.serverID, map[string]any{"type": agentproto.JobContainerInspect, "payload": map[string]any{"container": name}})
	expectStatus(t, r, http.StatusAccepted)
	var ia Accepted
	r.JSON(t, &ia)
	j := s.waitJob(t, ia.JobID, "succeeded", jobTimeout)
	full := s.Get(t, "/api/v1/jobs/"+ia.JobID, s.Token)
	if strings.Contains(string(full.Body), secret) {
		t.Fatalf("the inspection's job holds the secret value")
	}
	var ins agentproto.ContainerInspectResult
	if err := json.Unmarshal(j.Data, &ins); err != nil {
		t.Fatal(err)
	}
	cfg, _ := ins.Inspect["Config"].(map[string]any)
	env, _ := cfg["Env"].([]any)
	if !slices.Contains(env, any("DATABASE_URL="+agentproto.HiddenEnvValue)) || ins.Container != name || ins.ID == "" {
		t.Fatalf("the inspection: container %q, env %v", ins.Container, env)
	}
	for _, e := range env {
		if _, v, _ := strings.Cut(e.(string), "="); v != agentproto.HiddenEnvValue {
			t.Fatalf("an environment value is shown: %q", e)
		}
	}
	if st, _ := ins.Inspect["State"].(map[string]any); st["Status"] != "running" {
		t.Fatalf("the inspection's state: %v", ins.Inspect["State"])
	}
}
