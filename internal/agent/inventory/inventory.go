// Package inventory collects what runs on a host for capstan-agent's
// inventory reports: the systemd service units (over D-Bus), the Docker
// containers, images, volumes and networks (through the Engine API) and
// the listening TCP and UDP sockets with their processes (from /proc).
//
// A part that cannot be read is nil in the report (agentproto says: the
// agent could not read it); a host without systemd or without Docker
// simply has a nil part and no error. It must not import the agent
// package, which imports it.
package inventory

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// partTimeout bounds the reading of one part, so that a hung Docker daemon
// or systemd does not hold up the others.
const partTimeout = 10 * time.Second

// Collector collects a host's inventory. It keeps its connections to
// systemd and Docker, and what it remembers between collections, until
// Close. Not safe for concurrent use; the inventory loop owns it.
type Collector struct {
	services   *systemdServices
	containers *dockerContainers
	ports      *portScanner
}

// New returns a collector for the host whose root filesystem is at root
// ("/" on a real host; /proc and /run/systemd are read under it).
func New(root string) *Collector {
	if root == "" {
		root = "/"
	}
	return &Collector{
		services:   newSystemdServices(root),
		containers: newDockerContainers(),
		ports:      &portScanner{root: root},
	}
}

// Collect reads the inventory. Parts that could not be read are nil and
// their errors joined in err; the report is usable either way.
func (c *Collector) Collect(ctx context.Context) (agentproto.InventoryRequest, error) {
	now := time.Now()
	inv := agentproto.InventoryRequest{CollectedAt: now.UTC()}
	var errs []error
	part := func(name string, f func(context.Context) error) {
		pctx, cancel := context.WithTimeout(ctx, partTimeout)
		defer cancel()
		if err := f(pctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	part("systemd services", func(ctx context.Context) (err error) {
		inv.Services, err = c.services.list(ctx, now)
		return err
	})
	part("docker containers", func(ctx context.Context) (err error) {
		inv.Containers, err = c.containers.list(ctx)
		return err
	})
	part("docker images", func(ctx context.Context) (err error) {
		inv.Images, err = c.containers.images(ctx)
		return err
	})
	// After the containers: they count the containers of its list.
	part("docker volumes", func(ctx context.Context) (err error) {
		inv.Volumes, err = c.containers.volumes(ctx, now)
		return err
	})
	part("docker networks", func(ctx context.Context) (err error) {
		inv.Networks, err = c.containers.networks(ctx)
		return err
	})
	part("listening ports", func(context.Context) (err error) {
		inv.Ports, err = c.ports.list(now)
		return err
	})
	return inv, errors.Join(errs...)
}

// Close closes the connections to systemd and Docker.
func (c *Collector) Close() error {
	c.services.close()
	c.containers.close()
	return nil
}

// Hash is a digest of what an inventory says, to tell whether it changed:
// its collection time is left out, lists are taken in sorted order, and a
// container's status text counts only by its parenthesized parts ("Up 3
// minutes (healthy)" counts as "(healthy)", "Exited (1) 2 hours ago" as
// "(1)"), so that the passing of time alone is no change. A nil list (not
// readable) and an empty one differ.
func Hash(inv agentproto.InventoryRequest) [sha256.Size]byte {
	inv.CollectedAt = time.Time{}
	inv.Services = sortedClone(inv.Services, func(a, b agentproto.ServiceInfo) int { return cmp.Compare(a.Name, b.Name) })
	inv.Ports = sortedClone(inv.Ports, func(a, b agentproto.ListeningPort) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Address, b.Address), cmp.Compare(a.PID, b.PID))
	})
	inv.Containers = sortedClone(inv.Containers, func(a, b agentproto.ContainerInfo) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	for i := range inv.Containers {
		inv.Containers[i].Status = statusKey(inv.Containers[i].Status)
	}
	inv.Images = sortedClone(inv.Images, func(a, b agentproto.ImageInfo) int { return cmp.Compare(a.ID, b.ID) })
	inv.Volumes = sortedClone(inv.Volumes, func(a, b agentproto.VolumeInfo) int { return cmp.Compare(a.Name, b.Name) })
	inv.Networks = sortedClone(inv.Networks, func(a, b agentproto.NetworkInfo) int { return cmp.Compare(a.ID, b.ID) })
	// Maps (labels) are encoded with sorted keys.
	b, err := json.Marshal(inv)
	if err != nil {
		// Not reachable with these types; an unhashable inventory counts
		// as changed.
		return sha256.Sum256([]byte(time.Now().String()))
	}
	return sha256.Sum256(b)
}

func sortedClone[S ~[]E, E any](s S, cmp func(a, b E) int) S {
	if s == nil {
		return nil
	}
	s = slices.Clone(s)
	slices.SortStableFunc(s, cmp)
	return s
}

// statusKey keeps the parenthesized parts of a Docker status text.
func statusKey(status string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(status, '(')
		if i < 0 {
			return b.String()
		}
		j := strings.IndexByte(status[i:], ')')
		if j < 0 {
			return b.String()
		}
		b.WriteString(status[i : i+j+1])
		status = status[i+j+1:]
	}
}
