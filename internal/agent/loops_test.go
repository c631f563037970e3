package agent_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Extra loops run with the agent's client, are restarted after an error,
// and end with Run.
func TestExtraLoops(t *testing.T) {
	cp := agenttest.New(t)
	var calls, running atomic.Int32
	var gotClient atomic.Bool
	r := start(t, cp, nil, func(o *agent.Options) {
		o.Loops = []agent.Loop{{Name: "test loop", Run: func(ctx context.Context, c *agent.Client) error {
			gotClient.Store(c != nil)
			if calls.Add(1) == 1 {
				return errors.New("first run fails")
			}
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return nil
		}}}
	})
	testlab.Eventually(t, 30*time.Second, "the loop to run again after its error", func() bool { return running.Load() == 1 })
	if calls.Load() != 2 || !gotClient.Load() {
		t.Errorf("calls %d, client %v", calls.Load(), gotClient.Load())
	}
	r.stop()
	r.wait(t)
	if running.Load() != 0 {
		t.Error("the loop outlived Run")
	}
}
