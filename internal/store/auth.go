package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
)

var _ auth.Store = (*Store)(nil)

type accountRow struct {
	ID           string        `db:"id"`
	Email        string        `db:"email"`
	PasswordHash string        `db:"password_hash"`
	TOTPSecret   string        `db:"totp_secret"`
	TOTPLastStep int64         `db:"totp_last_step"`
	Admin        bool          `db:"admin"`
	DisabledAt   sql.NullInt64 `db:"disabled_at"`
	CreatedAt    int64         `db:"created_at"`
	UpdatedAt    int64         `db:"updated_at"`
}

func (r accountRow) account() auth.Account {
	return auth.Account{
		User: auth.User{ID: r.ID, Email: r.Email, Admin: r.Admin, Disabled: r.DisabledAt.Valid,
			CreatedAt: fromMS(r.CreatedAt)},
		PasswordHash: r.PasswordHash, TOTPSecret: r.TOTPSecret, TOTPLastStep: r.TOTPLastStep,
		DisabledAt: nullMS(r.DisabledAt), UpdatedAt: fromMS(r.UpdatedAt),
	}
}

const accountColumns = `id, email, password_hash, totp_secret, totp_last_step, admin, disabled_at, created_at, updated_at`

// CreateAccount stores a new account; a taken e-mail is a conflict.
func (s *Store) CreateAccount(ctx context.Context, a auth.Account) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO users (`+accountColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)`),
		a.ID, a.Email, a.PasswordHash, a.TOTPSecret, a.TOTPLastStep, a.Admin, ms(a.CreatedAt), ms(a.UpdatedAt))
	if isUniqueViolation(err) {
		return fault.Conflictf("email-taken", "An account with this e-mail address already exists.")
	}
	return err
}

func (s *Store) accountWhere(ctx context.Context, where string, arg any) (auth.Account, error) {
	return getOne(ctx, s.r, always(accountRow.account), "user", s.rebind(`SELECT `+accountColumns+` FROM users WHERE `+where), arg)
}

// AccountByEmail returns the account with this (normalized) e-mail.
func (s *Store) AccountByEmail(ctx context.Context, email string) (auth.Account, error) {
	return s.accountWhere(ctx, "email = ?", email)
}

// AccountByID returns the account with this id.
func (s *Store) AccountByID(ctx context.Context, id string) (auth.Account, error) {
	return s.accountWhere(ctx, "id = ?", id)
}

// ListUsers returns every user, oldest first.
func (s *Store) ListUsers(ctx context.Context) ([]auth.User, error) {
	var rows []struct {
		accountRow
		LastSignIn sql.NullInt64 `db:"last_sign_in"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT `+accountColumns+`,
		(SELECT MAX(created_at) FROM sessions WHERE sessions.user_id = users.id) AS last_sign_in FROM users ORDER BY id`); err != nil {
		return nil, err
	}
	users := make([]auth.User, len(rows))
	for i, r := range rows {
		users[i] = r.account().User
		users[i].LastSignInAt = nullMS(r.LastSignIn)
	}
	return users, nil
}

// SetTOTPSecret replaces a user's sealed TOTP secret and resets its replay guard.
func (s *Store) SetTOTPSecret(ctx context.Context, userID, sealed string, now time.Time) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE users SET totp_secret = ?, totp_last_step = 0, updated_at = ? WHERE id = ?`),
		sealed, ms(now), userID)
	return mustAffect(res, err, "user")
}

// DisableUser disables a user and revokes every session it has.
func (s *Store) DisableUser(ctx context.Context, userID string, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE users SET disabled_at = COALESCE(disabled_at, ?), updated_at = ? WHERE id = ?`),
			ms(now), ms(now), userID)
		if err := mustAffect(res, err, "user"); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET revoked_at = ?, revoked_reason = 'user_disabled' WHERE user_id = ? AND revoked_at IS NULL`),
			ms(now), userID)
		return err
	})
}

// activeAdminsTx returns the ids of the enabled administrators, locking
// their rows on PostgreSQL so that two changes that each leave the other
// administrator in place cannot both commit (SQLite's write transactions
// are serial already).
func (s *Store) activeAdminsTx(ctx context.Context, tx *sqlx.Tx) ([]string, error) {
	q := `SELECT id FROM users WHERE admin AND disabled_at IS NULL ORDER BY id`
	if s.dialect == Postgres {
		q += ` FOR UPDATE`
	}
	var ids []string
	return ids, tx.SelectContext(ctx, &ids, q)
}

// lastAdminTx refuses a change that leaves no enabled administrator.
func (s *Store) lastAdminTx(ctx context.Context, tx *sqlx.Tx, userID, what string) error {
	admins, err := s.activeAdminsTx(ctx, tx)
	if err != nil {
		return err
	}
	for _, id := range admins {
		if id != userID {
			return nil
		}
	}
	if len(admins) == 0 {
		return nil // none to keep: the user is not one
	}
	return fault.Conflictf("last-admin", "This is the last enabled administrator: %s would leave no one to manage Capstan. Make another user an administrator first.", what)
}

// accountTx reads a user's row in tx.
func accountTx(ctx context.Context, tx *sqlx.Tx, userID string) (accountRow, error) {
	var r accountRow
	err := tx.GetContext(ctx, &r, tx.Rebind(`SELECT `+accountColumns+` FROM users WHERE id = ?`), userID)
	if notFound(err) {
		return r, fault.NotFoundf("No such user.")
	}
	return r, err
}

// SetUserAccess changes a user's role (admin, when not nil) and whether it
// is disabled (when not nil), refusing a change that leaves no enabled
// administrator (409 last-admin). Disabling revokes every session of the
// user and forgets its devices. It returns the user after the change.
func (s *Store) SetUserAccess(ctx context.Context, userID string, admin, disabled *bool, now time.Time) (auth.User, error) {
	var out auth.User
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		r, err := accountTx(ctx, tx, userID)
		if err != nil {
			return err
		}
		activeAdmin := r.Admin && !r.DisabledAt.Valid
		switch {
		case activeAdmin && admin != nil && !*admin:
			if err := s.lastAdminTx(ctx, tx, userID, "making it a member"); err != nil {
				return err
			}
		case activeAdmin && disabled != nil && *disabled:
			if err := s.lastAdminTx(ctx, tx, userID, "disabling it"); err != nil {
				return err
			}
		}
		if admin != nil {
			r.Admin = *admin
		}
		if disabled != nil {
			switch {
			case *disabled && !r.DisabledAt.Valid:
				r.DisabledAt = sql.NullInt64{Int64: ms(now), Valid: true}
			case !*disabled:
				r.DisabledAt = sql.NullInt64{}
			}
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE users SET admin = ?, disabled_at = ?, updated_at = ? WHERE id = ?`),
			r.Admin, r.DisabledAt, ms(now), userID)
		if err := mustAffect(res, err, "user"); err != nil {
			return err
		}
		if r.DisabledAt.Valid {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET revoked_at = ?, revoked_reason = 'user_disabled'
				WHERE user_id = ? AND revoked_at IS NULL`), ms(now), userID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sign_in_devices SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL`),
				ms(now), userID); err != nil {
				return err
			}
		}
		out = r.account().User
		return nil
	})
	return out, err
}

// DeleteUser deletes a user with its sessions, devices and inbox,
// refusing to delete the last enabled administrator (409 last-admin).
func (s *Store) DeleteUser(ctx context.Context, userID string) (auth.User, error) {
	var out auth.User
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		r, err := accountTx(ctx, tx, userID)
		if err != nil {
			return err
		}
		if r.Admin && !r.DisabledAt.Valid {
			if err := s.lastAdminTx(ctx, tx, userID, "deleting it"); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM users WHERE id = ?`), userID)
		if err := mustAffect(res, err, "user"); err != nil {
			return err
		}
		out = r.account().User
		return nil
	})
	return out, err
}

// AdvanceTOTPStep records a used TOTP step if it is newer than the last one.
func (s *Store) AdvanceTOTPStep(ctx context.Context, userID string, step int64) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE users SET totp_last_step = ? WHERE id = ? AND totp_last_step < ?`), step, userID, step))
}

type challengeRow struct {
	IDHash     string        `db:"id_hash"`
	UserID     string        `db:"user_id"`
	CreatedAt  int64         `db:"created_at"`
	ExpiresAt  int64         `db:"expires_at"`
	Failures   int           `db:"failures"`
	ConsumedAt sql.NullInt64 `db:"consumed_at"`
}

// CreateChallenge stores a second-factor challenge.
func (s *Store) CreateChallenge(ctx context.Context, c auth.Challenge) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO login_challenges (id_hash, user_id, created_at, expires_at, failures) VALUES (?, ?, ?, ?, 0)`),
		c.IDHash, c.UserID, ms(c.CreatedAt), ms(c.ExpiresAt))
	return err
}

// ChallengeByHash returns a challenge by the hash of its id.
func (s *Store) ChallengeByHash(ctx context.Context, hash string) (auth.Challenge, error) {
	var r challengeRow
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT id_hash, user_id, created_at, expires_at, failures, consumed_at FROM login_challenges WHERE id_hash = ?`), hash)
	if notFound(err) {
		return auth.Challenge{}, fault.NotFoundf("No such challenge.")
	}
	if err != nil {
		return auth.Challenge{}, err
	}
	return auth.Challenge{IDHash: r.IDHash, UserID: r.UserID, CreatedAt: fromMS(r.CreatedAt), ExpiresAt: fromMS(r.ExpiresAt),
		Failures: r.Failures, ConsumedAt: nullMS(r.ConsumedAt)}, nil
}

// TakeChallengeAttempt counts one code attempt on a live challenge with
// attempts left, in one conditional statement.
func (s *Store) TakeChallengeAttempt(ctx context.Context, hash string, max int, now time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE login_challenges SET failures = failures + 1
		WHERE id_hash = ? AND consumed_at IS NULL AND expires_at > ? AND failures < ?`), hash, ms(now), max))
}

// ConsumeChallenge marks a challenge used, once, and takes back the
// attempt of the right code.
func (s *Store) ConsumeChallenge(ctx context.Context, hash string, now time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE login_challenges SET consumed_at = ?,
		failures = CASE WHEN failures > 0 THEN failures - 1 ELSE 0 END
		WHERE id_hash = ? AND consumed_at IS NULL`), ms(now), hash))
}

// SetPassword replaces a user's password hash.
func (s *Store) SetPassword(ctx context.Context, userID, hash string, now time.Time) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE users SET password_hash = ?, updated_at = ? WHERE id = ?`), hash, ms(now), userID)
	return mustAffect(res, err, "user")
}

// CreateDevice stores a device that completed a sign-in.
func (s *Store) CreateDevice(ctx context.Context, d auth.Device) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO sign_in_devices (token_hash, user_id, created_at, last_used_at, expires_at) VALUES (?, ?, ?, ?, ?)`),
		d.Hash, d.UserID, ms(d.CreatedAt), ms(d.LastUsedAt), ms(d.ExpiresAt))
	return err
}

// DeviceByHash returns a device by the hash of its cookie.
func (s *Store) DeviceByHash(ctx context.Context, hash string) (auth.Device, error) {
	var r struct {
		Hash       string        `db:"token_hash"`
		UserID     string        `db:"user_id"`
		CreatedAt  int64         `db:"created_at"`
		LastUsedAt int64         `db:"last_used_at"`
		ExpiresAt  int64         `db:"expires_at"`
		RevokedAt  sql.NullInt64 `db:"revoked_at"`
	}
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT token_hash, user_id, created_at, last_used_at, expires_at, revoked_at
		FROM sign_in_devices WHERE token_hash = ?`), hash)
	if notFound(err) {
		return auth.Device{}, fault.NotFoundf("No such device.")
	}
	if err != nil {
		return auth.Device{}, err
	}
	return auth.Device{Hash: r.Hash, UserID: r.UserID, CreatedAt: fromMS(r.CreatedAt), LastUsedAt: fromMS(r.LastUsedAt),
		ExpiresAt: fromMS(r.ExpiresAt), RevokedAt: nullMS(r.RevokedAt)}, nil
}

// TouchDevice records a sign-in from a live device and moves its expiry.
func (s *Store) TouchDevice(ctx context.Context, hash string, now, expires time.Time) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE sign_in_devices SET last_used_at = ?, expires_at = ?
		WHERE token_hash = ? AND revoked_at IS NULL`), ms(now), ms(expires), hash)
	return err
}

// RevokeDevices revokes a user's live devices but keep.
func (s *Store) RevokeDevices(ctx context.Context, userID, keep string, now time.Time) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE sign_in_devices SET revoked_at = ?
		WHERE user_id = ? AND token_hash <> ? AND revoked_at IS NULL`), ms(now), userID, keep)
	return err
}

func insertAccess(ctx context.Context, tx *sqlx.Tx, a auth.AccessToken) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO access_tokens (token_hash, session_id, user_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`),
		a.Hash, a.SessionID, a.UserID, ms(a.CreatedAt), ms(a.ExpiresAt))
	return err
}

func insertRefresh(ctx context.Context, tx *sqlx.Tx, r auth.RefreshToken) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO refresh_tokens (token_hash, session_id, created_at) VALUES (?, ?, ?)`),
		r.Hash, r.SessionID, ms(r.CreatedAt))
	return err
}

// CreateSession stores a new session with its first refresh and access tokens.
func (s *Store) CreateSession(ctx context.Context, sess auth.Session, r auth.RefreshToken, a auth.AccessToken) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO sessions (id, user_id, created_at, last_used_at, expires_at, ip, user_agent) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			sess.ID, sess.UserID, ms(sess.CreatedAt), ms(sess.LastUsedAt), ms(sess.ExpiresAt), sess.IP, truncate(sess.UserAgent, 512))
		if err != nil {
			return err
		}
		if err := insertRefresh(ctx, tx, r); err != nil {
			return err
		}
		return insertAccess(ctx, tx, a)
	})
}

type sessionRow struct {
	ID         string        `db:"id"`
	UserID     string        `db:"user_id"`
	CreatedAt  int64         `db:"created_at"`
	LastUsedAt int64         `db:"last_used_at"`
	ExpiresAt  int64         `db:"expires_at"`
	RevokedAt  sql.NullInt64 `db:"revoked_at"`
	IP         string        `db:"ip"`
	UserAgent  string        `db:"user_agent"`
}

// RefreshTokenByHash returns a refresh token and its session.
func (s *Store) RefreshTokenByHash(ctx context.Context, hash string) (auth.RefreshToken, auth.Session, error) {
	var r struct {
		TokenHash string        `db:"token_hash"`
		CreatedAt int64         `db:"token_created_at"`
		UsedAt    sql.NullInt64 `db:"used_at"`
		sessionRow
	}
	err := s.r.GetContext(ctx, &r, s.rebind(`
		SELECT t.token_hash, t.created_at AS token_created_at, t.used_at,
		       s.id, s.user_id, s.created_at, s.last_used_at, s.expires_at, s.revoked_at, s.ip, s.user_agent
		FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
		WHERE t.token_hash = ?`), hash)
	if notFound(err) {
		return auth.RefreshToken{}, auth.Session{}, fault.NotFoundf("No such refresh token.")
	}
	if err != nil {
		return auth.RefreshToken{}, auth.Session{}, err
	}
	return auth.RefreshToken{Hash: r.TokenHash, SessionID: r.ID, CreatedAt: fromMS(r.CreatedAt), UsedAt: nullMS(r.UsedAt)},
		auth.Session{ID: r.ID, UserID: r.UserID, CreatedAt: fromMS(r.sessionRow.CreatedAt), LastUsedAt: fromMS(r.LastUsedAt),
			ExpiresAt: fromMS(r.ExpiresAt), RevokedAt: nullMS(r.RevokedAt), IP: r.IP, UserAgent: r.UserAgent}, nil
}

// RotateRefresh replaces a refresh token by a successor: the first time,
// or again while its first use is later than graceSince.
func (s *Store) RotateRefresh(ctx context.Context, oldHash string, next auth.RefreshToken, access auth.AccessToken, graceSince, now time.Time) (bool, error) {
	rotated := false
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		// used_at keeps the first use: the grace runs from it.
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE refresh_tokens SET used_at = COALESCE(used_at, ?)
			WHERE token_hash = ? AND (used_at IS NULL OR used_at > ?)`), ms(now), oldHash, ms(graceSince))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET last_used_at = ? WHERE id = ?`), ms(now), next.SessionID); err != nil {
			return err
		}
		if err := insertRefresh(ctx, tx, next); err != nil {
			return err
		}
		if err := insertAccess(ctx, tx, access); err != nil {
			return err
		}
		rotated = true
		return nil
	})
	return rotated && err == nil, err
}

// RevokeSession revokes a session and every access token issued in it.
func (s *Store) RevokeSession(ctx context.Context, sessionID, reason string, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		_, err := revokeSessions(ctx, tx, "id = ?", []any{sessionID}, reason, now)
		return err
	})
}

// RevokeUserSession revokes one live session of the user.
func (s *Store) RevokeUserSession(ctx context.Context, userID, sessionID, reason string, now time.Time) (bool, error) {
	n := 0
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		n, err = revokeSessions(ctx, tx, "id = ? AND user_id = ? AND expires_at > ?", []any{sessionID, userID, ms(now)}, reason, now)
		return err
	})
	return n == 1 && err == nil, err
}

// RevokeUserSessions revokes every live session of the user but keep.
func (s *Store) RevokeUserSessions(ctx context.Context, userID, keep, reason string, now time.Time) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		n, err = revokeSessions(ctx, tx, "user_id = ? AND id <> ?", []any{userID, keep}, reason, now)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// revokeSessions revokes the unrevoked sessions matching where and the
// access tokens issued in them, and returns how many sessions it revoked.
func revokeSessions(ctx context.Context, tx *sqlx.Tx, where string, args []any, reason string, now time.Time) (int, error) {
	res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET revoked_at = ?, revoked_reason = ? WHERE revoked_at IS NULL AND `+where),
		append([]any{ms(now), reason}, args...)...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE access_tokens SET revoked_at = ? WHERE revoked_at IS NULL
		AND session_id IN (SELECT id FROM sessions WHERE revoked_at = ? AND revoked_reason = ? AND `+where+`)`),
		append([]any{ms(now), ms(now), reason}, args...)...)
	return int(n), err
}

// ListSessions returns a user's live sessions, newest first.
func (s *Store) ListSessions(ctx context.Context, userID string, now time.Time) ([]auth.Session, error) {
	var rows []sessionRow
	err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT id, user_id, created_at, last_used_at, expires_at, revoked_at, ip, user_agent
		FROM sessions WHERE user_id = ? AND revoked_at IS NULL AND expires_at > ? AND last_used_at > ?
		ORDER BY created_at DESC, id DESC`), userID, ms(now), ms(now.Add(-auth.SessionIdleTTL)))
	if err != nil {
		return nil, err
	}
	out := make([]auth.Session, len(rows))
	for i, r := range rows {
		out[i] = auth.Session{ID: r.ID, UserID: r.UserID, CreatedAt: fromMS(r.CreatedAt), LastUsedAt: fromMS(r.LastUsedAt),
			ExpiresAt: fromMS(r.ExpiresAt), RevokedAt: nullMS(r.RevokedAt), IP: r.IP, UserAgent: r.UserAgent}
	}
	return out, nil
}

// EndedSessions returns those of ids that are revoked, past their end or
// of a disabled user (an id with no session is ended too).
func (s *Store) EndedSessions(ctx context.Context, ids []string, now time.Time) ([]string, error) {
	var ended []string
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 500)]
		ids = ids[len(batch):]
		// An API token's stream (its id in place of a session's) ends
		// when the token is revoked or expires, its owner is disabled,
		// or, for a token that reads secrets, its owner is demoted.
		q, args, err := sqlx.In(`SELECT s.id FROM sessions s JOIN users u ON u.id = s.user_id
			WHERE s.id IN (?) AND s.revoked_at IS NULL AND s.expires_at > ? AND u.disabled_at IS NULL
			UNION ALL SELECT t.id FROM api_tokens t JOIN users u ON u.id = t.user_id
			WHERE t.id IN (?) AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?) AND u.disabled_at IS NULL
			  AND (u.admin OR (t.scopes NOT LIKE '%"read:secrets"%' AND t.scopes NOT LIKE '%"admin"%'))`, batch, ms(now), batch, ms(now))
		if err != nil {
			return nil, err
		}
		var live []string
		if err := s.r.SelectContext(ctx, &live, s.rebind(q), args...); err != nil {
			return nil, err
		}
		alive := make(map[string]bool, len(live))
		for _, id := range live {
			alive[id] = true
		}
		for _, id := range batch {
			if !alive[id] {
				ended = append(ended, id)
			}
		}
	}
	return ended, nil
}

// Principal resolves a live access token to its user and session.
func (s *Store) Principal(ctx context.Context, accessHash string, now time.Time) (auth.Principal, error) {
	var r struct {
		SessionID string `db:"session_id"`
		ExpiresAt int64  `db:"expires_at"`
		accountRow
	}
	err := s.r.GetContext(ctx, &r, s.rebind(`
		SELECT a.session_id, a.expires_at,
		       u.id, u.email, u.password_hash, u.totp_secret, u.totp_last_step, u.admin, u.disabled_at,
		       u.created_at, u.updated_at
		FROM access_tokens a
		JOIN sessions s ON s.id = a.session_id
		JOIN users u ON u.id = a.user_id
		WHERE a.token_hash = ? AND a.revoked_at IS NULL AND a.expires_at > ?
		  AND s.revoked_at IS NULL AND u.disabled_at IS NULL`), accessHash, ms(now))
	if notFound(err) {
		return auth.Principal{}, fault.Unauthenticatedf(auth.CodeInvalidToken, "The access token is invalid.")
	}
	if err != nil {
		return auth.Principal{}, err
	}
	return auth.Principal{User: r.account().User, SessionID: r.SessionID, TokenHash: accessHash, ExpiresAt: fromMS(r.ExpiresAt)}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
