package stream

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/jobs"
)

func publishN(h *Hub, n int) []Message {
	out := make([]Message, n)
	for i := range n {
		out[i] = h.Publish(Message{Type: TypeJob, Admin: []byte(`{}`), Member: []byte(`{}`)})
	}
	return out
}

// Resuming gives exactly the messages after the id, while the ring holds
// them; before that, or with an id the hub never gave, it is a gap.
func TestHubResume(t *testing.T) {
	h := NewHub(8)
	sent := publishN(h, 20) // the ring holds the last 8: sent[12:]
	for i := 1; i < len(sent); i++ {
		if sent[i].ID != sent[i-1].ID+1 {
			t.Fatalf("ids not consecutive: %d %d", sent[i-1].ID, sent[i].ID)
		}
	}
	cases := []struct {
		after   int64
		resumed bool
		backlog int
	}{
		{0, true, 0},
		{sent[19].ID, true, 0},
		{sent[18].ID, true, 1},
		{sent[11].ID, true, 8}, // the one before the ring's oldest
		{sent[10].ID, false, 0},
		{sent[19].ID + 1, false, 0},
	}
	for _, c := range cases {
		s, backlog, last, resumed := h.Subscribe(c.after)
		s.Close()
		if resumed != c.resumed || len(backlog) != c.backlog || last != sent[19].ID {
			t.Errorf("after %d: resumed %v backlog %d last %d, want %v %d %d", c.after, resumed, len(backlog), last, c.resumed, c.backlog, sent[19].ID)
		}
		for i, m := range backlog {
			if m.ID != c.after+1+int64(i) {
				t.Errorf("after %d: backlog[%d] id %d", c.after, i, m.ID)
			}
		}
	}
	if h.Subscribers() != 0 {
		t.Errorf("closed subscriptions remain: %d", h.Subscribers())
	}
}

// An id another hub gave (before a restart, or another control plane's)
// is a gap, never a wrong resume, even when its number falls in this
// hub's ring.
func TestHubRefusesAnotherHubsIDs(t *testing.T) {
	old := NewHub(8)
	sent := publishN(old, 20)
	h := NewHub(8)
	mine := publishN(h, 20)
	if _, _, _, resumed := h.Subscribe(sent[len(sent)-1].ID); resumed {
		t.Fatal("an id of the old hub resumed")
	}
	// The same number under this hub's tag resumes; under the other's,
	// it does not.
	seq := sent[15].ID & (1<<seqBits - 1)
	if _, _, _, resumed := h.Subscribe(h.tag | seq); !resumed {
		t.Fatal("this hub's own id did not resume")
	}
	if _, _, _, resumed := h.Subscribe(old.tag | seq); resumed && old.tag != h.tag {
		t.Fatal("another hub's id within this hub's ring resumed")
	}
	if mine[0].ID&^(1<<seqBits-1) != h.tag || mine[0].ID <= 0 {
		t.Fatalf("id %d does not carry the hub's tag", mine[0].ID)
	}
}

// A subscriber that falls too far behind is dropped, never blocking the
// publisher; the others keep receiving.
func TestHubDropsSlowSubscriber(t *testing.T) {
	h := NewHub(DefaultRing)
	slow, _, _, _ := h.Subscribe(0)
	fast, _, _, _ := h.Subscribe(0)
	defer fast.Close()
	for range subscriberBuffer + 1 {
		h.Publish(Message{Type: TypeJob})
		<-fast.C()
	}
	select {
	case <-slow.Dropped():
	default:
		t.Fatal("the slow subscriber was not dropped")
	}
	if h.Subscribers() != 1 {
		t.Fatalf("subscribers: %d", h.Subscribers())
	}
	h.Publish(Message{Type: TypeJob})
	if m := <-fast.C(); m.Type != TypeJob {
		t.Fatal("the other subscriber stopped receiving")
	}
}

// Who receives what: members only the member data, a user's message only
// that user.
func TestMessageFor(t *testing.T) {
	admin := Viewer{UserID: "usr_a", Admin: true}
	member := Viewer{UserID: "usr_m"}
	both := Message{Admin: []byte("A"), Member: []byte("M")}
	adminOnly := Message{Admin: []byte("A")}
	mine := Message{Admin: []byte("X"), Member: []byte("X"), UserID: "usr_m"}
	check := func(m Message, v Viewer, want string) {
		t.Helper()
		got, ok := m.For(v)
		if (want == "") == ok || string(got) != want {
			t.Errorf("%+v for %+v: %q %v, want %q", m, v, got, ok, want)
		}
	}
	check(both, admin, "A")
	check(both, member, "M")
	check(adminOnly, admin, "A")
	check(adminOnly, member, "")
	check(mine, member, "X")
	check(mine, admin, "")
}

// Events reach members without their error text; job events reach
// administrators only.
func TestPublishedForMembers(t *testing.T) {
	h := NewHub(8)
	sub, _, _, _ := h.Subscribe(0)
	defer sub.Close()
	ev, err := events.New(events.DeployFailed, events.Subject{Type: "deployment", ID: "dep_1"},
		events.DeployPayload{DeploymentID: "dep_1", ApplicationName: "web", Error: "build output s3cret"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h.PublishEvent(ev)
	m := <-sub.C()
	admin, _ := m.For(Viewer{Admin: true})
	member, _ := m.For(Viewer{})
	if !strings.Contains(string(admin), "s3cret") || strings.Contains(string(member), "s3cret") || !strings.Contains(string(member), `"application_name":"web"`) {
		t.Fatalf("admin %s\nmember %s", admin, member)
	}

	h.PublishJob(jobs.Change{Job: jobs.Job{ID: "job_1", Status: jobs.Running}, Events: []jobs.Event{{Message: "s3cret"}}})
	m = <-sub.C()
	if _, ok := m.For(Viewer{}); ok || m.Type != TypeJobEvents {
		t.Fatalf("members receive job events: %+v", m)
	}
	var je JobEvents
	if err := json.Unmarshal(m.Admin, &je); err != nil || len(je.Events) != 1 || je.JobID != "job_1" {
		t.Fatalf("job events %s", m.Admin)
	}
}
