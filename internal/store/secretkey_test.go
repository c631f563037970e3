package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func mustSecretKeyID(t *testing.T, s *store.Store, want string) {
	t.Helper()
	got, err := s.SecretKeyID(context.Background())
	if err != nil {
		t.Fatalf("secret key id: %v", err)
	}
	if got != want {
		t.Fatalf("secret key id: got %q, want %q", got, want)
	}
}

func mustClaimSecretKeyID(t *testing.T, s *store.Store, id, want string) {
	t.Helper()
	got, err := s.ClaimSecretKeyID(context.Background(), id, t0)
	if err != nil {
		t.Fatalf("claim secret key id %s: %v", id, err)
	}
	if got != want {
		t.Fatalf("claim secret key id %s: got %q, want %q", id, got, want)
	}
}

// A fresh store takes the first key that claims it, and from then on
// expects that one; of parallel claims with different keys one wins and
// every other is given the winner.
func TestSecretKeyIDRecordedOnce(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		mustSecretKeyID(t, s, "")
		const n = 8
		got := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = s.ClaimSecretKeyID(context.Background(), fmt.Sprintf("%08x", i), t0)
			}()
		}
		wg.Wait()
		winners := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if got[i] != got[0] {
				t.Fatalf("claim %d got %q, claim 0 got %q: want one id for all", i, got[i], got[0])
			}
			if got[i] == fmt.Sprintf("%08x", i) {
				winners++
			}
		}
		if winners != 1 {
			t.Fatalf("%d claims were recorded, want 1 (all got %q)", winners, got[0])
		}
		mustSecretKeyID(t, s, got[0])
		mustClaimSecretKeyID(t, s, "ffffffff", got[0])
		mustClaimSecretKeyID(t, s, got[0], got[0])
	})
}

// A store with sealed values but no recorded key id (one last opened by
// an older control plane) expects the key that sealed them: another key's
// claim is refused and records nothing; the right key's is recorded.
func TestSecretKeyIDFromSealedValues(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateAccount(t, s, "a@example.com", t0)
		b := mustCreateAccount(t, s, "b@example.com", t0)
		c := mustCreateAccount(t, s, "c@example.com", t0)
		for _, u := range []struct{ id, sealed string }{
			{a.ID, "v1:037bf6d3:AAAA"}, {b.ID, "v1:037bf6d3:BBBB"}, {c.ID, "v1:68d31f49:CCCC"},
		} {
			if err := s.SetTOTPSecret(ctx, u.id, u.sealed, t0); err != nil {
				t.Fatal(err)
			}
		}
		// The key that sealed most of the values is the one expected.
		mustSecretKeyID(t, s, "037bf6d3")
		mustClaimSecretKeyID(t, s, "0badc0de", "037bf6d3")
		// Refused claims record nothing: with no sealed value left, the
		// store takes any key again.
		for _, u := range []string{a.ID, b.ID, c.ID} {
			if err := s.SetTOTPSecret(ctx, u, "sealed:none", t0); err != nil {
				t.Fatal(err)
			}
		}
		mustSecretKeyID(t, s, "")
		if err := s.SetTOTPSecret(ctx, c.ID, "v1:68d31f49:CCCC", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.SetTOTPSecret(ctx, a.ID, "v1:037bf6d3:AAAA", t0); err != nil {
			t.Fatal(err)
		}
		// A key that sealed some of the values is taken and recorded.
		mustClaimSecretKeyID(t, s, "68d31f49", "68d31f49")
		mustSecretKeyID(t, s, "68d31f49")
		mustClaimSecretKeyID(t, s, "037bf6d3", "68d31f49")
	})
}
