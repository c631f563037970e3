package inventory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// images lists the Docker engine's images, sorted by id, or nil, nil when
// there is no Docker engine (its socket does not exist). Tags exclude
// Docker's "<none>:<none>" placeholder.
func (d *dockerContainers) images(ctx context.Context) ([]agentproto.ImageInfo, error) {
	if ok, err := d.engine(); !ok {
		return nil, err
	}
	res, err := d.cli.ImageList(ctx, client.ImageListOptions{All: false})
	if err != nil {
		return nil, err
	}
	out := make([]agentproto.ImageInfo, 0, len(res.Items))
	for _, im := range res.Items {
		tags := []string{}
		for _, t := range im.RepoTags {
			if t != "" && t != "<none>:<none>" {
				tags = append(tags, t)
			}
		}
		slices.Sort(tags)
		out = append(out, agentproto.ImageInfo{ID: im.ID, Tags: tags, SizeBytes: im.Size, Created: time.Unix(im.Created, 0).UTC()})
	}
	slices.SortFunc(out, func(a, b agentproto.ImageInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
