package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/stream"
)

// A stream ticket is redeemed once, however many redeem it at once, and
// never after it expired or its session ended.
func TestStreamTickets(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		t0 := time.Now().UTC().Truncate(time.Millisecond)
		a := mustCreateAccount(t, s, "admin@example.com", t0)
		sess := mustCreateSession(t, s, a.ID, t0)
		want := stream.Ticket{UserID: a.ID, SessionID: sess.sess.ID, Until: t0.Add(15 * time.Minute)}

		hash := ids.Hash(ids.Token(stream.TicketPrefix))
		if err := s.CreateStreamTicket(ctx, hash, want, t0.Add(stream.TicketTTL), t0); err != nil {
			t.Fatal(err)
		}
		const n = 10
		var wg sync.WaitGroup
		got := make([]stream.Ticket, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { got[i], errs[i] = s.RedeemStreamTicket(ctx, hash, t0.Add(time.Second)) })
		}
		wg.Wait()
		redeemed := 0
		for i, err := range errs {
			switch {
			case err == nil:
				redeemed++
				if got[i] != want {
					t.Errorf("redeemed %+v, want %+v", got[i], want)
				}
			case fault.Is(err, fault.Unauthenticated):
			default:
				t.Errorf("redeem: %v", err)
			}
		}
		if redeemed != 1 {
			t.Fatalf("%d of %d concurrent redeems got the ticket", redeemed, n)
		}

		// Expired: refused at its expiry, and deleted by the next ticket.
		expired := ids.Hash(ids.Token(stream.TicketPrefix))
		if err := s.CreateStreamTicket(ctx, expired, want, t0.Add(stream.TicketTTL), t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RedeemStreamTicket(ctx, expired, t0.Add(stream.TicketTTL)); !fault.Is(err, fault.Unauthenticated) {
			t.Fatalf("expired ticket: %v", err)
		}

		// Its session revoked: refused, although the ticket is live.
		live := ids.Hash(ids.Token(stream.TicketPrefix))
		if err := s.CreateStreamTicket(ctx, live, want, t0.Add(stream.TicketTTL), t0); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeSession(ctx, sess.sess.ID, "logout", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RedeemStreamTicket(ctx, live, t0.Add(2*time.Second)); !fault.Is(err, fault.Unauthenticated) {
			t.Fatalf("ticket of a revoked session: %v", err)
		}
		if _, err := s.RedeemStreamTicket(ctx, ids.Hash("stk_unknown"), t0); !fault.Is(err, fault.Unauthenticated) {
			t.Fatalf("unknown ticket: %v", err)
		}
	})
}
