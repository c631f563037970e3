package deploy

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// pruneIDPattern is a full image or network id as a dry run lists it.
var pruneIDPattern = regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`)

func checkPrune(p agentproto.DockerPrunePayload) error {
	if p.DryRun && len(p.ImageIDs)+len(p.NetworkIDs) > 0 {
		return fmt.Errorf("a dry run takes no ids")
	}
	if len(p.ImageIDs) > agentproto.MaxPruneItems || len(p.NetworkIDs) > agentproto.MaxPruneItems {
		return fmt.Errorf("at most %d images and %d networks", agentproto.MaxPruneItems, agentproto.MaxPruneItems)
	}
	for _, id := range slices.Concat(p.ImageIDs, p.NetworkIDs) {
		if !pruneIDPattern.MatchString(id) {
			return fmt.Errorf("invalid id %q", id)
		}
	}
	return nil
}

// runPrune runs docker.prune. A dry run lists the images no container
// uses and no application keeps, and the networks no container is
// attached to; a removal removes those of the ids it is given that are
// still such, and nothing else. Volumes are never pruned: they hold data.
// A removal waits for the container deploys running on this agent, and
// holds new ones back while it removes, so that it never takes an image a
// release is about to run.
func (d *Deployer) runPrune(ctx context.Context, c agent.Call[agentproto.DockerPrunePayload]) (agentproto.DockerPruneResult, error) {
	p, events := c.Payload, c.Events
	if err := checkPrune(p); err != nil {
		return agentproto.DockerPruneResult{}, fmt.Errorf("invalid docker.prune payload: %w", err)
	}
	cli, err := d.client()
	if err != nil {
		return agentproto.DockerPruneResult{}, err
	}
	if !p.DryRun {
		if !d.images.TryLock() {
			events.Emit(agentproto.LevelInfo, "waiting for the deploys running on this server to finish", nil)
			if err := lockCtx(ctx, &d.images); err != nil {
				return agentproto.DockerPruneResult{}, err
			}
		}
		defer d.images.Unlock()
	}
	engine, err := readEngine(ctx, cli)
	if err != nil {
		return agentproto.DockerPruneResult{}, err
	}
	plan := planPrune(engine, p.KeepImageIDs)
	if p.DryRun {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("%d images (%s) and %d networks can be removed; %d images are kept",
			len(plan.Images), agent.HumanBytes(plan.ReclaimBytes), len(plan.Networks), len(plan.Kept)), nil)
		plan.DryRun = true
		return plan, nil
	}
	res := agentproto.DockerPruneResult{Images: []agentproto.PruneImage{}, Networks: []agentproto.PruneNetwork{},
		Kept: plan.Kept, Skipped: []agentproto.PruneSkipped{}}
	for _, id := range p.ImageIDs {
		i := slices.IndexFunc(plan.Images, func(im agentproto.PruneImage) bool { return sameImage(im.ID, id) })
		if i < 0 {
			res.Skipped = append(res.Skipped, agentproto.PruneSkipped{ID: id, Reason: imageNotPrunable(plan, id)})
			continue
		}
		im := plan.Images[i]
		if err := removeImage(ctx, cli, im.ID); err != nil {
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not remove image %s: %v", shortImage(im.ID), err), nil)
			res.Skipped = append(res.Skipped, agentproto.PruneSkipped{ID: id, Reason: "the engine refused: " + err.Error()})
			continue
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed image %s %v (%s)", shortImage(im.ID), im.Tags, agent.HumanBytes(im.SizeBytes)), nil)
		res.Images = append(res.Images, im)
		res.ReclaimBytes += im.SizeBytes
	}
	for _, id := range p.NetworkIDs {
		i := slices.IndexFunc(plan.Networks, func(n agentproto.PruneNetwork) bool { return n.ID == id })
		if i < 0 {
			res.Skipped = append(res.Skipped, agentproto.PruneSkipped{ID: id, Reason: "not present, or a container is attached to it"})
			continue
		}
		n := plan.Networks[i]
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil {
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not remove network %s: %v", n.Name, err), nil)
			res.Skipped = append(res.Skipped, agentproto.PruneSkipped{ID: id, Reason: "the engine refused: " + err.Error()})
			continue
		}
		events.Emit(agentproto.LevelInfo, "removed network "+n.Name, nil)
		res.Networks = append(res.Networks, n)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed %d images (%s) and %d networks; %d skipped",
		len(res.Images), agent.HumanBytes(res.ReclaimBytes), len(res.Networks), len(res.Skipped)), nil)
	return res, nil
}

// lockCtx takes mu, or gives up when ctx ends.
func lockCtx(ctx context.Context, mu interface{ TryLock() bool }) error {
	for {
		if mu.TryLock() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the running deploys: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// engineState is what a prune reads of the engine.
type engineState struct {
	images     []imageSummary
	containers []containerSummary
	networks   []network.Summary
}

func readEngine(ctx context.Context, cli *client.Client) (engineState, error) {
	var st engineState
	ims, err := cli.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return st, fmt.Errorf("listing images: %w", err)
	}
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return st, fmt.Errorf("listing containers: %w", err)
	}
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return st, fmt.Errorf("listing networks: %w", err)
	}
	return engineState{images: ims.Items, containers: cs.Items, networks: ns.Items}, nil
}

// builtinNetworks are the engine's own networks, which cannot be removed.
var builtinNetworks = []string{"bridge", "host", "none"}

// planPrune is what a prune may remove: every image no container (running
// or not) uses and keep does not name, and every local network that is
// not the engine's own and no container (running or not) is attached
// to. Kept lists the images it keeps and why. Sorted by id.
func planPrune(st engineState, keep []string) agentproto.DockerPruneResult {
	res := agentproto.DockerPruneResult{Images: []agentproto.PruneImage{}, Networks: []agentproto.PruneNetwork{},
		Kept: []agentproto.PruneKept{}, Skipped: []agentproto.PruneSkipped{}}
	for _, im := range st.images {
		tags := slices.DeleteFunc(slices.Clone(im.RepoTags), func(t string) bool { return t == "" || t == "<none>:<none>" })
		if tags == nil {
			tags = []string{}
		}
		slices.Sort(tags)
		switch {
		case slices.ContainsFunc(keep, func(k string) bool { return sameImage(k, im.ID) }):
			res.Kept = append(res.Kept, agentproto.PruneKept{ID: im.ID, Tags: tags, Reason: agentproto.KeptByApplication})
		case slices.ContainsFunc(st.containers, func(c containerSummary) bool { return sameImage(c.ImageID, im.ID) }):
			res.Kept = append(res.Kept, agentproto.PruneKept{ID: im.ID, Tags: tags, Reason: agentproto.KeptInUse})
		default:
			res.Images = append(res.Images, agentproto.PruneImage{ID: im.ID, Tags: tags, SizeBytes: im.Size})
			res.ReclaimBytes += im.Size
		}
	}
	attached := map[string]bool{}
	for _, c := range st.containers {
		if c.NetworkSettings == nil {
			continue
		}
		for name, ep := range c.NetworkSettings.Networks {
			attached[name] = true
			if ep != nil && ep.NetworkID != "" {
				attached[ep.NetworkID] = true
			}
		}
	}
	for _, n := range st.networks {
		if slices.Contains(builtinNetworks, n.Name) || n.Scope != "local" || n.Ingress || attached[n.ID] || attached[n.Name] {
			continue
		}
		res.Networks = append(res.Networks, agentproto.PruneNetwork{ID: n.ID, Name: n.Name, Driver: n.Driver})
	}
	slices.SortFunc(res.Images, func(a, b agentproto.PruneImage) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(res.Kept, func(a, b agentproto.PruneKept) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(res.Networks, func(a, b agentproto.PruneNetwork) int { return cmp.Compare(a.ID, b.ID) })
	return res
}

// imageNotPrunable says why an image asked for is not in the plan.
func imageNotPrunable(plan agentproto.DockerPruneResult, id string) string {
	if i := slices.IndexFunc(plan.Kept, func(k agentproto.PruneKept) bool { return sameImage(k.ID, id) }); i >= 0 {
		if plan.Kept[i].Reason == agentproto.KeptByApplication {
			return "an application keeps it for its releases"
		}
		return "a container uses it"
	}
	return "not present"
}
