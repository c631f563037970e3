package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func newInvitation(email string, at time.Time) auth.Invitation {
	return auth.Invitation{ID: ids.NewAt("inv", at), TokenHash: ids.Hash(ids.Token("cin")), Email: email, InvitedBy: "admin@example.com",
		CreatedAt: at, ExpiresAt: at.Add(auth.InvitationTTL)}
}

func inviteeAccount(email string, at time.Time) auth.Account {
	return auth.Account{User: auth.User{ID: ids.NewAt(ids.User, at), Email: email, CreatedAt: at},
		PasswordHash: "$argon2id$test", TOTPSecret: "sealed-user", TOTPLastStep: 7, UpdatedAt: at}
}

func wantCode(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	if !fault.Is(err, kind) || (code != "" && fault.As(err).Code != code) {
		t.Fatalf("err %v, want kind %v code %q", err, kind, code)
	}
}

// TestInvitationCreateAndConflicts: an address that is a user's or has an
// open invitation is refused; one whose invitation expired or was revoked
// can be invited again.
func TestInvitationCreateAndConflicts(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		mustCreateAccount(t, s, "user@example.com", t0)
		wantCode(t, s.CreateInvitation(ctx, newInvitation("user@example.com", t0), t0), fault.Conflict, auth.CodeEmailTaken)

		first := newInvitation("new@example.com", t0)
		if err := s.CreateInvitation(ctx, first, t0); err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.CreateInvitation(ctx, newInvitation("new@example.com", t0.Add(time.Hour)), t0.Add(time.Hour)),
			fault.Conflict, auth.CodeInvitationPending)

		// Expired: a new one may be made, and the old one is listed as
		// closed while within the history.
		later := t0.Add(auth.InvitationTTL + time.Minute)
		second := newInvitation("new@example.com", later)
		if err := s.CreateInvitation(ctx, second, later); err != nil {
			t.Fatalf("invite again after expiry: %v", err)
		}
		list, err := s.ListInvitations(ctx, later.Add(-auth.InvitationHistory))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].ID != second.ID || list[1].ID != first.ID {
			t.Fatalf("list %+v, want second then first", list)
		}
		if got := list[1].StatusAt(later); got != auth.InvitationExpired {
			t.Fatalf("first is %s, want expired", got)
		}
		// Past the history, only the pending one is listed.
		if list, err = s.ListInvitations(ctx, later); err != nil || len(list) != 1 || list[0].ID != second.ID {
			t.Fatalf("list past history %+v, %v; want the pending one", list, err)
		}

		// Revoked: revoking again is 404, and a new invitation may be made.
		if _, err := s.RevokeInvitation(ctx, second.ID, later); err != nil {
			t.Fatal(err)
		}
		_, err = s.RevokeInvitation(ctx, second.ID, later)
		wantCode(t, err, fault.NotFound, "")
		_, err = s.RevokeInvitation(ctx, "inv_unknown", later)
		wantCode(t, err, fault.NotFound, "")
		third := newInvitation("new@example.com", later)
		if err := s.CreateInvitation(ctx, third, later); err != nil {
			t.Fatalf("invite again after revoking: %v", err)
		}
		if ok, err := s.SetInvitationTOTP(ctx, second.TokenHash, "sealed", later); err != nil || ok {
			t.Fatalf("enrol a revoked invitation: %v, %v; want refused", ok, err)
		}

		// A failed delivery deletes it.
		if err := s.DeleteInvitation(ctx, third.ID); err != nil {
			t.Fatal(err)
		}
		_, err = s.InvitationByHash(ctx, third.TokenHash)
		wantCode(t, err, fault.NotFound, "")
	})
}

// TestInvitationAccept: acceptance needs an open invitation and the second
// factor the code was checked against; it creates the account and closes
// the invitation, once. An accepted invitation cannot be revoked.
func TestInvitationAccept(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		inv := newInvitation("invitee@example.com", t0)
		inv.Admin = true
		if err := s.CreateInvitation(ctx, inv, t0); err != nil {
			t.Fatal(err)
		}
		a := inviteeAccount(inv.Email, t0)
		a.Admin = true
		// Not enrolled yet.
		if ok, err := s.AcceptInvitation(ctx, inv.TokenHash, "", a, t0); err != nil || ok {
			t.Fatalf("accept before enrollment: %v, %v", ok, err)
		}
		for _, sealed := range []string{"sealed-1", "sealed-2"} {
			if ok, err := s.SetInvitationTOTP(ctx, inv.TokenHash, sealed, t0); err != nil || !ok {
				t.Fatalf("enrol: %v, %v", ok, err)
			}
		}
		// The code was checked against a secret replaced since.
		if ok, err := s.AcceptInvitation(ctx, inv.TokenHash, "sealed-1", a, t0); err != nil || ok {
			t.Fatalf("accept with a replaced secret: %v, %v", ok, err)
		}
		// Expired.
		if ok, err := s.AcceptInvitation(ctx, inv.TokenHash, "sealed-2", a, inv.ExpiresAt); err != nil || ok {
			t.Fatalf("accept at expiry: %v, %v", ok, err)
		}
		at := t0.Add(time.Hour)
		if ok, err := s.AcceptInvitation(ctx, inv.TokenHash, "sealed-2", a, at); err != nil || !ok {
			t.Fatalf("accept: %v, %v", ok, err)
		}
		got, err := s.AccountByEmail(ctx, inv.Email)
		if err != nil || got.ID != a.ID || !got.Admin || got.TOTPLastStep != 7 || got.TOTPSecret != "sealed-user" {
			t.Fatalf("account %+v, %v", got, err)
		}
		stored, err := s.InvitationByHash(ctx, inv.TokenHash)
		if err != nil || stored.StatusAt(at) != auth.InvitationAccepted || stored.UserID != a.ID {
			t.Fatalf("invitation %+v, %v; want accepted by %s", stored, err, a.ID)
		}
		if ok, err := s.AcceptInvitation(ctx, inv.TokenHash, "sealed-2", inviteeAccount(inv.Email, at), at); err != nil || ok {
			t.Fatalf("accept twice: %v, %v", ok, err)
		}
		_, err = s.RevokeInvitation(ctx, inv.ID, at)
		wantCode(t, err, fault.Conflict, "invitation-accepted")
		// The address is a user's now.
		wantCode(t, s.CreateInvitation(ctx, newInvitation(inv.Email, at), at), fault.Conflict, auth.CodeEmailTaken)

		// A user created with the address meanwhile (on the host): the
		// acceptance is refused and the invitation stays open.
		other := newInvitation("race@example.com", t0)
		if err := s.CreateInvitation(ctx, other, t0); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.SetInvitationTOTP(ctx, other.TokenHash, "s", t0); err != nil || !ok {
			t.Fatal(ok, err)
		}
		mustCreateAccount(t, s, other.Email, t0)
		_, err = s.AcceptInvitation(ctx, other.TokenHash, "s", inviteeAccount(other.Email, at), at)
		wantCode(t, err, fault.Conflict, auth.CodeEmailTaken)
		if stored, err := s.InvitationByHash(ctx, other.TokenHash); err != nil || stored.AcceptedAt != nil {
			t.Fatalf("invitation after a refused acceptance %+v, %v; want still open", stored, err)
		}
	})
}

// TestInvitationParallel: many acceptances of one invitation at once, each
// with an account of its own: exactly one is accepted and one account
// exists. Parallel invitations of one address: exactly one is made.
func TestInvitationParallel(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const n = 8
		for round := range 3 {
			at := t0.Add(time.Duration(round) * time.Hour)
			email := fmt.Sprintf("parallel-%d@example.com", round)
			inv := newInvitation(email, at)
			if err := s.CreateInvitation(ctx, inv, at); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.SetInvitationTOTP(ctx, inv.TokenHash, "sealed", at); err != nil || !ok {
				t.Fatal(ok, err)
			}
			accepted := countApplied(t, n, func(int) (bool, error) {
				return s.AcceptInvitation(ctx, inv.TokenHash, "sealed", inviteeAccount(email, at), at)
			})
			if accepted != 1 {
				t.Fatalf("round %d: %d of %d parallel acceptances succeeded, want exactly 1", round, accepted, n)
			}
			users, err := s.ListUsers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(users) != round+1 {
				t.Fatalf("round %d: %d users, want %d", round, len(users), round+1)
			}

			email = fmt.Sprintf("twice-%d@example.com", round)
			errs := inParallel(n, func(int) error { return s.CreateInvitation(ctx, newInvitation(email, at), at) })
			made := 0

			for _, err := range errs {
				switch {
				case err == nil:
					made++
				case fault.Is(err, fault.Conflict) && fault.As(err).Code == auth.CodeInvitationPending:
				default:
					t.Fatalf("parallel invitation: %v", err)
				}
			}
			if made != 1 {
				t.Fatalf("round %d: %d parallel invitations of one address made, want 1", round, made)
			}
		}
	})
}
