package inventory

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// dockerAPI is what the containers collector uses of the Engine API client
// (*client.Client).
type dockerAPI interface {
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerInspect(ctx context.Context, id string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ImageList(ctx context.Context, options client.ImageListOptions) (client.ImageListResult, error)
	VolumeList(ctx context.Context, options client.VolumeListOptions) (client.VolumeListResult, error)
	NetworkList(ctx context.Context, options client.NetworkListOptions) (client.NetworkListResult, error)
	DiskUsage(ctx context.Context, options client.DiskUsageOptions) (client.DiskUsageResult, error)
	DaemonHost() string
	Close() error
}

// inspected is what is remembered of a container's inspection.
type inspected struct {
	status       string // the list's Status when inspected
	restartCount int
}

// dockerContainers lists the containers of the Docker engine through its
// API (the version negotiated with the daemon on the first call). The
// restart count is only in a container's inspection; it is inspected again
// only when its status text changes (a restart changes it), not on every
// collection.
type dockerContainers struct {
	newClient func() (dockerAPI, error)
	// newEventsClient makes the event watcher's client; nil: the
	// engine of DOCKER_HOST, or the default socket.
	newEventsClient func() (eventsAPI, error)
	cli             dockerAPI
	inspected       map[string]inspected // by container ID
	// last is the last list's containers, nil when it failed: the
	// volumes and networks count their containers in it.
	last  []container.Summary
	sizes volumeSizes
}

func newDockerContainers() *dockerContainers {
	return &dockerContainers{
		newClient: func() (dockerAPI, error) {
			// DOCKER_HOST and friends if set, else the default socket.
			return dockerc.New("")
		},
		inspected: map[string]inspected{},
	}
}

// engine makes the Docker client on first use and reports whether there
// is a Docker engine to ask: false, nil when its socket does not exist.
func (d *dockerContainers) engine() (bool, error) {
	if d.cli == nil {
		cli, err := d.newClient()
		if err != nil {
			return false, err
		}
		d.cli = cli
	}
	if sock, ok := strings.CutPrefix(d.cli.DaemonHost(), "unix://"); ok {
		if _, err := os.Stat(sock); errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
	}
	return true, nil
}

// list returns the containers, sorted by name, or nil, nil when there is no
// Docker engine (its socket does not exist).
func (d *dockerContainers) list(ctx context.Context) ([]agentproto.ContainerInfo, error) {
	d.last = nil
	if ok, err := d.engine(); !ok {
		return nil, err
	}
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, err
	}
	out := make([]agentproto.ContainerInfo, 0, len(res.Items))
	seen := make(map[string]bool, len(res.Items))
	for _, c := range res.Items {
		seen[c.ID] = true
		info := agentproto.ContainerInfo{
			ID:           c.ID,
			Name:         containerName(c.Names),
			Image:        c.Image,
			State:        string(c.State),
			Status:       c.Status,
			Ports:        containerPorts(c.Ports),
			Labels:       maps.Clone(c.Labels),
			RestartCount: d.restartCount(ctx, c),
		}
		if info.Labels == nil {
			info.Labels = map[string]string{}
		}
		out = append(out, info)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	maps.DeleteFunc(d.inspected, func(id string, _ inspected) bool { return !seen[id] })
	d.last = res.Items
	slices.SortFunc(out, func(a, b agentproto.ContainerInfo) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// restartCount is a container's restart count, from a remembered
// inspection while its status text is unchanged. A container removed in
// the meantime counts 0.
func (d *dockerContainers) restartCount(ctx context.Context, c container.Summary) int {
	if in, ok := d.inspected[c.ID]; ok && in.status == c.Status {
		return in.restartCount
	}
	res, err := d.cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil {
		return 0
	}
	d.inspected[c.ID] = inspected{status: c.Status, restartCount: res.Container.RestartCount}
	return res.Container.RestartCount
}

// containerName is a container's own name: the one without a slash once
// the leading one is trimmed (others are legacy link aliases).
func containerName(names []string) string {
	for _, n := range names {
		if n = strings.TrimPrefix(n, "/"); !strings.Contains(n, "/") {
			return n
		}
	}
	if len(names) > 0 {
		return strings.TrimPrefix(names[0], "/")
	}
	return ""
}

// containerPorts converts and sorts a container's ports, without
// duplicates.
func containerPorts(ps []container.PortSummary) []agentproto.ContainerPort {
	out := make([]agentproto.ContainerPort, 0, len(ps))
	for _, p := range ps {
		cp := agentproto.ContainerPort{HostPort: int(p.PublicPort), ContainerPort: int(p.PrivatePort), Protocol: p.Type}
		if p.IP.IsValid() {
			cp.IP = p.IP.String()
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b agentproto.ContainerPort) int {
		return cmp.Or(cmp.Compare(a.ContainerPort, b.ContainerPort), cmp.Compare(a.Protocol, b.Protocol),
			cmp.Compare(a.HostPort, b.HostPort), cmp.Compare(a.IP, b.IP))
	})
	return slices.Compact(out)
}

func (d *dockerContainers) close() {
	if d.cli != nil {
		_ = d.cli.Close()
		d.cli = nil
	}
}
