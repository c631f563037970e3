package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func hexID(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

func TestPlanPrune(t *testing.T) {
	live, rollback, used, stray, dangling := hexID('a'), hexID('b'), hexID('c'), hexID('d'), hexID('e')
	st := engineState{
		images: []imageSummary{
			{ID: stray, RepoTags: []string{"tool:2", "tool:latest"}, Size: 3000},
			{ID: live, RepoTags: []string{"web:v2"}, Size: 1000},
			{ID: rollback, RepoTags: []string{"web:v1"}, Size: 900},
			{ID: used, RepoTags: []string{"postgres:17"}, Size: 5000},
			{ID: dangling, RepoTags: []string{"<none>:<none>"}, Size: 200},
		},
		containers: []containerSummary{
			// A stopped container keeps its image and its network.
			{ID: "c1", ImageID: used, NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"db_net": {}}}},
			{ID: "c2", ImageID: live, NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"app": {NetworkID: "n-app"}}}},
		},
		networks: []network.Summary{
			{Network: network.Network{ID: "n-bridge", Name: "bridge", Scope: "local"}},
			{Network: network.Network{ID: "n-host", Name: "host", Scope: "local"}},
			{Network: network.Network{ID: "n-none", Name: "none", Scope: "local"}},
			{Network: network.Network{ID: "n-app", Name: "renamed", Scope: "local"}},
			{Network: network.Network{ID: "n-db", Name: "db_net", Scope: "local"}},
			{Network: network.Network{ID: "n-old", Name: "old_net", Driver: "bridge", Scope: "local"}},
			{Network: network.Network{ID: "n-swarm", Name: "overlay", Scope: "swarm"}},
		},
	}
	// The control plane keeps the live and the rollback release; a short
	// id matches too.
	plan := planPrune(st, []string{live, rollback[:19]})
	gotImages := []string{}
	for _, im := range plan.Images {
		gotImages = append(gotImages, im.ID)
	}
	if want := []string{stray, dangling}; !slices.Equal(gotImages, want) {
		t.Fatalf("images to remove: %v, want %v", gotImages, want)
	}
	if plan.ReclaimBytes != 3200 {
		t.Errorf("reclaim %d, want 3200", plan.ReclaimBytes)
	}
	if !slices.Equal(plan.Images[0].Tags, []string{"tool:2", "tool:latest"}) || len(plan.Images[1].Tags) != 0 || plan.Images[1].Tags == nil {
		t.Errorf("tags: %+v", plan.Images)
	}
	kept := map[string]string{}
	for _, k := range plan.Kept {
		kept[k.ID] = k.Reason
	}
	if kept[live] != agentproto.KeptByApplication || kept[rollback] != agentproto.KeptByApplication || kept[used] != agentproto.KeptInUse || len(kept) != 3 {
		t.Errorf("kept: %v", kept)
	}
	if len(plan.Networks) != 1 || plan.Networks[0].ID != "n-old" || plan.Networks[0].Name != "old_net" {
		t.Errorf("networks to remove: %+v, want only old_net", plan.Networks)
	}
	if why := imageNotPrunable(plan, rollback); !strings.Contains(why, "application") {
		t.Errorf("why the rollback image is not pruned: %q", why)
	}
	if why := imageNotPrunable(plan, hexID('f')); why != "not present" {
		t.Errorf("why a missing image is not pruned: %q", why)
	}
}

func TestCheckPrune(t *testing.T) {
	for _, tc := range []struct {
		p  agentproto.DockerPrunePayload
		ok bool
	}{
		{agentproto.DockerPrunePayload{DryRun: true}, true},
		{agentproto.DockerPrunePayload{ImageIDs: []string{hexID('a')}, NetworkIDs: []string{strings.Repeat("0", 64)}}, true},
		{agentproto.DockerPrunePayload{DryRun: true, ImageIDs: []string{hexID('a')}}, false},
		{agentproto.DockerPrunePayload{ImageIDs: []string{"web:v1"}}, false},
		{agentproto.DockerPrunePayload{NetworkIDs: []string{"bridge"}}, false},
	} {
		if err := checkPrune(tc.p); (err == nil) != tc.ok {
			t.Errorf("checkPrune(%+v) = %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}
