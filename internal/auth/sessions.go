package auth

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
)

// SessionInfo is one of the caller's sessions as the API lists it.
type SessionInfo struct {
	ID         string    `json:"id"`
	CreatedAt  time.Time `json:"created_at" doc:"When the sign-in that started it completed"`
	LastUsedAt time.Time `json:"last_used_at" doc:"When it signed in or last refreshed its access token"`
	ExpiresAt  time.Time `json:"expires_at" doc:"When it ends at the latest"`
	IP         string    `json:"ip" doc:"Client address of the sign-in"`
	UserAgent  string    `json:"user_agent" doc:"User agent of the sign-in"`
	Current    bool      `json:"current" doc:"Whether this is the session of the request's access token"`
}

// Sessions lists the caller's live sessions, newest first.
func (s *Service) Sessions(ctx context.Context, p Principal) ([]SessionInfo, error) {
	list, err := s.store.ListSessions(ctx, p.User.ID, s.now())
	if err != nil {
		return nil, err
	}
	out := make([]SessionInfo, len(list))
	for i, x := range list {
		out[i] = SessionInfo{ID: x.ID, CreatedAt: x.CreatedAt.UTC(), LastUsedAt: x.LastUsedAt.UTC(), ExpiresAt: x.ExpiresAt.UTC(),
			IP: x.IP, UserAgent: x.UserAgent, Current: x.ID == p.SessionID}
	}
	return out, nil
}

// RevokeSession ends one of the caller's sessions: its access token and
// every refresh token of it. Another user's session, or one that ended,
// is not found.
func (s *Service) RevokeSession(ctx context.Context, c audit.Caller, p Principal, id string) error {
	ok, err := s.store.RevokeUserSession(ctx, p.User.ID, id, "revoked", s.now())
	if err != nil {
		return err
	}
	if !ok {
		return fault.NotFoundf("No such session.")
	}
	return s.audit.Append(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: p.User.ID, Email: p.User.Email}, Action: audit.SessionRevoked,
		Target: audit.Target{Type: "session", ID: id}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"current": id == p.SessionID},
	})
}

// SessionsEnded returns those of the session ids that have ended: revoked,
// past their end, or of a disabled user.
func (s *Service) SessionsEnded(ctx context.Context, ids []string) ([]string, error) {
	return s.store.EndedSessions(ctx, ids, s.now())
}

// ChangePassword sets the signed-in caller's password after checking the
// current one and a TOTP code, then ends every other session of the user
// and forgets every other device it signed in from. device is the caller's
// device cookie, kept when it is the account's. Both checks are throttled
// per session, taken before they run; a wrong password or code changes
// nothing.
func (s *Service) ChangePassword(ctx context.Context, c audit.Caller, p Principal, device, current, code, next string) error {
	if err := ValidatePassword("new_password", next, p.User.Email); err != nil {
		return err
	}
	claims := []claim{{s.perSession, p.SessionID}}
	now := s.now()
	if err := s.takeForHash(ctx, claims, true, now); err != nil {
		return err
	}
	keep, err := s.changePassword(ctx, c, p, device, current, code, next, now)
	if !keep {
		s.giveBack(ctx, claims)
	}
	return err
}

func (s *Service) changePassword(ctx context.Context, c audit.Caller, p Principal, device, current, code, next string, now time.Time) (keep bool, _ error) {
	a, err := s.store.AccountByID(ctx, p.User.ID)
	if err != nil {
		return false, err
	}
	refuse := func(reason string, err error) (bool, error) {
		if aerr := s.audit.Append(ctx, audit.Entry{
			Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.PasswordChangeRefused,
			Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
			Details: map[string]any{"reason": reason},
		}); aerr != nil {
			return true, aerr
		}
		return true, err
	}
	ok, err := s.checkPassword(ctx, a.PasswordHash, current, true)
	if err != nil {
		return false, err
	}
	if !ok {
		return refuse("wrong_password", fault.Forbiddenf(CodeWrongPassword, "The current password is not this account's password."))
	}
	fresh, reason, err := s.checkCode(ctx, a, code, now)
	if err != nil {
		return false, err
	}
	if !fresh {
		return refuse(reason, fault.Forbiddenf(CodeWrongCode, "The code is incorrect or was already used. Wait for the next code."))
	}
	if err := s.store.SetPassword(ctx, a.ID, hashPassword(next), now); err != nil {
		return false, err
	}
	n, err := s.store.RevokeUserSessions(ctx, a.ID, p.SessionID, "password_changed", now)
	if err != nil {
		return false, err
	}
	d, err := s.device(ctx, device, a.ID, now)
	if err != nil {
		return false, err
	}
	if err := s.store.RevokeDevices(ctx, a.ID, d.hash, now); err != nil {
		return false, err
	}
	return false, s.audit.Append(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.PasswordChanged,
		Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"sessions_revoked": n},
	})
}
