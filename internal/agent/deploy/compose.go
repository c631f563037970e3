package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/compose"
)

// A compose application's release, after reading its document:
//
//  1. every service's image is pulled (a rollback's are local);
//  2. the services the web service depends on are started where none
//     runs, in dependency order, each waited for when a dependent needs
//     it healthy (running ones stay, for the web service still serving);
//  3. the web service is released like a container application's
//     container: a new one next to the live one, its health path
//     answering, the proxy switched, the old one stopped;
//  4. the other services are replaced, in dependency order, where what
//     they run changed (a container created with the same image and
//     settings stays, so a cache keeps serving through releases);
//  5. the images of releases no longer kept are removed, as the control
//     plane names them (DeployPayload.PruneImageIDs), except those of the
//     new release, of the kept ones (KeepImageIDs) and any image a
//     container on the server uses.
//
// Named volumes (capstan-<app id>-<volume>) outlive containers and
// releases; app.remove removes them only when told to purge.

// appNetwork is the name of a compose application's own network.
func appNetwork(app string) string { return "capstan-" + strings.ToLower(app) }

// volumeName is the engine's name of a compose application's volume.
func volumeName(app, vol string) string { return "capstan-" + strings.ToLower(app) + "-" + vol }

// serviceContainers lists the containers of a compose application's
// services other than its web service, in any state, newest first.
func serviceContainers(ctx context.Context, cli *client.Client, app string) ([]containerSummary, error) {
	return labeledContainers(ctx, cli, agentproto.LabelComposeApp, app, "the service containers")
}

// plannedService is a service as the release creates it.
type plannedService struct {
	name   string
	svc    types.ServiceConfig
	image  image
	env    []string
	digest string
}

func (d *Deployer) runCompose(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, secrets map[string]string, events agent.EventSink) (agentproto.DeployResult, error) {
	c := p.Compose
	doc := []byte(c.Document)
	// From git (not a rollback): the commit's compose file, whose
	// services may build.
	var co *composeCheckout
	if p.Build != nil && len(c.ImageIDs) == 0 {
		in, err := checkBuild(p, secrets)
		if err != nil {
			return agentproto.DeployResult{}, fmt.Errorf("invalid app.deploy payload: %w", err)
		}
		var dir string
		co, dir, err = d.checkoutCompose(ctx, p, in, events)
		defer os.RemoveAll(dir)
		if err != nil {
			return agentproto.DeployResult{}, err
		}
		doc = co.doc
	}
	proj, err := compose.Load(ctx, "capstan", doc, compose.Options{WebService: c.WebService, AllowBuild: co != nil || len(c.ImageIDs) > 0})
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	order, err := compose.Order(proj)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	appEnv, err := environment(p.EnvKeys, secrets)
	if err != nil {
		return agentproto.DeployResult{}, err
	}

	// 1. Images, networks, volumes.
	plan := map[string]*plannedService{}
	for _, name := range order {
		svc := proj.Services[name]
		ps := &plannedService{name: name, svc: svc}
		if id := c.ImageIDs[name]; id != "" {
			ps.image, err = resolveImage(ctx, cli, agentproto.DeployPayload{ImageID: id}, events)
		} else if len(c.ImageIDs) > 0 {
			return agentproto.DeployResult{}, fmt.Errorf("the release to roll back to has no image of service %s", name)
		} else if svc.Build != nil {
			ps.image, err = d.buildService(ctx, cli, p, co, ps, events)
		} else {
			ps.image, err = resolveImage(ctx, cli, agentproto.DeployPayload{Image: svc.Image}, events)
		}
		if err != nil {
			return agentproto.DeployResult{}, fmt.Errorf("service %s: %w", name, err)
		}
		ps.env = serviceEnv(svc, appEnv)
		ps.digest = serviceDigest(ps)
		plan[name] = ps
	}
	shared, err := dockerc.EnsureNetwork(ctx, cli, agentproto.DBNetwork, events)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	own, err := ensureAppNetwork(ctx, cli, p.AppID, events)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	for vol := range proj.Volumes {
		if err := ensureVolume(ctx, cli, p.AppID, vol, events); err != nil {
			return agentproto.DeployResult{}, err
		}
	}
	needHealthy := map[string]bool{}
	for _, s := range proj.Services {
		for dep, dc := range s.DependsOn {
			if dc.Condition == types.ServiceConditionHealthy {
				needHealthy[dep] = true
			}
		}
	}
	shapeOf := func(ps *plannedService, labels map[string]string, name string) *shape {
		return serviceShape(p, ps, labels, name, shared, own)
	}

	// 2. What the web service needs, where nothing runs.
	existing, err := serviceContainers(ctx, cli, p.AppID)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	var created []started
	undo := func() {
		for _, s := range created {
			d.discard(ctx, cli, s, events)
		}
	}
	for _, name := range order {
		if name == c.WebService || !dependsOn(proj, c.WebService, name) {
			continue
		}
		if _, ok := runningOf(existing, name, ""); ok {
			continue
		}
		s, err := d.startService(ctx, cli, p, plan[name], shapeOf, needHealthy[name], events)
		if err != nil {
			undo()
			return agentproto.DeployResult{}, err
		}
		created = append(created, s)
	}

	// 3. The web service, as a container application's release.
	web := plan[c.WebService]
	old, err := appContainers(ctx, cli, p.AppID)
	if err != nil {
		undo()
		return agentproto.DeployResult{}, err
	}
	defer d.sw.release(p.AppID)
	if live, ok := liveContainer(old); ok {
		if up := upstreamOf(live); up != "" {
			d.sw.hold(p.AppID, up)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("the web service's live container is %s (deployment %s)", containerName(live), live.Labels[agentproto.LabelDeployment]), nil)
	}
	webShape := shapeOf(web, map[string]string{agentproto.LabelService: c.WebService, agentproto.LabelServiceConfig: web.digest},
		serviceContainerName(p, c.WebService))
	s, err := d.startContainer(ctx, cli, p, web.image, web.env, webShape, events)
	if err != nil {
		undo()
		return agentproto.DeployResult{}, fmt.Errorf("service %s: %w", c.WebService, err)
	}
	healthy, err := d.waitHealthy(ctx, cli, s, p.HealthPath, time.Duration(p.HealthTimeoutSeconds)*time.Second, events)
	if err != nil {
		events.Emit(agentproto.LevelError, err.Error(), healthy)
		logTail(ctx, cli, s, events)
		d.discard(ctx, cli, s, events)
		undo()
		return agentproto.DeployResult{}, fmt.Errorf("service %s: %w", c.WebService, err)
	}
	applied, err := d.switchProxy(ctx, p, s, events)
	if err != nil {
		d.discard(ctx, cli, s, events)
		d.restoreProxy(ctx, p, events)
		undo()
		return agentproto.DeployResult{}, err
	}
	drain := d.opts.Proxy != nil && siteCount(applied, p.AppID) > 0
	removed, _ := d.removeOld(ctx, cli, p.AppID, func(id string) bool { return id != s.ID }, drain, events)

	// 4. The other services, where what they run changed; and those the
	// document no longer has.
	existing, err = serviceContainers(ctx, cli, p.AppID)
	if err != nil {
		return agentproto.DeployResult{}, fmt.Errorf("the web service was released, but the other services were not replaced: %w", err)
	}
	for _, name := range order {
		if name == c.WebService {
			continue
		}
		ps := plan[name]
		keep, ok := runningOf(existing, name, ps.digest)
		if !ok {
			// Stopped first: two containers of one service must not share
			// its volumes.
			for _, old := range serviceContainersOf(existing, name) {
				if err := d.removeContainer(ctx, cli, old); err != nil {
					return agentproto.DeployResult{}, fmt.Errorf("the web service was released, but service %s was not replaced: %w", name, err)
				}
				removed = append(removed, old.ID)
			}
			ns, err := d.startService(ctx, cli, p, ps, shapeOf, needHealthy[name], events)
			if err != nil {
				return agentproto.DeployResult{}, fmt.Errorf("the web service was released, but service %s was not replaced: %w", name, err)
			}
			keep.ID = ns.ID
		} else {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("service %s is unchanged: container %s stays", name, containerName(keep)), nil)
		}
		for _, old := range serviceContainersOf(existing, name) {
			if old.ID == keep.ID {
				continue
			}
			if err := d.removeContainer(ctx, cli, old); err != nil {
				events.Emit(agentproto.LevelWarn, err.Error(), nil)
				continue
			}
			removed = append(removed, old.ID)
		}
	}
	for _, old := range existing {
		if _, ok := plan[old.Labels[agentproto.LabelService]]; ok {
			continue
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("removing container %s of service %s, which the document no longer has", containerName(old), old.Labels[agentproto.LabelService]), nil)
		if err := d.removeContainer(ctx, cli, old); err != nil {
			events.Emit(agentproto.LevelWarn, err.Error(), nil)
			continue
		}
		removed = append(removed, old.ID)
	}

	services := map[string]string{}
	for name, ps := range plan {
		services[name] = ps.image.ID
	}

	// 5. The images of the releases no longer kept, as the control plane
	// names them: never one the new release, a kept release or any
	// container runs.
	pruned := []string{}
	if len(p.PruneImageIDs) > 0 {
		keep := slices.Clone(p.KeepImageIDs)
		for _, id := range services {
			keep = append(keep, id)
		}
		if ctx.Err() == nil {
			pruned = prune(ctx, cli, p.PruneImageIDs, keep, web.image.ID, events)
		} else {
			events.Emit(agentproto.LevelWarn, "not pruning old images: the job's time ran out", nil)
		}
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("released deployment %s: %d services; %s serves on %s", p.DeploymentID, len(plan), s.Name, s.upstream()), nil)
	res := agentproto.DeployResult{
		ContainerID:     s.ID,
		ContainerName:   s.Name,
		ImageID:         web.image.ID,
		HostPort:        s.HostPort,
		Pulled:          web.image.Pulled,
		RemovedIDs:      removed,
		PrunedImageIDs:  pruned,
		HealthStatus:    healthy.Status,
		HealthCheckedAt: healthy.At.Format(time.RFC3339Nano),
		Services:        services,
	}
	if co != nil {
		res.Build, res.ComposeDocument = co.build, string(co.doc)
	}
	return res, nil
}

// dependsOn reports whether service from depends on service on, directly
// or through others.
func dependsOn(p *types.Project, from, on string) bool {
	seen := map[string]bool{}
	var walk func(n string) bool
	walk = func(n string) bool {
		if seen[n] {
			return false
		}
		seen[n] = true
		for dep := range p.Services[n].DependsOn {
			if dep == on || walk(dep) {
				return true
			}
		}
		return false
	}
	return walk(from)
}

// serviceContainersOf returns the containers of service name.
func serviceContainersOf(list []containerSummary, name string) []containerSummary {
	var out []containerSummary
	for _, c := range list {
		if c.Labels[agentproto.LabelService] == name {
			out = append(out, c)
		}
	}
	return out
}

// runningOf returns the newest running container of service name, created
// with digest (any digest when "").
func runningOf(list []containerSummary, name, digest string) (containerSummary, bool) {
	for _, c := range serviceContainersOf(list, name) {
		if c.State == container.StateRunning && (digest == "" || c.Labels[agentproto.LabelServiceConfig] == digest) {
			return c, true
		}
	}
	return containerSummary{}, false
}

// serviceEnv is a service's environment: the document's values, then the
// application's environment when the service names an env_file (which
// stands for it). A variable without a value in the document is left
// out.
func serviceEnv(svc types.ServiceConfig, appEnv []string) []string {
	keys := make([]string, 0, len(svc.Environment))
	for k := range svc.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := []string{}
	for _, k := range keys {
		if v := svc.Environment[k]; v != nil {
			env = append(env, k+"="+*v)
		}
	}
	if len(svc.EnvFiles) > 0 {
		env = append(env, appEnv...)
	}
	return env
}

// serviceDigest is a digest of what a service's container is created
// with; a container with the same one need not be replaced.
func serviceDigest(ps *plannedService) string {
	svc := ps.svc
	b, _ := json.Marshal(struct {
		Image, Restart string
		Env, Cmd       []string
		Health         *types.HealthCheckConfig
		Volumes        []types.ServiceVolumeConfig
		Memory         int64
		Expose         []string
	}{ps.image.ID, svc.Restart, ps.env, svc.Command, svc.HealthCheck, svc.Volumes, int64(svc.MemLimit), svc.Expose})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// serviceContainerName is capstan-<app name>-<service>-<short deployment id>.
func serviceContainerName(p agentproto.DeployPayload, service string) string {
	base := newName(p.AppName, p.AppID, p.DeploymentID)
	dep := base[strings.LastIndexByte(base, '-')+1:]
	return strings.TrimSuffix(base, "-"+dep) + "-" + slugify(service, 40) + "-" + dep
}

// serviceShape is how a service's container is created.
func serviceShape(p agentproto.DeployPayload, ps *plannedService, labels map[string]string, name, shared, own string) *shape {
	svc := ps.svc
	sh := &shape{name: name, labels: labels, cmd: svc.Command, memory: int64(svc.MemLimit)}
	if hc := svc.HealthCheck; hc != nil {
		h := &container.HealthConfig{Test: hc.Test}
		if hc.Disable {
			h.Test = []string{"NONE"}
		}
		if hc.Interval != nil {
			h.Interval = time.Duration(*hc.Interval)
		}
		if hc.Timeout != nil {
			h.Timeout = time.Duration(*hc.Timeout)
		}
		if hc.StartPeriod != nil {
			h.StartPeriod = time.Duration(*hc.StartPeriod)
		}
		if hc.StartInterval != nil {
			h.StartInterval = time.Duration(*hc.StartInterval)
		}
		if hc.Retries != nil {
			h.Retries = int(*hc.Retries)
		}
		sh.health = h
	}
	for _, v := range svc.Volumes {
		sh.mounts = append(sh.mounts, mount.Mount{Type: mount.TypeVolume, Source: volumeName(p.AppID, v.Source), Target: v.Target, ReadOnly: v.ReadOnly})
	}
	switch {
	case svc.Restart == "" || svc.Restart == types.RestartPolicyUnlessStopped:
		sh.restart = container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}
	case svc.Restart == types.RestartPolicyAlways:
		sh.restart = container.RestartPolicy{Name: container.RestartPolicyAlways}
	case svc.Restart == types.RestartPolicyNo:
		sh.restart = container.RestartPolicy{Name: container.RestartPolicyDisabled}
	default:
		sh.restart = container.RestartPolicy{Name: container.RestartPolicyOnFailure}
		if n, err := strconv.Atoi(strings.TrimPrefix(svc.Restart, types.RestartPolicyOnFailure+":")); err == nil {
			sh.restart.MaximumRetryCount = n
		}
	}
	// The service name resolves on the application's network; the
	// capstan network reaches the server's managed databases.
	sh.networking = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		own: {Aliases: []string{ps.name}},
	}}
	sh.join = []string{shared}
	return sh
}

// startService creates and starts the container of a service other than
// the web service, and waits for it to be healthy when a dependent needs
// it so.
func (d *Deployer) startService(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, ps *plannedService,
	shapeOf func(*plannedService, map[string]string, string) *shape, healthy bool, events agent.EventSink) (started, error) {
	name := serviceContainerName(p, ps.name)
	sh := shapeOf(ps, map[string]string{
		agentproto.LabelComposeApp:    p.AppID,
		agentproto.LabelAppName:       p.AppName,
		agentproto.LabelDeployment:    p.DeploymentID,
		agentproto.LabelService:       ps.name,
		agentproto.LabelServiceConfig: ps.digest,
	}, name)
	stop := int(d.opts.StopTimeout / time.Second)
	cfg := &container.Config{Image: ps.image.ID, Env: ps.env, Labels: map[string]string{}, StopTimeout: &stop}
	hc := &container.HostConfig{LogConfig: logConfig(ctx, cli)}
	opts := client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc}
	sh.apply(cfg, hc, &opts)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("creating container %s of service %s (image %s)", name, ps.name, shortImage(ps.image.ID)), nil)
	res, err := cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsConflict(err) {
		opts.Name = name + "-" + ps.digest[:6]
		res, err = cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		return started{}, fmt.Errorf("creating the container of service %s: %w", ps.name, err)
	}
	s := started{ID: res.ID, Name: opts.Name}
	if err := sh.joinNetworks(ctx, cli, s.ID); err != nil {
		d.discard(ctx, cli, s, events)
		return started{}, fmt.Errorf("service %s: %w", ps.name, err)
	}
	if _, err := cli.ContainerStart(ctx, s.ID, client.ContainerStartOptions{}); err != nil {
		d.discard(ctx, cli, s, events)
		return started{}, fmt.Errorf("starting the container of service %s: %w", ps.name, err)
	}
	if !healthy {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("started container %s of service %s", s.Name, ps.name), nil)
		return s, nil
	}
	if err := d.waitContainerHealthy(ctx, cli, s, time.Duration(p.HealthTimeoutSeconds)*time.Second, events); err != nil {
		logTail(ctx, cli, s, events)
		d.discard(ctx, cli, s, events)
		return started{}, fmt.Errorf("service %s: %w", ps.name, err)
	}
	return s, nil
}

// waitContainerHealthy waits for the engine to report a container's
// health check healthy.
func (d *Deployer) waitContainerHealthy(ctx context.Context, cli *client.Client, s started, timeout time.Duration, events agent.EventSink) error {
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("waiting up to %s for container %s to be healthy", timeout, s.Name), nil)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(d.opts.HealthInterval)
	defer t.Stop()
	for {
		res, err := cli.ContainerInspect(hctx, s.ID, client.ContainerInspectOptions{})
		if err == nil && res.Container.State != nil {
			st := res.Container.State
			if st.Health != nil && st.Health.Status == container.Healthy {
				events.Emit(agentproto.LevelInfo, fmt.Sprintf("container %s is healthy", s.Name), nil)
				return nil
			}
			if why := exited(hctx, cli, s.ID); why != "" {
				return fmt.Errorf("container %s %s before it was healthy", s.Name, why)
			}
			if st.Health != nil && st.Health.Status == container.Unhealthy {
				return fmt.Errorf("container %s is unhealthy", s.Name)
			}
		}
		select {
		case <-hctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("container %s was not healthy within %s", s.Name, timeout)
		case <-t.C:
		}
	}
}

// ensureAppNetwork creates a compose application's network if it has
// none. The application's jobs run one at a time: nothing else creates it.
func ensureAppNetwork(ctx context.Context, cli *client.Client, app string, events agent.EventSink) (string, error) {
	name := appNetwork(app)
	res, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelComposeApp+"="+app)})
	if err != nil {
		return "", fmt.Errorf("listing networks: %w", err)
	}
	for _, n := range res.Items {
		if n.Name == name {
			return n.ID, nil
		}
	}
	cr, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Labels: map[string]string{agentproto.LabelComposeApp: app}})
	if err != nil {
		return "", fmt.Errorf("creating network %s: %w", name, err)
	}
	events.Emit(agentproto.LevelInfo, "created network "+name, nil)
	return cr.ID, nil
}

// ensureVolume creates a compose application's named volume if missing.
func ensureVolume(ctx context.Context, cli *client.Client, app, vol string, events agent.EventSink) error {
	name := volumeName(app, vol)
	if _, err := cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{}); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspecting volume %s: %w", name, err)
	}
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name,
		Labels: map[string]string{agentproto.LabelComposeApp: app, agentproto.LabelComposeVolume: vol}}); err != nil {
		return fmt.Errorf("creating volume %s: %w", name, err)
	}
	events.Emit(agentproto.LevelInfo, "created volume "+name, nil)
	return nil
}

// removeCompose removes what a compose application has besides its web
// service's containers: its services' containers, its network and, when
// purge, its volumes.
func (d *Deployer) removeCompose(ctx context.Context, cli *client.Client, app string, purge bool, events agent.EventSink) ([]string, error) {
	removed := []string{}
	list, err := serviceContainers(ctx, cli, app)
	if err != nil {
		return removed, err
	}
	for _, c := range list {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("stopping and removing container %s of service %s", containerName(c), c.Labels[agentproto.LabelService]), nil)
		if err := d.removeContainer(ctx, cli, c); err != nil {
			return removed, err
		}
		removed = append(removed, c.ID)
	}
	nets, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelComposeApp+"="+app)})
	if err != nil {
		return removed, fmt.Errorf("listing networks: %w", err)
	}
	for _, n := range nets.Items {
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return removed, fmt.Errorf("removing network %s: %w", n.Name, err)
		}
		events.Emit(agentproto.LevelInfo, "removed network "+n.Name, nil)
	}
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelComposeApp+"="+app)})
	if err != nil {
		return removed, fmt.Errorf("listing volumes: %w", err)
	}
	for _, v := range vols.Items {
		if !purge {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("keeping volume %s (purge removes it)", v.Name), nil)
			continue
		}
		if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return removed, fmt.Errorf("removing volume %s: %w", v.Name, err)
		}
		events.Emit(agentproto.LevelInfo, "removed volume "+v.Name, nil)
	}
	return removed, nil
}
