package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// t0 is a millisecond-precise time, so it survives the stored form unchanged.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)

var dialects = []store.Dialect{store.SQLite, store.Postgres}

// openUnmigrated returns a store on a new, empty database and a second,
// independent connection to the same database for raw SQL.
func openUnmigrated(t *testing.T, d store.Dialect) (*store.Store, *sql.DB) {
	t.Helper()
	url := storetest.DatabaseURL(t, d)
	dir := t.TempDir()
	s, err := store.Open(context.Background(), url, dir)
	if err != nil {
		t.Fatalf("open %s store: %v", d, err)
	}
	t.Cleanup(func() { s.Close() })
	var raw *sql.DB
	if d == store.SQLite {
		raw, err = sql.Open("sqlite", "file:"+filepath.Join(dir, store.FileName)+"?_pragma=busy_timeout(10000)")
	} else {
		raw, err = sql.Open("pgx", url)
	}
	if err != nil {
		t.Fatalf("open raw %s connection: %v", d, err)
	}
	t.Cleanup(func() { raw.Close() })
	return s, raw
}

// openRaw is openUnmigrated with the migrations applied.
func openRaw(t *testing.T, d store.Dialect) (*store.Store, *sql.DB) {
	t.Helper()
	s, raw := openUnmigrated(t, d)
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate %s store: %v", d, err)
	}
	return s, raw
}

// runWithRaw runs fn once per dialect with a migrated store and a raw
// connection to its database.
func runWithRaw(t *testing.T, fn func(t *testing.T, s *store.Store, raw *sql.DB)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			s, raw := openRaw(t, d)
			fn(t, s, raw)
		})
	}
}

func wantKind(t *testing.T, what string, err error, k fault.Kind) {
	t.Helper()
	if got, want := fault.KindOf(err), k; err == nil || got != want {
		t.Fatalf("%s: got error %v (kind %v), want kind %v", what, err, got, want)
	}
}

func mustCreateAccount(t *testing.T, s *store.Store, email string, at time.Time) auth.Account {
	t.Helper()
	a := auth.Account{
		User:         auth.User{ID: ids.NewAt(ids.User, at), Email: email, CreatedAt: at},
		PasswordHash: "$argon2id$test",
		TOTPSecret:   "sealed:" + email,
		UpdatedAt:    at,
	}
	if err := s.CreateAccount(context.Background(), a); err != nil {
		t.Fatalf("create account %s: %v", email, err)
	}
	return a
}

// session is a stored session with the clear tokens of its first link.
type session struct {
	sess    auth.Session
	refresh string
	access  string
}

func mustCreateSession(t *testing.T, s *store.Store, userID string, at time.Time) session {
	t.Helper()
	sess := auth.Session{ID: ids.NewAt(ids.Session, at), UserID: userID, CreatedAt: at, LastUsedAt: at,
		ExpiresAt: at.Add(30 * 24 * time.Hour), IP: "192.0.2.7", UserAgent: strings.Repeat("u", 600)}
	refresh, access := ids.Token("crt"), ids.Token("cat")
	rt := auth.RefreshToken{Hash: ids.Hash(refresh), SessionID: sess.ID, CreatedAt: at}
	at2 := auth.AccessToken{Hash: ids.Hash(access), SessionID: sess.ID, UserID: userID, CreatedAt: at, ExpiresAt: at.Add(15 * time.Minute)}
	if err := s.CreateSession(context.Background(), sess, rt, at2); err != nil {
		t.Fatalf("create session: %v", err)
	}
	return session{sess: sess, refresh: refresh, access: access}
}

func TestMigrateEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			s, _ := openUnmigrated(t, d)
			if got, want := s.Dialect(), d; got != want {
				t.Fatalf("dialect: got %v, want %v", got, want)
			}
			if got, want := s.DialectName(), string(d); got != want {
				t.Fatalf("dialect name: got %v, want %v", got, want)
			}
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
			v, err := s.Migrate(ctx)
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			current, latest, err := s.SchemaVersion(ctx)
			if err != nil {
				t.Fatalf("schema version: %v", err)
			}
			if latest < 1 {
				t.Fatalf("latest version: got %d, want at least 1", latest)
			}
			if got, want := current, latest; got != want {
				t.Fatalf("current version after migrate: got %d, want %d", got, want)
			}
			if got, want := v, latest; got != want {
				t.Fatalf("version returned by migrate: got %d, want %d", got, want)
			}

			// Migrating again changes nothing: the version stays and the
			// data survives.
			a := mustCreateAccount(t, s, "keep@example.com", t0)
			v2, err := s.Migrate(ctx)
			if err != nil {
				t.Fatalf("second migrate: %v", err)
			}
			if got, want := v2, latest; got != want {
				t.Fatalf("version after second migrate: got %d, want %d", got, want)
			}
			if _, err := s.AccountByID(ctx, a.ID); err != nil {
				t.Fatalf("account after second migrate: %v", err)
			}
		})
	}
}

func TestOpenRejectsUnknownScheme(t *testing.T) {
	_, err := store.Open(context.Background(), "mysql://localhost/capstan", t.TempDir())
	if err == nil {
		t.Fatalf("open mysql:// URL: got no error, want one")
	}
}

func TestAccounts(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		alice := mustCreateAccount(t, s, "alice@example.com", t0)
		bob := mustCreateAccount(t, s, "bob@example.com", t0.Add(time.Second))

		dup := alice
		dup.ID = ids.NewAt(ids.User, t0)
		err := s.CreateAccount(ctx, dup)
		wantKind(t, "duplicate e-mail", err, fault.Conflict)
		if got, want := fault.As(err).Code, "email-taken"; got != want {
			t.Fatalf("duplicate e-mail code: got %q, want %q", got, want)
		}

		byEmail, err := s.AccountByEmail(ctx, "alice@example.com")
		if err != nil {
			t.Fatalf("account by e-mail: %v", err)
		}
		if got, want := byEmail.ID, alice.ID; got != want {
			t.Fatalf("account by e-mail id: got %q, want %q", got, want)
		}
		if got, want := byEmail.PasswordHash, alice.PasswordHash; got != want {
			t.Fatalf("password hash: got %q, want %q", got, want)
		}
		if got, want := byEmail.TOTPSecret, alice.TOTPSecret; got != want {
			t.Fatalf("totp secret: got %q, want %q", got, want)
		}
		if !byEmail.CreatedAt.Equal(t0) || !byEmail.UpdatedAt.Equal(t0) {
			t.Fatalf("times: got created %v updated %v, want %v", byEmail.CreatedAt, byEmail.UpdatedAt, t0)
		}
		if got, want := byEmail.Admin || byEmail.Disabled || byEmail.DisabledAt != nil, false; got != want {
			t.Fatalf("admin or disabled: got %v, want %v", got, want)
		}

		byID, err := s.AccountByID(ctx, bob.ID)
		if err != nil {
			t.Fatalf("account by id: %v", err)
		}
		if got, want := byID.Email, "bob@example.com"; got != want {
			t.Fatalf("account by id e-mail: got %q, want %q", got, want)
		}

		_, err = s.AccountByEmail(ctx, "nobody@example.com")
		wantKind(t, "unknown e-mail", err, fault.NotFound)
		_, err = s.AccountByID(ctx, "usr_nobody")
		wantKind(t, "unknown id", err, fault.NotFound)

		admin := auth.Account{User: auth.User{ID: ids.NewAt(ids.User, t0), Email: "root@example.com", Admin: true, CreatedAt: t0},
			PasswordHash: "h", TOTPSecret: "s", UpdatedAt: t0}
		if err := s.CreateAccount(ctx, admin); err != nil {
			t.Fatalf("create admin: %v", err)
		}
		gotAdmin, err := s.AccountByID(ctx, admin.ID)
		if err != nil {
			t.Fatalf("admin by id: %v", err)
		}
		if got, want := gotAdmin.Admin, true; got != want {
			t.Fatalf("admin flag: got %v, want %v", got, want)
		}

		users, err := s.ListUsers(ctx)
		if err != nil {
			t.Fatalf("list users: %v", err)
		}
		if got, want := len(users), 3; got != want {
			t.Fatalf("user count: got %d, want %d", got, want)
		}
		for i, want := range []string{alice.ID, bob.ID, admin.ID} {
			if got := users[i].ID; got != want {
				t.Fatalf("user %d: got %q, want %q (oldest first)", i, got, want)
			}
		}
	})
}

func TestTOTPSecretAndSteps(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)

		for _, step := range []struct {
			step int64
			want bool
		}{{100, true}, {100, false}, {99, false}, {0, false}, {101, true}, {500, true}, {400, false}} {
			ok, err := s.AdvanceTOTPStep(ctx, a.ID, step.step)
			if err != nil {
				t.Fatalf("advance to %d: %v", step.step, err)
			}
			if got, want := ok, step.want; got != want {
				t.Fatalf("advance to %d: got %v, want %v", step.step, got, want)
			}
		}
		got, err := s.AccountByID(ctx, a.ID)
		if err != nil {
			t.Fatalf("account: %v", err)
		}
		if got, want := got.TOTPLastStep, int64(500); got != want {
			t.Fatalf("last step: got %d, want %d", got, want)
		}

		later := t0.Add(time.Hour)
		if err := s.SetTOTPSecret(ctx, a.ID, "sealed:new", later); err != nil {
			t.Fatalf("set totp secret: %v", err)
		}
		got, err = s.AccountByID(ctx, a.ID)
		if err != nil {
			t.Fatalf("account: %v", err)
		}
		if got, want := got.TOTPSecret, "sealed:new"; got != want {
			t.Fatalf("secret: got %q, want %q", got, want)
		}
		if got, want := got.TOTPLastStep, int64(0); got != want {
			t.Fatalf("last step after new secret: got %d, want %d", got, want)
		}
		if !got.UpdatedAt.Equal(later) {
			t.Fatalf("updated at: got %v, want %v", got.UpdatedAt, later)
		}
		if ok, err := s.AdvanceTOTPStep(ctx, a.ID, 1); err != nil || !ok {
			t.Fatalf("advance after reset: got %v, %v, want true, nil", ok, err)
		}
		wantKind(t, "secret of unknown user", s.SetTOTPSecret(ctx, "usr_nobody", "x", later), fault.NotFound)
	})
}

func TestDisableUser(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		other := mustCreateAccount(t, s, "bob@example.com", t0)
		s1 := mustCreateSession(t, s, a.ID, t0)
		s2 := mustCreateSession(t, s, a.ID, t0)
		s3 := mustCreateSession(t, s, other.ID, t0)
		now := t0.Add(time.Minute)
		if _, err := s.Principal(ctx, ids.Hash(s1.access), now); err != nil {
			t.Fatalf("principal before disable: %v", err)
		}

		if err := s.DisableUser(ctx, a.ID, now); err != nil {
			t.Fatalf("disable: %v", err)
		}
		got, err := s.AccountByID(ctx, a.ID)
		if err != nil {
			t.Fatalf("account: %v", err)
		}
		if got, want := got.Disabled, true; got != want {
			t.Fatalf("disabled: got %v, want %v", got, want)
		}
		if got.DisabledAt == nil || !got.DisabledAt.Equal(now) {
			t.Fatalf("disabled at: got %v, want %v", got.DisabledAt, now)
		}
		for _, sess := range []session{s1, s2} {
			_, err := s.Principal(ctx, ids.Hash(sess.access), now)
			wantKind(t, "principal of disabled user", err, fault.Unauthenticated)
			_, rs, err := s.RefreshTokenByHash(ctx, ids.Hash(sess.refresh))
			if err != nil {
				t.Fatalf("refresh token: %v", err)
			}
			if rs.RevokedAt == nil || !rs.RevokedAt.Equal(now) {
				t.Fatalf("session revoked at: got %v, want %v", rs.RevokedAt, now)
			}
		}
		if _, err := s.Principal(ctx, ids.Hash(s3.access), now); err != nil {
			t.Fatalf("other user's principal: %v", err)
		}

		// Disabling again keeps the first time.
		if err := s.DisableUser(ctx, a.ID, now.Add(time.Hour)); err != nil {
			t.Fatalf("disable again: %v", err)
		}
		got, err = s.AccountByID(ctx, a.ID)
		if err != nil {
			t.Fatalf("account: %v", err)
		}
		if got.DisabledAt == nil || !got.DisabledAt.Equal(now) {
			t.Fatalf("disabled at after second disable: got %v, want %v", got.DisabledAt, now)
		}
		wantKind(t, "disable unknown user", s.DisableUser(ctx, "usr_nobody", now), fault.NotFound)
	})
}

func TestChallenges(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		hash := ids.Hash(ids.Token("chl"))
		c := auth.Challenge{IDHash: hash, UserID: a.ID, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute)}
		if err := s.CreateChallenge(ctx, c); err != nil {
			t.Fatalf("create challenge: %v", err)
		}
		got, err := s.ChallengeByHash(ctx, hash)
		if err != nil {
			t.Fatalf("challenge by hash: %v", err)
		}
		if got, want := got.UserID, a.ID; got != want {
			t.Fatalf("user: got %q, want %q", got, want)
		}
		if !got.CreatedAt.Equal(c.CreatedAt) || !got.ExpiresAt.Equal(c.ExpiresAt) {
			t.Fatalf("times: got %v–%v, want %v–%v", got.CreatedAt, got.ExpiresAt, c.CreatedAt, c.ExpiresAt)
		}
		if got, want := got.Failures, 0; got != want {
			t.Fatalf("failures: got %d, want %d", got, want)
		}
		if got.ConsumedAt != nil {
			t.Fatalf("consumed at: got %v, want nil", got.ConsumedAt)
		}

		for i := range 3 {
			ok, err := s.TakeChallengeAttempt(ctx, hash, 5, t0.Add(time.Minute))
			if err != nil || !ok {
				t.Fatalf("take challenge attempt %d: got %v, %v, want true, nil", i, ok, err)
			}
		}
		if ok, err := s.TakeChallengeAttempt(ctx, hash, 5, c.ExpiresAt); err != nil || ok {
			t.Fatalf("take attempt at expiry: got %v, %v, want false, nil", ok, err)
		}
		if ok, err := s.TakeChallengeAttempt(ctx, hash, 3, t0.Add(time.Minute)); err != nil || ok {
			t.Fatalf("take attempt beyond the cap: got %v, %v, want false, nil", ok, err)
		}
		// One more attempt: the right code, which consuming gives back.
		if ok, err := s.TakeChallengeAttempt(ctx, hash, 5, t0.Add(time.Minute)); err != nil || !ok {
			t.Fatalf("take attempt of the right code: got %v, %v, want true, nil", ok, err)
		}

		now := t0.Add(time.Minute)
		for i, want := range []bool{true, false} {
			ok, err := s.ConsumeChallenge(ctx, hash, now.Add(time.Duration(i)*time.Second))
			if err != nil {
				t.Fatalf("consume %d: %v", i, err)
			}
			if got := ok; got != want {
				t.Fatalf("consume %d: got %v, want %v", i, got, want)
			}
		}
		got, err = s.ChallengeByHash(ctx, hash)
		if err != nil {
			t.Fatalf("challenge by hash: %v", err)
		}
		if got.ConsumedAt == nil || !got.ConsumedAt.Equal(now) {
			t.Fatalf("consumed at: got %v, want %v", got.ConsumedAt, now)
		}
		if got, want := got.Failures, 3; got != want {
			t.Fatalf("failures: got %d, want %d", got, want)
		}

		_, err = s.ChallengeByHash(ctx, ids.Hash("unknown"))
		wantKind(t, "unknown challenge", err, fault.NotFound)
		if ok, err := s.ConsumeChallenge(ctx, ids.Hash("unknown"), now); err != nil || ok {
			t.Fatalf("consume unknown: got %v, %v, want false, nil", ok, err)
		}
		if ok, err := s.TakeChallengeAttempt(ctx, hash, 5, now); err != nil || ok {
			t.Fatalf("take attempt on a used challenge: got %v, %v, want false, nil", ok, err)
		}
	})
}

func TestSessions(t *testing.T) {
	runWithRaw(t, func(t *testing.T, s *store.Store, raw *sql.DB) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		first := mustCreateSession(t, s, a.ID, t0)

		p, err := s.Principal(ctx, ids.Hash(first.access), t0.Add(time.Minute))
		if err != nil {
			t.Fatalf("principal: %v", err)
		}
		if got, want := p.User.ID, a.ID; got != want {
			t.Fatalf("principal user: got %q, want %q", got, want)
		}
		if got, want := p.User.Email, a.Email; got != want {
			t.Fatalf("principal e-mail: got %q, want %q", got, want)
		}
		if got, want := p.SessionID, first.sess.ID; got != want {
			t.Fatalf("principal session: got %q, want %q", got, want)
		}
		if got, want := p.TokenHash, ids.Hash(first.access); got != want {
			t.Fatalf("principal token hash: got %q, want %q", got, want)
		}
		if want := t0.Add(15 * time.Minute); !p.ExpiresAt.Equal(want) {
			t.Fatalf("principal expires at: got %v, want %v", p.ExpiresAt, want)
		}
		// The access token expires at its expiry time, not after it.
		_, err = s.Principal(ctx, ids.Hash(first.access), t0.Add(15*time.Minute))
		wantKind(t, "expired access token", err, fault.Unauthenticated)
		if got, want := fault.As(err).Code, auth.CodeInvalidToken; got != want {
			t.Fatalf("expired access token code: got %q, want %q", got, want)
		}
		_, err = s.Principal(ctx, ids.Hash("cat_unknown"), t0)
		wantKind(t, "unknown access token", err, fault.Unauthenticated)

		rt, sess, err := s.RefreshTokenByHash(ctx, ids.Hash(first.refresh))
		if err != nil {
			t.Fatalf("refresh token by hash: %v", err)
		}
		if got, want := rt.SessionID, first.sess.ID; got != want {
			t.Fatalf("refresh session: got %q, want %q", got, want)
		}
		if rt.UsedAt != nil || sess.RevokedAt != nil {
			t.Fatalf("fresh token: got used %v revoked %v, want nil, nil", rt.UsedAt, sess.RevokedAt)
		}
		if !sess.ExpiresAt.Equal(first.sess.ExpiresAt) || !sess.LastUsedAt.Equal(t0) || !sess.CreatedAt.Equal(t0) {
			t.Fatalf("session times: got %+v, want %+v", sess, first.sess)
		}
		if got, want := sess.IP, "192.0.2.7"; got != want {
			t.Fatalf("session ip: got %q, want %q", got, want)
		}
		if got, want := len(sess.UserAgent), 512; got != want {
			t.Fatalf("stored user agent length: got %d, want %d", got, want)
		}
		_, _, err = s.RefreshTokenByHash(ctx, ids.Hash("crt_unknown"))
		wantKind(t, "unknown refresh token", err, fault.NotFound)

		// Rotation succeeds once.
		now := t0.Add(time.Hour)
		nextRefresh, nextAccess := ids.Token("crt"), ids.Token("cat")
		next := auth.RefreshToken{Hash: ids.Hash(nextRefresh), SessionID: first.sess.ID, CreatedAt: now}
		access := auth.AccessToken{Hash: ids.Hash(nextAccess), SessionID: first.sess.ID, UserID: a.ID, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
		ok, err := s.RotateRefresh(ctx, ids.Hash(first.refresh), next, access, now.Add(-auth.RefreshGrace), now)
		if err != nil || !ok {
			t.Fatalf("rotate: got %v, %v, want true, nil", ok, err)
		}
		other := auth.RefreshToken{Hash: ids.Hash(ids.Token("crt")), SessionID: first.sess.ID, CreatedAt: now}
		otherAccess := auth.AccessToken{Hash: ids.Hash(ids.Token("cat")), SessionID: first.sess.ID, UserID: a.ID, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
		// A use at graceSince is past the grace.
		ok, err = s.RotateRefresh(ctx, ids.Hash(first.refresh), other, otherAccess, now, now)
		if err != nil {
			t.Fatalf("second rotate: %v", err)
		}
		if got, want := ok, false; got != want {
			t.Fatalf("second rotate: got %v, want %v", got, want)
		}
		_, _, err = s.RefreshTokenByHash(ctx, other.Hash)
		wantKind(t, "successor of a refused rotation", err, fault.NotFound)
		if _, err := s.Principal(ctx, otherAccess.Hash, now); err == nil {
			t.Fatalf("access token of a refused rotation: got a principal, want an error")
		}

		rt, sess, err = s.RefreshTokenByHash(ctx, ids.Hash(first.refresh))
		if err != nil {
			t.Fatalf("old refresh token: %v", err)
		}
		if rt.UsedAt == nil || !rt.UsedAt.Equal(now) {
			t.Fatalf("used at: got %v, want %v", rt.UsedAt, now)
		}
		if !sess.LastUsedAt.Equal(now) {
			t.Fatalf("last used at: got %v, want %v", sess.LastUsedAt, now)
		}
		rt, _, err = s.RefreshTokenByHash(ctx, next.Hash)
		if err != nil {
			t.Fatalf("next refresh token: %v", err)
		}
		if rt.UsedAt != nil {
			t.Fatalf("next refresh token used at: got %v, want nil", rt.UsedAt)
		}
		if _, err := s.Principal(ctx, access.Hash, now); err != nil {
			t.Fatalf("principal of rotated access token: %v", err)
		}

		// Revocation ends the session and every access token issued in it.
		revokedAt := now.Add(time.Minute)
		if err := s.RevokeSession(ctx, first.sess.ID, "logout", revokedAt); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		_, err = s.Principal(ctx, access.Hash, revokedAt)
		wantKind(t, "principal after revoke", err, fault.Unauthenticated)
		_, sess, err = s.RefreshTokenByHash(ctx, next.Hash)
		if err != nil {
			t.Fatalf("refresh token after revoke: %v", err)
		}
		if sess.RevokedAt == nil || !sess.RevokedAt.Equal(revokedAt) {
			t.Fatalf("revoked at: got %v, want %v", sess.RevokedAt, revokedAt)
		}
		var live, total int
		if err := raw.QueryRow(`SELECT COUNT(*) FROM access_tokens WHERE session_id = '` + first.sess.ID + `' AND revoked_at IS NULL`).Scan(&live); err != nil {
			t.Fatalf("count live access tokens: %v", err)
		}
		if err := raw.QueryRow(`SELECT COUNT(*) FROM access_tokens WHERE session_id = '` + first.sess.ID + `'`).Scan(&total); err != nil {
			t.Fatalf("count access tokens: %v", err)
		}
		if got, want := live, 0; got != want {
			t.Fatalf("live access tokens after revoke: got %d, want %d", got, want)
		}
		if got, want := total, 2; got != want {
			t.Fatalf("access tokens of the session: got %d, want %d", got, want)
		}
		var reason string
		if err := raw.QueryRow(`SELECT revoked_reason FROM sessions WHERE id = '` + first.sess.ID + `'`).Scan(&reason); err != nil {
			t.Fatalf("revoked reason: %v", err)
		}
		if got, want := reason, "logout"; got != want {
			t.Fatalf("revoked reason: got %q, want %q", got, want)
		}

		// Revoking again keeps the first reason and time.
		if err := s.RevokeSession(ctx, first.sess.ID, "refresh_reused", revokedAt.Add(time.Hour)); err != nil {
			t.Fatalf("revoke again: %v", err)
		}
		_, sess, err = s.RefreshTokenByHash(ctx, next.Hash)
		if err != nil {
			t.Fatalf("refresh token after second revoke: %v", err)
		}
		if sess.RevokedAt == nil || !sess.RevokedAt.Equal(revokedAt) {
			t.Fatalf("revoked at after second revoke: got %v, want %v", sess.RevokedAt, revokedAt)
		}
	})
}

func TestConcurrentRotationAndConsumption(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		first := mustCreateSession(t, s, a.ID, t0)
		hash := ids.Hash(ids.Token("chl"))
		if err := s.CreateChallenge(ctx, auth.Challenge{IDHash: hash, UserID: a.ID, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute)}); err != nil {
			t.Fatalf("create challenge: %v", err)
		}

		const n = 8
		type result struct {
			rotated, consumed bool
			err               error
		}
		results := make(chan result, n)
		for range n {
			go func() {
				now := t0.Add(time.Minute)
				next := auth.RefreshToken{Hash: ids.Hash(ids.Token("crt")), SessionID: first.sess.ID, CreatedAt: now}
				access := auth.AccessToken{Hash: ids.Hash(ids.Token("cat")), SessionID: first.sess.ID, UserID: a.ID, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
				rotated, err := s.RotateRefresh(ctx, ids.Hash(first.refresh), next, access, now, now)
				if err != nil {
					results <- result{err: err}
					return
				}
				consumed, err := s.ConsumeChallenge(ctx, hash, now)
				results <- result{rotated: rotated, consumed: consumed, err: err}
			}()
		}
		rotations, consumptions := 0, 0
		for range n {
			r := <-results
			if r.err != nil {
				t.Fatalf("concurrent rotate or consume: %v", r.err)
			}
			if r.rotated {
				rotations++
			}
			if r.consumed {
				consumptions++
			}
		}
		if got, want := rotations, 1; got != want {
			t.Fatalf("successful rotations: got %d, want %d", got, want)
		}
		if got, want := consumptions, 1; got != want {
			t.Fatalf("successful consumptions: got %d, want %d", got, want)
		}
	})
}

// TestChallengeAttemptsUnderConcurrency: parallel code attempts on one
// challenge get at most the cap, whatever their number.
func TestChallengeAttemptsUnderConcurrency(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		hash := ids.Hash(ids.Token("chl"))
		if err := s.CreateChallenge(ctx, auth.Challenge{IDHash: hash, UserID: a.ID, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute)}); err != nil {
			t.Fatalf("create challenge: %v", err)
		}
		const n, max = 40, 5
		var wg sync.WaitGroup
		var taken atomic.Int64
		errs := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := s.TakeChallengeAttempt(ctx, hash, max, t0.Add(time.Minute))
				if err != nil {
					errs <- err
				}
				if ok {
					taken.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("take challenge attempt: %v", err)
		}
		if got, want := taken.Load(), int64(max); got != want {
			t.Fatalf("attempts granted to %d parallel takes: got %d, want %d", n, got, want)
		}
		c, err := s.ChallengeByHash(ctx, hash)
		if err != nil {
			t.Fatalf("challenge by hash: %v", err)
		}
		if got, want := c.Failures, max; got != want {
			t.Fatalf("failures: got %d, want %d", got, want)
		}
	})
}

// TestRefreshGrace: a refresh token is exchanged again while its first
// use is within the grace, by every one of parallel refreshes, keeping the
// time of its first use; past the grace none of parallel refreshes is.
func TestRefreshGrace(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		first := mustCreateSession(t, s, a.ID, t0)
		rotate := func(at, graceSince time.Time) (bool, auth.AccessToken) {
			next := auth.RefreshToken{Hash: ids.Hash(ids.Token("crt")), SessionID: first.sess.ID, CreatedAt: at}
			access := auth.AccessToken{Hash: ids.Hash(ids.Token("cat")), SessionID: first.sess.ID, UserID: a.ID, CreatedAt: at, ExpiresAt: at.Add(15 * time.Minute)}
			ok, err := s.RotateRefresh(ctx, ids.Hash(first.refresh), next, access, graceSince, at)
			if err != nil {
				t.Errorf("rotate: %v", err)
			}
			return ok, access
		}
		used := t0.Add(time.Minute)
		const n = 8
		var oks [n]bool
		testlab.InParallel(n, func(i int) {
			at := used.Add(time.Duration(i) * time.Second)
			oks[i], _ = rotate(at, at.Add(-auth.RefreshGrace))
		})
		for i, ok := range oks {
			if !ok {
				t.Fatalf("parallel refresh %d within the grace: refused", i)
			}
		}
		rt, _, err := s.RefreshTokenByHash(ctx, ids.Hash(first.refresh))
		if err != nil || rt.UsedAt == nil || rt.UsedAt.After(used.Add(n*time.Second)) || rt.UsedAt.Before(used) {
			t.Fatalf("first use: got %v, %v, want between %v and %v", rt.UsedAt, err, used, used.Add(n*time.Second))
		}
		late := rt.UsedAt.Add(auth.RefreshGrace)
		testlab.InParallel(n, func(i int) {
			ok, access := rotate(late, late.Add(-auth.RefreshGrace))
			if ok {
				t.Errorf("refresh %d past the grace: exchanged", i)
			}
			if _, err := s.Principal(ctx, access.Hash, late); err == nil {
				t.Errorf("access token of a refused refresh %d: got a principal", i)
			}
		})
	})
}

// TestUserSessions: a user's live sessions are listed newest first,
// revoked one by one only by their user, all but one at once, and
// reported ended once revoked, expired or their user disabled.
func TestUserSessions(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		b := mustCreateAccount(t, s, "bob@example.com", t0)
		var mine []session
		for i := range 3 {
			mine = append(mine, mustCreateSession(t, s, a.ID, t0.Add(time.Duration(i)*time.Minute)))
		}
		bobs := mustCreateSession(t, s, b.ID, t0)
		now := t0.Add(10 * time.Minute) // the access tokens are live
		list, err := s.ListSessions(ctx, a.ID, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 || list[0].ID != mine[2].sess.ID || list[2].ID != mine[0].sess.ID || list[0].IP != "192.0.2.7" {
			t.Fatalf("sessions: got %+v, want alice's three, newest first", list)
		}
		if ok, err := s.RevokeUserSession(ctx, a.ID, bobs.sess.ID, "revoked", now); err != nil || ok {
			t.Fatalf("revoke another user's session: got %v, %v, want false, nil", ok, err)
		}
		if _, err := s.Principal(ctx, ids.Hash(bobs.access), now); err != nil {
			t.Fatalf("bob's session after alice tried to revoke it: %v", err)
		}
		// Of parallel revocations of one session, one revokes it.
		var revoked atomic.Int32
		testlab.InParallel(8, func(int) {
			ok, err := s.RevokeUserSession(ctx, a.ID, mine[0].sess.ID, "revoked", now)
			if err != nil {
				t.Errorf("revoke: %v", err)
			}
			if ok {
				revoked.Add(1)
			}
		})
		if got := revoked.Load(); got != 1 {
			t.Fatalf("parallel revocations that revoked: got %d, want 1", got)
		}
		if _, err := s.Principal(ctx, ids.Hash(mine[0].access), now); err == nil {
			t.Fatal("access token of a revoked session still works")
		}
		ended, err := s.EndedSessions(ctx, []string{mine[0].sess.ID, mine[1].sess.ID, bobs.sess.ID, "ses_none"}, now)
		if err != nil || strings.Join(ended, " ") != mine[0].sess.ID+" ses_none" {
			t.Fatalf("ended sessions: got %v, %v, want the revoked one and the unknown one", ended, err)
		}
		n, err := s.RevokeUserSessions(ctx, a.ID, mine[2].sess.ID, "password_changed", now)
		if err != nil || n != 1 {
			t.Fatalf("revoke all but one: got %d, %v, want 1, nil", n, err)
		}
		list, err = s.ListSessions(ctx, a.ID, now)
		if err != nil || len(list) != 1 || list[0].ID != mine[2].sess.ID {
			t.Fatalf("sessions after revoking all but one: got %+v, %v", list, err)
		}
		if err := s.DisableUser(ctx, b.ID, now); err != nil {
			t.Fatal(err)
		}
		if ended, err := s.EndedSessions(ctx, []string{bobs.sess.ID, mine[2].sess.ID}, now); err != nil || len(ended) != 1 || ended[0] != bobs.sess.ID {
			t.Fatalf("ended sessions after disabling bob: got %v, %v", ended, err)
		}
		if ended, err := s.EndedSessions(ctx, []string{mine[2].sess.ID}, mine[2].sess.ExpiresAt); err != nil || len(ended) != 1 {
			t.Fatalf("ended sessions at the absolute end: got %v, %v", ended, err)
		}
	})
}

// TestDevices: devices are found by hash, touched while live, and revoked
// all but one.
func TestDevices(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "alice@example.com", t0)
		var hashes []string
		for range 3 {
			h := ids.Hash(ids.Token("cdv"))
			hashes = append(hashes, h)
			if err := s.CreateDevice(ctx, auth.Device{Hash: h, UserID: a.ID, CreatedAt: t0, LastUsedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.DeviceByHash(ctx, ids.Hash("cdv_unknown"))
		wantKind(t, "unknown device", err, fault.NotFound)
		later := t0.Add(time.Minute)
		if err := s.TouchDevice(ctx, hashes[0], later, later.Add(48*time.Hour)); err != nil {
			t.Fatal(err)
		}
		d, err := s.DeviceByHash(ctx, hashes[0])
		if err != nil || d.UserID != a.ID || !d.LastUsedAt.Equal(later) || !d.ExpiresAt.Equal(later.Add(48*time.Hour)) || d.RevokedAt != nil {
			t.Fatalf("touched device: got %+v, %v", d, err)
		}
		if err := s.RevokeDevices(ctx, a.ID, hashes[1], later); err != nil {
			t.Fatal(err)
		}
		for i, h := range hashes {
			d, err := s.DeviceByHash(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := d.RevokedAt != nil, i != 1; got != want {
				t.Fatalf("device %d revoked: got %v, want %v", i, got, want)
			}
		}
	})
}

func TestMigrateOutOfOrder(t *testing.T) {
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			s, raw := openUnmigrated(t, d)
			if err := s.MigrateSkipping(ctx, 12); err != nil {
				t.Fatalf("migrate without 00012: %v", err)
			}
			if _, err := raw.Exec("SELECT count(*) FROM database_metric_samples"); err == nil {
				t.Fatal("database_metric_samples exists before its migration ran")
			}
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			var n int
			if err := raw.QueryRow("SELECT count(*) FROM database_metric_samples").Scan(&n); err != nil {
				t.Fatalf("database_metric_samples after the late migration: %v", err)
			}
		})
	}
}
