package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// replicasReport is the part of capstan-fleetsim's --json report about
// several control planes.
type replicasReport struct {
	ControlPlaneTotal *struct {
		PID      string  `json:"pid"`
		RSSMaxMB float64 `json:"rss_max_mb"`
		RSSEndMB float64 `json:"rss_end_mb"`
	} `json:"control_plane"`
	ControlPlanes []struct {
		URL      string `json:"url"`
		Agents   int    `json:"agents"`
		Errors   int64  `json:"errors"`
		Dispatch struct {
			Count int64   `json:"count"`
			P99ms float64 `json:"p99_ms"`
		} `json:"dispatch"`
		Calls map[string]struct {
			Count  int64 `json:"count"`
			Errors int64 `json:"errors"`
		} `json:"calls"`
		Process *struct {
			PID      string  `json:"pid"`
			RSSEndMB float64 `json:"rss_end_mb"`
			RSSMaxMB float64 `json:"rss_max_mb"`
		} `json:"process"`
	} `json:"control_planes"`
	RestartOf *struct {
		URL        string `json:"url"`
		AgentsOnIt int    `json:"agents_on_it"`
	} `json:"restart"`
}

// TestFleetSimReplicas runs the fleet simulator against two control
// planes on one PostgreSQL database: the agents are spread over both and
// each job is queued through the other replica than its agent's; the
// second replica is killed with SIGKILL mid-run and started again. The
// report must give each replica its agents, calls, dispatch and process;
// the first replica's agents must not notice the kill, the second's must
// all come back, and no job may be lost or run twice.
func TestFleetSimReplicas(t *testing.T) {
	t.Parallel()
	const agents = 60
	sim := buildFleetsim(t)
	grace := "--restart-lease-grace=5s"
	key := "CAPSTAN_SECRET_KEY=" + secrets.GenerateKey().Encode()
	opts := Options{Dialect: store.Postgres, Args: []string{grace}, Env: []string{key}}
	a := startControlPlane(t, opts)
	opts.DatabaseURL = a.DatabaseURL
	b := startControlPlane(t, opts)
	admin := newAdmin(t, a, "fleetsim@example.com")

	dir := t.TempDir()
	pidFile, logFile := filepath.Join(dir, "serve.pid"), filepath.Join(dir, "serve.log")
	restart := fmt.Sprintf("echo $$ >%s; exec %s serve --listen %s --log-level warn %s %s >>%s 2>&1",
		shellQuote(pidFile), shellQuote(capstanBin), b.Addr, shellJoin(b.StoreArgs()), grace, shellQuote(logFile))
	t.Cleanup(func() {
		stopRestarted(t, pidFile)
		if t.Failed() {
			if out, err := os.ReadFile(logFile); err == nil {
				t.Logf("restarted control plane's log:\n%s", testlab.Tail(string(out), 60))
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sim, "--url", a.URL+","+b.URL, "--agents", strconv.Itoa(agents),
		"--pid", strconv.Itoa(a.cmd.Process.Pid)+","+strconv.Itoa(b.cmd.Process.Pid),
		"--ramp", "3s", "--duration", "30s", "--kill-after", "15s", "--kill-index", "1", "--restart-cmd", restart,
		"--heartbeat", "2s", "--metrics", "3s", "--inventory", "1m", "--job-rate", "10", "--concurrency", "8",
		"--email", admin.Email, "--report-every", "0", "--grace", "2m", "--json")
	// The restarted replica gets the secret key from the simulator's
	// environment, through the restart command's shell.
	cmd.Env = append(childEnv(nil), key, "CAPSTAN_FLEETSIM_PASSWORD="+admin.Password, "CAPSTAN_FLEETSIM_TOTP_SECRET="+admin.TOTPSecret)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	select {
	case <-b.exited:
		// The simulator killed it: not this test's to stop.
		b.stopOnce.Do(func() {})
	default:
	}
	var rep stormReport
	var extra replicasReport
	jerr := json.Unmarshal(stdout.Bytes(), &rep)
	if jerr == nil {
		jerr = json.Unmarshal(stdout.Bytes(), &extra)
	}
	if jerr != nil {
		t.Fatalf("capstan-fleetsim: %v; report is not JSON (%v)\nstdout: %s\nstderr: %s", err, jerr, stdout.Bytes(), stderr.Bytes())
	}
	var exit *exec.ExitError
	if (err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1 && rep.Errors > 0)) || rep.Restart == nil || len(extra.ControlPlanes) != 2 {
		t.Fatalf("capstan-fleetsim: %v; restart %+v, %d control planes in the report\nstderr: %s", err, rep.Restart, len(extra.ControlPlanes), stderr.Bytes())
	}
	r := rep.Restart
	t.Logf("two replicas, %d agents; replica B killed at %.1fs: %d agents cut off, all back %.1fs after the restart; %d failed calls; first errors %v",
		rep.Enrolled, r.KilledAtS, r.AgentsDownMax, r.AllBackAfterS, r.ErrorsTotal, rep.FirstErrors)

	if rep.Enrolled != agents || rep.Stopped != 0 {
		t.Errorf("enrolled %d agents (%d stopped), want %d running", rep.Enrolled, rep.Stopped, agents)
	}
	pids := []int{a.cmd.Process.Pid, b.cmd.Process.Pid}
	var errs int64
	for i, cp := range extra.ControlPlanes {
		t.Logf("replica %d: %d agents, %d errors, %d heartbeats, dispatch n=%d p99 %.1f ms", i, cp.Agents, cp.Errors, cp.Calls["heartbeat"].Count, cp.Dispatch.Count, cp.Dispatch.P99ms)
		if want := []string{a.URL, b.URL}[i]; cp.URL != want || cp.Agents != agents/2 {
			t.Errorf("replica %d in the report: %s with %d agents, want %s with %d", i, cp.URL, cp.Agents, want, agents/2)
		}
		// Every agent heartbeats every 2 s for the 30 s; a few missed
		// around the kill on B.
		if n := cp.Calls["heartbeat"].Count; n < int64(agents/2*10) {
			t.Errorf("replica %d answered %d heartbeats, want at least %d", i, n, agents/2*10)
		}
		// Jobs queued through the other replica reached agents waiting
		// on this one.
		if cp.Dispatch.Count < 20 || cp.Calls["claim-job"].Count < 20 {
			t.Errorf("replica %d: %d dispatches, %d jobs claimed; want at least 20 of each", i, cp.Dispatch.Count, cp.Calls["claim-job"].Count)
		}
		if cp.Process == nil || cp.Process.RSSMaxMB <= 0 {
			t.Errorf("replica %d: no process figures although --pid was given", i)
		}
		errs += cp.Errors
	}
	if errs != rep.Errors {
		t.Errorf("errors per replica add up to %d, the report's total is %d", errs, rep.Errors)
	}
	if extra.ControlPlanes[0].Errors != 0 {
		t.Errorf("replica A, which was not killed, had %d failed calls", extra.ControlPlanes[0].Errors)
	}
	if p := extra.ControlPlanes[0].Process; p != nil && p.PID != strconv.Itoa(pids[0]) {
		t.Errorf("replica A's process is %s, want %d", p.PID, pids[0])
	}
	if p := extra.ControlPlanes[1].Process; p != nil && p.PID != strconv.Itoa(r.NewPID) {
		t.Errorf("replica B's process at the end is %s, want the restarted %d", p.PID, r.NewPID)
	}
	if tot, cps := extra.ControlPlaneTotal, extra.ControlPlanes; tot == nil || cps[0].Process == nil || cps[1].Process == nil ||
		math.Abs(tot.RSSEndMB-(cps[0].Process.RSSEndMB+cps[1].Process.RSSEndMB)) > 0.01 ||
		!strings.Contains(tot.PID, ",") {
		t.Errorf("the report's control_plane is not the two replicas together: %+v", tot)
	}

	if extra.RestartOf == nil || extra.RestartOf.URL != b.URL || extra.RestartOf.AgentsOnIt != agents/2 {
		t.Errorf("the restart names %+v, want %s with %d agents", extra.RestartOf, b.URL, agents/2)
	}
	if r.AgentsDownMax == 0 || r.AgentsDownMax > agents/2 {
		t.Errorf("%d agents cut off at most, want some and at most B's %d", r.AgentsDownMax, agents/2)
	}
	backWithin := stormMaxBackoff + 2*time.Second + stormStartSlack
	if !r.AllBack || r.AllBackAfterS > backWithin.Seconds() {
		t.Errorf("agents back: all %v, %.1fs after the restart; want all within %s", r.AllBack, r.AllBackAfterS, backWithin)
	}

	// No job lost, none run twice. An action whose answer was cut off
	// by the kill may have queued a job the simulator does not know of:
	// its agent claims and completes it too.
	j := rep.Jobs
	unknown := rep.Calls["actions"].Errors
	if j.Queued < 100 || j.Outstanding != 0 || j.Claimed < j.Queued || j.Claimed > j.Queued+unknown || j.Completed != j.Claimed {
		t.Errorf("jobs: %+v (%d actions failed); want at least 100 queued, each claimed and completed once", j, unknown)
	}
	db := openStoreDB(t, a)
	var counts map[string]int
	testlab.EventuallyReport(t, 2*time.Minute, "every job ended", func() (bool, string) {
		counts = jobCounts(t, db)
		return counts["queued"]+counts["running"] == 0, fmt.Sprint(counts)
	})
	if counts["succeeded"] < int(j.Queued) || counts["succeeded"] > int(j.Queued+unknown) || len(counts) != 1 {
		t.Errorf("jobs in the store by state: %v; want every one of the %d succeeded", counts, j.Queued)
	}
}
