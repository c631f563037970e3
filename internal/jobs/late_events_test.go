package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// TestLateEvents: the agent of a finished job may add events to it for
// LateEventsWindow after it finished (what it cleaned up after the
// result), not later, and not to a job that has not started.
func TestLateEvents(t *testing.T) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			st := storetest.Open(t, d)
			p := planetest.New(t, st, planetest.Options{Clock: testlab.NewClock(time.Now().UTC())})
			clock, js := p.Clock, p.Jobs
			srv := p.Enroll("web-1", agentproto.Facts{})
			ev := func(msg string) []agentproto.Event {
				return []agentproto.Event{{Level: agentproto.LevelInfo, Message: msg}}
			}

			queued, _, err := js.Enqueue(ctx, jobs.NewJob{ServerID: srv, Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})})
			if err != nil {
				t.Fatal(err)
			}
			if err := js.AddEvents(ctx, srv, queued.ID, ev("too early")); !fault.Is(err, fault.Conflict) {
				t.Fatalf("events of a queued job: %v, want a conflict", err)
			}
			j, ok, err := js.Claim(ctx, srv, 0)
			if err != nil || !ok || j.ID != queued.ID {
				t.Fatalf("claim: %+v %v %v", j, ok, err)
			}
			if err := js.AddEvents(ctx, srv, j.ID, ev("running")); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Complete(ctx, srv, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(jobs.LateEventsWindow - time.Second)
			if err := js.AddEvents(ctx, srv, j.ID, ev("removed the old container")); err != nil {
				t.Fatalf("events within the window after the job finished: %v", err)
			}
			clock.Advance(2 * time.Second)
			if err := js.AddEvents(ctx, srv, j.ID, ev("too late")); !fault.Is(err, fault.Conflict) {
				t.Fatalf("events past the window: %v, want a conflict", err)
			}
			got, events, err := js.Get(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, e := range events {
				msgs = append(msgs, e.Message)
			}
			if got.Status != jobs.Succeeded || len(msgs) != 2 || msgs[0] != "running" || msgs[1] != "removed the old container" {
				t.Fatalf("job %s with events %q, want succeeded with the running and the late event", got.Status, msgs)
			}
		})
	}
}
