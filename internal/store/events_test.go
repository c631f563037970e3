package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// mustEnroll creates a server and redeems its enrollment.
func mustEnroll(t *testing.T, s *store.Store, name string, at time.Time) servers.Server {
	t.Helper()
	srv := servers.Server{ID: ids.New(ids.Server), Name: name, Tags: []string{}, Status: servers.Pending, CreatedAt: at, UpdatedAt: at}
	enroll := ids.New("ept")
	if err := s.CreateServer(context.Background(), srv, ids.Hash(enroll), at.Add(time.Hour)); err != nil {
		t.Fatalf("create server: %v", err)
	}
	got, err := s.RedeemEnrollment(context.Background(), ids.Hash(enroll), ids.Hash(ids.New("agt")), agentproto.Facts{Hostname: name}, at)
	if err != nil {
		t.Fatalf("enroll: %v", err)
	}
	return got
}

func eventTypes(t *testing.T, s *store.Store) []events.Type {
	t.Helper()
	list, err := s.ListEvents(context.Background(), 100, "", "")
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var out []events.Type
	for i := len(list) - 1; i >= 0; i-- {
		out = append(out, list[i].Type)
	}
	return out
}

func TestEventsArePublishedWithTheirChange(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var woken atomic.Int32
		s.OnPublish(func() { woken.Add(1) })

		srv := mustEnroll(t, s, "web-1", t0)
		a := mustInsertApp(t, s, srv.ID, "web")
		d := mustQueueDeployment(t, s, a, t0)
		if _, _, _, err := s.ClaimDeployment(ctx, a.ID, t0); err != nil {
			t.Fatal(err)
		}
		if done, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Failed, Error: "image not found", At: t0.Add(time.Minute)}); !done || err != nil {
			t.Fatalf("finish: %v %v", done, err)
		}
		// Finishing again changes nothing and publishes nothing.
		if done, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Succeeded, At: t0.Add(time.Minute)}); done || err != nil {
			t.Fatalf("finish again: %v %v", done, err)
		}
		if _, err := s.RevokeServer(ctx, srv.ID, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeServer(ctx, srv.ID, t0.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		// A server that never enrolled publishes nothing when deleted.
		if err := s.DeleteServer(ctx, mustCreateServer(t, s, "never"), t0); err != nil {
			t.Fatal(err)
		}
		got := eventTypes(t, s)
		want := []events.Type{events.ServerEnrolled, events.DeployFailed, events.ServerRevoked}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("events: got %v, want %v", got, want)
		}
		if got, want := woken.Load(), int32(3); got < want {
			t.Fatalf("publish hook calls: got %d, want at least %d", got, want)
		}
		list, _ := s.ListEvents(ctx, 10, "", string(events.DeployFailed))
		var p events.DeployPayload
		if err := json.Unmarshal(list[0].Payload, &p); err != nil {
			t.Fatal(err)
		}
		if got, want := p, (events.DeployPayload{DeploymentID: d.ID, ApplicationID: a.ID, ApplicationName: "web", ServerID: srv.ID,
			Error: "image not found"}); got != want {
			t.Fatalf("deploy.failed payload: got %+v, want %+v", got, want)
		}
		if got, want := list[0].Subject, (events.Subject{Type: "deployment", ID: d.ID}); got != want {
			t.Fatalf("subject: got %+v, want %+v", got, want)
		}
	})
}

func TestServerPresenceIsPublishedOncePerChange(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustEnroll(t, s, "web-1", t0)
		// Many callers see the server offline at once: one publishes.
		for round, online := range []bool{false, true, false} {
			published := countApplied(t, 8, func(int) (bool, error) {
				return s.SetServerPresence(ctx, srv, online, t0.Add(time.Duration(round)*time.Minute))
			})
			if got, want := published, 1; got != want {
				t.Fatalf("round %d: publishers: got %d, want %d", round, got, want)
			}
		}
		got := eventTypes(t, s)
		want := []events.Type{events.ServerEnrolled, events.ServerOffline, events.ServerOnline, events.ServerOffline}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("events: got %v, want %v", got, want)
		}
	})
}

// recorder is a destination that records what it was given. Keys route
// every event to each of keys; failing makes the first attempts fail.
type recorder struct {
	kind    string
	keys    []string
	failing int32

	mu       sync.Mutex
	attempts map[string][]string // delivery id → event ids per attempt
	byKey    map[string]map[string]int
}

func newRecorder(kind string, keys ...string) *recorder {
	return &recorder{kind: kind, keys: keys, attempts: map[string][]string{}, byKey: map[string]map[string]int{}}
}

func (r *recorder) Kind() string { return r.kind }

func (r *recorder) Route(context.Context, events.Event) ([]string, error) { return r.keys, nil }

func (r *recorder) Deliver(_ context.Context, key string, d events.Delivery, ev events.Event) (events.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[d.ID] = append(r.attempts[d.ID], ev.ID)
	if r.failing > 0 {
		r.failing--
		return events.Result{Code: 500}, errors.New("receiver answered 500")
	}
	if r.byKey[key] == nil {
		r.byKey[key] = map[string]int{}
	}
	r.byKey[key][ev.ID]++
	return events.Result{Code: 200}, nil
}

func publishN(t *testing.T, s *store.Store, n int, at time.Time) []events.Event {
	t.Helper()
	var out []events.Event
	for i := range n {
		ev, err := events.New(events.ServerOffline, events.Subject{Type: "server", ID: fmt.Sprintf("srv_%d", i)},
			events.ServerPayload{ServerID: fmt.Sprintf("srv_%d", i)}, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func TestDispatcherDeliversOncePerDestination(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(t0)
		evs := publishN(t, s, 40, t0)
		inbox, chans := newRecorder("inbox", "all"), newRecorder("channel", "chn_a", "chn_b")
		// Three dispatchers (three control planes) share the store and
		// run at once.
		var ds []*events.Dispatcher
		for range 3 {
			d := events.NewDispatcher(s, c.Now, quiet)
			d.Register(inbox)
			d.Register(chans)
			ds = append(ds, d)
		}
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Go(func() {
				if _, err := d.Pass(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for _, r := range []*recorder{inbox, chans} {
			for _, key := range r.keys {
				for _, ev := range evs {
					if got, want := r.byKey[key][ev.ID], 1; got != want {
						t.Fatalf("%s:%s got event %s %d times, want %d", r.kind, key, ev.ID, got, want)
					}
				}
			}
		}
		for id, a := range chans.attempts {
			if got, want := len(a), 1; got != want {
				t.Fatalf("delivery %s: %d attempts, want %d", id, got, want)
			}
		}
		list, err := s.Deliveries(ctx, "channel:chn_a", 100)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(list), len(evs); got != want {
			t.Fatalf("deliveries of chn_a: got %d, want %d", got, want)
		}
		if got := list[0]; got.Status != events.Delivered || got.Attempts != 1 || got.ResponseCode != 200 || got.DeliveredAt == nil {
			t.Fatalf("delivery record: %+v", got)
		}
		// Nothing is left to do.
		if n, err := ds[0].Pass(ctx); n != 0 || err != nil {
			t.Fatalf("another pass: %d attempts, %v", n, err)
		}
	})
}

func TestDispatcherRetriesWithBackoffThenGivesUp(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(t0)
		publishN(t, s, 1, t0)
		hook := newRecorder("channel", "chn_a")
		hook.failing = 2
		d := events.NewDispatcher(s, c.Now, quiet)
		d.Register(hook)
		pass := func(want int) {
			t.Helper()
			if n, err := d.Pass(ctx); n != want || err != nil {
				t.Fatalf("pass at %s: %d attempts, %v; want %d", c.Now().Sub(t0), n, err, want)
			}
		}
		pass(1)
		list, _ := s.Deliveries(ctx, "channel:chn_a", 10)
		dl := list[0]
		if dl.Status != events.Pending || dl.Attempts != 1 || dl.ResponseCode != 500 || dl.LastError == "" || dl.NextAttemptAt == nil {
			t.Fatalf("after a failure: %+v", dl)
		}
		if wait := dl.NextAttemptAt.Sub(t0); wait < 8*time.Second || wait > 12*time.Second {
			t.Fatalf("first backoff: %s, want about %s", wait, events.DefaultRetryBase)
		}
		pass(0) // not due yet
		c.Advance(12 * time.Second)
		pass(1)
		list, _ = s.Deliveries(ctx, "channel:chn_a", 10)
		if wait := list[0].NextAttemptAt.Sub(c.Now()); wait < 16*time.Second || wait > 24*time.Second {
			t.Fatalf("second backoff: %s, want about 20s", wait)
		}
		c.Advance(24 * time.Second)
		pass(1)
		list, _ = s.Deliveries(ctx, "channel:chn_a", 10)
		if got := list[0]; got.Status != events.Delivered || got.Attempts != 3 || got.LastError != "" || got.ResponseCode != 200 {
			t.Fatalf("after the third attempt: %+v", got)
		}
		if got := hook.attempts[dl.ID]; len(got) != 3 {
			t.Fatalf("attempts under delivery id %s: %v, want 3", dl.ID, got)
		}

		// A destination that never answers is retried for a day, no more.
		publishN(t, s, 1, c.Now())
		hook.failing = 1 << 30
		start := c.Now()
		attempts := 0
		for range 200 {
			n, err := d.Pass(ctx)
			if err != nil {
				t.Fatal(err)
			}
			attempts += n
			c.Advance(10 * time.Minute)
		}
		list, _ = s.Deliveries(ctx, "channel:chn_a", 1)
		if got := list[0]; got.Status != events.Failed || got.NextAttemptAt != nil || got.LastAttemptAt.Sub(start) > events.DefaultMaxAge {
			t.Fatalf("after a day of failures: %+v", got)
		}
		if attempts < 10 || attempts > 40 {
			t.Fatalf("attempts in a day: %d, want exponential backoff to an hour", attempts)
		}
	})
}

func TestDeliveryOfACrashedDispatcherIsMadeAgainWithTheSameID(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := testlab.NewClock(t0)
		evs := publishN(t, s, 1, t0)
		hook := newRecorder("channel", "chn_a")
		d := events.NewDispatcher(s, c.Now, quiet)
		d.Register(hook)
		// A dispatcher routes and claims, then dies before it records
		// the outcome.
		if err := s.RouteEvent(ctx, evs[0].ID, []string{"channel:chn_a"}, c.Now()); err != nil {
			t.Fatal(err)
		}
		claimed, err := s.ClaimDeliveries(ctx, c.Now(), c.Now().Add(d.Lease), 10)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		// Its claim holds until the lease lapses, then another takes it.
		if n, err := d.Pass(ctx); n != 0 || err != nil {
			t.Fatalf("pass while the claim holds: %d %v", n, err)
		}
		c.Advance(d.Lease)
		if n, err := d.Pass(ctx); n != 1 || err != nil {
			t.Fatalf("pass after the claim lapsed: %d %v", n, err)
		}
		if got := hook.attempts[claimed[0].ID]; len(got) != 1 || got[0] != evs[0].ID {
			t.Fatalf("delivered under %s: %v", claimed[0].ID, got)
		}
		// The dead dispatcher's late outcome changes nothing.
		if err := s.FinishDelivery(ctx, claimed[0].ID, events.Outcome{Status: events.Failed, Attempt: 1, At: c.Now()}); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Delivery(ctx, claimed[0].ID)
		if got.Status != events.Delivered || got.Attempts != 2 {
			t.Fatalf("delivery: %+v", got)
		}
	})
}

func TestPruneEventsKeepsPendingDeliveries(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := publishN(t, s, 3, t0)
		if err := s.RouteEvent(ctx, evs[0].ID, nil, t0); err != nil {
			t.Fatal(err)
		}
		if err := s.RouteEvent(ctx, evs[1].ID, []string{"channel:chn_a"}, t0); err != nil {
			t.Fatal(err)
		}
		// evs[2] is not routed yet, evs[1] has a pending delivery.
		n, err := s.PruneEvents(ctx, t0.Add(time.Hour), 100)
		if err != nil || n != 1 {
			t.Fatalf("pruned: %d %v, want 1", n, err)
		}
		if got := eventTypes(t, s); len(got) != 2 {
			t.Fatalf("left: %v", got)
		}
	})
}

// quiet discards the dispatcher's log of failed attempts.
var quiet = slog.New(slog.DiscardHandler)

// ListServerStates gives what presence needs, the same as the full list:
// id, name, status and last heartbeat of every server.
func TestListServerStatesMatchesTheFullList(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustEnroll(t, s, "web-1", t0)
		mustEnroll(t, s, "web-2", t0)
		if err := s.TouchServer(ctx, a.ID, "1.2.3", nil, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		pending := servers.Server{ID: ids.New(ids.Server), Name: "later", Tags: []string{"x"}, Status: servers.Pending, CreatedAt: t0, UpdatedAt: t0}
		if err := s.CreateServer(ctx, pending, ids.Hash(ids.New("ept")), t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		full, err := s.ListServers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		states, err := s.ListServerStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != len(full) || len(full) != 3 {
			t.Fatalf("states %d, full %d, want 3", len(states), len(full))
		}
		for i, f := range full {
			st := states[i]
			if st.ID != f.ID || st.Name != f.Name || st.Status != f.Status || !equalTimes(st.LastSeenAt, f.LastSeenAt) {
				t.Fatalf("server %d: states %+v, full %+v", i, st, f)
			}
		}
	})
}

func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
