package inventory

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/image"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func TestDockerImages(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	writeFile(t, sock, "")
	created := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	fake := &fakeDocker{host: "unix://" + sock, images: []image.Summary{
		{ID: "sha256:bbb", RepoTags: []string{"web:v2", "registry.example/web:v2"}, Size: 2000, Created: created.Unix()},
		{ID: "sha256:aaa", RepoTags: []string{"<none>:<none>"}, Size: 1000, Created: created.Add(-time.Hour).Unix()},
	}}
	d := newDockerContainers()
	d.newClient = func() (dockerAPI, error) { return fake, nil }
	got, err := d.images(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []agentproto.ImageInfo{
		{ID: "sha256:aaa", Tags: []string{}, SizeBytes: 1000, Created: created.Add(-time.Hour)},
		{ID: "sha256:bbb", Tags: []string{"registry.example/web:v2", "web:v2"}, SizeBytes: 2000, Created: created},
	}
	if len(got) != len(want) {
		t.Fatalf("images: got %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || !slices.Equal(g.Tags, w.Tags) || g.Tags == nil || g.SizeBytes != w.SizeBytes || !g.Created.Equal(w.Created) {
			t.Errorf("image %d: got %+v, want %+v", i, g, w)
		}
	}

	// A changed image list changes the inventory's hash; the order of
	// the list does not.
	inv := agentproto.InventoryRequest{Images: got}
	swapped := agentproto.InventoryRequest{Images: []agentproto.ImageInfo{got[1], got[0]}}
	if Hash(inv) != Hash(swapped) {
		t.Error("the order of images changes the hash")
	}
	if Hash(inv) == Hash(agentproto.InventoryRequest{Images: got[:1]}) {
		t.Error("a removed image does not change the hash")
	}

	// Without Docker's socket: nil, no error.
	fake.host = "unix://" + filepath.Join(t.TempDir(), "none.sock")
	if got, err := d.images(context.Background()); got != nil || err != nil {
		t.Fatalf("without Docker: %v, %v", got, err)
	}
}
