package inventory

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// fakeDocker is a dockerAPI.
type fakeDocker struct {
	host     string
	items    []container.Summary
	images   []image.Summary
	restarts map[string]int
	inspects int
	closed   bool
	volumes  []volume.Volume
	networks []network.Summary
	usage    []volume.Volume // what DiskUsage measures
	measured int             // DiskUsage calls
}

func (f *fakeDocker) VolumeList(context.Context, client.VolumeListOptions) (client.VolumeListResult, error) {
	return client.VolumeListResult{Items: f.volumes}, nil
}

func (f *fakeDocker) NetworkList(context.Context, client.NetworkListOptions) (client.NetworkListResult, error) {
	return client.NetworkListResult{Items: f.networks}, nil
}

func (f *fakeDocker) DiskUsage(_ context.Context, o client.DiskUsageOptions) (client.DiskUsageResult, error) {
	if !o.Volumes || !o.Verbose {
		return client.DiskUsageResult{}, errors.New("want the volumes' items")
	}
	f.measured++
	return client.DiskUsageResult{Volumes: client.VolumesDiskUsage{Items: f.usage}}, nil
}

func (f *fakeDocker) ContainerList(_ context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	if !o.All {
		return client.ContainerListResult{}, errors.New("want all containers")
	}
	return client.ContainerListResult{Items: f.items}, nil
}

func (f *fakeDocker) ContainerInspect(_ context.Context, id string, _ client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	f.inspects++
	n, ok := f.restarts[id]
	if !ok {
		return client.ContainerInspectResult{}, errors.New("no such container")
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{ID: id, RestartCount: n}}, nil
}

func (f *fakeDocker) ImageList(_ context.Context, _ client.ImageListOptions) (client.ImageListResult, error) {
	return client.ImageListResult{Items: f.images}, nil
}

func (f *fakeDocker) DaemonHost() string { return f.host }
func (f *fakeDocker) Close() error       { f.closed = true; return nil }

func TestDockerContainers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	writeFile(t, sock, "")
	fake := &fakeDocker{
		host: "unix://" + sock,
		items: []container.Summary{
			{ID: "bbb", Names: []string{"/web/db", "/db"}, Image: "postgres:16", State: container.StateRunning, Status: "Up 2 hours (healthy)",
				Ports: []container.PortSummary{{PrivatePort: 5432, Type: "tcp"}}},
			{ID: "aaa", Names: []string{"/web"}, Image: "nginx:1.27", State: container.StateRunning, Status: "Up 5 minutes",
				Labels: map[string]string{"com.docker.compose.project": "site"},
				Ports: []container.PortSummary{
					{IP: netip.MustParseAddr("::"), PrivatePort: 80, PublicPort: 8080, Type: "tcp"},
					{IP: netip.MustParseAddr("0.0.0.0"), PrivatePort: 80, PublicPort: 8080, Type: "tcp"},
					{IP: netip.MustParseAddr("0.0.0.0"), PrivatePort: 80, PublicPort: 8080, Type: "tcp"},
				}},
			{ID: "ccc", Names: []string{"/job"}, Image: "busybox", State: container.StateExited, Status: "Exited (1) 3 days ago"},
		},
		restarts: map[string]int{"aaa": 0, "bbb": 3, "ccc": 1},
	}
	d := newDockerContainers()
	d.newClient = func() (dockerAPI, error) { return fake, nil }
	got, err := d.list(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []agentproto.ContainerInfo{
		{ID: "bbb", Name: "db", Image: "postgres:16", State: "running", Status: "Up 2 hours (healthy)",
			Ports: []agentproto.ContainerPort{{ContainerPort: 5432, Protocol: "tcp"}}, Labels: map[string]string{}, RestartCount: 3},
		{ID: "ccc", Name: "job", Image: "busybox", State: "exited", Status: "Exited (1) 3 days ago",
			Ports: []agentproto.ContainerPort{}, Labels: map[string]string{}, RestartCount: 1},
		{ID: "aaa", Name: "web", Image: "nginx:1.27", State: "running", Status: "Up 5 minutes",
			Ports: []agentproto.ContainerPort{
				{IP: "0.0.0.0", HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
				{IP: "::", HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
			},
			Labels: map[string]string{"com.docker.compose.project": "site"}},
	}
	if len(got) != len(want) {
		t.Fatalf("containers:\n got %+v\nwant %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Name != w.Name || g.Image != w.Image || g.State != w.State || g.Status != w.Status ||
			g.RestartCount != w.RestartCount || !slices.Equal(g.Ports, w.Ports) || !maps.Equal(g.Labels, w.Labels) || g.Labels == nil || g.Ports == nil {
			t.Errorf("container %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if got, want := fake.inspects, 3; got != want {
		t.Fatalf("%d inspections, want %d", got, want)
	}

	// Unchanged status: no new inspection. A restart changes the status
	// and is inspected again.
	if _, err := d.list(context.Background()); err != nil || fake.inspects != 3 {
		t.Fatalf("second list: err %v, %d inspections; want none new", err, fake.inspects)
	}
	fake.items[1].Status = "Up 2 seconds"
	fake.restarts["aaa"] = 1
	got, err = d.list(context.Background())
	if err != nil || fake.inspects != 4 {
		t.Fatalf("after a restart: err %v, %d inspections; want 4", err, fake.inspects)
	}
	if got, want := got[2].RestartCount, 1; got != want {
		t.Errorf("restart count after a restart = %d, want %d", got, want)
	}
	d.close()
	if !fake.closed {
		t.Error("client not closed")
	}
}

func TestDockerContainersWithoutDocker(t *testing.T) {
	fake := &fakeDocker{host: "unix://" + filepath.Join(t.TempDir(), "docker.sock")}
	d := newDockerContainers()
	d.newClient = func() (dockerAPI, error) { return fake, nil }
	got, err := d.list(context.Background())
	if got != nil || err != nil {
		t.Fatalf("list without a Docker socket = %v, %v; want nil, nil", got, err)
	}
}

func TestContainerName(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"/web"}, "web"},
		{[]string{"/app/db", "/db"}, "db"},
		{[]string{"/a/b"}, "a/b"},
		{nil, ""},
	} {
		if got := containerName(c.names); got != c.want {
			t.Errorf("containerName(%q) = %q, want %q", c.names, got, c.want)
		}
	}
}

// TestDockerContainersOnThisHost runs a container on the real Docker engine
// and finds it.
func TestDockerContainersOnThisHost(t *testing.T) {
	cli := testlab.Docker(t)
	if h := testlab.DockerHost(); h != "" {
		t.Setenv("DOCKER_HOST", h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A static binary that idles, in an image FROM scratch: no registry
	// is needed.
	image := testlab.ProgramImage(t, cli, testlab.UniqueName("capstan-inventory-test:"), "./testdata/sleeper").Ref
	port := network.MustParsePort("8080/tcp")
	name := testlab.CreateContainer(t, cli, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Labels: map[string]string{"capstan.test": "inventory"},
			ExposedPorts: network.PortSet{port: {}}},
		HostConfig: &container.HostConfig{
			PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1")}}},
		},
	})
	testlab.StartContainer(t, cli, name)
	insp, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := insp.Container.ID

	d := newDockerContainers()
	defer d.close()
	got, err := d.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(got, func(c agentproto.ContainerInfo) bool { return c.ID == id })
	if i < 0 {
		t.Fatalf("container %s not among %d listed", id, len(got))
	}
	c := got[i]
	if c.Name != name || c.Image != image || c.State != "running" || !strings.HasPrefix(c.Status, "Up") || c.Labels["capstan.test"] != "inventory" {
		t.Errorf("container = %+v", c)
	}
	if len(c.Ports) != 1 || c.Ports[0].IP != "127.0.0.1" || c.Ports[0].ContainerPort != 8080 || c.Ports[0].HostPort == 0 || c.Ports[0].Protocol != "tcp" {
		t.Errorf("ports = %+v, want 127.0.0.1:<some port> → 8080/tcp", c.Ports)
	}
}
