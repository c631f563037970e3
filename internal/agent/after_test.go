package agent_test

import (
	"context"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestAfterRunsBesideTheResult: the work a job leaves for after its result
// does not hold the result back; it runs once the executor returned, and
// its events reach the same job after the completion.
func TestAfterRunsBesideTheResult(t *testing.T) {
	cp := agenttest.New(t)
	release := make(chan struct{})
	ran := make(chan struct{})
	ex := agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, _ map[string]string, events agent.EventSink) (any, any, error) {
		events.Emit(agentproto.LevelInfo, "switched", nil)
		agent.After(ctx, events, func(ctx context.Context, events agent.EventSink) {
			defer close(ran)
			select {
			case <-release:
				events.Emit(agentproto.LevelInfo, "removed the old container", nil)
			case <-ctx.Done():
			}
		})
		return map[string]string{"released": "yes"}, nil, nil
	})
	start(t, cp, registry("test.after", ex))
	job := newJob("test.after", nil)
	cp.Enqueue(job, nil)

	res := waitCompletion(t, cp, job.ID)
	if res.Status != agentproto.StatusSucceeded {
		t.Fatalf("result %+v", res)
	}
	select {
	case <-ran:
		t.Fatal("the work left for after the result ended before it was released")
	default:
	}
	close(release)
	<-ran
	testlab.Eventually(t, waitLong, "the later event", func() bool {
		evs, _ := cp.Events(job.ID)
		return len(evs) == 2 && evs[1].Message == "removed the old container"
	})
	if n := cp.EventsAtCompletion(job.ID); n != 1 {
		t.Errorf("%d events at completion, want 1 (the later one came after)", n)
	}
}

// TestAfterOutsideAnAgent: an executor run on its own runs the work at once.
func TestAfterOutsideAnAgent(t *testing.T) {
	ran := false
	agent.After(context.Background(), nil, func(context.Context, agent.EventSink) { ran = true })
	if !ran {
		t.Fatal("After did not run the work outside an agent")
	}
}
