package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestIdleFootprint runs the capstan-agent binary against the fake control
// plane with the sample configuration (heartbeat 10 s, metrics 15 s,
// inventory checked every 30 s) for CAPSTAN_AGENT_FOOTPRINT_SECONDS seconds
// and logs its CPU use (utime+stime of /proc/PID/stat, from its first
// sample on) and resident memory (VmRSS, VmHWM). Skipped unless that
// variable is set.
func TestIdleFootprint(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("CAPSTAN_AGENT_FOOTPRINT_SECONDS"))
	if secs <= 0 {
		t.Skip("set CAPSTAN_AGENT_FOOTPRINT_SECONDS to measure the idle agent")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	bin := filepath.Join(t.TempDir(), "capstan-agent")
	build := exec.Command(goTool, "build", "-trimpath", "-ldflags", "-s -w -X main.version=footprint", "-o", bin, "../../cmd/capstan-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if st, err := os.Stat(bin); err == nil {
		t.Logf("binary: %.1f MB", float64(st.Size())/(1<<20))
	}

	cp := agenttest.New(t)
	cp.SetConfig(agentproto.Config{HeartbeatSeconds: 10, MetricsSeconds: 15, ClaimWaitSeconds: 25, MaxConcurrentJobs: 4})
	cfg := filepath.Join(t.TempDir(), "agent.json")
	if err := agent.SaveConfig(cfg, agent.Config{APIURL: cp.URL, ServerID: cp.ServerID(), ServerName: cp.ServerName(),
		AgentToken: cp.AgentToken(), HeartbeatSeconds: 10, MetricsSeconds: 15}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg, "--log-level", "warn")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() || stderr.String() != "" {
			t.Logf("agent stderr:\n%s", stderr.String())
		}
	}()
	pid := cmd.Process.Pid

	// The measurement starts once the first sample (after 15 s) is in.
	testlab.Eventually(t, time.Minute, "warm-up", func() bool { return len(cp.Inventories()) > 0 && len(cp.Samples()) > 0 })
	cpu0, t0 := cpuTicks(t, pid), time.Now()
	samples0, hb0 := len(cp.Samples()), len(cp.Heartbeats())
	var maxRSS int
	deadline := t0.Add(time.Duration(secs) * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatal("agent exited")
		case <-time.After(time.Second):
		}
		maxRSS = max(maxRSS, statusKB(t, pid, "VmRSS"))
	}
	cpu1, elapsed := cpuTicks(t, pid), time.Since(t0)
	cpuSeconds := float64(cpu1-cpu0) / 100 // USER_HZ
	t.Logf("over %s: %d samples, %d heartbeats, %d inventories in all", elapsed.Round(time.Second),
		len(cp.Samples())-samples0, len(cp.Heartbeats())-hb0, len(cp.Inventories()))
	invs := cp.Inventories()
	for i := 1; i < len(invs); i++ {
		t.Logf("inventory %d at %s: %s", i, invs[i].CollectedAt.Format(time.TimeOnly), inventoryDiff(invs[i-1], invs[i]))
	}
	t.Logf("CPU: %.2f s user+system = %.3f%% of one core", cpuSeconds, 100*cpuSeconds/elapsed.Seconds())
	t.Logf("RSS: %d kB now, %d kB max while measured, VmHWM %d kB", statusKB(t, pid, "VmRSS"), maxRSS, statusKB(t, pid, "VmHWM"))
}

// cpuTicks is utime+stime of a process, in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command (which may hold spaces) start at state (3).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}

// statusKB is a kB field of /proc/PID/status.
func statusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	return 0
}

// inventoryDiff names what changed between two inventories.
func inventoryDiff(a, b agentproto.InventoryRequest) string {
	set := func(inv agentproto.InventoryRequest) map[string]bool {
		m := map[string]bool{}
		for _, p := range inv.Ports {
			m[fmt.Sprintf("port %s %s:%d %s/%d", p.Protocol, p.Address, p.Port, p.Process, p.PID)] = true
		}
		for _, c := range inv.Containers {
			m[fmt.Sprintf("container %s %s %s", c.Name, c.State, c.Status)] = true
		}
		for _, s := range inv.Services {
			m[fmt.Sprintf("service %s %s/%s %s", s.Name, s.ActiveState, s.SubState, s.Enabled)] = true
		}
		return m
	}
	sa, sb := set(a), set(b)
	var out []string
	for k := range sb {
		if !sa[k] {
			out = append(out, "+"+k)
		}
	}
	for k := range sa {
		if !sb[k] {
			out = append(out, "-"+k)
		}
	}
	if len(out) == 0 {
		return "unchanged (refresh)"
	}
	return strings.Join(out, "; ")
}
