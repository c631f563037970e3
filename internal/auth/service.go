package auth

import (
	"context"
	"net/mail"
	"strings"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Lifetimes and limits of sign-in.
const (
	AccessTTL       = 900 * time.Second
	ChallengeTTL    = 5 * time.Minute
	MaxCodeFailures = 5
	// LockAfterFailures is how many failed credential checks in a row on
	// one account, from any address, lock it until an administrator runs
	// capstan user unlock (NIST SP 800-63B 5.2.2 allows at most 100).
	LockAfterFailures  = 100
	SessionAbsoluteTTL = 30 * 24 * time.Hour
	SessionIdleTTL     = 7 * 24 * time.Hour
)

// Token prefixes.
const (
	accessPrefix    = "cat"
	refreshPrefix   = "crt"
	challengePrefix = "chl"
)

// Problem codes returned by this package.
const (
	CodeInvalidCredentials = "invalid-credentials"
	CodeInvalidChallenge   = "invalid-challenge"
	CodeInvalidCode        = "invalid-code"
	CodeCodeReused         = "code-reused"
	CodeInvalidToken       = "invalid-token"
	CodeInvalidRefresh     = "invalid-refresh-token"
	CodeRefreshReused      = "refresh-token-reused"
	CodeThrottled          = "too-many-attempts"
	CodeAccountLocked      = "account-locked"
	CodeSignInBusy         = "sign-in-busy"
	CodeAdminRequired      = "admin-required"
)

// Client describes where a request came from, for throttling and audit.
type Client struct {
	IP        string
	UserAgent string
}

// Service implements sign-in and account management.
type Service struct {
	store  Store
	key    *secrets.Key
	audit  *audit.Log
	now    func() time.Time
	issuer string

	// perClient throttles failed attempts per (account, client address):
	// tightly, since one client guessing one account needs few tries.
	perClient *throttle
	// perAddress throttles failed attempts per client address over all
	// accounts: broadly, against one address spraying many accounts. The
	// account-wide limit lives in the store (LockAfterFailures), so that
	// an attacker elsewhere cannot slow down the account's owner.
	perAddress *throttle
	hashes     *hashQueue
	// checks counts password hashes compared, for tests and metrics.
	checks atomic.Int64
}

// NewService returns a Service. issuer names the control plane in
// authenticator apps.
func NewService(store Store, key *secrets.Key, log *audit.Log, now func() time.Time, issuer string) *Service {
	return &Service{
		store: store, key: key, audit: log, now: now, issuer: issuer,
		// 5 failures per account from one address, then one a minute.
		perClient: &throttle{store: store, kind: "client", burst: ClientBurst, every: time.Minute},
		// 20 failures per address, then one every 15 seconds.
		perAddress: &throttle{store: store, kind: "address", burst: AddressBurst, every: 15 * time.Second},
		// 8 hashes at once (152 MiB), 32 more waiting at most.
		hashes: newHashQueue(8, 32),
	}
}

// Throttle bursts: how many failed attempts in a row are answered before
// 429 and Retry-After.
const (
	ClientBurst  = 5  // per account and client address
	AddressBurst = 20 // per client address
)

// PasswordChecks returns how many password hashes the service has compared
// since it started.
func (s *Service) PasswordChecks() int64 { return s.checks.Load() }

func (s *Service) checkPassword(ctx context.Context, phc, pw string) (bool, error) {
	if err := s.hashes.acquire(ctx); err != nil {
		return false, err
	}
	defer s.hashes.release()
	s.checks.Add(1)
	return checkPassword(phc, pw)
}

// NormalizeEmail lowercases and trims an e-mail address.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// ValidateEmail checks the form of an e-mail address.
func ValidateEmail(field, email string) error {
	if len(email) > 254 {
		return fault.Invalidf(field, "must be at most 254 characters")
	}
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != email || !strings.Contains(email, "@") {
		return fault.Invalidf(field, "must be an e-mail address such as admin@example.com")
	}
	return nil
}

func (s *Service) sealTOTP(userID, secret string) string {
	return s.key.Seal("users.totp_secret:"+userID, []byte(secret))
}

func (s *Service) openTOTP(a Account) (string, error) {
	b, err := s.key.Open("users.totp_secret:"+a.ID, a.TOTPSecret)
	return string(b), err
}

// CreateUser creates an account and returns it with its TOTP enrollment.
func (s *Service) CreateUser(ctx context.Context, actor audit.Actor, email, password string, admin bool) (User, Enrollment, error) {
	email = NormalizeEmail(email)
	if err := ValidateEmail("email", email); err != nil {
		return User{}, Enrollment{}, err
	}
	if err := ValidatePassword("password", password, email); err != nil {
		return User{}, Enrollment{}, err
	}
	now := s.now().UTC()
	en, err := newEnrollment(s.issuer, email)
	if err != nil {
		return User{}, Enrollment{}, err
	}
	a := Account{
		User:         User{ID: ids.NewAt(ids.User, now), Email: email, Admin: admin, CreatedAt: now},
		PasswordHash: hashPassword(password),
		UpdatedAt:    now,
	}
	a.TOTPSecret = s.sealTOTP(a.ID, en.Secret)
	if err := s.store.CreateAccount(ctx, a); err != nil {
		return User{}, Enrollment{}, err
	}
	err = s.audit.Record(ctx, audit.Entry{Actor: actor, Action: audit.UserCreated,
		Target: audit.Target{Type: "user", ID: a.ID}, Details: map[string]any{"email": email, "admin": admin}})
	return a.User, en, err
}

// ListUsers returns every account.
func (s *Service) ListUsers(ctx context.Context) ([]User, error) { return s.store.ListUsers(ctx) }

// ResetTOTP gives the user a new TOTP secret; the old one stops working.
func (s *Service) ResetTOTP(ctx context.Context, actor audit.Actor, email string) (User, Enrollment, error) {
	a, err := s.store.AccountByEmail(ctx, NormalizeEmail(email))
	if err != nil {
		return User{}, Enrollment{}, err
	}
	en, err := newEnrollment(s.issuer, a.Email)
	if err != nil {
		return User{}, Enrollment{}, err
	}
	if err := s.store.SetTOTPSecret(ctx, a.ID, s.sealTOTP(a.ID, en.Secret), s.now()); err != nil {
		return User{}, Enrollment{}, err
	}
	err = s.audit.Record(ctx, audit.Entry{Actor: actor, Action: audit.UserTOTPReset, Target: audit.Target{Type: "user", ID: a.ID}})
	return a.User, en, err
}

// DisableUser disables an account and ends its sessions at once.
func (s *Service) DisableUser(ctx context.Context, actor audit.Actor, email string) (User, error) {
	a, err := s.store.AccountByEmail(ctx, NormalizeEmail(email))
	if err != nil {
		return User{}, err
	}
	if err := s.store.DisableUser(ctx, a.ID, s.now()); err != nil {
		return User{}, err
	}
	a.Disabled = true
	err = s.audit.Record(ctx, audit.Entry{Actor: actor, Action: audit.UserDisabled, Target: audit.Target{Type: "user", ID: a.ID}})
	return a.User, err
}

func throttledFor(wait time.Duration) error {
	return &fault.Error{Kind: fault.TooManyRequests, Code: CodeThrottled,
		Message: "Too many failed sign-in attempts. Try again later.", RetryAfter: wait}
}

var errLocked = &fault.Error{Kind: fault.TooManyRequests, Code: CodeAccountLocked,
	Message:    "This account is locked after too many failed sign-in attempts. An administrator can lift the lock with capstan user unlock.",
	RetryAfter: time.Hour}

func clientKey(email, ip string) string { return ip + " " + email } // an address holds no space

// takeTokens takes one throttle token for the (account, address) pair and
// one for the address, before a credential is checked; it takes neither
// when either must wait.
func (s *Service) takeTokens(ctx context.Context, email, ip string, now time.Time) error {
	if wait, err := s.perClient.take(ctx, clientKey(email, ip), now); err != nil || wait > 0 {
		if err != nil {
			return err
		}
		return throttledFor(wait)
	}
	if wait, err := s.perAddress.take(ctx, ip, now); err != nil || wait > 0 {
		if gerr := s.perClient.giveBack(ctx, clientKey(email, ip)); err == nil {
			err = gerr
		}
		if err != nil {
			return err
		}
		return throttledFor(wait)
	}
	return nil
}

// giveBackTokens returns the tokens of an attempt whose credential was
// right or never checked. It finishes even when the caller has gone.
func (s *Service) giveBackTokens(ctx context.Context, email, ip string) {
	ctx = context.WithoutCancel(ctx)
	// A token not given back costs the client one attempt; nothing to
	// tell the caller, whose attempt is over.
	_ = s.perClient.giveBack(ctx, clientKey(email, ip))
	_ = s.perAddress.giveBack(ctx, ip)
}

// PruneThrottles deletes the sign-in throttle buckets that are full again.
func (s *Service) PruneThrottles(ctx context.Context) (int, error) {
	return s.store.PruneThrottles(ctx, s.now().Add(-ThrottleIdle))
}

// takeAccountAttempt counts an attempt against the account in the store
// before its credential is checked, and returns the count of failures in
// a row including it. A locked account is refused (errLocked); so is one
// that reached LockAfterFailures, which is then locked.
func (s *Service) takeAccountAttempt(ctx context.Context, c Client, a Account) (int, error) {
	if a.LockedAt != nil {
		return 0, errLocked
	}
	n, ok, err := s.store.TakeSignInAttempt(ctx, a.ID, LockAfterFailures)
	if err != nil {
		return 0, err
	}
	if !ok {
		if err := s.lock(ctx, c, a); err != nil {
			return 0, err
		}
		return 0, errLocked
	}
	return n, nil
}

// returnAccountAttempt takes back an attempt counted by
// takeAccountAttempt whose credential was right or never checked. It runs
// even when the request was cancelled: the count must not leak.
func (s *Service) returnAccountAttempt(ctx context.Context, a Account) error {
	return s.store.ReturnSignInAttempt(context.WithoutCancel(ctx), a.ID)
}

// failAccountAttempt locks the account when the failed attempt counted as
// n reached LockAfterFailures.
func (s *Service) failAccountAttempt(ctx context.Context, c Client, a Account, n int) error {
	if n < LockAfterFailures {
		return nil
	}
	return s.lock(ctx, c, a)
}

// lock locks the account and audits it, once.
func (s *Service) lock(ctx context.Context, c Client, a Account) error {
	locked, err := s.store.LockAccount(ctx, a.ID, s.now())
	if err != nil || !locked {
		return err
	}
	return s.audit.Record(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorSystem}, Action: audit.UserLocked,
		Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"email": a.Email, "failures": LockAfterFailures},
	})
}

// UnlockUser lifts the lock that LockAfterFailures failed attempts put on
// an account and clears its count of failures. It reports whether the
// account was locked.
func (s *Service) UnlockUser(ctx context.Context, actor audit.Actor, email string) (User, bool, error) {
	a, err := s.store.AccountByEmail(ctx, NormalizeEmail(email))
	if err != nil {
		return User{}, false, err
	}
	wasLocked, err := s.store.UnlockAccount(ctx, a.ID, s.now())
	if err != nil {
		return User{}, false, err
	}
	a.Locked = false
	err = s.audit.Record(ctx, audit.Entry{Actor: actor, Action: audit.UserUnlocked,
		Target: audit.Target{Type: "user", ID: a.ID}, Details: map[string]any{"email": a.Email, "was_locked": wasLocked}})
	return a.User, wasLocked, err
}

// storable makes client input storable as text: PostgreSQL refuses NUL
// characters and invalid UTF-8.
func storable(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// LoginResult is the outcome of a correct password.
type LoginResult struct {
	ChallengeID string
	ExpiresAt   time.Time
}

var errBadCredentials = &fault.Error{Kind: fault.Unauthenticated, Code: CodeInvalidCredentials,
	Message: "The e-mail address or password is incorrect."}

// Login checks the password and starts a second-factor challenge. The
// response does not tell whether the e-mail exists: unknown accounts cost
// the same password hash and give the same error.
//
// Throttle tokens and the account's attempt are taken before the hash is
// computed and given back when the password is right, so parallel wrong
// passwords get no more checks than sequential ones.
func (s *Service) Login(ctx context.Context, c Client, email, password string) (LoginResult, error) {
	email = NormalizeEmail(email)
	now := s.now()
	if err := s.takeTokens(ctx, email, c.IP, now); err != nil {
		return LoginResult{}, err
	}
	res, keep, err := s.login(ctx, c, email, password, now)
	if !keep {
		s.giveBackTokens(ctx, email, c.IP)
	}
	return res, err
}

// login is Login after the throttle tokens are taken; keep reports whether
// the attempt failed and must keep them.
func (s *Service) login(ctx context.Context, c Client, email, password string, now time.Time) (_ LoginResult, keep bool, _ error) {
	var a Account
	known := false
	// No account has an address that fails ValidateEmail (CreateUser checks
	// it), and PostgreSQL refuses some such strings (NUL): skip the lookup.
	if ValidateEmail("email", email) == nil {
		var err error
		a, err = s.store.AccountByEmail(ctx, email)
		if err != nil && !fault.Is(err, fault.NotFound) {
			return LoginResult{}, false, err
		}
		known = err == nil
	}
	hash, n := dummyHash(), 0
	if known {
		var err error
		if n, err = s.takeAccountAttempt(ctx, c, a); err != nil {
			return LoginResult{}, err == errLocked, err
		}
		hash = a.PasswordHash
	}
	ok, err := s.checkPassword(ctx, hash, password)
	if err != nil {
		if known {
			if rerr := s.returnAccountAttempt(ctx, a); rerr != nil {
				return LoginResult{}, false, rerr
			}
		}
		return LoginResult{}, false, err
	}
	if known && ok {
		if err := s.returnAccountAttempt(ctx, a); err != nil {
			return LoginResult{}, false, err
		}
	}
	if !known || !ok || a.DisabledAt != nil {
		reason := "wrong_password"
		switch {
		case !known:
			reason = "unknown_email"
		case a.DisabledAt != nil && ok:
			reason = "disabled"
		}
		if err := s.audit.Record(ctx, audit.Entry{
			Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: storable(email)}, Action: audit.LoginFailed,
			Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
			Details: map[string]any{"reason": reason},
		}); err != nil {
			return LoginResult{}, true, err
		}
		if known && !ok {
			if err := s.failAccountAttempt(ctx, c, a, n); err != nil {
				return LoginResult{}, true, err
			}
		}
		return LoginResult{}, true, errBadCredentials
	}
	id := ids.Token(challengePrefix)
	ch := Challenge{IDHash: ids.Hash(id), UserID: a.ID, CreatedAt: now, ExpiresAt: now.Add(ChallengeTTL)}
	if err := s.store.CreateChallenge(ctx, ch); err != nil {
		return LoginResult{}, false, err
	}
	return LoginResult{ChallengeID: id, ExpiresAt: ch.ExpiresAt.UTC()}, false, nil
}

// Tokens is what a completed sign-in or a refresh hands out.
type Tokens struct {
	AccessToken      string
	AccessExpiresAt  time.Time
	RefreshToken     string
	RefreshExpiresAt time.Time // when the session ends at the latest
	User             User
}

var errBadChallenge = &fault.Error{Kind: fault.Unauthenticated, Code: CodeInvalidChallenge,
	Message: "The sign-in challenge is unknown, expired or used up. Sign in again."}

// Verify checks the TOTP code of a challenge and, if it is right, starts a
// session. A code is accepted once: a code of a time step that was already
// used is refused. A challenge allows MaxCodeFailures wrong codes, counted
// before each code is checked, so parallel guesses get no more.
func (s *Service) Verify(ctx context.Context, c Client, challengeID, code string) (Tokens, error) {
	now := s.now()
	hash := ids.Hash(challengeID)
	ch, err := s.store.ChallengeByHash(ctx, hash)
	if fault.Is(err, fault.NotFound) {
		return Tokens{}, errBadChallenge
	}
	if err != nil {
		return Tokens{}, err
	}
	if ch.ConsumedAt != nil || !now.Before(ch.ExpiresAt) || ch.Failures >= MaxCodeFailures {
		return Tokens{}, errBadChallenge
	}
	a, err := s.store.AccountByID(ctx, ch.UserID)
	if err != nil {
		return Tokens{}, err
	}
	if a.DisabledAt != nil {
		return Tokens{}, errBadChallenge
	}
	if err := s.takeTokens(ctx, a.Email, c.IP, now); err != nil {
		return Tokens{}, err
	}
	t, keep, err := s.verify(ctx, c, a, hash, code, now)
	if !keep {
		s.giveBackTokens(ctx, a.Email, c.IP)
	}
	return t, err
}

// verify is Verify after the throttle tokens are taken; keep reports
// whether the attempt failed and must keep them.
func (s *Service) verify(ctx context.Context, c Client, a Account, hash, code string, now time.Time) (_ Tokens, keep bool, _ error) {
	if ok, err := s.store.TakeChallengeAttempt(ctx, hash, MaxCodeFailures, now); err != nil || !ok {
		if err == nil {
			err = errBadChallenge
		}
		return Tokens{}, false, err
	}
	n, err := s.takeAccountAttempt(ctx, c, a)
	if err != nil {
		return Tokens{}, err == errLocked, err
	}
	secret, err := s.openTOTP(a)
	if err != nil {
		return Tokens{}, false, err
	}
	step := matchTOTP(secret, code, now)
	fresh := false
	if step > a.TOTPLastStep {
		if fresh, err = s.store.AdvanceTOTPStep(ctx, a.ID, step); err != nil {
			return Tokens{}, false, err
		}
	}
	if !fresh {
		reason, codeName, msg := "wrong_code", CodeInvalidCode, "The code is incorrect."
		if step != 0 {
			reason, codeName, msg = "code_reused", CodeCodeReused, "This code was already used. Wait for the next code."
		}
		if err := s.audit.Record(ctx, audit.Entry{
			Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.SecondFactorFailed,
			Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
			Details: map[string]any{"reason": reason},
		}); err != nil {
			return Tokens{}, true, err
		}
		if err := s.failAccountAttempt(ctx, c, a, n); err != nil {
			return Tokens{}, true, err
		}
		return Tokens{}, true, fault.Unauthenticatedf(codeName, "%s", msg)
	}
	if ok, err := s.store.ConsumeChallenge(ctx, hash, now); err != nil {
		return Tokens{}, false, err
	} else if !ok {
		return Tokens{}, false, errBadChallenge
	}
	if err := s.store.ResetSignInFailures(context.WithoutCancel(ctx), a.ID); err != nil {
		return Tokens{}, false, err
	}

	sess := Session{ID: ids.NewAt(ids.Session, now), UserID: a.ID, CreatedAt: now, LastUsedAt: now,
		ExpiresAt: now.Add(SessionAbsoluteTTL), IP: c.IP, UserAgent: c.UserAgent}
	refresh, rt := newRefresh(sess.ID, now)
	access, at := newAccess(sess.ID, a.ID, now)
	if err := s.store.CreateSession(ctx, sess, rt, at); err != nil {
		return Tokens{}, false, err
	}
	if err := s.audit.Record(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.LoginSucceeded,
		Target: audit.Target{Type: "session", ID: sess.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"method": "totp"},
	}); err != nil {
		return Tokens{}, false, err
	}
	return Tokens{AccessToken: access, AccessExpiresAt: at.ExpiresAt, RefreshToken: refresh,
		RefreshExpiresAt: sess.ExpiresAt, User: a.User}, false, nil
}

func newRefresh(sessionID string, now time.Time) (string, RefreshToken) {
	tok := ids.Token(refreshPrefix)
	return tok, RefreshToken{Hash: ids.Hash(tok), SessionID: sessionID, CreatedAt: now}
}

func newAccess(sessionID, userID string, now time.Time) (string, AccessToken) {
	tok := ids.Token(accessPrefix)
	return tok, AccessToken{Hash: ids.Hash(tok), SessionID: sessionID, UserID: userID, CreatedAt: now, ExpiresAt: now.Add(AccessTTL)}
}

var errBadRefresh = &fault.Error{Kind: fault.Unauthenticated, Code: CodeInvalidRefresh,
	Message: "The refresh token is missing, unknown, expired or revoked. Sign in again."}

// Refresh exchanges a refresh token for a new access token and a new refresh
// token. Presenting a refresh token a second time revokes its whole session:
// one of the two holders is not the user.
func (s *Service) Refresh(ctx context.Context, c Client, refreshToken string) (Tokens, error) {
	now := s.now()
	if refreshToken == "" {
		return Tokens{}, errBadRefresh
	}
	hash := ids.Hash(refreshToken)
	rt, sess, err := s.store.RefreshTokenByHash(ctx, hash)
	if fault.Is(err, fault.NotFound) {
		return Tokens{}, errBadRefresh
	}
	if err != nil {
		return Tokens{}, err
	}
	if rt.UsedAt != nil {
		return Tokens{}, s.refreshReused(ctx, c, sess, now)
	}
	if sess.RevokedAt != nil || !now.Before(sess.ExpiresAt) || !now.Before(sess.LastUsedAt.Add(SessionIdleTTL)) {
		return Tokens{}, errBadRefresh
	}
	a, err := s.store.AccountByID(ctx, sess.UserID)
	if err != nil {
		return Tokens{}, err
	}
	if a.DisabledAt != nil {
		return Tokens{}, errBadRefresh
	}
	refresh, next := newRefresh(sess.ID, now)
	access, at := newAccess(sess.ID, a.ID, now)
	ok, err := s.store.RotateRefresh(ctx, hash, next, at, now)
	if err != nil {
		return Tokens{}, err
	}
	if !ok { // lost a race with another use of the same token
		return Tokens{}, s.refreshReused(ctx, c, sess, now)
	}
	return Tokens{AccessToken: access, AccessExpiresAt: at.ExpiresAt, RefreshToken: refresh,
		RefreshExpiresAt: sess.ExpiresAt, User: a.User}, nil
}

func (s *Service) refreshReused(ctx context.Context, c Client, sess Session, now time.Time) error {
	if err := s.store.RevokeSession(ctx, sess.ID, "refresh_reused", now); err != nil {
		return err
	}
	if err := s.audit.Record(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: sess.UserID}, Action: audit.RefreshReused,
		Target: audit.Target{Type: "session", ID: sess.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"session_revoked": true},
	}); err != nil {
		return err
	}
	return fault.Unauthenticatedf(CodeRefreshReused, "This refresh token was already used; the session has been revoked. Sign in again.")
}

// Logout ends the caller's session: every refresh and access token of it.
func (s *Service) Logout(ctx context.Context, c Client, p Principal) error {
	if err := s.store.RevokeSession(ctx, p.SessionID, "logout", s.now()); err != nil {
		return err
	}
	return s.audit.Record(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: p.User.ID, Email: p.User.Email}, Action: audit.Logout,
		Target: audit.Target{Type: "session", ID: p.SessionID}, IP: c.IP, UserAgent: c.UserAgent,
	})
}

var errBadToken = &fault.Error{Kind: fault.Unauthenticated, Code: CodeInvalidToken,
	Message: "The access token is missing, invalid, expired or revoked."}

// Authenticate resolves a bearer access token.
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	if !strings.HasPrefix(token, accessPrefix+"_") || len(token) > 100 {
		return Principal{}, errBadToken
	}
	p, err := s.store.Principal(ctx, ids.Hash(token), s.now())
	if fault.Is(err, fault.NotFound) || fault.Is(err, fault.Unauthenticated) {
		return Principal{}, errBadToken
	}
	return p, err
}

// CheckOwnPassword re-checks the signed-in user's password before a
// sensitive operation. It is throttled and counted like a sign-in: the
// tokens and the account's attempt are taken before the hash.
func (s *Service) CheckOwnPassword(ctx context.Context, c Client, p Principal, password string) (bool, error) {
	now := s.now()
	if err := s.takeTokens(ctx, p.User.Email, c.IP, now); err != nil {
		return false, err
	}
	ok, keep, err := s.checkOwnPassword(ctx, c, p, password)
	if !keep {
		s.giveBackTokens(ctx, p.User.Email, c.IP)
	}
	return ok, err
}

func (s *Service) checkOwnPassword(ctx context.Context, c Client, p Principal, password string) (_ bool, keep bool, _ error) {
	a, err := s.store.AccountByID(ctx, p.User.ID)
	if err != nil {
		return false, false, err
	}
	n, err := s.takeAccountAttempt(ctx, c, a)
	if err != nil {
		return false, err == errLocked, err
	}
	ok, err := s.checkPassword(ctx, a.PasswordHash, password)
	if err != nil || ok {
		if rerr := s.returnAccountAttempt(ctx, a); rerr != nil {
			return false, false, rerr
		}
		return ok, false, err
	}
	return false, true, s.failAccountAttempt(ctx, c, a, n)
}
