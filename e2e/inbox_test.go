package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// InboxPage is the reply of GET /api/v1/notifications.
type InboxPage struct {
	Notifications []struct {
		ID        string `json:"id"`
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		Title     string `json:"title"`
		Body      string `json:"body"`
		Link      string `json:"link"`
		Read      bool   `json:"read"`
	} `json:"notifications"`
	UnreadCount int    `json:"unread_count"`
	NextCursor  string `json:"next_cursor"`
}

func inbox(t testing.TB, cp *ControlPlane, token, query string) InboxPage {
	t.Helper()
	var p InboxPage
	expectJSON(t, cp.Get(t, "/api/v1/notifications"+query, token), http.StatusOK, &p)
	return p
}

// TestInboxCountsAndReadMarking opens and resolves alerts through the
// agent protocol: every user's inbox gets an item per event, with the
// unread count; marking items read is per user.
func TestInboxCountsAndReadMarking(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		f := newFleet(t, Options{Dialect: d})
		member := signInUser(t, f.ControlPlane, createUser(t, f.ControlPlane, "member@example.com", testPassword, false)).AccessToken
		e := f.createEnrollment(t, "inbox-1")
		fd := feeder{f: f, token: f.enrollHTTP(t, e.Token).AgentToken}
		f.createRule(t, map[string]any{"kind": "memory_high", "threshold": 90, "duration": 0, "scope": "server", "scope_id": e.Server.ID})

		fd.report(t, 10, 95, 0)
		if ev := f.evaluate(t); len(ev.Opened) != 1 {
			t.Fatalf("opened: %+v", ev.Opened)
		}
		fd.report(t, 10, 20, 0)
		if ev := f.evaluate(t); len(ev.Resolved) != 1 {
			t.Fatalf("resolved: %+v", ev.Resolved)
		}
		for _, tok := range []string{f.Token, member} {
			testlab.Eventually(t, 30*time.Second, "two unread items", func() bool { return inbox(t, f.ControlPlane, tok, "").UnreadCount == 2 })
		}
		p := inbox(t, f.ControlPlane, f.Token, "?limit=1")
		if len(p.Notifications) != 1 || p.NextCursor == "" || p.Notifications[0].EventType != "alert.resolved" || p.Notifications[0].Read ||
			p.Notifications[0].Link == "" || p.Notifications[0].Title == "" {
			t.Fatalf("first page: %+v", p)
		}
		older := inbox(t, f.ControlPlane, f.Token, "?limit=1&before="+p.NextCursor)
		if len(older.Notifications) != 1 || older.Notifications[0].EventType != "alert.opened" {
			t.Fatalf("second page: %+v", older)
		}
		// The member's cursor is not an item of the admin's inbox.
		mine := inbox(t, f.ControlPlane, member, "?limit=1")
		expectStatus(t, f.Get(t, "/api/v1/notifications?before="+mine.NextCursor, f.Token), http.StatusUnprocessableEntity)

		r := f.Post(t, "/api/v1/notifications/read", f.Token, map[string]any{"ids": []string{p.Notifications[0].ID}})
		var res struct {
			Marked      int `json:"marked"`
			UnreadCount int `json:"unread_count"`
		}
		expectJSON(t, r, http.StatusOK, &res)
		if res.Marked != 1 || res.UnreadCount != 1 {
			t.Fatalf("marking one: %+v", res)
		}
		if got := inbox(t, f.ControlPlane, f.Token, ""); got.UnreadCount != 1 || !got.Notifications[0].Read {
			t.Fatalf("after marking one: %+v", got)
		}
		for _, body := range []map[string]any{{}, {"all": true, "ids": []string{p.Notifications[0].ID}}} {
			expectProblem(t, f.Post(t, "/api/v1/notifications/read", f.Token, body), http.StatusUnprocessableEntity, "validation-failed")
		}
		expectJSON(t, f.Post(t, "/api/v1/notifications/read", f.Token, map[string]any{"all": true}), http.StatusOK, &res)
		if res.Marked != 1 || res.UnreadCount != 0 {
			t.Fatalf("marking all: %+v", res)
		}
		// The member's inbox is the member's own.
		if got := inbox(t, f.ControlPlane, member, ""); got.UnreadCount != 2 || len(got.Notifications) != 2 {
			t.Fatalf("member's inbox: %+v", got)
		}
	})
}
