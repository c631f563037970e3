package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
)

type invitationRow struct {
	ID         string         `db:"id"`
	TokenHash  string         `db:"token_hash"`
	Email      string         `db:"email"`
	Admin      bool           `db:"admin"`
	InvitedBy  string         `db:"invited_by"`
	TOTPSecret string         `db:"totp_secret"`
	CreatedAt  int64          `db:"created_at"`
	ExpiresAt  int64          `db:"expires_at"`
	AcceptedAt sql.NullInt64  `db:"accepted_at"`
	RevokedAt  sql.NullInt64  `db:"revoked_at"`
	UserID     sql.NullString `db:"user_id"`
}

const invitationColumns = `id, token_hash, email, admin, invited_by, totp_secret, created_at, expires_at, accepted_at, revoked_at, user_id`

func (r invitationRow) invitation() auth.Invitation {
	return auth.Invitation{ID: r.ID, TokenHash: r.TokenHash, Email: r.Email, Admin: r.Admin, InvitedBy: r.InvitedBy,
		TOTPSecret: r.TOTPSecret, CreatedAt: fromMS(r.CreatedAt), ExpiresAt: fromMS(r.ExpiresAt),
		AcceptedAt: nullMS(r.AcceptedAt), RevokedAt: nullMS(r.RevokedAt), UserID: r.UserID.String}
}

// CreateInvitation stores an invitation. The address must be no user's and
// have no open invitation unexpired at now: open invitations of it that
// expired are closed first, and the unique open_email makes a second
// open one (a parallel invitation included) a conflict.
func (s *Store) CreateInvitation(ctx context.Context, inv auth.Invitation, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		var n int
		if err := tx.GetContext(ctx, &n, tx.Rebind(`SELECT COUNT(*) FROM users WHERE email = ?`), inv.Email); err != nil {
			return err
		}
		if n > 0 {
			return fault.Conflictf(auth.CodeEmailTaken, "%s is already a user.", inv.Email)
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE user_invitations SET open_email = NULL WHERE open_email = ? AND expires_at <= ?`),
			inv.Email, ms(now)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO user_invitations (id, token_hash, email, open_email, admin, invited_by,
			totp_secret, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, '', ?, ?)`),
			inv.ID, inv.TokenHash, inv.Email, inv.Email, inv.Admin, inv.InvitedBy, ms(inv.CreatedAt), ms(inv.ExpiresAt))
		if isUniqueViolation(err) {
			return fault.Conflictf(auth.CodeInvitationPending, "%s has a pending invitation already: revoke it to invite again.", inv.Email)
		}
		return err
	})
}

// DeleteInvitation deletes an invitation.
func (s *Store) DeleteInvitation(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM user_invitations WHERE id = ?`), id)
	return mustAffect(res, err, "invitation")
}

func (s *Store) invitationWhere(ctx context.Context, q sqlx.QueryerContext, where string, arg any) (auth.Invitation, error) {
	return getOne(ctx, q, always(invitationRow.invitation), "invitation", s.rebind(`SELECT `+invitationColumns+` FROM user_invitations WHERE `+where), arg)
}

// InvitationByHash returns the invitation of a token hash.
func (s *Store) InvitationByHash(ctx context.Context, hash string) (auth.Invitation, error) {
	return s.invitationWhere(ctx, s.r, "token_hash = ?", hash)
}

// ListInvitations returns the open invitations and those accepted,
// revoked or expired after since, newest first.
func (s *Store) ListInvitations(ctx context.Context, since time.Time) ([]auth.Invitation, error) {
	t := ms(since)
	return selectAll(ctx, s.r, always(invitationRow.invitation), s.rebind(`SELECT `+invitationColumns+` FROM user_invitations
		WHERE (accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ?) OR accepted_at > ? OR revoked_at > ?
		ORDER BY created_at DESC, id DESC`), t, t, t)
}

// RevokeInvitation revokes an invitation neither accepted nor revoked, in
// one conditional statement.
func (s *Store) RevokeInvitation(ctx context.Context, id string, now time.Time) (auth.Invitation, error) {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE user_invitations SET revoked_at = ?, open_email = NULL
		WHERE id = ? AND accepted_at IS NULL AND revoked_at IS NULL`), ms(now), id)
	if err != nil {
		return auth.Invitation{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return auth.Invitation{}, err
	}
	inv, err := s.invitationWhere(ctx, s.w, "id = ?", id)
	if err != nil {
		return auth.Invitation{}, err
	}
	switch {
	case n == 1:
		return inv, nil
	case inv.AcceptedAt != nil:
		return auth.Invitation{}, fault.Conflictf("invitation-accepted", "This invitation was accepted already: manage the user instead.")
	default:
		return auth.Invitation{}, fault.NotFoundf("No such invitation: it was revoked already.")
	}
}

// openInvitation is the condition of an invitation that can be accepted.
const openInvitation = `accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ?`

// SetInvitationTOTP replaces the sealed second factor of an open
// invitation.
func (s *Store) SetInvitationTOTP(ctx context.Context, hash, sealed string, now time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE user_invitations SET totp_secret = ? WHERE token_hash = ? AND `+openInvitation),
		sealed, hash, ms(now)))
}

// AcceptInvitation closes an open invitation whose second factor is still
// sealed, in one conditional statement, and creates its account in the
// same transaction: of parallel acceptances one changes the row and the
// others find it closed (PostgreSQL re-checks the condition on the row
// the first one committed).
func (s *Store) AcceptInvitation(ctx context.Context, hash, sealed string, a auth.Account, now time.Time) (bool, error) {
	accepted := false
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE user_invitations SET accepted_at = ?, user_id = ?, open_email = NULL
			WHERE token_hash = ? AND totp_secret = ? AND totp_secret <> '' AND `+openInvitation),
			ms(now), a.ID, hash, sealed, ms(now))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, tx.Rebind(`INSERT INTO users (`+accountColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)`),
			a.ID, a.Email, a.PasswordHash, a.TOTPSecret, a.TOTPLastStep, a.Admin, ms(a.CreatedAt), ms(a.UpdatedAt))
		if isUniqueViolation(err) {
			return fault.Conflictf(auth.CodeEmailTaken, "%s became a user meanwhile: sign in instead.", a.Email)
		}
		accepted = err == nil
		return err
	})
	return accepted && err == nil, err
}
