package e2e

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/procstat"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Memory budgets of idle processes, in KiB of private resident memory
// (RssAnon + RssShmem of /proc/PID/status): what the process itself
// holds. The pages of its executable that are mapped in (RssFile) are
// shared with every process running it and dropped by the kernel when
// memory is short; they are logged, not budgeted.
const (
	agentIdleBudgetKiB        = 15 << 10
	controlPlaneIdleBudgetKiB = 40 << 10
)

// procMemory is a process's resident memory from /proc/PID/status, in KiB.
type procMemory struct{ rss, anon, file, shmem int64 }

func (m procMemory) private() int64 { return m.anon + m.shmem }

func readProcMemory(t *testing.T, pid int) procMemory {
	t.Helper()
	st, err := procstat.Status(strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	return procMemory{rss: st["VmRSS"], anon: st["RssAnon"], file: st["RssFile"], shmem: st["RssShmem"]}
}

// counterValue returns the value of one exposition line of a Prometheus
// scrape (0 when absent).
func counterValue(body, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestIdleMemoryBudgets measures the resident memory of the real processes
// once they have settled and fails above the budgets: a control plane that
// has started, migrated and evaluated its alert rules a few times with
// nobody signed in, and an agent (metrics and inventory on, as always) that
// has delivered its inventory and at least three metric reports.
func TestIdleMemoryBudgets(t *testing.T) {
	t.Parallel()
	t.Run("control plane", func(t *testing.T) {
		t.Parallel()
		port := strconv.Itoa(testlab.FreePort(t))
		cp := startControlPlane(t, Options{Dialect: store.SQLite,
			Args: []string{"--metrics-listen", "127.0.0.1:" + port, "--alert-evaluation-interval", "1s"}})
		// Settled: the background loops have run (three evaluation
		// cycles) and answered a scrape.
		testlab.Eventually(t, 60*time.Second, "three alert evaluation cycles", func() bool {
			return counterValue(scrape(t, "http://127.0.0.1:"+port+"/metrics"), "capstan_alert_evaluation_duration_seconds_count") >= 3
		})
		m := readProcMemory(t, cp.cmd.Process.Pid)
		t.Logf("idle control plane: private %d KiB (anon %d, shmem %d), executable pages %d KiB, VmRSS %d KiB; budget %d KiB private",
			m.private(), m.anon, m.shmem, m.file, m.rss, controlPlaneIdleBudgetKiB)
		if m.private() > controlPlaneIdleBudgetKiB {
			t.Errorf("idle control plane holds %d KiB, over its budget of %d KiB", m.private(), controlPlaneIdleBudgetKiB)
		}
	})
	t.Run("agent", func(t *testing.T) {
		t.Parallel()
		port := strconv.Itoa(testlab.FreePort(t))
		f := newFleet(t, Options{Dialect: store.SQLite, Args: []string{"--metrics-listen", "127.0.0.1:" + port}})
		_, config := f.enrollServer(t, "budget-1")
		agent := startAgent(t, config)
		testlab.Eventually(t, 120*time.Second, "the agent's inventory and three metric reports", func() bool {
			body := scrape(t, "http://127.0.0.1:"+port+"/metrics")
			return counterValue(body, `capstan_agent_calls_total{kind="inventory",outcome="ok"}`) >= 1 &&
				counterValue(body, `capstan_agent_calls_total{kind="metrics",outcome="ok"}`) >= 3
		})
		if !agent.Running() {
			t.Fatalf("the agent exited:\n%s", agent.Logs())
		}
		m := readProcMemory(t, agent.cmd.Process.Pid)
		t.Logf("idle agent: private %d KiB (anon %d, shmem %d), executable pages %d KiB, VmRSS %d KiB; budget %d KiB private",
			m.private(), m.anon, m.shmem, m.file, m.rss, agentIdleBudgetKiB)
		if m.private() > agentIdleBudgetKiB {
			t.Errorf("idle agent holds %d KiB, over its budget of %d KiB", m.private(), agentIdleBudgetKiB)
		}
	})
}
