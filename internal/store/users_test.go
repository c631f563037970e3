package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// TestLastAdminUnderConcurrency: two administrators each made a member,
// disabled or deleted at the same moment, many times over: one change
// wins each round and the other is refused with last-admin, so an enabled
// administrator always remains.
func TestLastAdminUnderConcurrency(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		no, yes := false, true
		changes := map[string]func(id string) error{
			"demote":  func(id string) error { _, err := s.SetUserAccess(ctx, id, &no, nil, t0); return err },
			"disable": func(id string) error { _, err := s.SetUserAccess(ctx, id, nil, &yes, t0); return err },
			"delete":  func(id string) error { _, err := s.DeleteUser(ctx, id); return err },
		}
		round := 0
		for name, change := range changes {
			for range 5 {
				round++
				at := t0.Add(time.Duration(round) * time.Minute)
				a := mustCreateAccount(t, s, name+"-a-"+at.Format("150405")+"@example.com", at)
				b := mustCreateAccount(t, s, name+"-b-"+at.Format("150405")+"@example.com", at.Add(time.Second))
				for _, id := range []string{a.ID, b.ID} {
					if _, err := s.SetUserAccess(ctx, id, &yes, &no, at); err != nil {
						t.Fatal(err)
					}
				}
				// Every other enabled administrator of earlier rounds goes
				// first, so that a and b are the only ones.
				users, err := s.ListUsers(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, u := range users {
					if u.ID != a.ID && u.ID != b.ID && u.Admin && !u.Disabled {
						if _, err := s.SetUserAccess(ctx, u.ID, &no, nil, at); err != nil {
							t.Fatal(err)
						}
					}
				}
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i, id := range []string{a.ID, b.ID} {
					wg.Add(1)
					go func() { defer wg.Done(); errs[i] = change(id) }()
				}
				wg.Wait()
				refused := 0
				for _, err := range errs {
					switch {
					case err == nil:
					case fault.Is(err, fault.Conflict) && fault.As(err).Code == "last-admin":
						refused++
					default:
						t.Fatalf("%s: %v", name, err)
					}
				}
				if refused != 1 {
					t.Fatalf("%s of both administrators at once: %d refused (%v), want exactly 1", name, refused, errs)
				}
				users, err = s.ListUsers(ctx)
				if err != nil {
					t.Fatal(err)
				}
				admins := 0
				for _, u := range users {
					if u.Admin && !u.Disabled {
						admins++
					}
				}
				if admins != 1 {
					t.Fatalf("after %s: %d enabled administrators, want 1", name, admins)
				}
			}
		}
	})
}
