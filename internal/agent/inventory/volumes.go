package inventory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// volumeSizesEvery is how often volume sizes are measured: the engine
// walks every local volume's files for them, which on a large volume
// takes long, so the sizes of one measurement serve the collections
// until the next.
const volumeSizesEvery = 5 * time.Minute

// volumeSizes is what is kept of the last measurement.
type volumeSizes struct {
	at    time.Time
	sizes map[string]int64 // by volume name; a volume missing from it is unknown
}

// volumes lists the engine's volumes, sorted by name, or nil, nil when
// there is no Docker engine. Containers counts the containers of the last
// list that mount each (-1 when that list failed); sizes are those of the
// last measurement, at most volumeSizesEvery old (-1 when unknown).
func (d *dockerContainers) volumes(ctx context.Context, now time.Time) ([]agentproto.VolumeInfo, error) {
	if ok, err := d.engine(); !ok {
		return nil, err
	}
	res, err := d.cli.VolumeList(ctx, client.VolumeListOptions{})
	if err != nil {
		return nil, err
	}
	if d.sizes.sizes == nil || now.Sub(d.sizes.at) >= volumeSizesEvery {
		d.measureVolumes(ctx, now)
	}
	mounts := map[string]int{}
	for _, c := range d.last {
		for _, m := range c.Mounts {
			if m.Type == "volume" && m.Name != "" {
				mounts[m.Name]++
			}
		}
	}
	out := make([]agentproto.VolumeInfo, 0, len(res.Items))
	for _, v := range res.Items {
		info := agentproto.VolumeInfo{Name: v.Name, Driver: v.Driver, SizeBytes: -1, Containers: -1, Labels: maps.Clone(v.Labels)}
		if n, ok := d.sizes.sizes[v.Name]; ok {
			info.SizeBytes = n
		}
		if d.last != nil {
			info.Containers = mounts[v.Name]
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b agentproto.VolumeInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// measureVolumes asks the engine for its volumes' disk use. A failed
// measurement leaves every size unknown until the next one is due, so
// that a slow engine is not asked again at every collection.
func (d *dockerContainers) measureVolumes(ctx context.Context, now time.Time) {
	d.sizes = volumeSizes{at: now, sizes: map[string]int64{}}
	du, err := d.cli.DiskUsage(ctx, client.DiskUsageOptions{Volumes: true, Verbose: true})
	if err != nil {
		return
	}
	for _, v := range du.Volumes.Items {
		if v.UsageData != nil && v.UsageData.Size >= 0 {
			d.sizes.sizes[v.Name] = v.UsageData.Size
		}
	}
}

// networks lists the engine's networks, sorted by name, or nil, nil when
// there is no Docker engine. Containers counts the containers of the last
// list attached to each, running or not (-1 when that list failed).
func (d *dockerContainers) networks(ctx context.Context) ([]agentproto.NetworkInfo, error) {
	if ok, err := d.engine(); !ok {
		return nil, err
	}
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return nil, err
	}
	byID, byName := attachments(d.last)
	out := make([]agentproto.NetworkInfo, 0, len(res.Items))
	for _, n := range res.Items {
		info := agentproto.NetworkInfo{ID: n.ID, Name: n.Name, Driver: n.Driver, Scope: n.Scope, Containers: -1}
		if d.last != nil {
			info.Containers = max(byID[n.ID], byName[n.Name])
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b agentproto.NetworkInfo) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// attachments counts the containers attached to each network, by the
// network's id and by its name (an endpoint of a container that is not
// running may carry only the name).
func attachments(list []container.Summary) (byID, byName map[string]int) {
	byID, byName = map[string]int{}, map[string]int{}
	for _, c := range list {
		if c.NetworkSettings == nil {
			continue
		}
		for name, ep := range c.NetworkSettings.Networks {
			byName[name]++
			if ep != nil && ep.NetworkID != "" {
				byID[ep.NetworkID]++
			}
		}
	}
	return byID, byName
}
