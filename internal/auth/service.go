package auth

import (
	"context"
	"fmt"
	"net/mail"
	"runtime"
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
	AccessTTL          = 900 * time.Second
	ChallengeTTL       = 5 * time.Minute
	MaxCodeFailures    = 5
	SessionAbsoluteTTL = 30 * 24 * time.Hour
	SessionIdleTTL     = 7 * 24 * time.Hour
	// RefreshGrace is how long after its first use a refresh token is
	// still exchanged, for a second tab that refreshed at the same time;
	// a use after it is reuse and revokes the session.
	RefreshGrace = 30 * time.Second
	// DeviceTTL is how long a device cookie is good for after the last
	// sign-in completed with it.
	DeviceTTL = 180 * 24 * time.Hour
)

// Token prefixes.
const (
	accessPrefix    = "cat"
	refreshPrefix   = "crt"
	challengePrefix = "chl"
	devicePrefix    = "cdv"
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
	CodeSignInBusy         = "sign-in-busy"
	CodeAdminRequired      = "admin-required"
	CodeWrongPassword      = "wrong-password"
	CodeWrongCode          = "wrong-code"
)

// Service implements sign-in and account management.
type Service struct {
	store  Store
	key    *secrets.Key
	audit  *audit.Log
	now    func() time.Time
	issuer string

	// Sign-ins from strangers (no known device) take a token from each
	// of perClient, perAddress and perAccount. perClient throttles per
	// (account, client address), tightly: one client guessing one account
	// needs few tries. perAddress throttles one address over all accounts,
	// against one address spraying many. perAccount throttles one e-mail
	// address over all strangers' addresses, loosely: a delay that refills
	// with time, never a lock.
	perClient, perAddress, perAccount *throttle
	// perDevice is a known device's own failure budget; its sign-ins take
	// from it alone, so strangers cannot hold the account's owner back.
	perDevice *throttle
	// perSession throttles the password and code checks of a signed-in
	// caller (recovery kit, password change).
	perSession *throttle
	// hashes bounds the password hashes computed for strangers, owners
	// those for known devices and signed-in callers, so that a flood of
	// strangers' attempts cannot keep the owner waiting for a slot.
	hashes, owners *hashQueue
	// checks counts password hashes compared, for tests and metrics.
	checks atomic.Int64
}

// NewService returns a Service. issuer names the control plane in
// authenticator apps.
func NewService(store Store, key *secrets.Key, log *audit.Log, now func() time.Time, issuer string) *Service {
	return &Service{
		store: store, key: key, audit: log, now: now, issuer: issuer,
		perClient:  &throttle{store: store, kind: "client", burst: ClientBurst, every: time.Minute},
		perAddress: &throttle{store: store, kind: "address", burst: AddressBurst, every: 15 * time.Second},
		perAccount: &throttle{store: store, kind: "account", burst: AccountBurst, every: 30 * time.Second},
		perDevice:  &throttle{store: store, kind: "device", burst: DeviceBurst, every: time.Minute},
		perSession: &throttle{store: store, kind: "session", burst: ClientBurst, every: time.Minute},
		// Strangers: as many hashes at once as there are processors, 8
		// at most (152 MiB): more would only share the processors
		// with the owners' hashes. 32 more waiting at most. Owners: 2
		// more (38 MiB), 16 waiting.
		hashes: newHashQueue(min(runtime.GOMAXPROCS(0), 8), 32),
		owners: newHashQueue(2, 16),
	}
}

// Throttle bursts: how many failed attempts in a row are answered before
// 429 and Retry-After.
const (
	ClientBurst  = 5  // per account and client address, then 1 a minute
	AddressBurst = 20 // per client address, then 1 every 15 s
	// AccountBurst is strangers' failures on one account from all
	// addresses, then 1 every 30 s (NIST SP 800-63B 5.2.2 allows at most
	// 100 in a row). It refills in 50 minutes.
	AccountBurst = 100
	DeviceBurst  = 10 // per known device, then 1 a minute
)

// PasswordChecks returns how many password hashes the service has compared
// since it started.
func (s *Service) PasswordChecks() int64 { return s.checks.Load() }

// queue returns the hashing queue of owners (known devices, signed-in
// callers) when owner is true, else the strangers'.
func (s *Service) queue(owner bool) *hashQueue {
	if owner {
		return s.owners
	}
	return s.hashes
}

// checkPassword compares pw with the hash phc, in owner's queue of hashes.
func (s *Service) checkPassword(ctx context.Context, phc, pw string, owner bool) (bool, error) {
	q := s.queue(owner)
	if err := q.acquire(ctx); err != nil {
		return false, err
	}
	defer q.release()
	s.checks.Add(1)
	return checkPassword(phc, pw)
}

// takeForHash is take for an attempt whose password is then hashed in
// owner's queue: when that queue is full already it refuses at once
// (errHashBusy), before costing the store anything.
func (s *Service) takeForHash(ctx context.Context, claims []claim, owner bool, now time.Time) error {
	if s.queue(owner).full() {
		return errHashBusy
	}
	return s.take(ctx, claims, now)
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
func (s *Service) CreateUser(ctx context.Context, c audit.Caller, email, password string, admin bool) (User, Enrollment, error) {
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
	err = s.audit.Record(ctx, c, audit.UserCreated, audit.Target{Type: "user", ID: a.ID}, map[string]any{"email": email, "admin": admin})
	return a.User, en, err
}

// ListUsers returns every account.
func (s *Service) ListUsers(ctx context.Context) ([]User, error) { return s.store.ListUsers(ctx) }

// ResetTOTP gives the user a new TOTP secret; the old one stops working.
// Every session of the user ends and every device it signed in from is
// forgotten: whoever held the old secret may have signed in with it.
func (s *Service) ResetTOTP(ctx context.Context, c audit.Caller, email string) (User, Enrollment, error) {
	a, err := s.store.AccountByEmail(ctx, NormalizeEmail(email))
	if err != nil {
		return User{}, Enrollment{}, err
	}
	return s.resetTOTP(ctx, c, a)
}

// ResetTOTPByID is ResetTOTP of the user with that id, by c.
func (s *Service) ResetTOTPByID(ctx context.Context, c audit.Caller, id string) (User, Enrollment, error) {
	a, err := s.store.AccountByID(ctx, id)
	if err != nil {
		return User{}, Enrollment{}, err
	}
	return s.resetTOTP(ctx, c, a)
}

func (s *Service) resetTOTP(ctx context.Context, c audit.Caller, a Account) (User, Enrollment, error) {
	en, err := newEnrollment(s.issuer, a.Email)
	if err != nil {
		return User{}, Enrollment{}, err
	}
	now := s.now()
	if err := s.store.SetTOTPSecret(ctx, a.ID, s.sealTOTP(a.ID, en.Secret), now); err != nil {
		return User{}, Enrollment{}, err
	}
	n, err := s.store.RevokeUserSessions(ctx, a.ID, "", "2fa_reset", now)
	if err != nil {
		return User{}, Enrollment{}, err
	}
	if err := s.store.RevokeDevices(ctx, a.ID, "", now); err != nil {
		return User{}, Enrollment{}, err
	}
	err = s.audit.Record(ctx, c, audit.UserTOTPReset, audit.Target{Type: "user", ID: a.ID}, map[string]any{"sessions_revoked": n})
	return a.User, en, err
}

// DisableUser disables an account and ends its sessions at once.
func (s *Service) DisableUser(ctx context.Context, c audit.Caller, email string) (User, error) {
	a, err := s.store.AccountByEmail(ctx, NormalizeEmail(email))
	if err != nil {
		return User{}, err
	}
	now := s.now()
	if err := s.store.DisableUser(ctx, a.ID, now); err != nil {
		return User{}, err
	}
	if err := s.store.RevokeDevices(ctx, a.ID, "", now); err != nil {
		return User{}, err
	}
	a.Disabled = true
	err = s.audit.Record(ctx, c, audit.UserDisabled, audit.Target{Type: "user", ID: a.ID}, nil)
	return a.User, err
}

// UserChange is an administrator's change of a user's access; nil fields
// stay as they are.
type UserChange struct {
	Admin    *bool
	Disabled *bool
}

// ChangeUser changes a user's role or whether it is disabled, audited.
// The last enabled administrator can be neither made a member nor
// disabled (409 last-admin). Disabling ends the user's sessions at once
// (its live streams close on their next check) and forgets its devices.
// c is who changes it.
func (s *Service) ChangeUser(ctx context.Context, c audit.Caller, id string, ch UserChange) (User, error) {
	before, err := s.store.AccountByID(ctx, id)
	if err != nil {
		return User{}, err
	}
	u, err := s.store.SetUserAccess(ctx, id, ch.Admin, ch.Disabled, s.now())
	if err != nil {
		return User{}, err
	}
	target := audit.Target{Type: "user", ID: id}
	if before.Admin != u.Admin {
		if err := s.audit.Record(ctx, c, audit.UserRoleChanged, target, map[string]any{"email": u.Email, "admin": u.Admin}); err != nil {
			return User{}, err
		}
	}
	if before.Disabled != u.Disabled {
		action := audit.UserEnabled
		if u.Disabled {
			action = audit.UserDisabled
		}
		if err := s.audit.Record(ctx, c, action, target, map[string]any{"email": u.Email}); err != nil {
			return User{}, err
		}
	}
	return u, nil
}

// DeleteUser deletes a user, audited; the last enabled administrator
// cannot be deleted (409 last-admin).
func (s *Service) DeleteUser(ctx context.Context, c audit.Caller, id string) error {
	u, err := s.store.DeleteUser(ctx, id)
	if err != nil {
		return err
	}
	return s.audit.Record(ctx, c, audit.UserDeleted, audit.Target{Type: "user", ID: id}, map[string]any{"email": u.Email, "admin": u.Admin})
}

func throttledFor(wait time.Duration) error {
	return &fault.Error{Kind: fault.TooManyRequests, Code: CodeThrottled,
		Message: "Too many failed sign-in attempts. Try again later.", RetryAfter: wait}
}

func clientKey(email, ip string) string { return ip + " " + email } // an address holds no space

// strangerClaims are the tokens a sign-in attempt from no known device
// takes: for the (account, address) pair, for the address, and for the
// account. email need not be an account's: unknown addresses are
// throttled exactly like known ones.
func (s *Service) strangerClaims(email, ip string) []claim {
	addr := throttledAddress(ip)
	return []claim{{s.perClient, clientKey(email, addr)}, {s.perAddress, addr}, {s.perAccount, email}}
}

// deviceClaims are the tokens a sign-in attempt from a known device takes:
// its own budget only.
func (s *Service) deviceClaims(d knownDevice) []claim {
	return []claim{{s.perDevice, d.hash}}
}

// take takes one token of every claim before a credential is checked; it
// takes none when one of them must wait.
func (s *Service) take(ctx context.Context, claims []claim, now time.Time) error {
	for i, c := range claims {
		wait, err := c.t.take(ctx, c.key, now)
		if err == nil && wait == 0 {
			continue
		}
		s.giveBack(ctx, claims[:i])
		if err != nil {
			return err
		}
		return throttledFor(wait)
	}
	return nil
}

// giveBack returns the tokens of an attempt whose credential was right or
// never checked. It finishes even when the caller has gone.
func (s *Service) giveBack(ctx context.Context, claims []claim) {
	ctx = context.WithoutCancel(ctx)
	for _, c := range claims {
		// A token not given back costs the client one attempt; nothing
		// to tell the caller, whose attempt is over.
		_ = c.t.giveBack(ctx, c.key)
	}
}

// PruneThrottles deletes the sign-in throttle buckets that are full again.
func (s *Service) PruneThrottles(ctx context.Context) (int, error) {
	return s.store.PruneThrottles(ctx, s.now().Add(-ThrottleIdle))
}

// UnlockUser lifts the delay that strangers' failed sign-ins put on an
// account before it passes by itself. It reports whether strangers had
// failed on it within ThrottleIdle.
func (s *Service) UnlockUser(ctx context.Context, c audit.Caller, email string) (User, bool, error) {
	a, err := s.store.AccountByEmail(ctx, NormalizeEmail(email))
	if err != nil {
		return User{}, false, err
	}
	delayed, err := s.perAccount.reset(ctx, a.Email)
	if err != nil {
		return User{}, false, err
	}
	err = s.audit.Record(ctx, c, audit.UserUnlocked, audit.Target{Type: "user", ID: a.ID}, map[string]any{"email": a.Email, "had_failures": delayed})
	return a.User, delayed, err
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
// the same password hash, the same throttles and give the same error.
// device is the device cookie the client sent ("" for none).
//
// Throttle tokens are taken before the hash is computed and given back
// when the password is right, so parallel wrong passwords get no more
// checks than sequential ones.
func (s *Service) Login(ctx context.Context, c audit.Caller, email, password, device string) (LoginResult, error) {
	email = NormalizeEmail(email)
	now := s.now()
	var a Account
	known := false
	// No account has an address that fails ValidateEmail (CreateUser checks
	// it), and PostgreSQL refuses some such strings (NUL): skip the lookup.
	if ValidateEmail("email", email) == nil {
		var err error
		a, err = s.store.AccountByEmail(ctx, email)
		if err != nil && !fault.Is(err, fault.NotFound) {
			return LoginResult{}, err
		}
		known = err == nil
	}
	d, err := s.device(ctx, device, a.ID, now)
	if err != nil {
		return LoginResult{}, err
	}
	claims := s.strangerClaims(email, c.IP)
	if d.known {
		claims = s.deviceClaims(d)
	}
	if err := s.takeForHash(ctx, claims, d.known, now); err != nil {
		return LoginResult{}, err
	}
	res, keep, err := s.login(ctx, c, a, known, d.known, email, password, now)
	if !keep {
		s.giveBack(ctx, claims)
	}
	return res, err
}

// login is Login after the throttle tokens are taken; keep reports whether
// the attempt failed and must keep them.
func (s *Service) login(ctx context.Context, c audit.Caller, a Account, known, owner bool, email, password string, now time.Time) (_ LoginResult, keep bool, _ error) {
	hash := dummyHash()
	if known {
		hash = a.PasswordHash
	}
	ok, err := s.checkPassword(ctx, hash, password, owner)
	if err != nil {
		return LoginResult{}, false, err
	}
	if !known || !ok || a.DisabledAt != nil {
		reason := "wrong_password"
		switch {
		case !known:
			reason = "unknown_email"
		case a.DisabledAt != nil && ok:
			reason = "disabled"
		}
		if err := s.audit.Append(ctx, audit.Entry{
			Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: storable(email)}, Action: audit.LoginFailed,
			Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
			Details: map[string]any{"reason": reason, "known_device": owner},
		}); err != nil {
			return LoginResult{}, true, err
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
	// Device is the device cookie of a completed sign-in (the one sent,
	// if it was the account's, or a new one) and DeviceExpiresAt its end;
	// "" for a refresh.
	Device          string
	DeviceExpiresAt time.Time
	User            User
}

var errBadChallenge = &fault.Error{Kind: fault.Unauthenticated, Code: CodeInvalidChallenge,
	Message: "The sign-in challenge is unknown, expired or used up. Sign in again."}

// Verify checks the TOTP code of a challenge and, if it is right, starts a
// session. A code is accepted once: a code of a time step that was already
// used is refused. A challenge allows MaxCodeFailures wrong codes, counted
// before each code is checked, so parallel guesses get no more. device is
// the device cookie the client sent ("" for none).
func (s *Service) Verify(ctx context.Context, c audit.Caller, challengeID, code, device string) (Tokens, error) {
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
	d, err := s.device(ctx, device, a.ID, now)
	if err != nil {
		return Tokens{}, err
	}
	claims := s.strangerClaims(a.Email, c.IP)
	if d.known {
		claims = s.deviceClaims(d)
	}
	if err := s.take(ctx, claims, now); err != nil {
		return Tokens{}, err
	}
	t, keep, err := s.verify(ctx, c, a, d, hash, code, now)
	if !keep {
		s.giveBack(ctx, claims)
	}
	return t, err
}

// triesLeft says how many more codes the challenge takes, as the user
// reads it after a wrong one. Informational: parallel guesses may make it
// stale, the count itself is taken atomically before each code.
func (s *Service) triesLeft(ctx context.Context, hash string) string {
	ch, err := s.store.ChallengeByHash(ctx, hash)
	if err != nil {
		return ""
	}
	switch left := MaxCodeFailures - ch.Failures; {
	case left <= 0:
		return "That was the last try with this sign-in: enter the password again."
	case left == 1:
		return "1 more try."
	default:
		return fmt.Sprintf("%d more tries.", left)
	}
}

// verify is Verify after the throttle tokens are taken; keep reports
// whether the attempt failed and must keep them.
func (s *Service) verify(ctx context.Context, c audit.Caller, a Account, d knownDevice, hash, code string, now time.Time) (_ Tokens, keep bool, _ error) {
	if ok, err := s.store.TakeChallengeAttempt(ctx, hash, MaxCodeFailures, now); err != nil || !ok {
		if err == nil {
			err = errBadChallenge
		}
		return Tokens{}, false, err
	}
	fresh, reason, err := s.checkCode(ctx, a, code, now)
	if err != nil {
		return Tokens{}, false, err
	}
	if !fresh {
		codeName, msg := CodeInvalidCode, "The code is incorrect."
		if reason == "code_reused" {
			codeName, msg = CodeCodeReused, "This code was already used. Wait for the next code."
		}
		msg += " " + s.triesLeft(ctx, hash)
		if err := s.audit.Append(ctx, audit.Entry{
			Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.SecondFactorFailed,
			Target: audit.Target{Type: "user", ID: a.ID}, IP: c.IP, UserAgent: c.UserAgent,
			Details: map[string]any{"reason": reason, "known_device": d.known},
		}); err != nil {
			return Tokens{}, true, err
		}
		return Tokens{}, true, fault.Unauthenticatedf(codeName, "%s", msg)
	}
	if ok, err := s.store.ConsumeChallenge(ctx, hash, now); err != nil {
		return Tokens{}, false, err
	} else if !ok {
		return Tokens{}, false, errBadChallenge
	}
	t, err := s.startSession(ctx, c, a, d, "totp", now)
	return t, false, err
}

// startSession starts a session of a completed sign-in by method ("totp",
// or "invitation" for an invitee's first), remembering the device d.
func (s *Service) startSession(ctx context.Context, c audit.Caller, a Account, d knownDevice, method string, now time.Time) (Tokens, error) {
	device, deviceEnd, err := s.rememberDevice(ctx, a.ID, d, now)
	if err != nil {
		return Tokens{}, err
	}

	sess := Session{ID: ids.NewAt(ids.Session, now), UserID: a.ID, CreatedAt: now, LastUsedAt: now,
		ExpiresAt: now.Add(SessionAbsoluteTTL), IP: c.IP, UserAgent: c.UserAgent}
	refresh, rt := newRefresh(sess.ID, now)
	access, at := newAccess(sess.ID, a.ID, now)
	if err := s.store.CreateSession(ctx, sess, rt, at); err != nil {
		return Tokens{}, err
	}
	if err := s.audit.Append(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID, Email: a.Email}, Action: audit.LoginSucceeded,
		Target: audit.Target{Type: "session", ID: sess.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"method": method, "known_device": d.known},
	}); err != nil {
		return Tokens{}, err
	}
	return Tokens{AccessToken: access, AccessExpiresAt: at.ExpiresAt, RefreshToken: refresh,
		RefreshExpiresAt: sess.ExpiresAt, Device: device, DeviceExpiresAt: deviceEnd, User: a.User}, nil
}

// checkCode checks a TOTP code of the account and, when it is right and of
// a step not used before, records its step. It reports whether the code
// was accepted, and if not why ("wrong_code" or "code_reused").
func (s *Service) checkCode(ctx context.Context, a Account, code string, now time.Time) (bool, string, error) {
	secret, err := s.openTOTP(a)
	if err != nil {
		return false, "", err
	}
	step := matchTOTP(secret, code, now)
	if step == 0 {
		return false, "wrong_code", nil
	}
	fresh := false
	if step > a.TOTPLastStep {
		if fresh, err = s.store.AdvanceTOTPStep(ctx, a.ID, step); err != nil {
			return false, "", err
		}
	}
	if !fresh {
		return false, "code_reused", nil
	}
	return true, "", nil
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
// token. Presenting a refresh token again within RefreshGrace of its first
// use (two tabs refreshing at once) gets another new pair; presenting it
// later revokes its whole session: one of the two holders is not the user.
func (s *Service) Refresh(ctx context.Context, c audit.Caller, refreshToken string) (Tokens, error) {
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
	graceSince := now.Add(-RefreshGrace)
	if rt.UsedAt != nil && !rt.UsedAt.After(graceSince) {
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
	ok, err := s.store.RotateRefresh(ctx, hash, next, at, graceSince, now)
	if err != nil {
		return Tokens{}, err
	}
	if !ok { // its grace ended meanwhile
		return Tokens{}, s.refreshReused(ctx, c, sess, now)
	}
	return Tokens{AccessToken: access, AccessExpiresAt: at.ExpiresAt, RefreshToken: refresh,
		RefreshExpiresAt: sess.ExpiresAt, User: a.User}, nil
}

func (s *Service) refreshReused(ctx context.Context, c audit.Caller, sess Session, now time.Time) error {
	if err := s.store.RevokeSession(ctx, sess.ID, "refresh_reused", now); err != nil {
		return err
	}
	if err := s.audit.Append(ctx, audit.Entry{
		Actor: audit.Actor{Type: audit.ActorUser, ID: sess.UserID}, Action: audit.RefreshReused,
		Target: audit.Target{Type: "session", ID: sess.ID}, IP: c.IP, UserAgent: c.UserAgent,
		Details: map[string]any{"session_revoked": true},
	}); err != nil {
		return err
	}
	return fault.Unauthenticatedf(CodeRefreshReused, "This refresh token was already used; the session has been revoked. Sign in again.")
}

// Logout ends the caller's session: every refresh and access token of it.
func (s *Service) Logout(ctx context.Context, c audit.Caller, p Principal) error {
	if err := s.store.RevokeSession(ctx, p.SessionID, "logout", s.now()); err != nil {
		return err
	}
	return s.audit.Append(ctx, audit.Entry{
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
// sensitive operation. It is throttled per session (the caller already
// signed in, so strangers' failures do not count here): the token is taken
// before the hash.
func (s *Service) CheckOwnPassword(ctx context.Context, c audit.Caller, p Principal, password string) (bool, error) {
	claims := []claim{{s.perSession, p.SessionID}}
	if err := s.takeForHash(ctx, claims, true, s.now()); err != nil {
		return false, err
	}
	ok, err := s.checkOwnPassword(ctx, p, password)
	if err != nil || ok {
		s.giveBack(ctx, claims)
	}
	return ok, err
}

func (s *Service) checkOwnPassword(ctx context.Context, p Principal, password string) (bool, error) {
	a, err := s.store.AccountByID(ctx, p.User.ID)
	if err != nil {
		return false, err
	}
	return s.checkPassword(ctx, a.PasswordHash, password, true)
}
