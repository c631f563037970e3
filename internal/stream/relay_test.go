package stream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// memBus delivers every notification to every relay, the sender's
// included, in the order sent, as PostgreSQL's NOTIFY does; it refuses
// payloads of 8000 bytes and more, as PostgreSQL does.
type memBus struct {
	mu     sync.Mutex
	relays []*Relay
	fail   bool
	failed chan struct{} // a notify failed
}

func (b *memBus) Notify(ctx context.Context, msg string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		select {
		case b.failed <- struct{}{}:
		default:
		}
		return errors.New("connection refused")
	}
	if len(msg) >= 8000 {
		return errors.New("payload string too long")
	}
	for _, r := range b.relays {
		r.Deliver(ctx, msg)
	}
	return nil
}

type relayRig struct {
	bus  *memBus
	hubs []*Hub
	jobs map[string]jobs.Job
}

func newRelayRig(t *testing.T, n int) *relayRig {
	rig := &relayRig{bus: &memBus{failed: make(chan struct{}, 1)}, jobs: map[string]jobs.Job{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range n {
		h := NewHub(DefaultRing)
		r := NewRelay(h, rig.bus, "cp"+string(rune('a'+i)), func(_ context.Context, id string) (jobs.Job, error) {
			j, ok := rig.jobs[id] // written before the change is published
			if !ok {
				return jobs.Job{}, errors.New("no such job")
			}
			return j, nil
		}, log)
		rig.bus.relays = append(rig.bus.relays, r)
		rig.hubs = append(rig.hubs, h)
		wg.Go(func() { r.Run(ctx) })
	}
	return rig
}

func (rig *relayRig) subscribe(t *testing.T, i int) *Subscription {
	s, _, _, _ := rig.hubs[i].Subscribe(0)
	t.Cleanup(s.Close)
	return s
}

func next(t *testing.T, s *Subscription) Message {
	t.Helper()
	select {
	case m := <-s.C():
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s")
	}
	return Message{}
}

// A job change, a job's events, an event and an inbox item published on
// one control plane reach the streams of the others, once, in order, with
// the same audience rules; the publisher's own streams get each once.
func TestRelayCarriesMessagesToOtherControlPlanes(t *testing.T) {
	rig := newRelayRig(t, 2)
	local, remote := rig.subscribe(t, 0), rig.subscribe(t, 1)
	j := jobs.Job{ID: "job_1", ServerID: "srv_1", Type: "agent.ping", Status: jobs.Running}
	rig.hubs[0].PublishJob(jobs.Change{Job: j})
	rig.hubs[0].PublishJob(jobs.Change{Job: j, Events: []jobs.Event{{Seq: 1, Level: "info", Message: "half way"}}})
	ev, err := events.New(events.DeployFailed, events.Subject{Type: "deployment", ID: "dep_1"}, map[string]any{"error": "boom"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rig.hubs[0].PublishEvent(ev)
	rig.hubs[0].Publish(Message{Type: TypeInbox, Admin: []byte(`{"event_id":"e"}`), Member: []byte(`{"event_id":"e"}`), UserID: "usr_m"})

	for _, s := range []*Subscription{local, remote} {
		want := []string{TypeJob, TypeJobEvents, TypeEvent, TypeInbox}
		var got []Message
		for range want {
			got = append(got, next(t, s))
		}
		for i, m := range got {
			if m.Type != want[i] {
				t.Fatalf("message %d is %s, want %s", i, m.Type, want[i])
			}
		}
		if _, ok := got[1].For(Viewer{UserID: "usr_m"}); ok {
			t.Error("a member receives a job's events")
		}
		if d, _ := got[2].For(Viewer{UserID: "usr_m"}); strings.Contains(string(d), "boom") {
			t.Errorf("a member receives an event's error: %s", d)
		}
		if _, ok := got[3].For(Viewer{UserID: "usr_x", Admin: true}); ok {
			t.Error("another user receives an inbox item")
		}
		if d, _ := got[0].For(Viewer{Admin: true}); !strings.Contains(string(d), `"id":"job_1"`) {
			t.Errorf("job message: %s", d)
		}
	}
	select {
	case m := <-local.C():
		t.Fatalf("the publisher's stream got a message twice: %s", m.Type)
	default:
	}
}

// A job whose message is too large for the bus travels as its id and is
// read from the store; a job's many events are split into messages that
// fit; anything else too large reaches the others as a reset.
func TestRelayLargeMessages(t *testing.T) {
	rig := newRelayRig(t, 2)
	remote := rig.subscribe(t, 1)
	big := jobs.Job{ID: "job_big", ServerID: "srv_1", Type: "app.deploy", Status: jobs.Queued,
		Payload: json.RawMessage(`{"doc":"` + strings.Repeat("x", 20000) + `"}`)}
	rig.jobs[big.ID] = big
	rig.hubs[0].PublishJob(jobs.Change{Job: big})
	if m := next(t, remote); m.Type != TypeJob || !strings.Contains(string(m.Admin), "job_big") {
		t.Fatalf("large job: %s %.100s", m.Type, m.Admin)
	}

	var evs []jobs.Event
	for i := range 200 {
		evs = append(evs, jobs.Event{Seq: i + 1, Level: "info", Message: strings.Repeat("build output ", 10)})
	}
	rig.hubs[0].PublishJob(jobs.Change{Job: big, Events: evs})
	seen := 0
	for seen < len(evs) {
		m := next(t, remote)
		if m.Type != TypeJobEvents {
			t.Fatalf("got %s while waiting for the events", m.Type)
		}
		var je JobEvents
		if err := json.Unmarshal(m.Admin, &je); err != nil {
			t.Fatal(err)
		}
		for _, e := range je.Events {
			if e.Seq != seen+1 {
				t.Fatalf("event %d after %d", e.Seq, seen)
			}
			seen++
		}
	}

	rig.hubs[0].Publish(Message{Type: TypeInbox, Admin: []byte(`"` + strings.Repeat("y", 9000) + `"`), UserID: "usr_a"})
	if m := next(t, remote); m.Type != TypeReset {
		t.Fatalf("too large a message: %s, want a reset", m.Type)
	}
}

// Messages the bus lost (a failed notify) reach the others as a reset
// once the bus works again, never as silence.
func TestRelayLostMessagesBecomeReset(t *testing.T) {
	rig := newRelayRig(t, 2)
	remote := rig.subscribe(t, 1)
	rig.bus.mu.Lock()
	rig.bus.fail = true
	rig.bus.mu.Unlock()
	rig.hubs[0].Publish(Message{Type: TypeInbox, Admin: []byte(`{}`), UserID: "usr_a"})
	select {
	case <-rig.bus.failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never tried to send the message")
	}
	rig.bus.mu.Lock()
	rig.bus.fail = false
	rig.bus.mu.Unlock()
	rig.hubs[0].Publish(Message{Type: TypeInbox, Admin: []byte(`{"n":2}`), UserID: "usr_a"})
	// A reset (sent when the bus came back, before or after the next
	// message), and the next message; never the lost one.
	got := map[string]string{}
	for range 2 {
		m := next(t, remote)
		got[m.Type] = string(m.Admin)
	}
	if _, ok := got[TypeReset]; !ok || got[TypeInbox] != `{"n":2}` {
		t.Fatalf("after lost messages: %v, want a reset and the next message", got)
	}
}
