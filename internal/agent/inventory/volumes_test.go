package inventory

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/volume"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func TestDockerVolumesAndNetworks(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	writeFile(t, sock, "")
	fake := &fakeDocker{
		host: "unix://" + sock,
		items: []container.Summary{
			{ID: "c1", Names: []string{"/db"}, Mounts: []container.MountPoint{{Type: "volume", Name: "pgdata"}, {Type: "bind"}},
				NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"app_net": {NetworkID: "n2"}}}},
			// A stopped container whose endpoint carries only the name.
			{ID: "c2", Names: []string{"/web"}, Mounts: []container.MountPoint{{Type: "volume", Name: "pgdata"}},
				NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"app_net": {}}}},
		},
		volumes: []volume.Volume{{Name: "pgdata", Driver: "local", Labels: map[string]string{"k": "v"}}, {Name: "cache", Driver: "local"}, {Name: "nfs", Driver: "nfs"}},
		networks: []network.Summary{
			{Network: network.Network{ID: "n2", Name: "app_net", Driver: "bridge", Scope: "local"}},
			{Network: network.Network{ID: "n1", Name: "bridge", Driver: "bridge", Scope: "local"}},
		},
		usage: []volume.Volume{{Name: "pgdata", UsageData: &volume.UsageData{Size: 4096, RefCount: 2}}, {Name: "cache", UsageData: &volume.UsageData{Size: 0}},
			{Name: "nfs", UsageData: &volume.UsageData{Size: -1}}},
	}
	d := newDockerContainers()
	d.newClient = func() (dockerAPI, error) { return fake, nil }
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

	// Before any container list, counts are unknown.
	vols, err := d.volumes(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if vols[2].Name != "pgdata" || vols[2].Containers != -1 || vols[2].SizeBytes != 4096 {
		t.Fatalf("before a container list: %+v", vols)
	}
	if _, err := d.list(ctx); err != nil {
		t.Fatal(err)
	}
	vols, err = d.volumes(ctx, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []agentproto.VolumeInfo{
		{Name: "cache", Driver: "local", SizeBytes: 0, Containers: 0},
		{Name: "nfs", Driver: "nfs", SizeBytes: -1, Containers: 0},
		{Name: "pgdata", Driver: "local", SizeBytes: 4096, Containers: 2, Labels: map[string]string{"k": "v"}},
	}
	if !slices.EqualFunc(vols, want, func(a, b agentproto.VolumeInfo) bool {
		return a.Name == b.Name && a.Driver == b.Driver && a.SizeBytes == b.SizeBytes && a.Containers == b.Containers && a.Labels["k"] == b.Labels["k"]
	}) {
		t.Fatalf("volumes: got %+v, want %+v", vols, want)
	}
	if fake.measured != 1 {
		t.Fatalf("sizes measured %d times within %s, want once", fake.measured, volumeSizesEvery)
	}
	fake.usage[0].UsageData.Size = 8192
	vols, _ = d.volumes(ctx, now.Add(volumeSizesEvery))
	if fake.measured != 2 || vols[2].SizeBytes != 8192 {
		t.Fatalf("after %s: measured %d times, pgdata %d bytes; want a new measurement of 8192", volumeSizesEvery, fake.measured, vols[2].SizeBytes)
	}

	nets, err := d.networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantNets := []agentproto.NetworkInfo{
		{ID: "n2", Name: "app_net", Driver: "bridge", Scope: "local", Containers: 2},
		{ID: "n1", Name: "bridge", Driver: "bridge", Scope: "local", Containers: 0},
	}
	if !slices.Equal(nets, wantNets) {
		t.Fatalf("networks: got %+v, want %+v", nets, wantNets)
	}

	// No engine: no lists, no error.
	none := newDockerContainers()
	none.newClient = func() (dockerAPI, error) {
		return &fakeDocker{host: "unix://" + filepath.Join(t.TempDir(), "docker.sock")}, nil
	}
	if v, err := none.volumes(ctx, now); v != nil || err != nil {
		t.Fatalf("no engine: volumes %v, %v", v, err)
	}
	if n, err := none.networks(ctx); n != nil || err != nil {
		t.Fatalf("no engine: networks %v, %v", n, err)
	}
}
