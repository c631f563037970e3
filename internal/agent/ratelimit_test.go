package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// The control plane answers a rate-limited report 429 with Retry-After.
// The agent's backoff here is at most 100 ms, far below the 1 s asked for.
const testRetryAfter = time.Second

// checkWaited fails unless route was posted to exactly twice by the time
// its retry was accepted: once throttled, once again no sooner than
// Retry-After later.
func checkWaited(t *testing.T, cp *agenttest.ControlPlane, route string) {
	t.Helper()
	posts := cp.Posts(route)
	if len(posts) < 2 {
		t.Fatalf("%s: %d posts, want the throttled one and its retry", route, len(posts))
	}
	if gap := posts[1].Sub(posts[0]); gap < testRetryAfter {
		t.Errorf("%s: retried %s after a 429 with Retry-After %s, want no sooner", route, gap, testRetryAfter)
	}
}

// TestReportsHonourRetryAfter: metrics and inventory reports answered 429
// are sent again, unchanged, after the Retry-After the control plane gave,
// not earlier and not in a tight loop.
func TestReportsHonourRetryAfter(t *testing.T) {
	cp := agenttest.New(t)
	cp.Throttle("metrics", 1, testRetryAfter)
	cp.Throttle("inventory", 1, testRetryAfter)
	s := &seqSampler{}
	inv := &fakeInventory{}
	inv.set(agentproto.InventoryRequest{Services: []agentproto.ServiceInfo{{Name: "ssh.service"}}})
	r := start(t, cp, nil, withReports(s, inv, 20*time.Millisecond, time.Hour))

	testlab.Eventually(t, waitLong, "metrics accepted after the 429", func() bool { return len(cp.Samples()) >= 1 })
	testlab.Eventually(t, waitLong, "an inventory accepted after the 429", func() bool { return len(cp.Inventories()) >= 1 })
	checkWaited(t, cp, "metrics")
	checkWaited(t, cp, "inventory")
	// The samples taken while waiting went with the retry: none dropped.
	for i, n := range sampleNumbers(cp.Samples()) {
		if n != i {
			t.Fatalf("sample %d is number %d: the throttled samples were not sent again (%v)", i, n, sampleNumbers(cp.Samples()))
		}
	}
	if got := cp.Inventories()[0].Services; len(got) != 1 || got[0].Name != "ssh.service" {
		t.Errorf("inventory after the 429: %+v", got)
	}
	r.stop()
	r.wait(t)
}

// TestJobEventsHonourRetryAfter: a job's events answered 429 are posted
// again after Retry-After, and all of them arrive.
func TestJobEventsHonourRetryAfter(t *testing.T) {
	cp := agenttest.New(t)
	cp.Throttle("events", 1, testRetryAfter)
	reg := agent.Registry{}
	reg.Register("test.events", agent.ExecutorFunc(func(_ context.Context, _ agentproto.Job, _ map[string]string, ev agent.EventSink) (any, any, error) {
		for i := range 5 {
			ev.Emit(agentproto.LevelInfo, fmt.Sprintf("step %d", i), nil)
		}
		return nil, nil, nil
	}))
	start(t, cp, reg)
	job := newJob("test.events", nil)
	cp.Enqueue(job, nil)
	waitCompletion(t, cp, job.ID)
	events, _ := cp.Events(job.ID)
	if len(events) != 5 {
		t.Fatalf("%d events arrived, want all 5: %+v", len(events), events)
	}
	checkWaited(t, cp, "events")
}
