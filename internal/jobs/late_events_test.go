package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestLateEvents: the agent of a finished job may add events to it for
// LateEventsWindow after it finished (what it cleaned up after the
// result), not later, and not to a job that has not started.
func TestLateEvents(t *testing.T) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			st := storetest.Open(t, d)
			clock := testlab.NewClock(time.Now().UTC())
			js := jobs.NewService(st, secrets.GenerateKey(), clock.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
			srvs := servers.NewService(st, js, audit.NewLog(st, clock.Now), clock.Now, "http://capstan.test", time.Hour)
			e, err := srvs.CreateEnrollment(ctx, audit.Actor{Type: audit.ActorUser, ID: "usr_admin"}, audit.Entry{}, "web-1", nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := srvs.Enroll(ctx, audit.Entry{}, agentproto.EnrollRequest{Token: e.Token})
			if err != nil {
				t.Fatal(err)
			}
			srv := res.ServerID
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
