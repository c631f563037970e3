package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// stormReport is the restart part of capstan-fleetsim's --json report.
type stormReport struct {
	fleetsimReport
	Restart *struct {
		KilledAtS      float64 `json:"killed_at_s"`
		RestartedAtS   float64 `json:"restarted_at_s"`
		NewPID         int     `json:"new_pid"`
		AgentsDownMax  int     `json:"agents_down_max"`
		AllBack        bool    `json:"all_back"`
		AllBackAfterS  float64 `json:"all_back_after_s"`
		ErrorsTotal    int     `json:"errors_total"`
		ErrorsPeakPerS int     `json:"errors_peak_per_s"`
		BackPeakPerS   int     `json:"back_peak_per_s"`
		Curve          []struct {
			Second    int `json:"second"`
			Errors    int `json:"errors"`
			WentDown  int `json:"went_down"`
			CameBack  int `json:"came_back"`
			AgentsOut int `json:"agents_out_max"`
		} `json:"curve"`
	} `json:"restart"`
}

// Sizes and intervals of the restart storm run in make test.
const (
	stormAgents    = 500
	stormHeartbeat = 2 * time.Second
	stormMetrics   = 3 * time.Second
	// stormMaxBackoff is the longest wait of a simulated agent between
	// two failed claims (its backoff: 0.5 s doubling up to 30 s).
	stormMaxBackoff = 30 * time.Second
	// stormStartSlack is what the restarted control plane may take to
	// open its store and listen, on a loaded machine.
	stormStartSlack = 20 * time.Second
)

// TestRestartStorm: 500 simulated agents (capstan-fleetsim) heartbeat,
// report metrics and run jobs against a control plane that is killed
// with SIGKILL mid-run and started again on the same address and data.
// Every agent must be back within the longest wait its backoff allows
// plus the restart, the failed calls must stay within what the agents'
// own intervals and backoff can make in that time (no retry loop), and no
// job may be lost: every job the simulator queued is claimed and
// completed, and every job in the store succeeded (a claim whose answer
// died with the process is queued again).
func TestRestartStorm(t *testing.T) {
	t.Parallel()
	sim := buildFleetsim(t)
	grace := "--restart-lease-grace=5s"
	cp := startControlPlane(t, Options{Args: []string{grace}})
	admin := newAdmin(t, cp, "storm@example.com")

	// The simulator kills cp and starts the control plane again with this
	// command; the new process writes its id first, to be stopped when
	// the test ends.
	dir := t.TempDir()
	pidFile, logFile := filepath.Join(dir, "serve.pid"), filepath.Join(dir, "serve.log")
	restart := fmt.Sprintf("echo $$ >%s; exec %s serve --listen %s --log-level warn %s %s >>%s 2>&1",
		shellQuote(pidFile), shellQuote(capstanBin), cp.Addr, shellJoin(cp.StoreArgs()), grace, shellQuote(logFile))
	t.Cleanup(func() {
		stopRestarted(t, pidFile)
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("restarted control plane's log:\n%s", testlab.Tail(string(b), 60))
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sim, "--url", cp.URL, "--agents", strconv.Itoa(stormAgents),
		"--ramp", "5s", "--duration", "40s", "--kill-after", "15s", "--restart-cmd", restart,
		"--heartbeat", stormHeartbeat.String(), "--metrics", stormMetrics.String(), "--inventory", "1m",
		"--job-rate", "20", "--concurrency", "16", "--pid", strconv.Itoa(cp.cmd.Process.Pid),
		"--email", admin.Email, "--report-every", "0", "--grace", "2m", "--json")
	cmd.Env = append(childEnv(nil), "CAPSTAN_FLEETSIM_PASSWORD="+admin.Password, "CAPSTAN_FLEETSIM_TOTP_SECRET="+admin.TOTPSecret)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	select {
	case <-cp.exited:
		// The simulator killed it: not this test's to stop.
		cp.stopOnce.Do(func() {})
	default:
	}
	var rep stormReport
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("capstan-fleetsim: %v; report is not JSON (%v)\nstdout: %s\nstderr: %s", err, jerr, stdout.Bytes(), stderr.Bytes())
	}
	// The simulator exits 1 when calls failed, as they do while the
	// control plane is down.
	var exit *exec.ExitError
	if (err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1 && rep.Errors > 0)) || rep.Restart == nil {
		t.Fatalf("capstan-fleetsim: %v; restart %+v\nstderr: %s", err, rep.Restart, stderr.Bytes())
	}
	r := rep.Restart
	t.Logf("restart storm, %d agents: killed at %.1fs, restarted at %.1fs; %d cut off at most; all back %.1fs after the restart; %d failed calls (peak %d/s), back peak %d/s",
		rep.Enrolled, r.KilledAtS, r.RestartedAtS, r.AgentsDownMax, r.AllBackAfterS, r.ErrorsTotal, r.ErrorsPeakPerS, r.BackPeakPerS)
	var curve strings.Builder
	for _, c := range r.Curve {
		fmt.Fprintf(&curve, " %ds:%d/%d/%d", c.Second, c.Errors, c.WentDown, c.CameBack)
	}
	t.Logf("per second (errors/went down/came back):%s", curve.String())
	t.Logf("failed calls in the whole run: %d, first ones: %v", rep.Errors, rep.FirstErrors)

	if rep.Enrolled != stormAgents || rep.Stopped != 0 {
		t.Errorf("enrolled %d agents (%d stopped), want %d running", rep.Enrolled, rep.Stopped, stormAgents)
	}
	if r.AgentsDownMax == 0 {
		t.Errorf("no agent was cut off by the kill: the storm did not happen")
	}
	backWithin := stormMaxBackoff + stormHeartbeat + stormStartSlack
	if !r.AllBack || r.AllBackAfterS > backWithin.Seconds() {
		t.Errorf("agents back: all %v, %.1fs after the restart; want all within %s (the longest backoff, a heartbeat, the start)", r.AllBack, r.AllBackAfterS, backWithin)
	}
	// Each agent, while cut off, fails at most every heartbeat and metrics
	// report, and a claim (and the event and result of a job it runs)
	// per step of its backoff: 0.5 s doubling, so 7 steps to 30 s and
	// then one per 15 s at least; and one call of each kind in flight at
	// the kill.
	out := r.AllBackAfterS + (r.RestartedAtS - r.KilledAtS)
	perAgent := out/stormHeartbeat.Seconds() + out/stormMetrics.Seconds() + 3*(7+out/15) + 5
	if limit := int(float64(stormAgents) * perAgent); r.ErrorsTotal > limit {
		t.Errorf("%d failed calls in the %.1fs the agents were cut off, want at most %d (%.1f per agent)", r.ErrorsTotal, out, limit, perAgent)
	}

	// No job lost.
	j := rep.Jobs
	if j.Queued < 100 || j.Outstanding != 0 || j.Completed < j.Queued {
		t.Errorf("jobs: %+v; want at least 100 queued, each claimed and completed", j)
	}
	db := openStoreDB(t, cp)
	var counts map[string]int
	testlab.EventuallyReport(t, 2*time.Minute, "every job ended", func() (bool, string) {
		counts = jobCounts(t, db)
		return counts["queued"]+counts["running"] == 0, fmt.Sprint(counts)
	})
	if counts["succeeded"] == 0 || len(counts) != 1 {
		t.Errorf("jobs in the store by state: %v; want every one succeeded", counts)
	}
}

// jobCounts counts the jobs in the store by state (a failed one with its
// error).
func jobCounts(t testing.TB, db *sql.DB) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT status, COALESCE(error, ''), COUNT(*) FROM jobs GROUP BY status, COALESCE(error, '')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var status, errText string
		var n int
		if err := rows.Scan(&status, &errText, &n); err != nil {
			t.Fatal(err)
		}
		if errText != "" {
			status += " " + errText
		}
		out[status] += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shellJoin quotes each argument for sh and joins them with spaces.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// stopRestarted stops the control plane whose process id is in pidFile
// (one that a test did not start itself): SIGTERM, then SIGKILL if it is
// still there after stopTimeout.
func stopRestarted(t testing.TB, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return // never started
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Errorf("pid file %s: %q", pidFile, b)
		return
	}
	gone := func() bool {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		// An exited child of a process that is gone may wait as a
		// zombie for its new parent to reap it.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		return len(f) > 0 && f[0] == "Z"
	}
	if gone() {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM) //nolint:errcheck // it may just have exited
	deadline := time.Now().Add(stopTimeout)
	for !gone() {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // best effort
			t.Errorf("the restarted control plane (pid %d) did not exit within %s of SIGTERM", pid, stopTimeout)
			return
		}
		time.Sleep(pollInterval)
	}
}
