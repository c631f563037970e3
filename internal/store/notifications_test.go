package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/notify"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func TestInbox(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		alice := mustCreateAccount(t, s, "alice@example.com", t0)
		bob := mustCreateAccount(t, s, "bob@example.com", t0)
		for i := range 5 {
			at := t0.Add(time.Duration(i) * time.Minute)
			evID := ids.NewAt(events.IDPrefix, at)
			for _, u := range []string{alice.ID, bob.ID} {
				n := notify.Notification{ID: ids.NewAt(notify.NotificationIDPrefix, at), UserID: u, EventID: evID, EventType: events.ServerOffline,
					Title: fmt.Sprintf("t%d", i), Body: "b", Link: "/servers/srv_1", Subject: events.Subject{Type: "server", ID: "srv_1"}, CreatedAt: at}
				// Delivered twice (a retry): stored once.
				for range 2 {
					n.ID = ids.NewAt(notify.NotificationIDPrefix, at)
					if err := s.InsertNotification(ctx, n); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		list, unread, err := s.ListNotifications(ctx, alice.ID, 3, "")
		if err != nil || len(list) != 3 || unread != 5 || list[0].Title != "t4" || list[0].Read {
			t.Fatalf("first page: %+v, unread %d, %v", list, unread, err)
		}
		if next, _, _ := s.ListNotifications(ctx, alice.ID, 3, list[2].ID); len(next) != 2 || next[0].Title != "t1" {
			t.Fatalf("second page: %+v", next)
		}
		all, _, _ := s.ListNotifications(ctx, alice.ID, 10, "")
		aliceIDs := []string{all[0].ID, all[1].ID}
		// Bob's ids mark nothing of Alice's, and the other way round.
		bobList, _, _ := s.ListNotifications(ctx, bob.ID, 10, "")
		if marked, unread, err := s.MarkNotificationsRead(ctx, alice.ID, []string{bobList[0].ID}, false, t0); marked != 0 || unread != 5 || err != nil {
			t.Fatalf("marking another user's item: %d %d %v", marked, unread, err)
		}
		if marked, unread, err := s.MarkNotificationsRead(ctx, alice.ID, aliceIDs[:2], false, t0); marked != 2 || unread != 3 || err != nil {
			t.Fatalf("marking two: %d %d %v", marked, unread, err)
		}
		// Everyone marks all at once: each item is marked once.
		var total atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				marked, _, err := s.MarkNotificationsRead(ctx, alice.ID, nil, true, t0)
				if err != nil {
					t.Error(err)
				}
				total.Add(int32(marked))
			})
		}
		wg.Wait()
		if got := total.Load(); got != 3 {
			t.Fatalf("marked by concurrent read-all: %d, want 3", got)
		}
		if _, unread, _ := s.ListNotifications(ctx, alice.ID, 10, ""); unread != 0 {
			t.Fatalf("alice unread: %d", unread)
		}
		if _, unread, _ := s.ListNotifications(ctx, bob.ID, 10, ""); unread != 5 {
			t.Fatalf("bob unread: %d, want 5", unread)
		}
	})
}

func TestNotificationSettings(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		u := mustCreateAccount(t, s, "carol@example.com", t0)
		if all, err := s.NotificationSettings(ctx); err != nil || len(all) != 0 {
			t.Fatalf("settings before any: %v %v", all, err)
		}
		for _, want := range []notify.Settings{{EmailDeploySuccess: true}, {EmailAlerts: true, EmailDeployFailure: true}} {
			if err := s.PutNotificationSettings(ctx, u.ID, want, t0); err != nil {
				t.Fatal(err)
			}
			all, err := s.NotificationSettings(ctx)
			if err != nil || all[u.ID] != want {
				t.Fatalf("settings: got %+v, want %+v (%v)", all[u.ID], want, err)
			}
		}
	})
}

// Items list by their events, newest first, whatever order they were
// delivered in.
func TestInboxOrderedByEvent(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		u := mustCreateAccount(t, s, "order@example.com", t0)
		first, second := ids.NewAt(events.IDPrefix, t0), ids.NewAt(events.IDPrefix, t0)
		// The later event is delivered first.
		for i, evID := range []string{second, first} {
			n := notify.Notification{ID: ids.New(notify.NotificationIDPrefix), UserID: u.ID, EventID: evID, EventType: events.ServerOffline,
				Title: evID, Body: "b", Subject: events.Subject{Type: "server", ID: "srv_1"}, CreatedAt: t0.Add(time.Duration(i) * time.Second)}
			if err := s.InsertNotification(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		page, _, err := s.ListNotifications(ctx, u.ID, 1, "")
		if err != nil || len(page) != 1 || page[0].EventID != second {
			t.Fatalf("first page: %+v, %v; want the later event %s", page, err, second)
		}
		next, _, err := s.ListNotifications(ctx, u.ID, 1, page[0].ID)
		if err != nil || len(next) != 1 || next[0].EventID != first {
			t.Fatalf("second page: %+v, %v; want the earlier event %s", next, err, first)
		}
		if rest, _, err := s.ListNotifications(ctx, u.ID, 1, next[0].ID); err != nil || len(rest) != 0 {
			t.Fatalf("third page: %+v, %v", rest, err)
		}
		// A cursor that is not an item of this inbox is refused, not read
		// as an empty page.
		other := mustCreateAccount(t, s, "other@example.com", t0)
		for _, c := range []struct{ user, cursor string }{{u.ID, "ntf_unknown"}, {other.ID, page[0].ID}} {
			if _, _, err := s.ListNotifications(ctx, c.user, 1, c.cursor); !fault.Is(err, fault.Invalid) {
				t.Errorf("cursor %s of user %s: %v, want invalid", c.cursor, c.user, err)
			}
		}
	})
}
