package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// MaxHealthTimeout bounds DeployPayload.HealthTimeoutSeconds.
const MaxHealthTimeout = time.Hour

func (d *Deployer) runDeploy(ctx context.Context, c agent.Call[agentproto.DeployPayload]) (agentproto.DeployResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	if p.Service != nil {
		return d.runServiceDeploy(ctx, p, secrets, events)
	}
	if err := checkDeploy(&p); err != nil {
		return agentproto.DeployResult{}, fmt.Errorf("invalid app.deploy payload: %w", err)
	}
	env, err := environment(p.EnvKeys, secrets)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	var in buildInputs
	if p.Build != nil && p.ImageID == "" {
		if in, err = checkBuild(p, secrets); err != nil {
			return agentproto.DeployResult{}, fmt.Errorf("invalid app.deploy payload: %w", err)
		}
	}
	cli, err := d.client()
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	unlock, err := d.locks.lock(ctx, p.AppID, events)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	lk := &heldLock{unlock: unlock}
	defer lk.release()
	d.images.RLock()
	defer d.images.RUnlock()
	if p.Compose != nil {
		res, err := d.runCompose(ctx, cli, p, secrets, events)
		if err != nil {
			return agentproto.DeployResult{}, err
		}
		return res, nil
	}
	res, err := d.release(ctx, cli, p, env, in, events, lk)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	return res, nil
}

// checkDeploy checks p and fills in its defaults.
func checkDeploy(p *agentproto.DeployPayload) error {
	if err := checkAppID(p.AppID); err != nil {
		return err
	}
	if p.DeploymentID == "" {
		return errors.New("deployment_id is required")
	}
	if p.Image == "" && p.ImageID == "" && p.Compose == nil {
		return errors.New("image or image_id is required")
	}
	if p.ContainerPort < 1 || p.ContainerPort > 65535 {
		return fmt.Errorf("container_port must be between 1 and 65535, not %d", p.ContainerPort)
	}
	if p.HealthPath == "" {
		p.HealthPath = "/"
	}
	if u, err := url.ParseRequestURI(p.HealthPath); err != nil || !strings.HasPrefix(p.HealthPath, "/") || strings.HasPrefix(p.HealthPath, "//") || u.Host != "" ||
		strings.ContainsFunc(p.HealthPath, func(r rune) bool { return r <= ' ' || r == 0x7f }) || len(p.HealthPath) > 2048 {
		return fmt.Errorf("health_path must be a path starting with /, not %q", p.HealthPath)
	}
	switch t := time.Duration(p.HealthTimeoutSeconds) * time.Second; {
	case p.HealthTimeoutSeconds == 0:
		p.HealthTimeoutSeconds = int(DefaultHealthTimeout / time.Second)
	case p.HealthTimeoutSeconds < 0 || t > MaxHealthTimeout:
		return fmt.Errorf("health_timeout_seconds must be between 1 and %d, not %d", int(MaxHealthTimeout/time.Second), p.HealthTimeoutSeconds)
	}
	if p.MemoryLimitBytes < 0 {
		return fmt.Errorf("memory_limit_bytes must not be negative, not %d", p.MemoryLimitBytes)
	}
	seen := map[string]bool{}
	for _, k := range p.EnvKeys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("invalid environment variable name %q", k)
		}
		if seen[k] {
			return fmt.Errorf("environment variable %s is listed twice", k)
		}
		seen[k] = true
	}
	return nil
}

// environment is the container's environment: the keys in order, their
// values from the job's secrets.
func environment(keys []string, secrets map[string]string) ([]string, error) {
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		v, ok := secrets[k]
		if !ok {
			return nil, fmt.Errorf("environment variable %s has no value in the job's secrets", k)
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// heldLock is an application's lock held by a job, which a release hands
// over to the clean-up it leaves for after its result.
type heldLock struct {
	unlock func()
	handed bool
}

// handOver returns the unlock function: the job no longer releases it.
func (l *heldLock) handOver() func() {
	l.handed = true
	return l.unlock
}

func (l *heldLock) release() {
	if !l.handed {
		l.unlock()
	}
}

// release runs the steps of a release; see the package documentation. The
// release is done once the proxy serves the new container: the removal of
// the old containers and their images is left for after the job's result
// (agent.After), holding the application's lock (lk) until it is done,
// and reported as later events of the job.
func (d *Deployer) release(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, env []string, in buildInputs, events agent.EventSink, lk *heldLock) (agentproto.DeployResult, error) {
	// 1. The image: built from git, or pulled (a rollback's is local).
	var img image
	var built *agentproto.BuildResult
	var err error
	if p.Build != nil && p.ImageID == "" {
		img, built, err = d.buildImage(ctx, cli, p, in, events)
	} else {
		img, err = resolveImage(ctx, cli, p, events)
	}
	if err != nil {
		return agentproto.DeployResult{}, err
	}

	// The live container keeps the proxy until the switch, whatever the
	// applies of other jobs meanwhile.
	old, err := appContainers(ctx, cli, p.AppID)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	defer d.sw.release(p.AppID)
	if live, ok := liveContainer(old); ok {
		up := upstreamOf(live)
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("the application's live container is %s (deployment %s, %s%s)",
			containerName(live), live.Labels[agentproto.LabelDeployment], live.State, prefixed(", on ", up)), nil)
		if up != "" {
			d.sw.hold(p.AppID, up)
		}
	} else {
		events.Emit(agentproto.LevelInfo, "the application has no container on this server yet", nil)
	}

	// 2. The new container.
	s, err := d.startContainer(ctx, cli, p, img, env, nil, events)
	if err != nil {
		return agentproto.DeployResult{}, err
	}

	// 3. Its health.
	healthy, err := d.waitHealthy(ctx, cli, s, p.HealthPath, time.Duration(p.HealthTimeoutSeconds)*time.Second, events)
	if err != nil {
		events.Emit(agentproto.LevelError, err.Error(), healthy)
		logTail(ctx, cli, s, events)
		d.discard(ctx, cli, s, events)
		return agentproto.DeployResult{}, err
	}

	// 4. The switch.
	applied, err := d.switchProxy(ctx, p, s, events)
	if err != nil {
		d.discard(ctx, cli, s, events)
		d.restoreProxy(ctx, p, events)
		return agentproto.DeployResult{}, err
	}

	events.Emit(agentproto.LevelInfo, fmt.Sprintf("released deployment %s: container %s serves on %s", p.DeploymentID, s.Name, s.upstream()), nil)

	// 5. After the result: the old containers (those of the application
	// before this release: a later release's are not this one's to
	// remove), their images, and those of earlier deployments that fell
	// out of the ones kept for rollbacks.
	drain := d.opts.Proxy != nil && siteCount(applied, p.AppID) > 0
	oldIDs := map[string]bool{}
	for _, c := range old {
		oldIDs[c.ID] = true
	}
	unlock := lk.handOver()
	agent.After(ctx, events, func(ctx context.Context, events agent.EventSink) {
		defer unlock()
		_, images := d.removeOld(ctx, cli, p.AppID, func(id string) bool { return oldIDs[id] }, drain, events)
		if p.Build != nil {
			// Builds of a commit built before leave its older image untagged.
			images = append(images, danglingBuilds(ctx, cli, p.AppID)...)
		}
		if ctx.Err() == nil {
			prune(ctx, cli, append(images, p.PruneImageIDs...), p.KeepImageIDs, img.ID, events)
		} else if len(images)+len(p.PruneImageIDs) > 0 {
			events.Emit(agentproto.LevelWarn, "not pruning old images: the agent is stopping", nil)
		}
	})
	return agentproto.DeployResult{
		ContainerID:     s.ID,
		ContainerName:   s.Name,
		ImageID:         img.ID,
		HostPort:        s.HostPort,
		Pulled:          img.Pulled,
		RemovedIDs:      []string{},
		PrunedImageIDs:  []string{},
		HealthStatus:    healthy.Status,
		HealthCheckedAt: healthy.At.Format(time.RFC3339Nano),
		Build:           built,
	}, nil
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// switchProxy points the proxy at the new container, applying the
// server's desired proxy state as it is now (see applyDesired). It
// returns the state applied.
func (d *Deployer) switchProxy(ctx context.Context, p agentproto.DeployPayload, s started, events agent.EventSink) (agentproto.ProxyConfig, error) {
	if d.opts.Proxy == nil {
		if n := siteCount(p.Proxy, p.AppID); n > 0 {
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("this agent has no proxy: the application's %d domains and published ports are not served", n), nil)
		} else {
			events.Emit(agentproto.LevelInfo, "this agent has no proxy; nothing to switch", nil)
		}
		return p.Proxy, nil
	}
	if err := ctx.Err(); err != nil {
		return p.Proxy, fmt.Errorf("switching the proxy to the new container: %w", context.Cause(ctx))
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("switching the proxy to %s with the server's current proxy state", s.upstream()), nil)
	cfg, err := d.applyDesired(ctx, p.Proxy, map[string]string{p.AppID: s.upstream()}, events)
	if err != nil {
		if siteCount(cfg, p.AppID) == 0 && ctx.Err() == nil && !proxy.IsStale(err) {
			// No request of this application goes through the proxy.
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not apply the proxy state: %v; the application has no domains or published ports, so the release goes on", err), nil)
			return cfg, nil
		}
		return cfg, fmt.Errorf("switching the proxy to the new container: %w", err)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("the proxy sends the application's requests to %s (proxy state revision %d: %d sites of the server, %d of this application)",
		s.upstream(), cfg.Revision, len(cfg.Sites), siteCount(cfg, p.AppID)), nil)
	return cfg, nil
}

// restoreProxy applies the server's desired proxy state again after a
// failed switch, the application's upstream being its old container (if
// any), in case the failed apply left the proxy half-switched.
func (d *Deployer) restoreProxy(ctx context.Context, p agentproto.DeployPayload, events agent.EventSink) {
	if d.opts.Proxy == nil {
		return
	}
	ctx, cancel := cleanupContext(ctx, 15*time.Second)
	defer cancel()
	if _, err := d.applyDesired(ctx, p.Proxy, nil, events); err != nil {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not apply the proxy state again after the failed switch: %v", err), nil)
		return
	}
	events.Emit(agentproto.LevelInfo, "applied the proxy state again with the application's previous container", nil)
}

// removeOld stops and removes the application's containers that isOld
// picks, after a drain (if drain: the proxy was switched away
// from a running one). It returns the ids removed and the images they ran.
// A removal begun goes on after ctx ends; none begins after it.
func (d *Deployer) removeOld(ctx context.Context, cli *client.Client, app string, isOld func(id string) bool, drain bool, events agent.EventSink) (removed, images []string) {
	removed = []string{}
	lctx, cancel := cleanupContext(ctx, 30*time.Second)
	list, err := appContainers(lctx, cli, app)
	cancel()
	if err != nil {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("not removing the old containers: %v", err), nil)
		return removed, nil
	}
	var old []containerSummary
	running := false
	for _, c := range list {
		if isOld(c.ID) {
			old = append(old, c)
			running = running || c.State == container.StateRunning
		}
	}
	if len(old) == 0 {
		return removed, nil
	}
	if running && drain && d.opts.Drain > 0 {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("waiting %s for the requests sent to the old container before the switch", d.opts.Drain), nil)
		t := time.NewTimer(d.opts.Drain)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	for i, c := range old {
		if ctx.Err() != nil {
			// The new container is the newest: the proxy prefers it.
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("the job's time ran out: %d old containers are left; the next release removes them", len(old)-i), nil)
			break
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("stopping and removing the old container %s (deployment %s, %s)",
			containerName(c), c.Labels[agentproto.LabelDeployment], c.State), nil)
		if err := d.removeContainer(ctx, cli, c); err != nil {
			events.Emit(agentproto.LevelWarn, err.Error(), nil)
			continue
		}
		removed = append(removed, c.ID)
		images = append(images, c.ImageID)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed %d old containers", len(removed)), nil)
	return removed, images
}
