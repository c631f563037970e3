package monitoring

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/servers"
)

// PresenceStore records which servers were last published online.
type PresenceStore interface {
	ServerPresence(ctx context.Context) (map[string]bool, error)
	SetServerPresence(ctx context.Context, srv servers.Server, online bool, now time.Time) (bool, error)
}

// ServerLister lists servers with their derived status.
type ServerLister interface {
	List(ctx context.Context) ([]servers.Server, error)
	// ListStates lists them with their id, name, status and last
	// heartbeat only.
	ListStates(ctx context.Context) ([]servers.Server, error)
	// WithStatus derives the status of servers read from the store.
	WithStatus(list []servers.Server) []servers.Server
}

// Presence publishes server.online and server.offline when an enrolled
// server's agent stops or starts being heard from.
type Presence struct {
	store   PresenceStore
	servers ServerLister
	now     func() time.Time
}

// NewPresence returns a presence watcher.
func NewPresence(st PresenceStore, srv ServerLister, now func() time.Time) *Presence {
	return &Presence{store: st, servers: srv, now: now}
}

// Check compares every enrolled server's status with what was last
// published and publishes the changes. It returns how many it published.
func (p *Presence) Check(ctx context.Context) (int, error) {
	known, err := p.store.ServerPresence(ctx)
	if err != nil {
		return 0, err
	}
	list, err := p.servers.ListStates(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, srv := range list {
		if srv.Status != servers.Online && srv.Status != servers.Offline {
			continue
		}
		online := srv.Status == servers.Online
		if was, ok := known[srv.ID]; ok && was == online {
			continue
		}
		changed, err := p.store.SetServerPresence(ctx, srv, online, p.now())
		if err != nil {
			return n, err
		}
		if changed {
			n++
		}
	}
	return n, nil
}
