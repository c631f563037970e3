package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// TestJobTypeTheAgentDoesNotRun: a job type the server's agent reported
// it does not run is refused with 409 agent-upgrade-required, naming the
// server, the agent's version and the type, and nothing is queued; one it
// runs is queued; an agent that reported no job types is sent any.
func TestJobTypeTheAgentDoesNotRun(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		p := planetest.New(t, st, planetest.Options{Now: func() time.Time { return time.Now().UTC() }})
		js := p.Jobs
		enroll := func(name string, types []string) string {
			t.Helper()
			return p.Enroll(name, agentproto.Facts{Hostname: name, AgentVersion: "0.9", JobTypes: types})
		}
		restart := jobs.Of(agentproto.ServiceRestart, agentproto.ServicePayload{Unit: "web.service"})
		ping := jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})

		narrow := enroll("narrow", []string{agentproto.JobAgentPing})
		_, _, err := js.Enqueue(ctx, jobs.NewJob{ServerID: narrow, Work: restart})
		fe := fault.As(err)
		if fe == nil || fe.Kind != fault.Conflict || fe.Code != "agent-upgrade-required" {
			t.Fatalf("service.restart on an agent that runs only agent.ping: %v, want 409 agent-upgrade-required", err)
		}
		for _, want := range []string{"narrow", "0.9", "service.restart"} {
			if !strings.Contains(fe.Message, want) {
				t.Errorf("the refusal %q does not name %q", fe.Message, want)
			}
		}
		if list, err := js.List(ctx, jobs.ListFilter{ServerID: narrow}, 10, jobs.AdminReader); err != nil || len(list) != 0 {
			t.Fatalf("jobs of the server after the refusal: %d (%v), want none", len(list), err)
		}
		if _, _, err := js.Enqueue(ctx, jobs.NewJob{ServerID: narrow, Work: ping}); err != nil {
			t.Fatalf("agent.ping on an agent that runs it: %v", err)
		}
		older := enroll("older", nil)
		if _, _, err := js.Enqueue(ctx, jobs.NewJob{ServerID: older, Work: restart}); err != nil {
			t.Fatalf("service.restart on an agent that reported no job types: %v", err)
		}
	})
}
