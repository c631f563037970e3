package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/capstan-dev/capstan/internal/stream"
)

// CreateStreamTicket stores a ticket's hash, and deletes the tickets that
// expired.
func (s *Store) CreateStreamTicket(ctx context.Context, hash string, t stream.Ticket, expires, now time.Time) error {
	if _, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM stream_tickets WHERE expires_at <= ?`), ms(now)); err != nil {
		return err
	}
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO stream_tickets (hash, user_id, session_id, until_at, expires_at)
		VALUES (?, ?, ?, ?, ?)`), hash, t.UserID, t.SessionID, ms(t.Until), ms(expires))
	return err
}

// RedeemStreamTicket uses a ticket, once: the row is deleted by the one
// call that gets it, and only while the ticket is live and its session
// neither revoked nor expired.
func (s *Store) RedeemStreamTicket(ctx context.Context, hash string, now time.Time) (stream.Ticket, error) {
	var (
		t     stream.Ticket
		until int64
	)
	err := s.w.QueryRowContext(ctx, s.rebind(`DELETE FROM stream_tickets WHERE hash = ? AND expires_at > ?
		RETURNING user_id, session_id, until_at`), hash, ms(now)).Scan(&t.UserID, &t.SessionID, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return stream.Ticket{}, stream.ErrTicket
	}
	if err != nil {
		return stream.Ticket{}, err
	}
	t.Until = time.UnixMilli(until).UTC()
	var live int
	// The credential that took it is a session, or an API token.
	err = s.w.QueryRowContext(ctx, s.rebind(`SELECT
		(SELECT COUNT(*) FROM sessions s JOIN users u ON u.id = s.user_id
		 WHERE s.id = ? AND s.user_id = ? AND s.revoked_at IS NULL AND s.expires_at > ? AND u.disabled_at IS NULL) +
		(SELECT COUNT(*) FROM api_tokens k JOIN users u ON u.id = k.user_id
		 WHERE k.id = ? AND k.user_id = ? AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > ?) AND u.disabled_at IS NULL)`),
		t.SessionID, t.UserID, ms(now), t.SessionID, t.UserID, ms(now)).Scan(&live)
	if err != nil {
		return stream.Ticket{}, err
	}
	if live == 0 {
		return stream.Ticket{}, stream.ErrTicket
	}
	return t, nil
}
