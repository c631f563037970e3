package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	dockerimage "github.com/moby/moby/api/types/image"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// imageSummary is an image of the engine's list.
type imageSummary = dockerimage.Summary

// image is the image a release runs.
type image struct {
	ID     string // full id, sha256:…
	Pulled bool
}

// resolveImage finds the image of a release: the local image ImageID for
// a rollback, else Image pulled from its registry, or the local image of
// that exact reference when the registry cannot be reached.
func resolveImage(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, events agent.EventSink) (image, error) {
	if p.ImageID != "" {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("using the local image %s (rollback)", shortImage(p.ImageID)), nil)
		res, err := cli.ImageInspect(ctx, p.ImageID)
		if cerrdefs.IsNotFound(err) {
			return image{}, fmt.Errorf("image %s is no longer on this server", p.ImageID)
		}
		if err != nil {
			return image{}, fmt.Errorf("inspecting image %s: %w", p.ImageID, err)
		}
		return image{ID: res.ID}, nil
	}

	events.Emit(agentproto.LevelInfo, fmt.Sprintf("pulling %s", p.Image), nil)
	pullErr := pull(ctx, cli, p.Image)
	if pullErr == nil {
		res, err := cli.ImageInspect(ctx, p.Image)
		if err != nil {
			return image{}, fmt.Errorf("inspecting the pulled image %s: %w", p.Image, err)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("pulled %s: image %s", p.Image, shortImage(res.ID)), nil)
		return image{ID: res.ID, Pulled: true}, nil
	}
	if ctx.Err() != nil || !registryUnreachable(pullErr) {
		return image{}, fmt.Errorf("pulling %s: %w", p.Image, pullErr)
	}
	res, err := cli.ImageInspect(ctx, p.Image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return image{}, fmt.Errorf("pulling %s: %w (and there is no local image of that reference)", p.Image, pullErr)
		}
		return image{}, fmt.Errorf("pulling %s: %w; inspecting the local image: %v", p.Image, pullErr, err)
	}
	events.Emit(agentproto.LevelWarn, fmt.Sprintf("registry unreachable; using the local image %s", p.Image),
		map[string]string{"pull_error": pullErr.Error(), "image_id": res.ID})
	return image{ID: res.ID}, nil
}

// pull pulls ref and waits for the engine to finish.
func pull(ctx context.Context, cli *client.Client, ref string) error {
	res, err := cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer res.Close()
	return res.Wait(ctx)
}

// unreachableMarks are the words of the engine's errors when it cannot
// reach a registry at all (name resolution, connection, TLS handshake),
// as opposed to a registry that answers no.
var unreachableMarks = []string{
	"no such host",
	"server misbehaving",
	"temporary failure in name resolution",
	"connection refused",
	"connection reset by peer",
	"network is unreachable",
	"no route to host",
	"i/o timeout",
	"tls handshake timeout",
	"client.timeout exceeded",
	"dial tcp",
	"dial udp",
}

// registryUnreachable reports whether a pull failed because the engine
// could not reach the registry.
func registryUnreachable(err error) bool {
	if err == nil || client.IsErrConnectionFailed(err) { // the engine itself
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, m := range unreachableMarks {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// sameImage reports whether two image ids (full or short, with or without
// the sha256: prefix) name the same image.
func sameImage(a, b string) bool {
	a, b = strings.TrimPrefix(a, "sha256:"), strings.TrimPrefix(b, "sha256:")
	if len(a) < 12 || len(b) < 12 {
		return a == b
	}
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

func shortImage(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// prune removes the images in candidates (those of the containers a
// release removed, and those the control plane says fell out of the ones
// kept for rollbacks) except newID, the kept ones and those any container
// still uses; candidates no longer on the host are passed over quietly.
// Failures are warn events; it returns the ids removed.
func prune(ctx context.Context, cli *client.Client, candidates []string, keep []string, newID string, events agent.EventSink) []string {
	var todo []string
	for _, id := range candidates {
		if id == "" || sameImage(id, newID) || slices.ContainsFunc(todo, func(t string) bool { return sameImage(t, id) }) {
			continue
		}
		if slices.ContainsFunc(keep, func(k string) bool { return sameImage(k, id) }) {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("keeping image %s for rollbacks", shortImage(id)), nil)
			continue
		}
		todo = append(todo, id)
	}
	pruned := []string{}
	if len(todo) == 0 {
		return pruned
	}
	present, err := cli.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("not pruning old images: listing images: %v", err), nil)
		return pruned
	}
	todo = slices.DeleteFunc(todo, func(id string) bool {
		return !slices.ContainsFunc(present.Items, func(im imageSummary) bool { return sameImage(im.ID, id) })
	})
	if len(todo) == 0 {
		return pruned
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("not pruning old images: listing containers: %v", err), nil)
		return pruned
	}
	for _, id := range todo {
		if slices.ContainsFunc(list.Items, func(c containerSummary) bool { return sameImage(c.ImageID, id) }) {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("keeping image %s: a container still uses it", shortImage(id)), nil)
			continue
		}
		if err := removeImage(ctx, cli, id); err != nil {
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not prune image %s: %v", shortImage(id), err), nil)
			continue
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("pruned image %s", shortImage(id)), nil)
		pruned = append(pruned, id)
	}
	return pruned
}

// removeImage removes an image without force: the engine refuses while a
// container uses it. An image with several references is removed by
// untagging each of them.
func removeImage(ctx context.Context, cli *client.Client, id string) error {
	_, err := cli.ImageRemove(ctx, id, client.ImageRemoveOptions{PruneChildren: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "referenced in multiple repositories") {
		return err
	}
	res, ierr := cli.ImageInspect(ctx, id)
	if ierr != nil {
		return errors.Join(err, ierr)
	}
	for _, tag := range res.RepoTags {
		if _, err := cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	// Left without tags, the image went with its last one; a digest
	// reference may still hold it.
	if _, err := cli.ImageRemove(ctx, id, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}
