package auth

import (
	"context"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
)

// InvitationTTL is how long an invitation can be accepted.
const InvitationTTL = 72 * time.Hour

// InvitationHistory is how long accepted, revoked and expired invitations
// stay in the list after they closed.
const InvitationHistory = 7 * 24 * time.Hour

// Invitation states, as the API shows them.
const (
	InvitationPending  = "pending"
	InvitationAccepted = "accepted"
	InvitationRevoked  = "revoked"
	InvitationExpired  = "expired"
)

// Prefixes of invitation ids and tokens.
const (
	invitationIDPrefix    = "inv"
	invitationTokenPrefix = "cin"
)

// Problem codes of invitations.
const (
	CodeInvalidInvitation  = "invalid-invitation"
	CodeInvitationPending  = "invitation-pending"
	CodeEmailTaken         = "email-taken"
	CodeEnrollmentRequired = "enrollment-required"
	CodeEmailFailed        = "email-failed"
)

// Invitation is an administrator's offer to someone to become a user. Its
// token is only ever stored as a hash.
type Invitation struct {
	ID         string     `json:"id"`
	Email      string     `json:"email"`
	Admin      bool       `json:"admin" doc:"The invitee becomes an administrator (true) or a member"`
	InvitedBy  string     `json:"invited_by" doc:"E-mail address of the administrator who invited"`
	Status     string     `json:"status" enum:"pending,accepted,revoked,expired"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	AcceptedAt *time.Time `json:"accepted_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	UserID     string     `json:"user_id,omitempty" doc:"The user the invitation became, once accepted"`

	TokenHash string `json:"-"`
	// TOTPSecret is the second factor issued to the invitee, sealed with
	// the secret key bound to the invitation id; "" until issued.
	TOTPSecret string `json:"-"`
}

// StatusAt returns the invitation's state at now.
func (i Invitation) StatusAt(now time.Time) string {
	switch {
	case i.AcceptedAt != nil:
		return InvitationAccepted
	case i.RevokedAt != nil:
		return InvitationRevoked
	case !now.Before(i.ExpiresAt):
		return InvitationExpired
	}
	return InvitationPending
}

// InvitationStore persists invitations.
type InvitationStore interface {
	// CreateInvitation stores a new invitation, refusing an address that
	// is a user's (409 email-taken) or has an open invitation unexpired
	// at now (409 invitation-pending).
	CreateInvitation(ctx context.Context, inv Invitation, now time.Time) error
	// DeleteInvitation forgets an invitation that was never handed out.
	DeleteInvitation(ctx context.Context, id string) error
	// InvitationByHash returns the invitation of a token hash.
	InvitationByHash(ctx context.Context, hash string) (Invitation, error)
	// ListInvitations returns the open invitations and those closed
	// (accepted, revoked or expired) after since, newest first.
	ListInvitations(ctx context.Context, since time.Time) ([]Invitation, error)
	// RevokeInvitation revokes an invitation not accepted nor revoked:
	// 404 when there is none such, 409 when it was accepted.
	RevokeInvitation(ctx context.Context, id string, now time.Time) (Invitation, error)
	// SetInvitationTOTP replaces the sealed second factor of an
	// invitation that is open at now; false when it is not.
	SetInvitationTOTP(ctx context.Context, hash, sealed string, now time.Time) (bool, error)
	// AcceptInvitation creates the account and closes the invitation in
	// one change, if the invitation is still open at now and its second
	// factor is still sealed (the one the code was checked against);
	// false (nothing changed) otherwise. An address taken by a user
	// meanwhile is 409 email-taken.
	AcceptInvitation(ctx context.Context, hash, sealed string, a Account, now time.Time) (bool, error)
}

var errBadInvitation = &fault.Error{Kind: fault.NotFound, Code: CodeInvalidInvitation,
	Message: "This invitation is unknown, expired, revoked or already used. Ask an administrator for a new one."}

// Deliver hands an invitation's token to the invitee (by e-mail); an
// error means the invitee did not get it.
type Deliver func(ctx context.Context, inv Invitation, token string) error

// Invite creates an invitation for email with the role admin, valid for
// InvitationTTL, and returns it with its token. deliver (nil: none, the
// caller hands the token over) is called before Invite returns: when it
// fails, the invitation is deleted again and the error is a fault.Upstream
// email-failed. c is the audit entry's actor, address and user agent;
// delivery names how the token went out, for the audit log.
func (s *Service) Invite(ctx context.Context, c audit.Caller, email string, admin bool, delivery string, deliver Deliver) (Invitation, string, error) {
	email = NormalizeEmail(email)
	if err := ValidateEmail("email", email); err != nil {
		return Invitation{}, "", err
	}
	now := s.now().UTC()
	token := ids.Token(invitationTokenPrefix)
	inv := Invitation{ID: ids.NewAt(invitationIDPrefix, now), Email: email, Admin: admin, InvitedBy: c.Actor.Email,
		CreatedAt: now, ExpiresAt: now.Add(InvitationTTL), TokenHash: ids.Hash(token)}
	if err := s.store.CreateInvitation(ctx, inv, now); err != nil {
		return Invitation{}, "", err
	}
	if deliver != nil {
		if err := deliver(ctx, inv, token); err != nil {
			if derr := s.store.DeleteInvitation(context.WithoutCancel(ctx), inv.ID); derr != nil {
				return Invitation{}, "", derr
			}
			return Invitation{}, "", &fault.Error{Kind: fault.Upstream, Code: CodeEmailFailed,
				Message: "The invitation could not be e-mailed, so none was made: " + err.Error()}
		}
	}
	inv.Status = InvitationPending
	return inv, token, s.audit.Record(ctx, c, audit.UserInvited, audit.Target{Type: "invitation", ID: inv.ID},
		map[string]any{"email": email, "admin": admin, "delivery": delivery})
}

// ListInvitations returns the pending invitations and those closed within
// InvitationHistory, newest first.
func (s *Service) ListInvitations(ctx context.Context) ([]Invitation, error) {
	now := s.now()
	list, err := s.store.ListInvitations(ctx, now.Add(-InvitationHistory))
	for i := range list {
		list[i].Status = list[i].StatusAt(now)
	}
	return list, err
}

// RevokeInvitation revokes an invitation that was not accepted; its link
// stops working at once.
func (s *Service) RevokeInvitation(ctx context.Context, c audit.Caller, id string) error {
	inv, err := s.store.RevokeInvitation(ctx, id, s.now())
	if err != nil {
		return err
	}
	return s.audit.Record(ctx, c, audit.InvitationRevoked, audit.Target{Type: "invitation", ID: inv.ID}, map[string]any{"email": inv.Email})
}

// openInvitation looks up the open invitation of token. Every lookup takes
// a token of the client address's sign-in throttle first, given back when
// the invitation is open: wrong, expired and used tokens cost the address
// as wrong passwords do, and are all told apart from nothing.
func (s *Service) openInvitation(ctx context.Context, c audit.Caller, token string, now time.Time) (Invitation, error) {
	claims := []claim{{s.perAddress, throttledAddress(c.IP)}}
	if err := s.take(ctx, claims, now); err != nil {
		return Invitation{}, err
	}
	inv, err := s.lookupInvitation(ctx, token, now)
	if !fault.Is(err, fault.NotFound) {
		s.giveBack(ctx, claims)
	}
	return inv, err
}

func (s *Service) lookupInvitation(ctx context.Context, token string, now time.Time) (Invitation, error) {
	if !strings.HasPrefix(token, invitationTokenPrefix+"_") || len(token) > 100 {
		return Invitation{}, errBadInvitation
	}
	inv, err := s.store.InvitationByHash(ctx, ids.Hash(token))
	if fault.Is(err, fault.NotFound) {
		return Invitation{}, errBadInvitation
	}
	if err != nil {
		return Invitation{}, err
	}
	if inv.Status = inv.StatusAt(now); inv.Status != InvitationPending {
		return Invitation{}, errBadInvitation
	}
	return inv, nil
}

// LookupInvitation returns the pending invitation of token, for the
// invitee to read whom it is for; throttled per client address.
func (s *Service) LookupInvitation(ctx context.Context, c audit.Caller, token string) (Invitation, error) {
	return s.openInvitation(ctx, c, token, s.now())
}

func (s *Service) sealInvitationTOTP(invitationID, secret string) string {
	return s.key.Seal("user_invitations.totp_secret:"+invitationID, []byte(secret))
}

// InvitationEnrollment issues the invitee's second factor: a new TOTP
// secret, kept sealed on the invitation until AcceptInvitation proves it.
// Each call issues another secret and the earlier one stops counting, so
// a secret is shown once.
func (s *Service) InvitationEnrollment(ctx context.Context, c audit.Caller, token string) (Invitation, Enrollment, error) {
	now := s.now()
	inv, err := s.openInvitation(ctx, c, token, now)
	if err != nil {
		return Invitation{}, Enrollment{}, err
	}
	en, err := newEnrollment(s.issuer, inv.Email)
	if err != nil {
		return Invitation{}, Enrollment{}, err
	}
	ok, err := s.store.SetInvitationTOTP(ctx, inv.TokenHash, s.sealInvitationTOTP(inv.ID, en.Secret), now)
	if err != nil {
		return Invitation{}, Enrollment{}, err
	}
	if !ok { // accepted or revoked meanwhile
		return Invitation{}, Enrollment{}, errBadInvitation
	}
	return inv, en, nil
}

// AcceptInvitation creates the invitee's account with password and the
// second factor InvitationEnrollment issued, proven by code, and signs it
// in. The password follows the rules of CreateUser. The code counts toward
// the sign-in throttles of the invitation's address like a sign-in's code.
// Of parallel acceptances of one invitation exactly one creates the
// account; the others find the invitation used. device is the device
// cookie the client sent ("" for none).
func (s *Service) AcceptInvitation(ctx context.Context, c audit.Caller, token, password, code, device string) (Tokens, error) {
	now := s.now().UTC()
	inv, err := s.openInvitation(ctx, c, token, now)
	if err != nil {
		return Tokens{}, err
	}
	if err := ValidatePassword("password", password, inv.Email); err != nil {
		return Tokens{}, err
	}
	if inv.TOTPSecret == "" {
		return Tokens{}, fault.Conflictf(CodeEnrollmentRequired, "Set up the second factor first: it is issued with the invitation's enrollment.")
	}
	secret, err := s.key.Open("user_invitations.totp_secret:"+inv.ID, inv.TOTPSecret)
	if err != nil {
		return Tokens{}, err
	}
	claims := s.strangerClaims(inv.Email, c.IP)
	if err := s.takeForHash(ctx, claims, false, now); err != nil {
		return Tokens{}, err
	}
	t, keep, err := s.acceptInvitation(ctx, c, inv, string(secret), password, code, device, now)
	if !keep {
		s.giveBack(ctx, claims)
	}
	return t, err
}

// acceptInvitation is AcceptInvitation after the throttle tokens are
// taken; keep reports whether the code was wrong and they must be kept.
func (s *Service) acceptInvitation(ctx context.Context, c audit.Caller, inv Invitation, secret, password, code, device string,
	now time.Time) (_ Tokens, keep bool, _ error) {
	step := matchTOTP(secret, code, now)
	if step == 0 {
		return Tokens{}, true, fault.Invalidf("code", "is not the code the authenticator app shows for this secret now")
	}
	if err := s.hashes.acquire(ctx); err != nil {
		return Tokens{}, false, err
	}
	hash := hashPassword(password)
	s.hashes.release()
	a := Account{
		User:         User{ID: ids.NewAt(ids.User, now), Email: inv.Email, Admin: inv.Admin, CreatedAt: now},
		PasswordHash: hash, TOTPLastStep: step, UpdatedAt: now,
	}
	a.TOTPSecret = s.sealTOTP(a.ID, secret)
	ok, err := s.store.AcceptInvitation(ctx, inv.TokenHash, inv.TOTPSecret, a, now)
	if err != nil {
		return Tokens{}, false, err
	}
	if !ok {
		return Tokens{}, false, errBadInvitation
	}
	if err := s.audit.Append(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.InvitationAccepted,
		Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"invitation_id": inv.ID, "email": a.Email, "admin": a.Admin, "invited_by": inv.InvitedBy},
	}); err != nil {
		return Tokens{}, false, err
	}
	d, err := s.device(ctx, device, a.ID, now)
	if err != nil {
		return Tokens{}, false, err
	}
	t, err := s.startSession(ctx, c, a, d, "invitation", now)
	return t, false, err
}
