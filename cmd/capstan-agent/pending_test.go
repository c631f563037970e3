package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestBinaryKeepsUndeliveredAcrossKill9: while the control plane refuses
// metrics and job results (503), the agent samples every second and
// finishes a ping; it is then killed with SIGKILL. Started again on the
// same state directory with the control plane accepting, it delivers the
// ping's result of the first run (not a second run of it) and every
// sample the first run had buffered, then keeps nothing more.
func TestBinaryKeepsUndeliveredAcrossKill9(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetConfig(agentproto.Config{HeartbeatSeconds: 1, MetricsSeconds: 1, ClaimWaitSeconds: 2, MaxConcurrentJobs: 4})
	cp.SetMetricsStatus(http.StatusServiceUnavailable)
	var accept atomic.Bool
	cp.SetCompleteHook(func(string, int) int {
		if accept.Load() {
			return 0
		}
		return http.StatusServiceUnavailable
	})
	path := filepath.Join(t.TempDir(), "agent.json")
	cfg := agent.Config{APIURL: cp.URL, ServerID: cp.ServerID(), ServerName: cp.ServerName(), AgentToken: cp.AgentToken(), HeartbeatSeconds: 1, MetricsSeconds: 1}
	if err := agent.SaveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	args := []string{"run", "--config", path, "--state-dir", state, "--log-level", "debug",
		"--proxy-access-log", filepath.Join(t.TempDir(), "access.log")}

	first := startBinary(t, args...)
	job := agentproto.Job{ID: ids.New(ids.Job), Type: agentproto.JobAgentPing, Payload: json.RawMessage(`{"message":"kept"}`), TimeoutSeconds: 30}
	cp.Enqueue(job, nil)
	// A sample is kept before the next is taken: once a fourth distinct
	// sample was posted, the first three are on disk.
	var refused []time.Time
	testlab.Eventually(t, 2*time.Minute, "a refused result and four refused samples", func() bool {
		refused = distinctTimes(cp.RefusedSamples())
		return cp.CompleteAttempts(job.ID) >= 1 && len(refused) >= 4
	})
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.exitStatus(t, time.Minute)
	killed := time.Now()
	if n := len(cp.Completions(job.ID)); n != 0 {
		t.Fatalf("the control plane took %d results while refusing them", n)
	}
	refused = distinctTimes(cp.RefusedSamples())
	owed := refused[:len(refused)-1]

	cp.SetMetricsStatus(0)
	accept.Store(true)
	second := startBinary(t, args...)
	testlab.Eventually(t, time.Minute, "the first run's ping result", func() bool { return len(cp.Completions(job.ID)) > 0 })
	res := cp.Completions(job.ID)[0]
	var pr agentproto.PingResult
	if err := json.Unmarshal(res.Data, &pr); err != nil || res.Status != agentproto.StatusSucceeded || pr.Message != "kept" {
		t.Fatalf("result %+v (%v), want the ping's success with message kept", res, err)
	}
	if !pr.AgentTime.Before(killed) {
		t.Fatalf("the ping ran at %s, after the first agent was killed at %s: it ran again", pr.AgentTime, killed)
	}
	testlab.EventuallyReport(t, time.Minute, "every sample the killed agent had buffered", func() (bool, string) {
		got := distinctTimes(cp.Samples())
		var missing []time.Time
		for _, at := range owed {
			if _, ok := slices.BinarySearchFunc(got, at, time.Time.Compare); !ok {
				missing = append(missing, at)
			}
		}
		return len(missing) == 0, "missing samples taken at " + formatTimes(missing)
	})
	pending := filepath.Join(state, agent.PendingDir, cp.ServerID())
	testlab.EventuallyReport(t, time.Minute, "nothing of the first run kept once delivered", func() (bool, string) {
		jobs, err := os.ReadDir(filepath.Join(pending, "jobs"))
		if err != nil || len(jobs) != 0 {
			return false, fmt.Sprintf("job records %s (%v)", dirNames(jobs), err)
		}
		// Between a sample and its delivery the file holds that sample.
		b, err := os.ReadFile(filepath.Join(pending, "metrics.json"))
		if os.IsNotExist(err) {
			return true, ""
		}
		var kept struct{ Samples []agentproto.MetricSample }
		if err == nil {
			err = json.Unmarshal(b, &kept)
		}
		if err != nil {
			return false, err.Error()
		}
		for _, s := range kept.Samples {
			if !s.At.After(killed) {
				return false, "metrics.json still holds a sample of " + s.At.String()
			}
		}
		return true, ""
	})
	if !second.running() {
		t.Fatalf("the second agent exited:\n%s", second.stderr.String())
	}
}

// distinctTimes returns the sorted distinct times of samples.
func distinctTimes(samples []agentproto.MetricSample) []time.Time {
	out := make([]time.Time, 0, len(samples))
	for _, s := range samples {
		out = append(out, s.At)
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}

func formatTimes(ts []time.Time) string {
	b, _ := json.Marshal(ts)
	return string(b)
}

func dirNames(es []os.DirEntry) string {
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	b, _ := json.Marshal(names)
	return string(b)
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
