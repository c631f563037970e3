package agent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestJobRunningAtCrashIsReportedFailed copies an agent's state directory
// while a job runs, as a crash or power loss would leave it. An agent
// started on the copy reports that job failed (its outcome unknown) at
// once, rather than leaving it to its lease, and does not run it when the
// control plane hands it out again: it reports the same result.
func TestJobRunningAtCrashIsReportedFailed(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	state := t.TempDir()
	start(t, cp, registry("test.gate", g), func(o *agent.Options) { o.StateDir = state })
	job := newJob("test.gate", nil)
	cp.Enqueue(job, nil)
	<-g.started

	crashed := t.TempDir()
	src := filepath.Join(state, agent.PendingDir, cp.ServerID())
	if err := os.CopyFS(filepath.Join(crashed, agent.PendingDir, cp.ServerID()), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if n := len(cp.Completions(job.ID)); n != 0 {
		t.Fatalf("%d completions while the job runs", n)
	}

	// The same server, another control plane process: only the restarted
	// agent reports to it.
	after := agenttest.New(t)
	after.SetServer(cp.ServerID(), cp.AgentToken())
	g2 := newGate()
	start(t, after, registry("test.gate", g2), func(o *agent.Options) { o.StateDir = crashed })
	res := waitCompletion(t, after, job.ID)
	if res.Status != agentproto.StatusFailed || res.Error == "" {
		t.Fatalf("result %+v, want failed with a reason", res)
	}
	t.Logf("reported: %s", res.Error)

	after.Enqueue(job, nil)
	testlab.Eventually(t, waitLong, "the job delivered again to be completed again", func() bool { return len(after.Completions(job.ID)) >= 2 })
	if got := after.Completions(job.ID)[1]; got.Status != res.Status || got.Error != res.Error {
		t.Errorf("second completion %+v, want the first %+v", got, res)
	}
	if n := g2.runs.Load(); n != 0 {
		t.Errorf("the restarted agent ran the job %d times, want 0", n)
	}
	close(g.release)
}
