package deploy

import (
	"context"
	"fmt"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// runRemove stops and removes every container of the application, then
// applies the server's current desired proxy state (which no longer has
// its sites; see applyDesired). Removing an
// application that has no container here succeeds.
func (d *Deployer) runRemove(ctx context.Context, c agent.Call[agentproto.RemovePayload]) (agentproto.RemoveResult, error) {
	p, events := c.Payload, c.Events
	if err := checkAppID(p.AppID); err != nil {
		return agentproto.RemoveResult{}, fmt.Errorf("invalid app.remove payload: %w", err)
	}
	if n := siteCount(p.Proxy, p.AppID); n > 0 {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("the proxy state still has %d sites of application %s; they will have no upstream", n, p.AppID), nil)
	}
	name := p.AppName
	if live, ok := d.serviceApp(p.AppID); ok {
		name = live.Name
	}
	if name != "" && d.opts.StateDir != "" {
		if !svcNamePattern.MatchString(name) {
			return agentproto.RemoveResult{}, fmt.Errorf("invalid app.remove payload: app_name %q", name)
		}
		unlock, err := d.locks.lock(ctx, p.AppID, events)
		if err != nil {
			return agentproto.RemoveResult{}, err
		}
		defer unlock()
		if err := d.serviceRemove(ctx, p, name, events); err != nil {
			return agentproto.RemoveResult{}, err
		}
		return d.removeFinish(ctx, p, agentproto.RemoveResult{RemovedIDs: []string{}}, events)
	}
	cli, err := d.client()
	if err != nil {
		return agentproto.RemoveResult{}, err
	}
	unlock, err := d.locks.lock(ctx, p.AppID, events)
	if err != nil {
		return agentproto.RemoveResult{}, err
	}
	defer unlock()

	list, err := appContainers(ctx, cli, p.AppID)
	if err != nil {
		return agentproto.RemoveResult{}, err
	}
	res := agentproto.RemoveResult{RemovedIDs: []string{}}
	if len(list) == 0 {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("application %s has no container on this server", p.AppID), nil)
	}
	for _, c := range list {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("removing the containers of application %s: %w", p.AppID, context.Cause(ctx))
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("stopping and removing container %s (deployment %s, %s)",
			containerName(c), c.Labels[agentproto.LabelDeployment], c.State), nil)
		if err := d.removeContainer(ctx, cli, c); err != nil {
			return res, err
		}
		res.RemovedIDs = append(res.RemovedIDs, c.ID)
	}
	more, err := d.removeCompose(ctx, cli, p.AppID, p.PurgeVolumes, events)
	res.RemovedIDs = append(res.RemovedIDs, more...)
	if err != nil {
		return res, err
	}
	return d.removeFinish(ctx, p, res, events)
}

// removeFinish applies the proxy state without the removed application.
func (d *Deployer) removeFinish(ctx context.Context, p agentproto.RemovePayload, res agentproto.RemoveResult, events agent.EventSink) (agentproto.RemoveResult, error) {
	if d.opts.Proxy == nil {
		events.Emit(agentproto.LevelInfo, "this agent has no proxy; nothing to apply", nil)
		return res, nil
	}
	cfg, err := d.applyDesired(ctx, p.Proxy, nil, events)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return res, fmt.Errorf("applying the proxy state: %w", err)
	case len(p.ProxySites) == 0:
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not apply the proxy state (%v); application %s had no site in it, "+
			"so nothing of it is left there", err, p.AppID), nil)
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed application %s", p.AppID), nil)
		return res, nil
	case p.Force:
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not apply the proxy state (%v); forgetting the sites of application %s "+
			"there (%s): the proxy may serve them until it takes this server's next proxy state", err, p.AppID, strings.Join(p.ProxySites, ", ")), nil)
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed application %s", p.AppID), nil)
		return res, nil
	default:
		return res, fmt.Errorf("applying the proxy state: %w; the proxy still has the sites of application %s (%s): "+
			"delete the application with ?force=true to forget them", err, p.AppID, strings.Join(p.ProxySites, ", "))
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("applied the proxy state: revision %d, %d sites", cfg.Revision, len(cfg.Sites)), nil)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed application %s", p.AppID), nil)
	return res, nil
}
