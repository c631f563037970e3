package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// EventInfo is an event as GET /api/v1/events shows it.
type EventInfo struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Subject struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	} `json:"subject"`
	Payload    json.RawMessage `json:"payload"`
	OccurredAt time.Time       `json:"occurred_at"`
}

// listEvents returns the events of a type (all when typ is empty), oldest
// first.
func (f *Fleet) listEvents(t testing.TB, typ string) []EventInfo {
	t.Helper()
	path := "/api/v1/events?limit=200"
	if typ != "" {
		path += "&type=" + typ
	}
	var out struct {
		Events []EventInfo `json:"events"`
	}
	expectJSON(t, f.Get(t, path, f.Token), http.StatusOK, &out)
	slices.Reverse(out.Events)
	return out.Events
}

// eventTypesFor lists the types of the events about a subject, oldest
// first.
func (f *Fleet) eventTypesFor(t testing.TB, subjectID string) []string {
	t.Helper()
	var out []string
	for _, ev := range f.listEvents(t, "") {
		if ev.Subject.ID == subjectID {
			out = append(out, ev.Type)
		}
	}
	return out
}

// TestServerEventsFollowTheAgent runs a real agent: its enrollment, its
// going offline (killed) and coming back, and its revocation are each
// published once, in that order.
func TestServerEventsFollowTheAgent(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		f := newFleet(t, Options{Dialect: d})
		e, config := f.enrollServer(t, "events-1")
		agent := startAgent(t, config)
		testlab.Eventually(t, 30*time.Second, "server.enrolled", func() bool {
			return slices.Equal(f.eventTypesFor(t, e.Server.ID), []string{"server.enrolled"})
		})

		agent.Kill(t)
		// Offline 30 s after the last heartbeat.
		testlab.Eventually(t, 90*time.Second, "server.offline after the agent was killed", func() bool {
			return slices.Equal(f.eventTypesFor(t, e.Server.ID), []string{"server.enrolled", "server.offline"})
		})
		var p struct {
			ServerID   string     `json:"server_id"`
			ServerName string     `json:"server_name"`
			LastSeenAt *time.Time `json:"last_seen_at"`
		}
		offline := f.listEvents(t, "server.offline")
		if err := json.Unmarshal(offline[len(offline)-1].Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.ServerID != e.Server.ID || p.ServerName != "events-1" || p.LastSeenAt == nil {
			t.Fatalf("server.offline payload: %+v", p)
		}

		startAgent(t, config)
		testlab.Eventually(t, 30*time.Second, "server.online after the agent came back", func() bool {
			return slices.Equal(f.eventTypesFor(t, e.Server.ID), []string{"server.enrolled", "server.offline", "server.online"})
		})
		expectStatus(t, f.Post(t, "/api/v1/servers/"+e.Server.ID+"/revoke", f.Token, nil), http.StatusOK)
		testlab.Eventually(t, 10*time.Second, "server.revoked", func() bool {
			return slices.Equal(f.eventTypesFor(t, e.Server.ID),
				[]string{"server.enrolled", "server.offline", "server.online", "server.revoked"})
		})

		expectProblem(t, f.Get(t, "/api/v1/events?type=server.exploded", f.Token), http.StatusUnprocessableEntity, "validation-failed")
	})
}
