package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
)

var _ auth.TokenStore = (*Store)(nil)

type apiTokenRow struct {
	ID         string        `db:"id"`
	UserID     string        `db:"user_id"`
	UserEmail  string        `db:"user_email"`
	Name       string        `db:"name"`
	TokenHash  string        `db:"token_hash"`
	Scopes     string        `db:"scopes"`
	Resources  string        `db:"resources"`
	CreatedAt  int64         `db:"created_at"`
	ExpiresAt  sql.NullInt64 `db:"expires_at"`
	LastUsedAt sql.NullInt64 `db:"last_used_at"`
	LastUsedIP string        `db:"last_used_ip"`
	RevokedAt  sql.NullInt64 `db:"revoked_at"`
}

const apiTokenColumns = `t.id, t.user_id, u.email AS user_email, t.name, t.token_hash, t.scopes, t.resources, t.created_at,
	t.expires_at, t.last_used_at, t.last_used_ip, t.revoked_at`

func (r apiTokenRow) token() (auth.APIToken, error) {
	t := auth.APIToken{ID: r.ID, UserID: r.UserID, UserEmail: r.UserEmail, Name: r.Name, Hash: r.TokenHash,
		CreatedAt: fromMS(r.CreatedAt), ExpiresAt: nullMS(r.ExpiresAt), LastUsedAt: nullMS(r.LastUsedAt),
		LastUsedIP: r.LastUsedIP, RevokedAt: nullMS(r.RevokedAt)}
	if err := json.Unmarshal([]byte(r.Scopes), &t.Scopes); err != nil {
		return t, err
	}
	if err := json.Unmarshal([]byte(r.Resources), &t.Resources); err != nil {
		return t, err
	}
	return t, nil
}

func nullableMS(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ms(*t)
}

// CreateAPIToken stores a token if its owner has fewer than max live
// ones. The count and the insert are one transaction under the owner's
// row lock (PostgreSQL) or the single writer (SQLite), so parallel
// creations never pass max.
func (s *Store) CreateAPIToken(ctx context.Context, t auth.APIToken, max int, now time.Time) error {
	scopes, err := json.Marshal(t.Scopes)
	if err != nil {
		return err
	}
	resources, err := json.Marshal(t.Resources)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		// Take the owner's row first: parallel creations of one owner
		// wait here for each other.
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE users SET updated_at = updated_at WHERE id = ? AND disabled_at IS NULL`), t.UserID)
		if err := mustAffect(res, err, "user"); err != nil {
			return err
		}
		var n int
		if err := tx.GetContext(ctx, &n, tx.Rebind(`SELECT COUNT(*) FROM api_tokens WHERE user_id = ? AND revoked_at IS NULL
			AND (expires_at IS NULL OR expires_at > ?)`), t.UserID, ms(now)); err != nil {
			return err
		}
		if n >= max {
			return fault.Conflictf(auth.CodeTokenLimit, "You have %d live tokens, the most there may be: revoke one first.", n)
		}
		_, err = tx.ExecContext(ctx, tx.Rebind(`INSERT INTO api_tokens (id, user_id, name, token_hash, scopes, resources, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), t.ID, t.UserID, t.Name, t.Hash, string(scopes), string(resources), ms(t.CreatedAt), nullableMS(t.ExpiresAt))
		return err
	})
}

// APITokens lists tokens, newest first: userID's, or everyone's for "".
func (s *Store) APITokens(ctx context.Context, userID string) ([]auth.APIToken, error) {
	q, args := `SELECT `+apiTokenColumns+` FROM api_tokens t JOIN users u ON u.id = t.user_id`, []any{}
	if userID != "" {
		q, args = q+` WHERE t.user_id = ?`, append(args, userID)
	}
	return selectAll(ctx, s.r, apiTokenRow.token, s.rebind(q+` ORDER BY t.id DESC`), args...)
}

// RevokeAPIToken revokes a token that is not revoked yet, of userID or
// of anyone for "".
func (s *Store) RevokeAPIToken(ctx context.Context, id, userID string, now time.Time) (auth.APIToken, error) {
	q, args := `UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, []any{ms(now), id}
	if userID != "" {
		q, args = q+` AND user_id = ?`, append(args, userID)
	}
	res, err := s.w.ExecContext(ctx, s.rebind(q), args...)
	if err := mustAffect(res, err, "token"); err != nil {
		return auth.APIToken{}, fault.NotFoundf("No such token, or it is revoked already.")
	}
	var r apiTokenRow
	if err := s.w.GetContext(ctx, &r, s.rebind(`SELECT `+apiTokenColumns+` FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.id = ?`), id); err != nil {
		return auth.APIToken{}, err
	}
	return r.token()
}

// TokenPrincipal resolves a live token of an enabled user, with the
// user's role as it is now.
func (s *Store) TokenPrincipal(ctx context.Context, hash string, now time.Time) (auth.Principal, error) {
	return s.tokenPrincipal(ctx, "t.token_hash = ?", hash, now)
}

// TokenPrincipalByID is TokenPrincipal for the token's id.
func (s *Store) TokenPrincipalByID(ctx context.Context, id string, now time.Time) (auth.Principal, error) {
	return s.tokenPrincipal(ctx, "t.id = ?", id, now)
}

func (s *Store) tokenPrincipal(ctx context.Context, where string, arg any, now time.Time) (auth.Principal, error) {
	var r struct {
		apiTokenRow
		Admin bool `db:"admin"`
	}
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT `+apiTokenColumns+`, u.admin FROM api_tokens t JOIN users u ON u.id = t.user_id
		WHERE `+where+` AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?) AND u.disabled_at IS NULL`), arg, ms(now))
	if notFound(err) {
		return auth.Principal{}, fault.Unauthenticatedf(auth.CodeInvalidToken, "The token is invalid.")
	}
	if err != nil {
		return auth.Principal{}, err
	}
	t, err := r.token()
	if err != nil {
		return auth.Principal{}, err
	}
	p := auth.Principal{User: auth.User{ID: r.UserID, Email: r.UserEmail, Admin: r.Admin}, TokenHash: t.Hash, Token: &t}
	if t.ExpiresAt != nil {
		p.ExpiresAt = *t.ExpiresAt
	}
	return p, nil
}

// TouchAPIToken records a use. The address changes in one conditional
// statement, so of parallel first uses from a new address exactly one
// reports it; a use from the same address writes at most once a minute.
func (s *Store) TouchAPIToken(ctx context.Context, id, ip string, now time.Time) (bool, error) {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE api_tokens SET last_used_ip = ?, last_used_at = ? WHERE id = ? AND last_used_ip <> ?`),
		ip, ms(now), id, ip)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return n == 1, err
	}
	_, err = s.w.ExecContext(ctx, s.rebind(`UPDATE api_tokens SET last_used_at = ? WHERE id = ? AND last_used_at < ?`),
		ms(now), id, ms(now.Add(-auth.TokenTouchEvery)))
	return false, err
}
