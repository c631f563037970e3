package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/clouddrive"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func mustAdminSession(t *testing.T, s *store.Store, email string) session {
	t.Helper()
	a := auth.Account{User: auth.User{ID: ids.NewAt(ids.User, t0), Email: email, Admin: true, CreatedAt: t0},
		PasswordHash: "$argon2id$test", TOTPSecret: "sealed:" + email, UpdatedAt: t0}
	if err := s.CreateAccount(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return mustCreateSession(t, s, a.ID, t0)
}

// TestCloudDriveStates: a state is used once, by one of many concurrent
// callers, only in the browser it was set in, only while its session is
// signed in as an administrator, and never after it expired.
func TestCloudDriveStates(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		adm := mustAdminSession(t, s, "admin@example.com")
		put := func(hash, browser string, sess session, expires time.Time) {
			t.Helper()
			if err := s.InsertCloudDriveState(ctx, clouddrive.State{Hash: hash, SessionID: sess.sess.ID, UserID: sess.sess.UserID,
				BrowserHash: browser, SealedVerifier: "sealed-" + hash, ExpiresAt: expires}); err != nil {
				t.Fatal(err)
			}
		}
		use := func(hash, browser string, at time.Time) bool {
			t.Helper()
			st, ok, err := s.UseCloudDriveState(ctx, hash, browser, at)
			if err != nil {
				t.Fatal(err)
			}
			if ok && (st.SealedVerifier != "sealed-"+hash || st.SessionID != adm.sess.ID) {
				t.Fatalf("state %s: got %+v", hash, st)
			}
			return ok
		}
		put("h1", "b1", adm, t0.Add(time.Hour))
		if use("h1", "other-browser", t0) {
			t.Fatal("a state was used from another browser")
		}
		if use("h1", "b1", t0.Add(time.Hour)) {
			t.Fatal("an expired state was used")
		}
		put("h2", "b2", adm, t0.Add(time.Hour))
		wins := countApplied(t, 8, func(int) (bool, error) {
			_, ok, err := s.UseCloudDriveState(ctx, "h2", "b2", t0)
			return ok && err == nil, err
		})
		if got, want := wins, 1; got != want {
			t.Fatalf("concurrent uses of one state: %d succeeded, want %d", got, want)
		}
		// A state of a session that signed out, or of a user no longer
		// an administrator, is of no use.
		put("h3", "b3", adm, t0.Add(time.Hour))
		if err := s.RevokeSession(ctx, adm.sess.ID, "logout", t0); err != nil {
			t.Fatal(err)
		}
		if use("h3", "b3", t0) {
			t.Fatal("the state of a signed-out session was used")
		}
		member := mustCreateSession(t, s, mustCreateAccount(t, s, "member@example.com", t0).ID, t0)
		put("h4", "b4", member, t0.Add(time.Hour))
		if _, ok, err := s.UseCloudDriveState(ctx, "h4", "b4", t0); err != nil || ok {
			t.Fatalf("a member's state: ok %v, err %v; want refused", ok, err)
		}
	})
}

// TestCloudDriveConnection: one connection at most; the refresh token is
// replaced and the connection deleted only for the stored grant.
func TestCloudDriveConnection(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if _, err := s.CloudDriveConnection(ctx); !fault.Is(err, fault.NotFound) {
			t.Fatalf("no connection: got %v, want not found", err)
		}
		c := clouddrive.Connection{GrantID: "g1", Provider: "google", AccountEmail: "a@example.com", Scope: clouddrive.Scope,
			SealedRefreshToken: "sealed-1", ConnectedBy: "usr_1", ConnectedAt: t0}
		if err := s.InsertCloudDriveConnection(ctx, c); err != nil {
			t.Fatal(err)
		}
		c2 := c
		c2.GrantID = "g2"
		if err := s.InsertCloudDriveConnection(ctx, c2); !fault.Is(err, fault.Conflict) {
			t.Fatalf("second connection: got %v, want conflict", err)
		}
		if ok, err := s.UpdateCloudDriveRefreshToken(ctx, "g2", "sealed-x"); err != nil || ok {
			t.Fatalf("update of another grant: ok %v, err %v", ok, err)
		}
		if ok, err := s.UpdateCloudDriveRefreshToken(ctx, "g1", "sealed-2"); err != nil || !ok {
			t.Fatalf("update: ok %v, err %v", ok, err)
		}
		got, err := s.CloudDriveConnection(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.SealedRefreshToken = "sealed-2"
		if got != c {
			t.Fatalf("got %+v, want %+v", got, c)
		}
		if ok, err := s.DeleteCloudDriveConnection(ctx, "g2"); err != nil || ok {
			t.Fatalf("delete of another grant: ok %v, err %v", ok, err)
		}
		if ok, err := s.DeleteCloudDriveConnection(ctx, "g1"); err != nil || !ok {
			t.Fatalf("delete: ok %v, err %v", ok, err)
		}
		if ok, err := s.DeleteCloudDriveConnection(ctx, "g1"); err != nil || ok {
			t.Fatalf("second delete: ok %v, err %v", ok, err)
		}
	})
}
