package auth_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

const password = "a long and unusual passphrase"

var (
	client   = audit.Caller{IP: "198.51.100.7", UserAgent: "capstan-test/1"}
	operator = audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "cli"}}
)

type fixture struct {
	t     *testing.T
	clock *testlab.Clock
	store *store.Store
	log   *audit.Log
	svc   *auth.Service
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st := storetest.Open(t, store.SQLite)
	// On a TOTP step boundary, so every step lasts 30 seconds from here.
	clk := testlab.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	log := audit.NewLog(st, clk.Now)
	return &fixture{t: t, clock: clk, store: st, log: log,
		svc: auth.NewService(st, secrets.GenerateKey(), log, clk.Now, "Capstan test")}
}

func (f *fixture) createUser(email string) (auth.User, auth.Enrollment) {
	f.t.Helper()
	u, en, err := f.svc.CreateUser(context.Background(), operator, email, password, false)
	if err != nil {
		f.t.Fatalf("create user %s: %v", email, err)
	}
	return u, en
}

// code returns the TOTP code of secret at the fake clock's time.
func (f *fixture) code(secret string) string {
	f.t.Helper()
	code, err := auth.TOTPCode(secret, f.clock.Now())
	if err != nil {
		f.t.Fatalf("totp code: %v", err)
	}
	return code
}

// acceptedCodes returns the codes of secret that Verify accepts now.
func (f *fixture) acceptedCodes(secret string) map[string]bool {
	f.t.Helper()
	accepted := map[string]bool{}
	for _, d := range []time.Duration{-30 * time.Second, 0, 30 * time.Second} {
		code, err := auth.TOTPCode(secret, f.clock.Now().Add(d))
		if err != nil {
			f.t.Fatalf("totp code: %v", err)
		}
		accepted[code] = true
	}
	return accepted
}

// wrongCode returns a code that no accepted step of secret produces now.
func (f *fixture) wrongCode(secret string) string {
	f.t.Helper()
	accepted := f.acceptedCodes(secret)
	for i := 0; ; i++ {
		if code := fmt.Sprintf("%06d", i); !accepted[code] {
			return code
		}
	}
}

func (f *fixture) login(c audit.Caller, email string) auth.LoginResult {
	f.t.Helper()
	r, err := f.svc.Login(context.Background(), c, email, password, "")
	if err != nil {
		f.t.Fatalf("login %s: %v", email, err)
	}
	return r
}

// signIn moves the clock to the next TOTP step (so the code is fresh) and
// signs in with password and code.
func (f *fixture) signIn(email, secret string) auth.Tokens {
	f.t.Helper()
	f.clock.Advance(30 * time.Second)
	r := f.login(client, email)
	tok, err := f.svc.Verify(context.Background(), client, r.ChallengeID, f.code(secret), "")
	if err != nil {
		f.t.Fatalf("verify %s: %v", email, err)
	}
	return tok
}

func (f *fixture) authenticate(token string) auth.Principal {
	f.t.Helper()
	p, err := f.svc.Authenticate(context.Background(), token)
	if err != nil {
		f.t.Fatalf("authenticate: %v", err)
	}
	return p
}

func (f *fixture) refresh(token string) auth.Tokens {
	f.t.Helper()
	tok, err := f.svc.Refresh(context.Background(), client, token)
	if err != nil {
		f.t.Fatalf("refresh: %v", err)
	}
	return tok
}

// audit returns the entries with this action, newest first.
func (f *fixture) audit(action string) []audit.Entry {
	f.t.Helper()
	es, _, err := f.log.List(context.Background(), audit.MaxLimit, "", action)
	if err != nil {
		f.t.Fatalf("list audit %s: %v", action, err)
	}
	return es
}

// wantFault fails unless err is a fault of kind k with the given code.
func wantFault(t *testing.T, what string, err error, k fault.Kind, code string) *fault.Error {
	t.Helper()
	fe := fault.As(err)
	if fe == nil {
		t.Fatalf("%s: got error %v, want a fault of kind %v", what, err, k)
	}
	if got, want := fe.Kind, k; got != want {
		t.Fatalf("%s: got kind %v (%v), want %v", what, got, err, want)
	}
	if got, want := fe.Code, code; got != want {
		t.Fatalf("%s: got code %q, want %q", what, got, want)
	}
	return fe
}

func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	fe := wantFault(t, what, err, fault.Invalid, "")
	if got, want := len(fe.Fields), 1; got != want {
		t.Fatalf("%s: got %d fields, want %d", what, got, want)
	}
	if got, want := fe.Fields[0].Field, field; got != want {
		t.Fatalf("%s: got field %q, want %q", what, got, want)
	}
}

func TestCreateUser(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	for _, email := range []string{"", "not-an-email", "alice@", "Alice <alice@example.com>", "alice@example.com, bob@example.com",
		strings.Repeat("a", 250) + "@example.com"} {
		_, _, err := f.svc.CreateUser(ctx, operator, email, password, false)
		wantField(t, fmt.Sprintf("e-mail %q", email), err, "email")
	}
	for _, pw := range []string{"", "elevenchars", strings.Repeat("p", auth.MaxPasswordLen+1), "alice@example.com"} {
		_, _, err := f.svc.CreateUser(ctx, operator, "alice@example.com", pw, false)
		wantField(t, fmt.Sprintf("password of %d characters", len(pw)), err, "password")
	}
	if got, want := len(f.audit(audit.UserCreated)), 0; got != want {
		t.Fatalf("users created by invalid input: got %d, want %d", got, want)
	}

	u, en, err := f.svc.CreateUser(ctx, operator, "  Alice@Example.COM ", password, true)
	if err != nil {
		t.Fatalf("create user: %v", err)
	}
	if got, want := u.Email, "alice@example.com"; got != want {
		t.Fatalf("normalized e-mail: got %q, want %q", got, want)
	}
	if got, want := u.Admin, true; got != want {
		t.Fatalf("admin: got %v, want %v", got, want)
	}
	if got, want := strings.HasPrefix(u.ID, "usr_"), true; got != want {
		t.Fatalf("user id %q has prefix usr_: got %v, want %v", u.ID, got, want)
	}
	if !u.CreatedAt.Equal(f.clock.Now()) {
		t.Fatalf("created at: got %v, want %v", u.CreatedAt, f.clock.Now())
	}
	if got, want := en.Secret != "" && strings.HasPrefix(en.URI, "otpauth://totp/") && strings.Contains(en.URI, "Capstan"), true; got != want {
		t.Fatalf("enrollment %+v complete: got %v, want %v", en, got, want)
	}

	stored, err := f.store.AccountByID(ctx, u.ID)
	if err != nil {
		t.Fatalf("stored account: %v", err)
	}
	if got, want := strings.Contains(stored.TOTPSecret, en.Secret), false; got != want {
		t.Fatalf("stored TOTP secret holds the clear secret: got %v, want %v", got, want)
	}
	if got, want := strings.HasPrefix(stored.PasswordHash, "$argon2id$"), true; got != want {
		t.Fatalf("stored password is an argon2id hash: got %v, want %v", got, want)
	}

	_, _, err = f.svc.CreateUser(ctx, operator, "ALICE@example.com", password, false)
	wantFault(t, "duplicate e-mail", err, fault.Conflict, "email-taken")

	users, err := f.svc.ListUsers(ctx)
	if err != nil {
		t.Fatalf("list users: %v", err)
	}
	if got, want := len(users), 1; got != want {
		t.Fatalf("users: got %d, want %d", got, want)
	}
	created := f.audit(audit.UserCreated)
	if got, want := len(created), 1; got != want {
		t.Fatalf("user.created entries: got %d, want %d", got, want)
	}
	if got, want := created[0].Target.ID, u.ID; got != want {
		t.Fatalf("user.created target: got %q, want %q", got, want)
	}
	if got, want := created[0].Actor, operator.Actor; got != want {
		t.Fatalf("user.created actor: got %+v, want %+v", got, want)
	}
}

func TestLoginFailuresLookAlike(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.createUser("alice@example.com")

	_, errWrong := f.svc.Login(ctx, client, "alice@example.com", "not the password at all", "")
	_, errUnknown := f.svc.Login(ctx, client, "nobody@example.com", password, "")
	wrong := wantFault(t, "wrong password", errWrong, fault.Unauthenticated, auth.CodeInvalidCredentials)
	unknown := wantFault(t, "unknown e-mail", errUnknown, fault.Unauthenticated, auth.CodeInvalidCredentials)
	if got, want := unknown.Message, wrong.Message; got != want {
		t.Fatalf("messages: got %q for an unknown e-mail, want %q as for a wrong password", got, want)
	}

	failed := f.audit(audit.LoginFailed)
	if got, want := len(failed), 2; got != want {
		t.Fatalf("auth.login.failed entries: got %d, want %d", got, want)
	}
	for i, want := range []struct{ email, reason string }{{"nobody@example.com", "unknown_email"}, {"alice@example.com", "wrong_password"}} {
		if got := failed[i].Actor.Email; got != want.email {
			t.Fatalf("entry %d e-mail: got %q, want %q", i, got, want.email)
		}
		if got := failed[i].Details["reason"]; got != want.reason {
			t.Fatalf("entry %d reason: got %v, want %q", i, got, want.reason)
		}
		if got, want := failed[i].IP, client.IP; got != want {
			t.Fatalf("entry %d ip: got %q, want %q", i, got, want)
		}
	}

	// The e-mail is matched without regard to case and spaces.
	r, err := f.svc.Login(ctx, client, " ALICE@example.com", password, "")
	if err != nil {
		t.Fatalf("login with differently written e-mail: %v", err)
	}
	if got, want := strings.HasPrefix(r.ChallengeID, "chl_"), true; got != want {
		t.Fatalf("challenge id %q has prefix chl_: got %v, want %v", r.ChallengeID, got, want)
	}
	if want := f.clock.Now().Add(auth.ChallengeTTL); !r.ExpiresAt.Equal(want) {
		t.Fatalf("challenge expires at: got %v, want %v", r.ExpiresAt, want)
	}
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	u, en := f.createUser("alice@example.com")

	r := f.login(client, "alice@example.com")
	now := f.clock.Now()
	tok, err := f.svc.Verify(ctx, client, r.ChallengeID, f.code(en.Secret), "")
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if got, want := strings.HasPrefix(tok.AccessToken, "cat_") && strings.HasPrefix(tok.RefreshToken, "crt_"), true; got != want {
		t.Fatalf("token prefixes %q, %q: got %v, want %v", tok.AccessToken, tok.RefreshToken, got, want)
	}
	if want := now.Add(auth.AccessTTL); !tok.AccessExpiresAt.Equal(want) {
		t.Fatalf("access expires at: got %v, want %v", tok.AccessExpiresAt, want)
	}
	if want := now.Add(auth.SessionAbsoluteTTL); !tok.RefreshExpiresAt.Equal(want) {
		t.Fatalf("refresh expires at: got %v, want %v", tok.RefreshExpiresAt, want)
	}
	if got, want := tok.User.ID, u.ID; got != want {
		t.Fatalf("tokens user: got %q, want %q", got, want)
	}

	p := f.authenticate(tok.AccessToken)
	if got, want := p.User.ID, u.ID; got != want {
		t.Fatalf("principal user: got %q, want %q", got, want)
	}
	succeeded := f.audit(audit.LoginSucceeded)
	if got, want := len(succeeded), 1; got != want {
		t.Fatalf("auth.login.succeeded entries: got %d, want %d", got, want)
	}
	if got, want := succeeded[0].Target.ID, p.SessionID; got != want {
		t.Fatalf("auth.login.succeeded target: got %q, want %q", got, want)
	}

	// A challenge is used once.
	f.clock.Advance(30 * time.Second)
	_, err = f.svc.Verify(ctx, client, r.ChallengeID, f.code(en.Secret), "")
	wantFault(t, "second use of a challenge", err, fault.Unauthenticated, auth.CodeInvalidChallenge)
	_, err = f.svc.Verify(ctx, client, "chl_unknown", f.code(en.Secret), "")
	wantFault(t, "unknown challenge", err, fault.Unauthenticated, auth.CodeInvalidChallenge)

	for _, bad := range []string{"", "garbage", tok.RefreshToken, "cat_" + strings.Repeat("x", 100), tok.AccessToken + "x"} {
		_, err := f.svc.Authenticate(ctx, bad)
		wantFault(t, fmt.Sprintf("authenticate %q", bad), err, fault.Unauthenticated, auth.CodeInvalidToken)
	}

	// The access token lives AccessTTL.
	f.clock.Advance(auth.AccessTTL - 31*time.Second)
	f.authenticate(tok.AccessToken)
	f.clock.Advance(time.Second)
	_, err = f.svc.Authenticate(ctx, tok.AccessToken)
	wantFault(t, "expired access token", err, fault.Unauthenticated, auth.CodeInvalidToken)
}

func TestVerifyRefusesReplayedCode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	f.signIn("alice@example.com", en.Secret)
	used := f.code(en.Secret)
	previous, err := auth.TOTPCode(en.Secret, f.clock.Now().Add(-30*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	f.clock.Advance(5 * time.Second) // same step
	r := f.login(client, "alice@example.com")
	_, err = f.svc.Verify(ctx, client, r.ChallengeID, used, "")
	wantFault(t, "replayed code", err, fault.Unauthenticated, auth.CodeCodeReused)
	if previous != used {
		_, err = f.svc.Verify(ctx, client, r.ChallengeID, previous, "")
		wantFault(t, "code of an earlier step", err, fault.Unauthenticated, auth.CodeCodeReused)
	}
	failed := f.audit(audit.SecondFactorFailed)
	if got := len(failed); got < 1 {
		t.Fatalf("auth.2fa.failed entries: got %d, want at least 1", got)
	}
	if got, want := failed[0].Details["reason"], "code_reused"; got != want {
		t.Fatalf("auth.2fa.failed reason: got %v, want %q", got, want)
	}

	// The next step's code is fresh and completes the same challenge.
	f.clock.Advance(30 * time.Second)
	if _, err := f.svc.Verify(ctx, client, r.ChallengeID, f.code(en.Secret), ""); err != nil {
		t.Fatalf("verify with the next code: %v", err)
	}
}

func TestWrongCodesKillChallenge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	r := f.login(client, "alice@example.com")
	for i := 0; i < auth.MaxCodeFailures; i++ {
		_, err := f.svc.Verify(ctx, client, r.ChallengeID, f.wrongCode(en.Secret), "")
		wantFault(t, fmt.Sprintf("wrong code %d", i+1), err, fault.Unauthenticated, auth.CodeInvalidCode)
	}
	failed := f.audit(audit.SecondFactorFailed)
	if got, want := len(failed), auth.MaxCodeFailures; got != want {
		t.Fatalf("auth.2fa.failed entries: got %d, want %d", got, want)
	}
	if got, want := failed[0].Details["reason"], "wrong_code"; got != want {
		t.Fatalf("auth.2fa.failed reason: got %v, want %q", got, want)
	}
	_, err := f.svc.Verify(ctx, client, r.ChallengeID, f.code(en.Secret), "")
	wantFault(t, "right code after too many wrong ones", err, fault.Unauthenticated, auth.CodeInvalidChallenge)
}

func TestChallengeExpires(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")

	r := f.login(client, "alice@example.com")
	f.clock.Advance(auth.ChallengeTTL - time.Second)
	if _, err := f.svc.Verify(ctx, client, r.ChallengeID, f.code(en.Secret), ""); err != nil {
		t.Fatalf("verify just before expiry: %v", err)
	}

	r = f.login(client, "alice@example.com")
	f.clock.Advance(auth.ChallengeTTL)
	_, err := f.svc.Verify(ctx, client, r.ChallengeID, f.code(en.Secret), "")
	wantFault(t, "verify at expiry", err, fault.Unauthenticated, auth.CodeInvalidChallenge)
}

func TestLoginThrottledPerClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	f.createUser("bob@example.com")

	for i := range auth.ClientBurst {
		_, err := f.svc.Login(ctx, client, "alice@example.com", fmt.Sprintf("wrong password %d", i), "")
		wantFault(t, fmt.Sprintf("failed login %d", i+1), err, fault.Unauthenticated, auth.CodeInvalidCredentials)
	}
	// Even the right password must wait, from this address.
	_, err := f.svc.Login(ctx, client, "alice@example.com", password, "")
	fe := wantFault(t, "sixth login", err, fault.TooManyRequests, auth.CodeThrottled)
	if got, want := fe.RetryAfter, time.Minute; got != want {
		t.Fatalf("retry after: got %v, want %v", got, want)
	}
	// The owner at another address signs in, password and code.
	other := audit.Caller{IP: "203.0.113.9"}
	f.clock.Advance(30 * time.Second)
	r := f.login(other, "alice@example.com")
	if _, err := f.svc.Verify(ctx, other, r.ChallengeID, f.code(en.Secret), ""); err != nil {
		t.Fatalf("verify from another address: %v", err)
	}
	// Other accounts from the same address are not affected.
	f.login(client, "bob@example.com")

	_, err = f.svc.Login(ctx, client, "alice@example.com", password, "")
	fe = wantFault(t, "login half a minute later", err, fault.TooManyRequests, auth.CodeThrottled)
	if got, want := fe.RetryAfter, 30*time.Second; got != want {
		t.Fatalf("retry after: got %v, want %v", got, want)
	}
	f.clock.Advance(fe.RetryAfter)
	f.login(client, "alice@example.com")
	// A right password gives its token back: more right ones go through.
	for range 2 * auth.ClientBurst {
		f.login(client, "alice@example.com")
	}
}

// outcomes counts errors by problem code ("" for nil).
type outcomes struct {
	mu     sync.Mutex
	counts map[string]int
}

func (o *outcomes) add(t *testing.T, err error) {
	t.Helper()
	code := ""
	if err != nil {
		fe := fault.As(err)
		if fe == nil {
			t.Errorf("unexpected error: %v", err)
			return
		}
		code = fe.Code
		if fe.Kind == fault.TooManyRequests && fe.RetryAfter <= 0 {
			t.Errorf("%s without Retry-After", code)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[string]int{}
	}
	o.counts[code]++
}

func TestParallelWrongLoginsAreThrottled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.createUser("alice@example.com")
	const n = 120
	var out outcomes
	testlab.InParallel(n, func(int) {
		_, err := f.svc.Login(context.Background(), client, "alice@example.com", "not the password at all", "")
		out.add(t, err)
	})
	if got, want := f.svc.PasswordChecks(), int64(auth.ClientBurst); got != want {
		t.Fatalf("password checks for %d parallel wrong logins: got %d, want %d", n, got, want)
	}
	if got, want := out.counts[auth.CodeInvalidCredentials], auth.ClientBurst; got != want {
		t.Fatalf("invalid-credentials answers: got %d, want %d (all: %v)", got, want, out.counts)
	}
	if got, want := out.counts[auth.CodeThrottled], n-auth.ClientBurst; got != want {
		t.Fatalf("too-many-attempts answers: got %d, want %d", got, want)
	}
	if got, want := len(f.audit(audit.LoginFailed)), auth.ClientBurst; got != want {
		t.Fatalf("auth.login.failed entries: got %d, want %d", got, want)
	}
}

func TestParallelWrongOwnPasswordsAreThrottled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, en := f.createUser("alice@example.com")
	p := f.authenticate(f.signIn("alice@example.com", en.Secret).AccessToken)
	before := f.svc.PasswordChecks()
	const n = 50
	var out outcomes
	testlab.InParallel(n, func(int) {
		ok, err := f.svc.CheckOwnPassword(context.Background(), client, p, "not the password at all")
		if ok {
			t.Error("a wrong password was accepted")
		}
		out.add(t, err)
	})
	if got, want := f.svc.PasswordChecks()-before, int64(auth.ClientBurst); got != want {
		t.Fatalf("password checks for %d parallel wrong passwords: got %d, want %d", n, got, want)
	}
	if got, want := out.counts[""], auth.ClientBurst; got != want {
		t.Fatalf("checked and refused: got %d, want %d", got, want)
	}
	if got, want := out.counts[auth.CodeThrottled], n-auth.ClientBurst; got != want {
		t.Fatalf("too-many-attempts answers: got %d, want %d", got, want)
	}
}

// TestParallelWrongCodesOnOneChallenge sends the wrong codes from distinct
// addresses, so no address throttle interferes: the challenge's own cap
// must hold.
func TestParallelWrongCodesOnOneChallenge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, en := f.createUser("alice@example.com")
	r := f.login(client, "alice@example.com")
	wrong := f.wrongCode(en.Secret)
	const n = 40
	var out outcomes
	testlab.InParallel(n, func(i int) {
		c := audit.Caller{IP: fmt.Sprintf("198.51.100.%d", 100+i)}
		_, err := f.svc.Verify(context.Background(), c, r.ChallengeID, wrong, "")
		out.add(t, err)
	})
	if got, want := len(f.audit(audit.SecondFactorFailed)), auth.MaxCodeFailures; got != want {
		t.Fatalf("codes checked among %d parallel wrong ones: got %d, want %d", n, got, want)
	}
	if got, want := out.counts[auth.CodeInvalidCode], auth.MaxCodeFailures; got != want {
		t.Fatalf("invalid-code answers: got %d, want %d", got, want)
	}
	if got, want := out.counts[auth.CodeInvalidChallenge], n-auth.MaxCodeFailures; got != want {
		t.Fatalf("invalid-challenge answers: got %d, want %d", got, want)
	}
	_, err := f.svc.Verify(context.Background(), client, r.ChallengeID, f.code(en.Secret), "")
	wantFault(t, "right code on a used-up challenge", err, fault.Unauthenticated, auth.CodeInvalidChallenge)
}

// TestOwnerSignsInWhileAttacked: an attacker hammering the account from
// other addresses neither slows down nor stops its owner.
func TestOwnerSignsInWhileAttacked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, en := f.createUser("alice@example.com")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var attempts sync.WaitGroup
	attempts.Add(3 * auth.ClientBurst) // the attack has begun once these failed
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := audit.Caller{IP: fmt.Sprintf("203.0.113.%d", i+1)}
			for n := 0; ctx.Err() == nil; n++ {
				_, err := f.svc.Login(ctx, c, "alice@example.com", "guess number "+strconv.Itoa(n), "")
				if n < auth.ClientBurst {
					attempts.Done()
				}
				if fault.KindOf(err) == fault.TooManyRequests {
					runtime.Gosched()
				}
			}
		}()
	}
	attempts.Wait()
	owner := audit.Caller{IP: "192.0.2.50"}
	f.clock.Advance(30 * time.Second)
	r, err := f.svc.Login(context.Background(), owner, "alice@example.com", password, "")
	if err != nil {
		t.Fatalf("owner's login during the attack: %v", err)
	}
	if _, err := f.svc.Verify(context.Background(), owner, r.ChallengeID, f.code(en.Secret), ""); err != nil {
		t.Fatalf("owner's verify during the attack: %v", err)
	}
	stop()
	wg.Wait()
}

// TestAccountDelayForStrangers: AccountBurst failures from many
// addresses delay strangers' sign-ins to the account, the right password
// included, exactly as for an e-mail address with no account; the delay
// passes with time or capstan user unlock, and never holds back a known
// device of the account.
func TestAccountDelayForStrangers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	u, en := f.createUser("alice@example.com")
	// The owner's device completed a sign-in before the attack.
	device := f.signIn("alice@example.com", en.Secret).Device
	if !strings.HasPrefix(device, "cdv_") {
		t.Fatalf("device cookie of a sign-in: got %q, want cdv_…", device)
	}
	_, ben := f.createUser("ben@example.com")
	other := f.signIn("ben@example.com", ben.Secret).Device
	// fail makes AccountBurst failed logins for email: ClientBurst one
	// after another from each address, the addresses in parallel.
	fail := func(email string, base int) {
		t.Helper()
		var out outcomes
		addresses := auth.AccountBurst / auth.ClientBurst
		testlab.InParallel(addresses, func(a int) {
			c := audit.Caller{IP: fmt.Sprintf("10.%d.%d.1", base, a)}
			for range auth.ClientBurst {
				_, err := f.svc.Login(ctx, c, email, "a wrong password", "")
				out.add(t, err)
			}
		})
		if got, want := out.counts[auth.CodeInvalidCredentials], auth.AccountBurst; got != want {
			t.Fatalf("%s: invalid-credentials answers: got %d, want %d (all: %v)", email, got, want, out.counts)
		}
	}
	fail("alice@example.com", 1)
	fail("nobody@example.com", 2)

	stranger := audit.Caller{IP: "192.0.2.51"}
	checks := f.svc.PasswordChecks()
	_, errKnown := f.svc.Login(ctx, stranger, "alice@example.com", password, "")
	_, errUnknown := f.svc.Login(ctx, stranger, "nobody@example.com", password, "")
	known := wantFault(t, "right password from a stranger after the burst", errKnown, fault.TooManyRequests, auth.CodeThrottled)
	unknown := wantFault(t, "unknown account after the burst", errUnknown, fault.TooManyRequests, auth.CodeThrottled)
	if known.Message != unknown.Message || known.RetryAfter != unknown.RetryAfter || known.RetryAfter <= 0 {
		t.Fatalf("known and unknown accounts differ: %+v vs %+v", known, unknown)
	}
	// Another account's device is a stranger here.
	_, err := f.svc.Login(ctx, stranger, "alice@example.com", password, other)
	wantFault(t, "another account's device", err, fault.TooManyRequests, auth.CodeThrottled)
	if got, want := f.svc.PasswordChecks(), checks; got != want {
		t.Fatalf("password checks while delayed: got %d, want %d", got, want)
	}

	// The owner's known device signs in, the wrong password first.
	owner := audit.Caller{IP: "192.0.2.50"}
	f.clock.Advance(time.Second)
	_, err = f.svc.Login(ctx, owner, "alice@example.com", "a slip of the finger", device)
	wantFault(t, "owner's wrong password from the known device", err, fault.Unauthenticated, auth.CodeInvalidCredentials)
	r, err := f.svc.Login(ctx, owner, "alice@example.com", password, device)
	if err != nil {
		t.Fatalf("owner's login from the known device: %v", err)
	}
	f.clock.Advance(30 * time.Second)
	tok, err := f.svc.Verify(ctx, owner, r.ChallengeID, f.code(en.Secret), device)
	if err != nil {
		t.Fatalf("owner's verify from the known device: %v", err)
	}
	if tok.Device != device {
		t.Fatalf("device cookie after a sign-in from it: got %q, want it kept", tok.Device)
	}

	// The delay passes: 30 s give strangers one more attempt.
	f.clock.Advance(30 * time.Second)
	f.login(audit.Caller{IP: "192.0.2.52"}, "alice@example.com")
	_, err = f.svc.Login(ctx, audit.Caller{IP: "192.0.2.53"}, "nobody@example.com", "a wrong password", "")
	wantFault(t, "unknown account after 30 s", err, fault.Unauthenticated, auth.CodeInvalidCredentials)

	// capstan user unlock lifts it at once.
	for i := 0; ; i++ {
		_, err := f.svc.Login(ctx, audit.Caller{IP: fmt.Sprintf("10.3.%d.1", i)}, "alice@example.com", "a wrong password", "")
		if fault.Is(err, fault.TooManyRequests) {
			break
		}
		wantFault(t, "wrong password from a stranger", err, fault.Unauthenticated, auth.CodeInvalidCredentials)
	}
	got, was, err := f.svc.UnlockUser(ctx, operator, " ALICE@example.com")
	if err != nil || !was || got.ID != u.ID {
		t.Fatalf("unlock: got %+v, %v, %v, want alice, true, nil", got, was, err)
	}
	unlocked := f.audit(audit.UserUnlocked)
	if len(unlocked) != 1 || unlocked[0].Target.ID != u.ID || unlocked[0].Actor != operator.Actor || unlocked[0].Details["had_failures"] != true {
		t.Fatalf("user.unlocked entries: got %+v, want one for alice by the operator", unlocked)
	}
	f.login(audit.Caller{IP: "192.0.2.54"}, "alice@example.com")
	_, _, err = f.svc.UnlockUser(ctx, operator, "nobody@example.com")
	wantFault(t, "unlock an unknown user", err, fault.NotFound, "")
}

// TestKnownDeviceBudget: a known device's failures are throttled on its
// own budget, which strangers do not share.
func TestKnownDeviceBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	device := f.signIn("alice@example.com", en.Secret).Device
	var out outcomes
	testlab.InParallel(3*auth.DeviceBurst, func(i int) {
		_, err := f.svc.Login(ctx, audit.Caller{IP: fmt.Sprintf("10.9.%d.1", i)}, "alice@example.com", "a wrong password", device)
		out.add(t, err)
	})
	if got, want := out.counts[auth.CodeInvalidCredentials], auth.DeviceBurst; got != want {
		t.Fatalf("invalid-credentials from a known device: got %d, want %d (all: %v)", got, want, out.counts)
	}
	_, err := f.svc.Login(ctx, client, "alice@example.com", password, device)
	wantFault(t, "known device past its budget", err, fault.TooManyRequests, auth.CodeThrottled)
	// Without the device cookie the same address is a stranger with its
	// own budgets.
	f.login(client, "alice@example.com")
}

// TestIPv6ThrottledPer64: addresses of one IPv6 /64 share their throttles.
func TestIPv6ThrottledPer64(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.createUser("alice@example.com")
	for i := range auth.ClientBurst {
		c := audit.Caller{IP: fmt.Sprintf("2001:db8:1:2::%x", i+1)}
		_, err := f.svc.Login(ctx, c, "alice@example.com", "a wrong password", "")
		wantFault(t, "wrong password", err, fault.Unauthenticated, auth.CodeInvalidCredentials)
	}
	_, err := f.svc.Login(ctx, audit.Caller{IP: "2001:db8:1:2:ffff::1"}, "alice@example.com", password, "")
	wantFault(t, "another address of the /64", err, fault.TooManyRequests, auth.CodeThrottled)
	f.login(audit.Caller{IP: "2001:db8:1:3::1"}, "alice@example.com")
}

func TestLoginThrottledPerAddress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.createUser("alice@example.com")

	for i := range 20 {
		_, err := f.svc.Login(ctx, client, fmt.Sprintf("user%d@example.com", i), password, "")
		wantFault(t, fmt.Sprintf("failed login %d", i+1), err, fault.Unauthenticated, auth.CodeInvalidCredentials)
	}
	_, err := f.svc.Login(ctx, client, "alice@example.com", password, "")
	fe := wantFault(t, "login from a throttled address", err, fault.TooManyRequests, auth.CodeThrottled)
	if got, want := fe.RetryAfter, 15*time.Second; got != want {
		t.Fatalf("retry after: got %v, want %v", got, want)
	}
	f.login(audit.Caller{IP: "203.0.113.9"}, "alice@example.com")
	f.clock.Advance(fe.RetryAfter)
	f.login(client, "alice@example.com")
}

func TestRefreshRotatesAndDetectsReuse(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	u, en := f.createUser("alice@example.com")
	first := f.signIn("alice@example.com", en.Secret)
	p := f.authenticate(first.AccessToken)

	f.clock.Advance(time.Minute)
	second := f.refresh(first.RefreshToken)
	if got, want := second.RefreshToken != first.RefreshToken && second.AccessToken != first.AccessToken, true; got != want {
		t.Fatalf("refresh hands out new tokens: got %v, want %v", got, want)
	}
	if got, want := second.RefreshExpiresAt, first.RefreshExpiresAt; !got.Equal(want) {
		t.Fatalf("session end after refresh: got %v, want %v", got, want)
	}
	if want := f.clock.Now().Add(auth.AccessTTL); !second.AccessExpiresAt.Equal(want) {
		t.Fatalf("new access token expires at: got %v, want %v", second.AccessExpiresAt, want)
	}
	if got, want := f.authenticate(second.AccessToken).SessionID, p.SessionID; got != want {
		t.Fatalf("session of the new access token: got %q, want %q", got, want)
	}

	f.clock.Advance(time.Minute)
	third := f.refresh(second.RefreshToken)
	f.authenticate(third.AccessToken)

	// The first token again: someone else holds a copy.
	_, err := f.svc.Refresh(ctx, client, first.RefreshToken)
	wantFault(t, "reused refresh token", err, fault.Unauthenticated, auth.CodeRefreshReused)
	for _, access := range []string{first.AccessToken, second.AccessToken, third.AccessToken} {
		_, err := f.svc.Authenticate(ctx, access)
		wantFault(t, "access token of a revoked session", err, fault.Unauthenticated, auth.CodeInvalidToken)
	}
	_, err = f.svc.Refresh(ctx, client, third.RefreshToken)
	wantFault(t, "newest refresh token of a revoked session", err, fault.Unauthenticated, auth.CodeInvalidRefresh)

	reused := f.audit(audit.RefreshReused)
	if got, want := len(reused), 1; got != want {
		t.Fatalf("auth.refresh.reused entries: got %d, want %d", got, want)
	}
	if got, want := reused[0].Target.ID, p.SessionID; got != want {
		t.Fatalf("auth.refresh.reused target: got %q, want %q", got, want)
	}
	if got, want := reused[0].Actor.ID, u.ID; got != want {
		t.Fatalf("auth.refresh.reused actor: got %q, want %q", got, want)
	}

	for _, bad := range []string{"", "crt_unknown"} {
		_, err := f.svc.Refresh(ctx, client, bad)
		wantFault(t, fmt.Sprintf("refresh %q", bad), err, fault.Unauthenticated, auth.CodeInvalidRefresh)
	}
}

func TestSessionIdleExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	tok := f.signIn("alice@example.com", en.Secret)

	// Using the session keeps it alive.
	f.clock.Advance(auth.SessionIdleTTL - time.Second)
	tok = f.refresh(tok.RefreshToken)
	f.clock.Advance(auth.SessionIdleTTL - time.Second)
	tok = f.refresh(tok.RefreshToken)

	f.clock.Advance(auth.SessionIdleTTL)
	_, err := f.svc.Refresh(ctx, client, tok.RefreshToken)
	wantFault(t, "refresh after idling", err, fault.Unauthenticated, auth.CodeInvalidRefresh)
}

func TestSessionAbsoluteExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	tok := f.signIn("alice@example.com", en.Secret)
	end := tok.RefreshExpiresAt

	step := 6 * 24 * time.Hour
	for range 4 {
		f.clock.Advance(step)
		tok = f.refresh(tok.RefreshToken)
	}
	f.clock.Advance(end.Sub(f.clock.Now()) - time.Second)
	tok = f.refresh(tok.RefreshToken)
	if got, want := tok.RefreshExpiresAt, end; !got.Equal(want) {
		t.Fatalf("session end: got %v, want %v", got, want)
	}
	f.clock.Advance(time.Second)
	_, err := f.svc.Refresh(ctx, client, tok.RefreshToken)
	wantFault(t, "refresh at the session's end", err, fault.Unauthenticated, auth.CodeInvalidRefresh)
}

func TestLogout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	tok := f.signIn("alice@example.com", en.Secret)
	keep := f.signIn("alice@example.com", en.Secret)
	p := f.authenticate(tok.AccessToken)

	if err := f.svc.Logout(ctx, client, p); err != nil {
		t.Fatalf("logout: %v", err)
	}
	_, err := f.svc.Authenticate(ctx, tok.AccessToken)
	wantFault(t, "access token after logout", err, fault.Unauthenticated, auth.CodeInvalidToken)
	_, err = f.svc.Refresh(ctx, client, tok.RefreshToken)
	wantFault(t, "refresh after logout", err, fault.Unauthenticated, auth.CodeInvalidRefresh)
	f.authenticate(keep.AccessToken) // other sessions live on

	entries := f.audit(audit.Logout)
	if got, want := len(entries), 1; got != want {
		t.Fatalf("auth.logout entries: got %d, want %d", got, want)
	}
	if got, want := entries[0].Target.ID, p.SessionID; got != want {
		t.Fatalf("auth.logout target: got %q, want %q", got, want)
	}
}

func TestDisableUserEndsSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	u, en := f.createUser("alice@example.com")
	_, bobEn := f.createUser("bob@example.com")
	one := f.signIn("alice@example.com", en.Secret)
	two := f.signIn("alice@example.com", en.Secret)
	bob := f.signIn("bob@example.com", bobEn.Secret)
	f.clock.Advance(30 * time.Second)
	pending := f.login(client, "alice@example.com")

	got, err := f.svc.DisableUser(ctx, operator, "ALICE@example.com")
	if err != nil {
		t.Fatalf("disable: %v", err)
	}
	if got, want := got.Disabled, true; got != want {
		t.Fatalf("disabled: got %v, want %v", got, want)
	}
	for _, tok := range []auth.Tokens{one, two} {
		_, err := f.svc.Authenticate(ctx, tok.AccessToken)
		wantFault(t, "access token of a disabled user", err, fault.Unauthenticated, auth.CodeInvalidToken)
		_, err = f.svc.Refresh(ctx, client, tok.RefreshToken)
		wantFault(t, "refresh of a disabled user", err, fault.Unauthenticated, auth.CodeInvalidRefresh)
	}
	f.authenticate(bob.AccessToken)
	_, err = f.svc.Verify(ctx, client, pending.ChallengeID, f.code(en.Secret), "")
	wantFault(t, "challenge of a disabled user", err, fault.Unauthenticated, auth.CodeInvalidChallenge)
	_, err = f.svc.Login(ctx, client, "alice@example.com", password, "")
	wantFault(t, "login of a disabled user", err, fault.Unauthenticated, auth.CodeInvalidCredentials)
	if got, want := f.audit(audit.LoginFailed)[0].Details["reason"], "disabled"; got != want {
		t.Fatalf("auth.login.failed reason: got %v, want %q", got, want)
	}
	disabled := f.audit(audit.UserDisabled)
	if got, want := len(disabled), 1; got != want {
		t.Fatalf("user.disabled entries: got %d, want %d", got, want)
	}
	if got, want := disabled[0].Target.ID, u.ID; got != want {
		t.Fatalf("user.disabled target: got %q, want %q", got, want)
	}

	_, err = f.svc.DisableUser(ctx, operator, "nobody@example.com")
	wantFault(t, "disable unknown user", err, fault.NotFound, "")
}

func TestResetTOTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	u, old := f.createUser("alice@example.com")
	f.signIn("alice@example.com", old.Secret)

	got, fresh, err := f.svc.ResetTOTP(ctx, operator, "Alice@Example.com")
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	if got, want := got.ID, u.ID; got != want {
		t.Fatalf("reset user: got %q, want %q", got, want)
	}
	if got, want := fresh.Secret != old.Secret, true; got != want {
		t.Fatalf("new secret differs: got %v, want %v", got, want)
	}

	// Same TOTP step as the last sign-in: the replay guard starts over with
	// the new secret, and the old secret's codes no longer work.
	r := f.login(client, "alice@example.com")
	if oldCode := f.code(old.Secret); !f.acceptedCodes(fresh.Secret)[oldCode] { // else a one-in-300,000 collision
		_, err = f.svc.Verify(ctx, client, r.ChallengeID, oldCode, "")
		wantFault(t, "old secret's code", err, fault.Unauthenticated, auth.CodeInvalidCode)
	}
	if _, err := f.svc.Verify(ctx, client, r.ChallengeID, f.code(fresh.Secret), ""); err != nil {
		t.Fatalf("verify with the new secret: %v", err)
	}
	reset := f.audit(audit.UserTOTPReset)
	if got, want := len(reset), 1; got != want {
		t.Fatalf("user.2fa.reset entries: got %d, want %d", got, want)
	}

	_, _, err = f.svc.ResetTOTP(ctx, operator, "nobody@example.com")
	wantFault(t, "reset unknown user", err, fault.NotFound, "")
}

func TestCheckOwnPassword(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	p := f.authenticate(f.signIn("alice@example.com", en.Secret).AccessToken)

	ok, err := f.svc.CheckOwnPassword(ctx, client, p, password)
	if err != nil || !ok {
		t.Fatalf("right password: got %v, %v, want true, nil", ok, err)
	}
	for range 5 {
		ok, err := f.svc.CheckOwnPassword(ctx, client, p, "wrong password!")
		if err != nil || ok {
			t.Fatalf("wrong password: got %v, %v, want false, nil", ok, err)
		}
	}
	_, err = f.svc.CheckOwnPassword(ctx, client, p, password)
	wantFault(t, "password check after five failures", err, fault.TooManyRequests, auth.CodeThrottled)
}

// TestRefreshGraceForConcurrentTabs: a refresh token presented again
// within RefreshGrace of its first use gets another working pair; past it,
// it revokes the session.
func TestRefreshGraceForConcurrentTabs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, en := f.createUser("alice@example.com")
	first := f.signIn("alice@example.com", en.Secret)
	f.clock.Advance(time.Minute)
	a := f.refresh(first.RefreshToken)
	f.clock.Advance(auth.RefreshGrace - time.Second)
	b := f.refresh(first.RefreshToken)
	if a.RefreshToken == b.RefreshToken || a.AccessToken == b.AccessToken {
		t.Fatal("the second tab got the first tab's tokens")
	}
	f.authenticate(a.AccessToken)
	f.authenticate(b.AccessToken)
	if got := len(f.audit(audit.RefreshReused)); got != 0 {
		t.Fatalf("auth.refresh.reused entries within the grace: got %d, want 0", got)
	}
	f.clock.Advance(time.Second)
	_, err := f.svc.Refresh(ctx, client, first.RefreshToken)
	wantFault(t, "refresh token past its grace", err, fault.Unauthenticated, auth.CodeRefreshReused)
	_, err = f.svc.Authenticate(ctx, b.AccessToken)
	wantFault(t, "access token of a revoked session", err, fault.Unauthenticated, auth.CodeInvalidToken)
}
