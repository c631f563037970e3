package apps_test

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/metrics"
)

// A service application's detail shows every release slot its server's
// inventory lists: unit, port, release, state, and which one is live.
func TestServiceApplicationSlotStates(t *testing.T) {
	r := newGitRig(t)
	a, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "svc", ServerID: r.serverID, Kind: apps.KindService,
		Source:  apps.Source{Type: apps.SourceGit, InstallationID: r.inst, RepoID: r.repo.ID, Branch: "main"},
		Service: &apps.ServiceSettings{StartCommand: "./run"}, Deploy: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.app(a.ID); got.Slots == nil || got.Slots.CollectedAt != nil || len(got.Slots.Slots) != 0 || got.Services != nil {
		t.Fatalf("slots before any inventory: %+v, services %+v", got.Slots, got.Services)
	}
	j := r.claim(agentproto.JobAppDeploy)
	first := a.Latest.ID
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{Service: &agentproto.ServiceRelease{
		Unit: "capstan-app-svc@41000.service", Port: 41000, Release: first, Built: true}}, "")

	// The live slot, not in the inventory yet.
	r.clock.Advance(time.Second)
	inv := func(units ...agentproto.ServiceInfo) {
		t.Helper()
		if err := r.st.PutInventory(r.ctx, r.serverID, metrics.Inventory{CollectedAt: r.clock.Now(), ReceivedAt: r.clock.Now(),
			Services: units}); err != nil {
			t.Fatal(err)
		}
	}
	inv(agentproto.ServiceInfo{Name: "ssh.service", ActiveState: "active", SubState: "running"})
	got := r.app(a.ID).Slots
	if got.CollectedAt == nil || len(got.Slots) != 1 || got.Slots[0] != (apps.SlotState{Unit: "capstan-app-svc@41000.service", Port: 41000,
		Release: first, State: "missing", Live: true}) {
		t.Fatalf("slots with the live one missing: %+v", got)
	}

	// The live slot and an old one that failed; another application's
	// unit of a similar name is not this one's.
	unit := func(port, release, active, sub string) agentproto.ServiceInfo {
		return agentproto.ServiceInfo{Name: "capstan-app-svc@" + port + ".service", Description: "Capstan application svc (deployment " + release + ")",
			LoadState: "loaded", ActiveState: active, SubState: sub}
	}
	inv(unit("41000", first, "active", "running"), unit("39000", "dep_old", "failed", "failed"),
		agentproto.ServiceInfo{Name: "capstan-app-svc2@40000.service", ActiveState: "active", SubState: "running"},
		agentproto.ServiceInfo{Name: "capstan-app-svc@nope.service", ActiveState: "active", SubState: "running"})
	got = r.app(a.ID).Slots
	want := []apps.SlotState{
		{Unit: "capstan-app-svc@39000.service", Port: 39000, Release: "dep_old", State: "failed", Status: "failed (failed)"},
		{Unit: "capstan-app-svc@41000.service", Port: 41000, Release: first, State: "running", Status: "active (running)", Live: true},
	}
	if len(got.Slots) != len(want) {
		t.Fatalf("slots %+v, want %+v", got.Slots, want)
	}
	for i := range want {
		if got.Slots[i] != want[i] {
			t.Errorf("slot %d: %+v, want %+v", i, got.Slots[i], want[i])
		}
	}
}
