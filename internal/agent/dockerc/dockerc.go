// Package dockerc makes the agent's clients of the server's Docker
// engine, and holds the few engine operations several agent families
// share: the capstan network, files copied into and out of containers,
// and the streams of an attached or exec'd process.
package dockerc

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Events is where an operation tells what it did (agent.EventSink; the
// agent's runtime imports this package, so it is named here).
type Events interface {
	Emit(level, message string, data any)
}

// New returns a client of the Docker engine at host; "" means
// DOCKER_HOST and friends if set, else the default socket. Making it
// does not connect; the API version is negotiated on the first request.
func New(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.New(opts...)
}

// Lazy is a client made on first use, by New; it is safe for concurrent
// use. The zero value is ready.
type Lazy struct {
	once sync.Once
	cli  *client.Client
	err  error
}

// Client returns the client of the engine at host, made on the first
// call (later calls get the same one, whatever their host).
func (l *Lazy) Client(host string) (*client.Client, error) {
	l.once.Do(func() {
		l.cli, l.err = New(host)
		if l.err != nil {
			l.err = fmt.Errorf("docker client: %w", l.err)
		}
	})
	return l.cli, l.err
}

// Close releases the client's connections; calls of Client after it
// fail.
func (l *Lazy) Close() error {
	l.once.Do(func() { l.err = errors.New("docker client closed") })
	if l.cli != nil {
		return l.cli.Close()
	}
	return nil
}

// EnsureNetwork creates the user-defined bridge network name if the
// engine has none of that name, and returns how a container names it.
// The engine does not refuse a second network of the same name, so two
// jobs creating it at once (on one engine) leave two: every caller then
// keeps the oldest and removes the others, so all of them converge on the
// same one. While a duplicate cannot be removed (a container uses it), the
// kept one is named by its id. Database instances and applications join
// the server's capstan network through it, so that they converge on one.
func EnsureNetwork(ctx context.Context, cli *client.Client, name string, events Events) (string, error) {
	networkMu.Lock()
	defer networkMu.Unlock()
	list := func() ([]network.Summary, error) {
		res, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
		if err != nil {
			return nil, fmt.Errorf("listing networks: %w", err)
		}
		items := slices.DeleteFunc(res.Items, func(n network.Summary) bool { return n.Name != name })
		slices.SortFunc(items, func(a, b network.Summary) int {
			if c := a.Created.Compare(b.Created); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		return items, nil
	}
	items, err := list()
	if err != nil {
		return "", err
	}
	if len(items) == 0 {
		if _, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge",
			Labels: map[string]string{agentproto.LabelDBInstance: "network"}}); err != nil && !cerrdefs.IsConflict(err) {
			return "", fmt.Errorf("creating network %s: %w", name, err)
		}
		events.Emit(agentproto.LevelInfo, "created network "+name, nil)
		if items, err = list(); err != nil {
			return "", err
		}
		if len(items) == 0 {
			return "", fmt.Errorf("network %s is gone right after it was created", name)
		}
	}
	ref := name
	for _, dup := range items[1:] {
		if _, err := cli.NetworkRemove(ctx, dup.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			ref = items[0].ID
		}
	}
	return ref, nil
}

// networkMu serializes this agent's network creation.
var networkMu sync.Mutex

// CopyFile writes a file into a container's directory dir; its mode and
// owner are like's (nil: 0600, root).
func CopyFile(ctx context.Context, cli *client.Client, id, dir, name string, content []byte, like *tar.Header) error {
	h := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(content)), ModTime: time.Now()}
	if like != nil {
		h.Mode, h.Uid, h.Gid = like.Mode, like.Uid, like.Gid
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := tw.Write(content); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: dir, Content: &buf}); err != nil {
		return fmt.Errorf("writing %s into the container: %w", name, err)
	}
	return nil
}

// ReadFile reads a file of a container (running or not): its tar header
// and content, up to 1 MiB.
func ReadFile(ctx context.Context, cli *client.Client, id, path string) (*tar.Header, []byte, error) {
	cp, err := cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer cp.Content.Close()
	tr := tar.NewReader(cp.Content)
	h, err := tr.Next()
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	content, err := io.ReadAll(io.LimitReader(tr, 1<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return h, content, nil
}
