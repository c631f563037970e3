package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Several control planes: --url takes a comma-separated list of the
// replicas of one control plane (one PostgreSQL database, one secret key),
// and --pid, when given, their process ids in the same order.
//
// Simulated agent i talks to control plane i mod n for the whole run. A
// real agent has one address, the api_url it was enrolled with, and no
// list of others to move to: in front of several replicas that address is
// a load balancer's, and it is the load balancer that moves agents off a
// dead replica. The simulator keeps each agent on its replica instead (a
// load balancer on loopback would need two descriptors per agent) and
// reports calls, dispatch and process use per control plane, so a slow or
// dead replica shows as such. An agent whose replica is down backs off and
// retries it, as a real agent does; the administrator, like a browser
// behind a load balancer, moves to the next replica on a refused
// connection.

// parseURLs splits --url into control plane URLs: every one an absolute
// http(s) URL on loopback, none twice.
func parseURLs(raw string) ([]string, error) {
	var urls []string
	seen := map[string]bool{}
	for _, u := range strings.Split(raw, ",") {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		if u == "" {
			return nil, errors.New("--url has an empty entry; give one URL or a comma-separated list")
		}
		if err := checkLoopback(u); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("--url lists %s twice", u)
		}
		seen[u] = true
		urls = append(urls, u)
	}
	return urls, nil
}

// parsePIDs splits --pid into process ids, one per URL in the same order.
// An empty --pid or "0" watches no process.
func parsePIDs(raw string, urls int) ([]int, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "0" {
		return nil, nil
	}
	var pids []int
	seen := map[int]bool{}
	for _, f := range strings.Split(raw, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--pid %q: each entry must be a positive process id", raw)
		}
		if seen[pid] {
			return nil, fmt.Errorf("--pid lists %d twice", pid)
		}
		seen[pid] = true
		pids = append(pids, pid)
	}
	if len(pids) != urls {
		return nil, fmt.Errorf("--pid gives %d process ids for %d URLs; give one per --url entry, in the same order", len(pids), urls)
	}
	return pids, nil
}

// pin returns the control plane (index in --url) of simulated agent i
// among n.
func pin(i, n int) int { return i % n }

// pinned returns how many of the simulated agents each of n control
// planes has.
func pinned(agents, n int) []int {
	out := make([]int, n)
	for i := range agents {
		out[pin(i, n)]++
	}
	return out
}

// procMon follows one control plane process: its first and last samples
// and its peaks. After a kill and restart it follows the new process and
// counts the killed one's CPU time in the average.
type procMon struct {
	pid      string
	startAt  time.Time
	first    procSample
	last     procSample
	cpuMax   float64
	rssMaxKB uint64
	fdsMax   int
	ok       bool
	// cpuCarry is the CPU time of the processes killed during the run.
	cpuCarry time.Duration
}

func newProcMon(pid string, startAt time.Time) *procMon {
	p := &procMon{pid: pid, startAt: startAt}
	if s, err := readProc(pid); err == nil {
		p.first, p.last, p.ok = s, s, true
		p.rssMaxKB = s.rssKB
	}
	return p
}

// switchPID follows the control plane's new process after a restart.
func (p *procMon) switchPID(pid string) {
	if p.ok {
		p.cpuCarry += p.last.cpu - p.first.cpu
	}
	p.pid = pid
	if s, err := readProc(pid); err == nil {
		p.first, p.last, p.ok = s, s, true
		p.rssMaxKB = max(p.rssMaxKB, s.rssKB)
	}
}

// sample returns the process's use since the previous sample.
func (p *procMon) sample() ProcInterval {
	s, err := readProc(p.pid)
	if !p.ok || err != nil {
		return ProcInterval{}
	}
	iv := ProcInterval{CPUPercent: cpuPercent(p.last, s), RSSMB: float64(s.rssKB) / 1024, Threads: s.threads, FDs: openFDs(p.pid)}
	p.last = s
	p.cpuMax = max(p.cpuMax, iv.CPUPercent)
	p.rssMaxKB = max(p.rssMaxKB, s.rssKB, s.hwmKB)
	p.fdsMax = max(p.fdsMax, iv.FDs)
	return iv
}

// report is the process's use over the whole run, of every process it had.
func (p *procMon) report() ProcReport {
	last, err := readProc(p.pid)
	if err != nil {
		last = p.last
	}
	p.rssMaxKB = max(p.rssMaxKB, last.rssKB, last.hwmKB)
	r := ProcReport{PID: p.pid, CPUMaxPct: p.cpuMax, RSSEndMB: float64(last.rssKB) / 1024, RSSMaxMB: float64(p.rssMaxKB) / 1024,
		FDsMax: p.fdsMax, FDLimit: fdLimit(p.pid), ThreadsEnd: last.threads}
	if wall := last.at.Sub(p.startAt); wall > 0 {
		r.CPUAvgPct = 100 * float64(p.cpuCarry+last.cpu-p.first.cpu) / float64(wall)
	}
	r.CPUAvgOfMachinePct = r.CPUAvgPct / float64(runtime.NumCPU())
	return r
}

// monitor samples the control planes', the simulator's and the machine's
// CPU and memory.
type monitor struct {
	cps       []*procMon // one per --pid, in --url order; none without --pid
	cpuMax    float64    // highest of the windows' summed CPU of the control planes
	selfFirst procSample
	selfLast  procSample
	cpuFirst  cpuTimes
	cpuLast   cpuTimes
}

func newMonitor(pids []int) *monitor {
	m := &monitor{}
	start := time.Now()
	m.cpuFirst, _ = readCPUTimes()
	m.cpuLast = m.cpuFirst
	m.selfFirst, _ = readProc("self")
	m.selfLast = m.selfFirst
	for _, pid := range pids {
		m.cps = append(m.cps, newProcMon(strconv.Itoa(pid), start))
	}
	return m
}

// watching reports whether the control planes' processes are sampled.
func (m *monitor) watching() bool { return len(m.cps) > 0 }

func (m *monitor) fdLimitText() string {
	if !m.watching() {
		return "not watched"
	}
	var parts []string
	for _, p := range m.cps {
		parts = append(parts, fmt.Sprintf("pid %s, fd limit %d", p.pid, fdLimit(p.pid)))
	}
	return strings.Join(parts, "; ")
}

// sample returns the use of each control plane and of all of them, of the
// simulator and of the machine since the previous sample.
func (m *monitor) sample() (cps []ProcInterval, total, self ProcInterval, mc MachineCPU) {
	if t, ok := readCPUTimes(); ok {
		mc = machineCPU(m.cpuLast, t)
		m.cpuLast = t
	}
	if p, err := readProc("self"); err == nil {
		self = ProcInterval{CPUPercent: cpuPercent(m.selfLast, p), RSSMB: float64(p.rssKB) / 1024, Threads: p.threads, FDs: openFDs("self")}
		m.selfLast = p
	}
	for _, p := range m.cps {
		cps = append(cps, p.sample())
	}
	total = sumIntervals(cps)
	m.cpuMax = max(m.cpuMax, total.CPUPercent)
	return cps, total, self, mc
}

// sumIntervals adds up the use of several processes.
func sumIntervals(ps []ProcInterval) ProcInterval {
	var t ProcInterval
	for _, p := range ps {
		t.CPUPercent += p.CPUPercent
		t.RSSMB += p.RSSMB
		t.Threads += p.Threads
		t.FDs += p.FDs
	}
	return t
}

// sumReports adds up the use of several control plane processes over the
// run: CPU averages, resident memory and descriptors add up; the peak of
// the resident memory is the sum of each one's peak (an upper bound of the
// peak of the sum); the descriptor limit is the lowest. cpuMax is the
// highest of the reporting windows' summed CPU.
func sumReports(ps []ProcReport, cpuMax float64) ProcReport {
	var t ProcReport
	var pids []string
	for i, p := range ps {
		pids = append(pids, p.PID)
		t.CPUAvgPct += p.CPUAvgPct
		t.CPUAvgOfMachinePct += p.CPUAvgOfMachinePct
		t.RSSEndMB += p.RSSEndMB
		t.RSSMaxMB += p.RSSMaxMB
		t.FDsMax += p.FDsMax
		t.ThreadsEnd += p.ThreadsEnd
		if i == 0 || p.FDLimit < t.FDLimit {
			t.FDLimit = p.FDLimit
		}
	}
	t.PID = strings.Join(pids, ",")
	t.CPUMaxPct = cpuMax
	return t
}

// ControlPlaneReport is the part of a run one control plane of several
// served: the calls of the agents on it (and the administrator's calls it
// answered), the dispatch of jobs to its agents, and its process.
type ControlPlaneReport struct {
	URL            string             `json:"url"`
	Agents         int                `json:"agents" doc:"simulated agents that talk to this control plane"`
	Calls          map[string]Summary `json:"calls"`
	Steady         map[string]Summary `json:"steady_calls"`
	Dispatch       DispatchSummary    `json:"dispatch" doc:"jobs queued through another control plane, claimed by an agent waiting on this one"`
	SteadyDispatch DispatchSummary    `json:"steady_dispatch"`
	Errors         uint64             `json:"errors"`
	Process        *ProcReport        `json:"process,omitempty"`
}

func (c *ControlPlaneReport) write(w io.Writer, i int) {
	fmt.Fprintf(w, "\ncontrol plane %d: %s, %d agents; %d errors; steady state:\n", i, c.URL, c.Agents, c.Errors)
	writeCalls(w, c.Steady, c.SteadyDispatch)
	if p := c.Process; p != nil {
		p.write(w, "  process")
	}
}

// write prints a control plane process's line of the report.
func (p *ProcReport) write(w io.Writer, label string) {
	fmt.Fprintf(w, "%s (pid %s): cpu avg %.0f%% of one core, %.0f%% of the machine (max window %.0f%% of one core); rss end %.0f MB, max %.0f MB; fds max %d (limit %d); threads %d\n",
		label, p.PID, p.CPUAvgPct, p.CPUAvgOfMachinePct, p.CPUMaxPct, p.RSSEndMB, p.RSSMaxMB, p.FDsMax, p.FDLimit, p.ThreadsEnd)
}
