package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func newAPIToken(userID string, at time.Time) auth.APIToken {
	return auth.APIToken{ID: ids.NewAt(auth.TokenIDPrefix, at), UserID: userID, Name: "ci", Scopes: []string{auth.ScopeRead},
		Resources: []string{}, CreatedAt: at, Hash: ids.Hash(ids.Token("cpt"))}
}

// TestAPITokenLimitUnderRace: parallel creations never pass an owner's
// limit of live tokens; a revoked one frees its place.
func TestAPITokenLimitUnderRace(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		u := mustCreateAccount(t, s, "owner@example.com", t0)
		const max = 3
		var wg sync.WaitGroup
		errs := make([]error, 8)
		toks := make([]auth.APIToken, len(errs))
		for i := range errs {
			toks[i] = newAPIToken(u.ID, t0.Add(time.Duration(i)*time.Millisecond))
			wg.Go(func() { errs[i] = s.CreateAPIToken(ctx, toks[i], max, t0) })
		}
		wg.Wait()
		made := 0
		var first auth.APIToken
		for i, err := range errs {
			switch {
			case err == nil:
				if made == 0 {
					first = toks[i]
				}
				made++
			case fault.Is(err, fault.Conflict) && fault.As(err).Code == auth.CodeTokenLimit:
			default:
				t.Fatalf("create: %v", err)
			}
		}
		if made != max {
			t.Fatalf("%d tokens made in parallel, want %d", made, max)
		}
		if _, err := s.RevokeAPIToken(ctx, first.ID, u.ID, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeAPIToken(ctx, first.ID, "", t0); !fault.Is(err, fault.NotFound) {
			t.Fatalf("second revocation: %v, want not found", err)
		}
		if _, err := s.TokenPrincipal(ctx, first.Hash, t0); !fault.Is(err, fault.Unauthenticated) {
			t.Fatalf("a revoked token resolves: %v", err)
		}
		if err := s.CreateAPIToken(ctx, newAPIToken(u.ID, t0.Add(time.Second)), max, t0); err != nil {
			t.Fatalf("after a revocation: %v", err)
		}
	})
}

// TestTouchAPITokenNewAddressOnce: of parallel uses from a new address,
// one reports it.
func TestTouchAPITokenNewAddressOnce(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		u := mustCreateAccount(t, s, "owner@example.com", t0)
		tok := newAPIToken(u.ID, t0)
		if err := s.CreateAPIToken(ctx, tok, 10, t0); err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
			n := countApplied(t, 8, func(int) (bool, error) { return s.TouchAPIToken(ctx, tok.ID, ip, t0.Add(time.Minute)) })
			if n != 1 {
				t.Fatalf("%s: %d uses reported a new address, want 1", ip, n)
			}
		}
		p, err := s.TokenPrincipal(ctx, tok.Hash, t0.Add(time.Minute))
		if err != nil || p.Token.LastUsedIP != "127.0.0.2" || p.Token.LastUsedAt == nil {
			t.Fatalf("principal %+v, %v", p.Token, err)
		}
	})
}
