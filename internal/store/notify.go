package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capstan-dev/capstan/internal/backoff"
)

// notifyChannel is the PostgreSQL channel control planes sharing a
// database tell each other about changes on.
const notifyChannel = "capstan"

// msgDatabasesChanged tells the other control planes that database
// instances changed, so that they forget the revisions they keep.
const msgDatabasesChanged = "store:databases-changed"

// Shared reports whether several control planes may share this store
// (PostgreSQL): they then tell each other about changes with Notify and
// Listen, and keep in memory only what another could change when those
// messages keep it current (and, while they may be missed, nothing).
func (s *Store) Shared() bool { return s.dialect == Postgres }

// Notify sends msg to every control plane listening on the database,
// this one included. With SQLite (one control plane) it does nothing.
func (s *Store) Notify(ctx context.Context, msg string) error {
	if !s.Shared() {
		return nil
	}
	_, err := s.w.ExecContext(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, msg)
	return err
}

// Listen delivers every message sent with Notify, in order, until ctx
// ends. It holds one connection of its own; when that is lost, it calls
// connected(false), reconnects with backoff, and calls connected(true)
// once it listens again (messages sent meanwhile are lost: the caller
// treats reconnecting as "anything may have changed"). With SQLite it
// returns at once.
func (s *Store) Listen(ctx context.Context, deliver func(msg string), connected func(bool)) {
	if !s.Shared() {
		return
	}
	// The store's own message: another control plane changed instances.
	inner := deliver
	deliver = func(msg string) {
		if msg == msgDatabasesChanged {
			s.revs.invalidate()
			return
		}
		inner(msg)
	}
	// Cached revisions are only used while changes are heard; what was
	// cached before a reconnection may have missed some.
	heard := connected
	connected = func(up bool) {
		if !up {
			s.revsHeard.Store(false)
		}
		s.revs.invalidate()
		if up {
			s.revsHeard.Store(true)
		}
		heard(up)
	}
	retry := backoff.Exponential{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	for ctx.Err() == nil {
		if failures > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff.Jitter(retry.Delay(failures), 0.5)):
			}
		}
		listened, _ := s.listenOnce(ctx, deliver, connected)
		if ctx.Err() != nil {
			return
		}
		if listened {
			failures = 0
		}
		failures++
	}
}

// listenOnce listens on one connection until it fails; listened reports
// whether it got as far as listening.
func (s *Store) listenOnce(ctx context.Context, deliver func(msg string), connected func(bool)) (listened bool, err error) {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false, err
	}
	connected(true)
	defer connected(false)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		deliver(n.Payload)
	}
}
