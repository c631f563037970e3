package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// The applications an agent probes: those of its server with a live
// release, with the live deployment's health path and port.
func TestStoreHealthTargets(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		other := mustCreateServer(t, s, "web-2")
		release := func(a apps.App, at time.Time) apps.DeploymentRecord {
			t.Helper()
			d := mustQueueDeployment(t, s, a, at)
			if _, _, ok, err := s.ClaimDeployment(ctx, a.ID, at); err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
			if ok, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Succeeded, At: at}); err != nil || !ok {
				t.Fatalf("finish: %v %v", ok, err)
			}
			return d
		}
		live := mustInsertApp(t, s, srv, "live")
		d := release(live, t0)
		mustInsertApp(t, s, srv, "never") // no live release
		svc := apps.App{ID: ids.NewAt(apps.AppIDPrefix, t0), ServerID: srv, Name: "svc", Kind: apps.KindService,
			Source: apps.Source{Type: apps.SourceGit, InstallationID: 1, RepoID: 2, Branch: "main"}, HealthPath: "/",
			Service: apps.ServiceSettings{StartCommand: "./run", BuildTimeoutSeconds: 60}, State: apps.StateActive, CreatedAt: t0, UpdatedAt: t0}
		if err := s.InsertApp(ctx, svc, ""); err != nil {
			t.Fatal(err)
		}
		ds := release(svc, t0.Add(time.Second))
		gone := mustInsertApp(t, s, srv, "gone")
		release(gone, t0.Add(2*time.Second))
		if err := s.SetAppState(ctx, gone.ID, []string{apps.StateActive}, apps.StateRemoving, "job_1", "", t0); err != nil {
			t.Fatal(err)
		}
		release(mustInsertApp(t, s, other, "elsewhere"), t0.Add(3*time.Second))

		got, err := s.HealthTargets(ctx, srv)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]agentproto.HealthTarget{
			live.ID: {AppID: live.ID, Kind: agentproto.AppKindContainer, DeploymentID: d.ID, HealthPath: "/", ContainerPort: 80},
		}
		// A service application's slots have no container port.
		want[svc.ID] = agentproto.HealthTarget{AppID: svc.ID, Kind: agentproto.AppKindService, DeploymentID: ds.ID, HealthPath: "/"}
		if len(got) != len(want) {
			t.Fatalf("targets %+v, want %+v", got, want)
		}
		for _, g := range got {
			if g != want[g.AppID] {
				t.Errorf("target %+v, want %+v", g, want[g.AppID])
			}
		}
		if none, err := s.HealthTargets(ctx, "srv_nope"); err != nil || len(none) != 0 {
			t.Fatalf("targets of an unknown server: %+v %v", none, err)
		}
	})
}
