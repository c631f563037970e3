package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// mustSucceed stores a deployment of a that succeeded with imageID.
func mustSucceed(t *testing.T, s *store.Store, a apps.App, at time.Time, imageID string) {
	t.Helper()
	ctx := context.Background()
	d := mustQueueDeployment(t, s, a, at)
	if _, _, ok, err := s.ClaimDeployment(ctx, a.ID, at); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if done, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Succeeded, ImageID: imageID, At: at}); err != nil || !done {
		t.Fatalf("finish: %v %v", done, err)
	}
}

func TestStorePrunableImageIDs(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv, srv2 := mustCreateServer(t, s, "web-1"), mustCreateServer(t, s, "web-2")
		web, api, far := mustInsertApp(t, s, srv, "web"), mustInsertApp(t, s, srv, "api"), mustInsertApp(t, s, srv2, "far")
		mustSucceed(t, s, api, t0, "sha256:1")                  // shared with web: never pruned
		mustSucceed(t, s, far, t0.Add(time.Second), "sha256:0") // another server: no matter
		for i := range 8 {
			mustSucceed(t, s, web, t0.Add(time.Duration(i+2)*time.Second), fmt.Sprintf("sha256:%d", i))
		}
		// web, newest first: 7 6 5 4 3 | 2 1 0.
		got, err := s.PrunableImageIDs(ctx, web.ID, 5, 20)
		if err != nil || !slices.Equal(got, []string{"sha256:2", "sha256:0"}) {
			t.Fatalf("prunable: %v %v; want 2 and 0", got, err)
		}
		if got, err := s.PrunableImageIDs(ctx, web.ID, 5, 1); err != nil || !slices.Equal(got, []string{"sha256:2"}) {
			t.Fatalf("prunable within 1: %v %v", got, err)
		}
		if got, err := s.PrunableImageIDs(ctx, api.ID, 5, 20); err != nil || len(got) != 0 || got == nil {
			t.Fatalf("prunable of an app with one deployment: %v %v", got, err)
		}
		// An image deployed again lately is kept; 3 falls out.
		mustSucceed(t, s, web, t0.Add(20*time.Second), "sha256:2")
		if got, _ := s.PrunableImageIDs(ctx, web.ID, 5, 20); !slices.Equal(got, []string{"sha256:3", "sha256:0"}) {
			t.Fatalf("after deploying 2 again: %v", got)
		}
	})
}

func TestStoreInventoryImages(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		if _, _, known, err := s.ServerImageIDs(ctx, srv); known || err != nil {
			t.Fatalf("without inventory: known %v, %v", known, err)
		}
		if err := s.PutInventory(ctx, srv, metrics.Inventory{CollectedAt: t0, ReceivedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if _, _, known, err := s.ServerImageIDs(ctx, srv); known || err != nil {
			t.Fatalf("inventory without images: known %v, %v", known, err)
		}
		images := []agentproto.ImageInfo{{ID: "sha256:a", Tags: []string{"web:v1"}, SizeBytes: 10, Created: t0}, {ID: "sha256:b", Tags: []string{}}}
		if err := s.PutInventory(ctx, srv, metrics.Inventory{CollectedAt: t0.Add(time.Minute), ReceivedAt: t0, Images: images}); err != nil {
			t.Fatal(err)
		}
		ids, at, known, err := s.ServerImageIDs(ctx, srv)
		if err != nil || !known || !at.Equal(t0.Add(time.Minute)) || !slices.Equal(ids, []string{"sha256:a", "sha256:b"}) {
			t.Fatalf("images: %v %v %v %v", ids, at, known, err)
		}
		inv, err := s.ServerInventory(ctx, srv)
		if err != nil || len(inv.Images) != 2 || inv.Images[0].SizeBytes != 10 || !inv.Images[0].Created.Equal(t0) || inv.Images[0].Tags[0] != "web:v1" {
			t.Fatalf("inventory images: %+v %v", inv, err)
		}
	})
}

// The other bucket is stored under the empty host, apart from every
// site's minutes.
func TestStoreOtherBucket(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
		if err := s.PutRequestMinutes(ctx, "srv_a", []agentproto.RequestMinute{
			{Host: "example.com", Minute: m, Count: 3, Status2xx: 3},
			{Host: domains.OtherHost, Minute: m, Count: 40, Status4xx: 40},
		}, m); err != nil {
			t.Fatal(err)
		}
		other, err := s.RequestBuckets(ctx, "srv_a", []string{domains.OtherHost}, m, m.Add(time.Minute), time.Minute)
		if err != nil || len(other) != 1 || other[0].Count != 40 {
			t.Fatalf("other: %+v %v", other, err)
		}
		site, err := s.RequestBuckets(ctx, "srv_a", []string{"example.com"}, m, m.Add(time.Minute), time.Minute)
		if err != nil || len(site) != 1 || site[0].Count != 3 {
			t.Fatalf("site: %+v %v", site, err)
		}
	})
}

// The images other applications on the server ran: their images and their
// kept compose releases' images, not the application's own nor those of
// another server's applications.
func TestStoreOtherAppsImageIDs(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv, srv2 := mustCreateServer(t, s, "web-1"), mustCreateServer(t, s, "web-2")
		web, api, stack, far := mustInsertApp(t, s, srv, "web"), mustInsertApp(t, s, srv, "api"), mustInsertApp(t, s, srv, "stack"),
			mustInsertApp(t, s, srv2, "far")
		mustSucceed(t, s, web, t0, "sha256:own")
		mustSucceed(t, s, api, t0.Add(time.Second), "sha256:api")
		mustSucceed(t, s, far, t0.Add(2*time.Second), "sha256:far")
		d := mustQueueDeployment(t, s, stack, t0.Add(3*time.Second))
		if _, _, ok, err := s.ClaimDeployment(ctx, stack.ID, t0.Add(3*time.Second)); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if ok, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Succeeded, ImageID: "sha256:front", At: t0.Add(3 * time.Second),
			Release: &apps.Release{Services: map[string]string{"front": "sha256:front", "cache": "sha256:redis"}}}); err != nil || !ok {
			t.Fatalf("finish: %v %v", ok, err)
		}
		mustQueueDeployment(t, s, api, t0.Add(4*time.Second)) // queued: ran nothing
		got, err := s.OtherAppsImageIDs(ctx, web.ID)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if want := []string{"sha256:api", "sha256:front", "sha256:redis"}; !slices.Equal(got, want) {
			t.Fatalf("other applications' images: %v, want %v", got, want)
		}
	})
}
