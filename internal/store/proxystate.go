package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// bumpProxyRevision raises the revision of a server's desired proxy state.
// It runs in the transaction of the change that alters that state, so the
// change and its revision commit together; concurrent changes serialize
// on the server's row (PostgreSQL's row lock, SQLite's single writer), so
// every change gets a revision of its own. A server that is gone has no
// proxy to order: nothing is bumped then.
func bumpProxyRevision(ctx context.Context, tx *sqlx.Tx, serverID string) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE servers SET proxy_revision = proxy_revision + 1 WHERE id = ?`), serverID)
	return err
}

// proxyRevisionReadTries bounds the reads of ProxyState while changes
// keep committing between them.
const proxyRevisionReadTries = 20

// ProxyState returns the desired proxy state of a server, the sites and
// published ports of its applications that are not being removed, with
// the revision they
// belong to. The revision is read before and after the sites; as every
// change to the sites bumps it in its own transaction, an equal pair
// means the sites are exactly that revision's.
func (s *Store) ProxyState(ctx context.Context, serverID string) (agentproto.ProxyConfig, error) {
	for range proxyRevisionReadTries {
		before, err := s.proxyRevision(ctx, serverID)
		if err != nil {
			return agentproto.ProxyConfig{}, err
		}
		sites, err := s.ProxySites(ctx, serverID)
		if err != nil {
			return agentproto.ProxyConfig{}, err
		}
		ports, err := s.ProxyPorts(ctx, serverID)
		if err != nil {
			return agentproto.ProxyConfig{}, err
		}
		after, err := s.proxyRevision(ctx, serverID)
		if err != nil {
			return agentproto.ProxyConfig{}, err
		}
		if before == after {
			return agentproto.ProxyConfig{Sites: sites, Ports: ports, Revision: after}, nil
		}
	}
	return agentproto.ProxyConfig{}, fmt.Errorf("the proxy state of server %s changed during each of %d reads", serverID, proxyRevisionReadTries)
}

// proxyRevision is a server's proxy revision; 0 for a server that is gone.
func (s *Store) proxyRevision(ctx context.Context, serverID string) (int64, error) {
	var rev int64
	err := s.r.GetContext(ctx, &rev, s.rebind(`SELECT proxy_revision FROM servers WHERE id = ?`), serverID)
	if notFound(err) {
		return 0, nil
	}
	return rev, err
}
