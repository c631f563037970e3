package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/clouddrive"
	"github.com/capstan-dev/capstan/internal/fault"
)

// InsertCloudDriveState stores a sign-in state.
func (s *Store) InsertCloudDriveState(ctx context.Context, st clouddrive.State) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO clouddrive_states (state_hash, session_id, user_id, browser_hash,
		verifier, expires_at) VALUES (?, ?, ?, ?, ?, ?)`), st.Hash, st.SessionID, st.UserID, st.BrowserHash, st.SealedVerifier,
		ms(st.ExpiresAt))
	return err
}

// UseCloudDriveState marks a state used, once: the update is conditional
// on it being unused, unexpired, this browser's, and its session being
// live and an enabled administrator's, so only the one caller whose
// update changed the row gets it.
func (s *Store) UseCloudDriveState(ctx context.Context, hash, browserHash string, now time.Time) (clouddrive.State, bool, error) {
	var st clouddrive.State
	var n int64
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM clouddrive_states WHERE expires_at <= ?`), ms(now)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE clouddrive_states SET used_at = ?
			WHERE state_hash = ? AND browser_hash = ? AND used_at IS NULL AND expires_at > ?
			AND EXISTS (SELECT 1 FROM sessions JOIN users ON users.id = sessions.user_id
				WHERE sessions.id = clouddrive_states.session_id AND sessions.user_id = clouddrive_states.user_id
				AND sessions.revoked_at IS NULL AND sessions.expires_at > ? AND users.admin AND users.disabled_at IS NULL)`),
			ms(now), hash, browserHash, ms(now), ms(now))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		var r struct {
			SessionID string `db:"session_id"`
			UserID    string `db:"user_id"`
			Verifier  string `db:"verifier"`
			ExpiresAt int64  `db:"expires_at"`
		}
		if err := tx.GetContext(ctx, &r, tx.Rebind(`SELECT session_id, user_id, verifier, expires_at FROM clouddrive_states
			WHERE state_hash = ?`), hash); err != nil {
			return err
		}
		st = clouddrive.State{Hash: hash, SessionID: r.SessionID, UserID: r.UserID, BrowserHash: browserHash,
			SealedVerifier: r.Verifier, ExpiresAt: fromMS(r.ExpiresAt)}
		return nil
	})
	if err != nil || n != 1 {
		return clouddrive.State{}, false, err
	}
	return st, true, nil
}

// InsertCloudDriveConnection stores the connection (there is at most one).
func (s *Store) InsertCloudDriveConnection(ctx context.Context, c clouddrive.Connection) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO clouddrive_connections (id, grant_id, provider, account_email, scope,
		refresh_token, connected_by, connected_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?)`),
		c.GrantID, c.Provider, c.AccountEmail, c.Scope, c.SealedRefreshToken, c.ConnectedBy, ms(c.ConnectedAt))
	if isUniqueViolation(err) {
		return fault.Conflictf("clouddrive-connected", "A cloud drive is connected already; disconnect it first (DELETE /api/v1/backups/clouddrive/connection).")
	}
	return err
}

// CloudDriveConnection returns the connection.
func (s *Store) CloudDriveConnection(ctx context.Context) (clouddrive.Connection, error) {
	var r struct {
		GrantID      string `db:"grant_id"`
		Provider     string `db:"provider"`
		AccountEmail string `db:"account_email"`
		Scope        string `db:"scope"`
		RefreshToken string `db:"refresh_token"`
		ConnectedBy  string `db:"connected_by"`
		ConnectedAt  int64  `db:"connected_at"`
	}
	err := s.r.GetContext(ctx, &r, `SELECT grant_id, provider, account_email, scope, refresh_token, connected_by, connected_at
		FROM clouddrive_connections WHERE id = 1`)
	if notFound(err) {
		return clouddrive.Connection{}, fault.NotFoundf("No cloud drive is connected.")
	}
	if err != nil {
		return clouddrive.Connection{}, err
	}
	return clouddrive.Connection{GrantID: r.GrantID, Provider: r.Provider, AccountEmail: r.AccountEmail, Scope: r.Scope,
		SealedRefreshToken: r.RefreshToken, ConnectedBy: r.ConnectedBy, ConnectedAt: fromMS(r.ConnectedAt)}, nil
}

// UpdateCloudDriveRefreshToken replaces the grant's sealed refresh token.
func (s *Store) UpdateCloudDriveRefreshToken(ctx context.Context, grantID, sealed string) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE clouddrive_connections SET refresh_token = ? WHERE id = 1 AND grant_id = ?`),
		sealed, grantID))
}

// DeleteCloudDriveConnection forgets the grant.
func (s *Store) DeleteCloudDriveConnection(ctx context.Context, grantID string) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`DELETE FROM clouddrive_connections WHERE id = 1 AND grant_id = ?`), grantID))
}
