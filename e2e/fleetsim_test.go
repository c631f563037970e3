package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fleetsimReport is the part of capstan-fleetsim's --json report the test
// checks.
type fleetsimReport struct {
	Agents   int   `json:"agents"`
	Enrolled int64 `json:"enrolled"`
	Stopped  int64 `json:"stopped_agents"`
	Errors   int64 `json:"errors"`
	Calls    map[string]struct {
		Count  int64   `json:"count"`
		Errors int64   `json:"errors"`
		P50ms  float64 `json:"p50_ms"`
		P99ms  float64 `json:"p99_ms"`
	} `json:"calls"`
	Dispatch struct {
		Count int64   `json:"count"`
		P50ms float64 `json:"p50_ms"`
		P99ms float64 `json:"p99_ms"`
	} `json:"dispatch"`
	Jobs struct {
		Queued      int64 `json:"queued"`
		Claimed     int64 `json:"claimed"`
		Completed   int64 `json:"completed"`
		Outstanding int   `json:"outstanding"`
	} `json:"jobs"`
	FirstErrors  map[string]string `json:"first_errors"`
	ControlPlane *struct {
		CPUAvgPct float64 `json:"cpu_avg_percent"`
		RSSMaxMB  float64 `json:"rss_max_mb"`
	} `json:"control_plane"`
}

// TestFleetSim runs the fleet simulator for real, small: 50 simulated
// agents enroll through the API (the simulator signs in as an
// administrator with password and TOTP), heartbeat, report metrics and
// inventory, and run the agent.ping jobs it queues, against a started
// control plane. Nothing may fail, and every job must be dispatched and
// completed.
func TestFleetSim(t *testing.T) {
	t.Parallel()
	const agents = 50
	sim := buildFleetsim(t)
	cp := startControlPlane(t, Options{})
	admin := newAdmin(t, cp, "fleetsim@example.com")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sim, "--url", cp.URL, "--agents", strconv.Itoa(agents),
		"--ramp", "3s", "--duration", "14s", "--heartbeat", "2s", "--metrics", "3s", "--inventory", "10s",
		"--job-rate", "5", "--concurrency", "8", "--pid", strconv.Itoa(cp.cmd.Process.Pid),
		"--email", admin.Email, "--report-every", "0", "--grace", "10s", "--json")
	cmd.Env = append(childEnv(nil), "CAPSTAN_FLEETSIM_PASSWORD="+admin.Password, "CAPSTAN_FLEETSIM_TOTP_SECRET="+admin.TOTPSecret)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep fleetsimReport
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("capstan-fleetsim: %v; report is not JSON (%v)\nstdout: %s\nstderr: %s", err, jerr, stdout.Bytes(), stderr.Bytes())
	}
	t.Logf("capstan-fleetsim: %d agents, %d jobs queued; heartbeat p50 %.1f ms p99 %.1f ms; dispatch p50 %.1f ms p99 %.1f ms",
		rep.Enrolled, rep.Jobs.Queued, rep.Calls["heartbeat"].P50ms, rep.Calls["heartbeat"].P99ms, rep.Dispatch.P50ms, rep.Dispatch.P99ms)
	if err != nil || rep.Errors != 0 {
		t.Fatalf("capstan-fleetsim: %v; %d errors, first ones: %v\nstderr: %s", err, rep.Errors, rep.FirstErrors, stderr.Bytes())
	}
	if rep.Enrolled != agents || rep.Stopped != 0 {
		t.Errorf("enrolled %d agents (%d stopped), want %d running", rep.Enrolled, rep.Stopped, agents)
	}
	for call, least := range map[string]int64{"enrollment": agents, "enroll": agents, "heartbeat": 4 * agents,
		"metrics": 3 * agents, "inventory": agents, "claim-job": 1, "events": 1, "complete": 1, "actions": 1} {
		if got := rep.Calls[call].Count; got < least {
			t.Errorf("%s calls: %d, want at least %d", call, got, least)
		}
	}
	j := rep.Jobs
	if j.Queued < 20 || j.Claimed != j.Queued || j.Completed != j.Queued || j.Outstanding != 0 || rep.Dispatch.Count != j.Queued {
		t.Errorf("jobs: %+v with %d dispatch latencies; want at least 20 queued, each claimed and completed once", j, rep.Dispatch.Count)
	}
	if rep.ControlPlane == nil || rep.ControlPlane.RSSMaxMB <= 0 {
		t.Errorf("no control plane CPU and RSS in the report although --pid was given")
	}

	// What the simulator did is what the control plane recorded.
	s := signInUser(t, cp, newAdmin(t, cp, "checker@example.com"))
	r := cp.Get(t, "/api/v1/servers", s.AccessToken)
	var list struct {
		Servers []struct {
			Status string   `json:"status"`
			Tags   []string `json:"tags"`
		} `json:"servers"`
	}
	expectJSON(t, r, http.StatusOK, &list)
	online := 0
	for _, srv := range list.Servers {
		if srv.Status == "online" && len(srv.Tags) == 1 && srv.Tags[0] == "fleetsim" {
			online++
		}
	}
	if len(list.Servers) != agents || online != agents {
		t.Errorf("the control plane lists %d servers, %d of them online simulated ones; want %d", len(list.Servers), online, agents)
	}
	var jobs struct {
		Jobs []struct {
			Status string `json:"status"`
		} `json:"jobs"`
	}
	expectJSON(t, cp.Get(t, "/api/v1/jobs?limit=100", s.AccessToken), http.StatusOK, &jobs)
	for _, job := range jobs.Jobs {
		if job.Status != "succeeded" {
			t.Errorf("a simulated job is %s, want succeeded", job.Status)
			break
		}
	}
	if len(jobs.Jobs) == 0 {
		t.Error("the control plane lists no jobs")
	}
}

// buildFleetsim builds cmd/capstan-fleetsim into the test's temporary
// directory.
func buildFleetsim(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "capstan-fleetsim")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/capstan-dev/capstan/cmd/capstan-fleetsim")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building capstan-fleetsim: %v\n%s", err, out)
	}
	return bin
}
