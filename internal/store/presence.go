package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/servers"
)

// ServerPresence returns whether each server was last published online
// (true) or offline (false). Servers never published are absent.
func (s *Store) ServerPresence(ctx context.Context) (map[string]bool, error) {
	var rows []struct {
		ServerID string `db:"server_id"`
		Online   int    `db:"online"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT server_id, online FROM server_presence`); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(rows))
	for _, r := range rows {
		out[r.ServerID] = r.Online == 1
	}
	return out, nil
}

// SetServerPresence records that srv is online or offline and publishes
// server.online or server.offline when that changed, in one transaction;
// of several concurrent callers one publishes. A server seen for the
// first time is recorded, and published only when it is offline. It
// reports whether an event was published.
func (s *Store) SetServerPresence(ctx context.Context, srv servers.Server, online bool, now time.Time) (bool, error) {
	flag, was := 0, 1
	typ := events.ServerOffline
	if online {
		flag, was, typ = 1, 0, events.ServerOnline
	}
	var published bool
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		published = false
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE server_presence SET online = ?, changed_at = ? WHERE server_id = ? AND online = ?`),
			flag, ms(now), srv.ID, was)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		if n == 0 {
			res, err = tx.ExecContext(ctx, tx.Rebind(`INSERT INTO server_presence (server_id, online, changed_at)
				SELECT id, ?, ? FROM servers WHERE id = ? AND status = 'online' ON CONFLICT (server_id) DO NOTHING`), flag, ms(now), srv.ID)
			if err != nil {
				return err
			}
			if n, _ = res.RowsAffected(); online {
				n = 0
			}
		}
		if n == 0 {
			return nil
		}
		published = true
		return publishServerTx(ctx, tx, typ, srv, now)
	})
	if published && err == nil {
		s.published()
	}
	return published, err
}
