package apps

import (
	"context"
	"slices"
)

// KeptImages returns what names the Docker images the applications on a
// server keep: those of each one's newest KeepImages succeeded releases
// (its live release and the ones a rollback returns to). A prune on the
// server never removes them (servers.Deps.KeptImages).
func KeptImages(st Store) func(ctx context.Context, serverID string) ([]string, error) {
	return func(ctx context.Context, serverID string) ([]string, error) { return keptImageIDs(ctx, st, serverID) }
}

func keptImageIDs(ctx context.Context, st Store, serverID string) ([]string, error) {
	list, err := st.ListApps(ctx, serverID)
	if err != nil {
		return nil, err
	}
	keep := []string{}
	add := func(id string) {
		if id != "" && !slices.Contains(keep, id) {
			keep = append(keep, id)
		}
	}
	for _, a := range list {
		ids, err := kindOf(a).keptImages(ctx, st, a)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			add(id)
		}
	}
	return keep, nil
}
