package deploy

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type containerSummary = container.Summary

var loopback = netip.MustParseAddr("127.0.0.1")

// appContainers lists the containers of app, in any state, newest first.
func appContainers(ctx context.Context, cli *client.Client, app string) ([]containerSummary, error) {
	return labeledContainers(ctx, cli, agentproto.LabelApp, app, "the containers")
}

// labeledContainers lists the containers whose label is app, in any
// state, newest first; what names them in an error.
func labeledContainers(ctx context.Context, cli *client.Client, label, app, what string) ([]containerSummary, error) {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", label+"="+app),
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s of application %s: %w", what, app, err)
	}
	items := slices.DeleteFunc(res.Items, func(c containerSummary) bool { return c.Labels[label] != app })
	slices.SortStableFunc(items, func(a, b containerSummary) int { return cmp.Compare(b.Created, a.Created) })
	return items, nil
}

// liveContainer is the container of app that serves: the newest running
// one, else the newest one in any state; ok is false if app has none.
func liveContainer(items []containerSummary) (c containerSummary, ok bool) {
	for _, c := range items {
		if c.State == container.StateRunning {
			return c, true
		}
	}
	if len(items) > 0 {
		return items[0], true
	}
	return containerSummary{}, false
}

// upstreamOf is the loopback address a running container's LabelPort is
// published on, or "".
func upstreamOf(c containerSummary) string {
	if c.State != container.StateRunning {
		return ""
	}
	port, err := strconv.Atoi(c.Labels[agentproto.LabelPort])
	if err != nil {
		return ""
	}
	for _, p := range c.Ports {
		if int(p.PrivatePort) == port && p.PublicPort != 0 && (!p.IP.IsValid() || p.IP == loopback) && p.Type == "tcp" {
			return netip.AddrPortFrom(loopback, p.PublicPort).String()
		}
	}
	return ""
}

func containerName(c containerSummary) string {
	if len(c.Names) > 0 {
		return strings.TrimPrefix(c.Names[0], "/")
	}
	return shortID(c.ID)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// newName is the name of a release's container:
// capstan-<app name>-<short deployment id>.
func newName(appName, appID, deploymentID string) string {
	slug := slugify(appName, 40)
	if slug == "" {
		slug = slugify(appID, 40)
	}
	dep := deploymentID
	if i := strings.LastIndexByte(dep, '_'); i >= 0 {
		dep = dep[i+1:]
	}
	dep = slugify(dep, 64)
	if len(dep) > 8 {
		// Prefixed time-ordered ids (dep_<time><random>) differ at the
		// end.
		dep = dep[len(dep)-8:]
	}
	if dep == "" {
		dep = "x"
	}
	return "capstan-" + slug + "-" + dep
}

// slugify lowercases s and turns each run of characters a container name
// may not hold into one '-', at most max bytes.
func slugify(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= max {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}

// started is a release's new container.
type started struct {
	ID       string
	Name     string
	HostPort int
}

func (s started) upstream() string {
	return netip.AddrPortFrom(loopback, uint16(s.HostPort)).String()
}

// shape is what a compose service adds to a container: its name, labels,
// command, health check, mounts, networks, restart policy and memory
// limit. Nil for the container of a container application.
type shape struct {
	name       string
	labels     map[string]string
	cmd        []string
	health     *container.HealthConfig
	mounts     []mount.Mount
	networking *network.NetworkingConfig
	// join are networks the container joins after it is created (an
	// engine before API 1.44 creates a container on one network only).
	join    []string
	restart container.RestartPolicy
	memory  int64
}

// apply puts the shape onto a container's configuration.
func (sh *shape) apply(cfg *container.Config, hc *container.HostConfig, opts *client.ContainerCreateOptions) {
	if sh == nil {
		return
	}
	maps.Copy(cfg.Labels, sh.labels)
	if len(sh.cmd) > 0 {
		cfg.Cmd = sh.cmd
	}
	cfg.Healthcheck = sh.health
	hc.Mounts = sh.mounts
	hc.RestartPolicy = sh.restart
	if sh.memory > 0 {
		hc.Resources.Memory = sh.memory
	}
	opts.NetworkingConfig = sh.networking
}

// joinNetworks connects a created container to the shape's other
// networks.
func (sh *shape) joinNetworks(ctx context.Context, cli *client.Client, id string) error {
	if sh == nil {
		return nil
	}
	for _, n := range sh.join {
		if _, err := cli.NetworkConnect(ctx, n, client.NetworkConnectOptions{Container: id}); err != nil {
			return fmt.Errorf("connecting the container to network %s: %w", n, err)
		}
	}
	return nil
}

// startContainer creates and starts the container of a release, its
// container port published on a loopback port the agent picks. A
// container that could not start is removed. sh, for a compose
// application's web service, shapes the container.
func (d *Deployer) startContainer(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, img image, env []string, sh *shape, events agent.EventSink) (started, error) {
	port, ok := network.PortFrom(uint16(p.ContainerPort), network.TCP)
	if !ok {
		return started{}, fmt.Errorf("invalid container port %d", p.ContainerPort)
	}
	stop := int(d.opts.StopTimeout / time.Second)
	cfg := &container.Config{
		Image: img.ID,
		Env:   env,
		Labels: map[string]string{
			agentproto.LabelApp:        p.AppID,
			agentproto.LabelAppName:    p.AppName,
			agentproto.LabelDeployment: p.DeploymentID,
			agentproto.LabelPort:       strconv.Itoa(p.ContainerPort),
			agentproto.LabelHealthPath: p.HealthPath,
		},
		ExposedPorts: network.PortSet{port: {}},
		StopTimeout:  &stop,
	}
	name := newName(p.AppName, p.AppID, p.DeploymentID)
	if sh != nil {
		name = sh.name
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("creating container %s of image %s", name, shortImage(img.ID)),
		map[string]any{"name": name, "image_id": img.ID, "env_keys": p.EnvKeys, "memory_limit_bytes": p.MemoryLimitBytes})
	// The agent picks the loopback port itself: a port the engine picks
	// changes every time the container restarts (a crash, a reboot), which
	// would leave the proxy pointing at a dead port. A port taken between
	// the pick and the start is retried with another.
	var s started
	for attempt := 1; ; attempt++ {
		hostPort, err := agent.FreeLoopbackPort()
		if err != nil {
			return started{}, fmt.Errorf("choosing a loopback port: %w", err)
		}
		hc := &container.HostConfig{
			PortBindings:  network.PortMap{port: {{HostIP: loopback, HostPort: strconv.Itoa(hostPort)}}},
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
			Resources:     container.Resources{Memory: p.MemoryLimitBytes},
			LogConfig:     logConfig(ctx, cli),
		}
		opts := client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc}
		sh.apply(cfg, hc, &opts)
		res, err := cli.ContainerCreate(ctx, opts)
		if cerrdefs.IsConflict(err) {
			// A container of an earlier try of this deployment holds the
			// name (it may be the live one: it goes with the old ones).
			var b [3]byte
			_, _ = rand.Read(b[:])
			opts.Name = name + "-" + hex.EncodeToString(b[:])
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("the name %s is taken; creating %s instead", name, opts.Name), nil)
			res, err = cli.ContainerCreate(ctx, opts)
		}
		if err != nil {
			return started{}, fmt.Errorf("creating container %s: %w", opts.Name, err)
		}
		for _, w := range res.Warnings {
			events.Emit(agentproto.LevelWarn, "the engine warns: "+w, nil)
		}
		s = started{ID: res.ID, Name: opts.Name}
		if err := sh.joinNetworks(ctx, cli, s.ID); err != nil {
			d.discard(ctx, cli, s, events)
			return started{}, err
		}
		_, err = cli.ContainerStart(ctx, s.ID, client.ContainerStartOptions{})
		if err == nil {
			break
		}
		d.discard(ctx, cli, s, events)
		if attempt < 5 && portTaken(err) {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("loopback port %d was taken; trying another", hostPort), nil)
			continue
		}
		return started{}, fmt.Errorf("starting container %s: %w", s.Name, err)
	}
	insp, err := cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{})
	if err != nil {
		d.discard(ctx, cli, s, events)
		return started{}, fmt.Errorf("inspecting container %s: %w", s.Name, err)
	}
	if ns := insp.Container.NetworkSettings; ns != nil {
		for _, b := range ns.Ports[port] {
			if n, err := strconv.Atoi(b.HostPort); err == nil && n > 0 && (!b.HostIP.IsValid() || b.HostIP == loopback) {
				s.HostPort = n
				break
			}
		}
	}
	if s.HostPort == 0 {
		why := exited(ctx, cli, s.ID)
		if why == "" {
			why = "has no host port: the engine published none"
		}
		logTail(ctx, cli, s, events)
		d.discard(ctx, cli, s, events)
		return started{}, fmt.Errorf("container %s %s as it started", s.Name, why)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("started container %s (%s); port %d is published on %s", s.Name, shortID(s.ID), p.ContainerPort, s.upstream()),
		map[string]any{"container_id": s.ID, "host_port": s.HostPort})
	return s, nil
}

// logConfig keeps a release's log from filling the disk: when the engine
// logs to json-file by default, with no rotation unless its configuration
// says so, the container's log rotates at 10 MB, 3 files. Another default
// driver is the administrator's choice and is kept.
func logConfig(ctx context.Context, cli *client.Client) container.LogConfig {
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil || info.Info.LoggingDriver != "json-file" {
		return container.LogConfig{}
	}
	return container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "3"}}
}

// cleanupContext is for removing containers after ctx may have ended:
// it keeps ctx's values, not its end.
func cleanupContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// discard stops and removes a release's new container (which never
// served). It outlives ctx: left behind, the container would be the
// application's newest, which the proxy's discovery takes for its live
// one.
func (d *Deployer) discard(ctx context.Context, cli *client.Client, s started, events agent.EventSink) {
	ctx, cancel := cleanupContext(ctx, 30*time.Second)
	defer cancel()
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("removing the new container %s", s.Name), nil)
	// A running one gets a moment to stop (it may be writing); one that
	// exited or is restarting is removed at once.
	if insp, err := cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{}); err == nil &&
		insp.Container.State != nil && insp.Container.State.Running && !insp.Container.State.Restarting {
		timeout := 2
		if _, err := cli.ContainerStop(ctx, s.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("stopping container %s: %v", s.Name, err), nil)
		}
	}
	if _, err := cli.ContainerRemove(ctx, s.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not remove container %s: %v", s.Name, err), nil)
	}
}

// removeContainer stops a container gracefully (StopTimeout) and removes
// it with its anonymous volumes. It outlives ctx, for StopTimeout and a
// little more.
func (d *Deployer) removeContainer(ctx context.Context, cli *client.Client, c containerSummary) error {
	ctx, cancel := cleanupContext(ctx, d.opts.StopTimeout+30*time.Second)
	defer cancel()
	if c.State == container.StateRunning || c.State == container.StateRestarting || c.State == container.StatePaused {
		timeout := int(d.opts.StopTimeout / time.Second)
		if _, err := cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("stopping container %s: %w", containerName(c), err)
		}
	}
	if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing container %s: %w", containerName(c), err)
	}
	return nil
}

// portTaken reports whether a start failed because the host port is in use.
// The engine reports it only as text.
func portTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "port is already allocated") || strings.Contains(msg, "address already in use")
}
