// Command capstan-fleetsim simulates a fleet of agents against a running
// Capstan control plane, to find how many agents one control plane holds.
//
// Each simulated agent enrolls through the real API (the administrator
// creates an enrollment, the agent redeems it), then heartbeats, reports
// metrics (one sample per period) and inventory, and keeps one claim long
// poll outstanding; a claimed job gets a progress event and its result. A
// driver queues agent.ping jobs on random servers at --job-rate. The
// simulator reports, per call type, the count, errors and p50/p99 latency,
// the job dispatch latency (action POST response received → the agent
// holding the job), and with --pid the control plane's CPU and memory. It
// only talks to loopback addresses.
//
//	capstan user create --data-dir ./data --email sim@example.com --admin --password-stdin --json
//	capstan-fleetsim --url http://127.0.0.1:8080 --agents 1000 --ramp 1m --duration 3m \
//	    --email sim@example.com --password '…' --totp-secret '…' --pid $(pgrep -n capstan) [--json]
//
// Several replicas of one control plane (one PostgreSQL database, one
// secret key) are loaded at once with a comma-separated --url (and --pid in
// the same order): agent i talks to the (i mod n)-th for the whole run, as
// a real agent talks to the one address it was enrolled with; jobs are
// queued through another replica than their agent's; the report has the
// calls, dispatch, CPU and memory of each control plane and of all of them.
// With --kill-after, --kill-index chooses the one killed and restarted.
//
// The password, TOTP secret and admin token may come from the environment
// (CAPSTAN_FLEETSIM_PASSWORD, CAPSTAN_FLEETSIM_TOTP_SECRET,
// CAPSTAN_FLEETSIM_ADMIN_TOKEN) instead of flags. Exit status: 0 when the
// run had no errors, 1 when it had some, 2 when it could not run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // --debug-pprof-listen
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

type config struct {
	URL         string // as given: one URL or a comma-separated list
	URLs        []string
	Agents      int
	Duration    time.Duration
	Heartbeat   time.Duration
	Metrics     time.Duration
	Inventory   time.Duration
	JobRate     float64
	AdminToken  string
	Email       string
	Password    string
	TOTPSecret  string
	Ramp        time.Duration
	Concurrency int
	PID         string // as given: one process id or a comma-separated list
	PIDs        []int  // one per URL, or none
	KillIndex   int
	JSON        bool
	ReportEvery time.Duration
	ClaimWait   int
	Grace       time.Duration
	Seed        uint64
	EvalEvery   time.Duration
	KillAfter   time.Duration
	RestartCmd  string
	PprofListen string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("capstan-fleetsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "control plane URL (loopback only: 127.0.0.0/8 or localhost); a comma-separated list for several replicas of one control plane: agent i talks to the (i mod n)-th")
	fs.IntVar(&c.Agents, "agents", 100, "number of simulated agents")
	fs.DurationVar(&c.Duration, "duration", 2*time.Minute, "how long to run after the ramp")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 10*time.Second, "heartbeat interval")
	fs.DurationVar(&c.Metrics, "metrics", 15*time.Second, "metrics interval (one sample per report)")
	fs.DurationVar(&c.Inventory, "inventory", 5*time.Minute, "inventory interval (and one at start)")
	fs.Float64Var(&c.JobRate, "job-rate", 1, "agent.ping jobs per second queued on random servers (0: none)")
	fs.StringVar(&c.AdminToken, "admin-token", os.Getenv("CAPSTAN_FLEETSIM_ADMIN_TOKEN"), "administrator access token (or sign in with --email, --password, --totp-secret)")
	fs.StringVar(&c.Email, "email", "", "administrator e-mail to sign in with")
	fs.StringVar(&c.Password, "password", os.Getenv("CAPSTAN_FLEETSIM_PASSWORD"), "administrator password")
	fs.StringVar(&c.TOTPSecret, "totp-secret", os.Getenv("CAPSTAN_FLEETSIM_TOTP_SECRET"), "administrator TOTP secret (base32)")
	fs.DurationVar(&c.Ramp, "ramp", 0, "spread the agents' enrollment and start over this long")
	fs.IntVar(&c.Concurrency, "concurrency", 16, "enrollments in flight at once")
	fs.StringVar(&c.PID, "pid", "", "process id of the control plane, to report its CPU and RSS; with several --url, a comma-separated list in the same order (empty: skip)")
	fs.BoolVar(&c.JSON, "json", false, "print the final report as JSON on stdout")
	fs.DurationVar(&c.ReportEvery, "report-every", 30*time.Second, "interval of the progress reports on stderr (0: none)")
	fs.IntVar(&c.ClaimWait, "claim-wait", 25, "wait_seconds of the claim long poll")
	fs.DurationVar(&c.Grace, "grace", 15*time.Second, "after the run, how long to wait for queued jobs to be completed")
	fs.Uint64Var(&c.Seed, "seed", 0, "random seed (0: random)")
	fs.DurationVar(&c.EvalEvery, "evaluate-every", 0, "as the administrator, run an alert evaluation cycle (POST /api/v1/monitoring/evaluate) this often and report its duration as the evaluate call (0: never)")
	fs.DurationVar(&c.KillAfter, "kill-after", 0, "restart storm: this long into the run (and once every agent enrolled; the run is longer by the wait), kill the control plane (--pid) with SIGKILL and run --restart-cmd; the report has the curve of agents cut off and back (0: no kill)")
	fs.IntVar(&c.KillIndex, "kill-index", 0, "with several --url, which control plane --kill-after kills and --restart-cmd starts again, counted from 0 in --url order")
	fs.StringVar(&c.RestartCmd, "restart-cmd", "", "shell command (sh -c) that starts the control plane again after --kill-after; it should exec it, so that its process id is the control plane's")
	fs.StringVar(&c.PprofListen, "debug-pprof-listen", "", "serve the simulator's own net/http/pprof on this loopback address (host:port), to tell its stalls from the control plane's (empty: off)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var err error
	if c.URLs, err = parseURLs(c.URL); err != nil {
		return c, err
	}
	if c.PIDs, err = parsePIDs(c.PID, len(c.URLs)); err != nil {
		return c, err
	}
	if c.PprofListen != "" {
		if host, _, err := net.SplitHostPort(c.PprofListen); err != nil || checkLoopback("http://"+c.PprofListen) != nil {
			return c, fmt.Errorf("--debug-pprof-listen must be a loopback host:port, not %q", host)
		}
	}
	switch {
	case c.Agents < 1:
		return c, errors.New("--agents must be at least 1")
	case c.Duration <= 0:
		return c, errors.New("--duration must be positive")
	case c.Heartbeat < 100*time.Millisecond || c.Metrics < 100*time.Millisecond || c.Inventory < 100*time.Millisecond:
		return c, errors.New("--heartbeat, --metrics and --inventory must be at least 100ms")
	case c.JobRate < 0:
		return c, errors.New("--job-rate must not be negative")
	case c.Ramp < 0:
		return c, errors.New("--ramp must not be negative")
	case c.Concurrency < 1:
		return c, errors.New("--concurrency must be at least 1")
	case c.ClaimWait < 0 || c.ClaimWait > 30:
		return c, errors.New("--claim-wait must be between 0 and 30")
	case c.EvalEvery < 0 || (c.EvalEvery > 0 && c.EvalEvery < time.Second):
		return c, errors.New("--evaluate-every must be 0 or at least 1s")
	case c.KillAfter < 0:
		return c, errors.New("--kill-after must not be negative")
	case c.KillAfter > 0 && (len(c.PIDs) == 0 || c.RestartCmd == ""):
		return c, errors.New("--kill-after needs --pid (the process to kill) and --restart-cmd (how to start it again)")
	case c.KillIndex < 0 || c.KillIndex >= len(c.URLs):
		return c, fmt.Errorf("--kill-index must be between 0 and %d (one less than the number of --url entries)", len(c.URLs)-1)
	case c.AdminToken == "" && (c.Email == "" || c.Password == "" || c.TOTPSecret == ""):
		return c, errors.New("give --admin-token, or --email, --password and --totp-secret")
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	c.URL = strings.Join(c.URLs, ",")
	return c, nil
}

// checkLoopback refuses a URL whose host is not on this machine: the
// simulator generates load, and it must not be pointed at someone else's
// control plane by mistake.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url must be an absolute http:// or https:// URL")
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return fmt.Errorf("--url host %q is not a loopback address (127.0.0.0/8 or localhost); the simulator only loads a local control plane", host)
	}
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "capstan-fleetsim:", err)
		return 2
	}
	if os.Getenv("GOGC") == "" {
		// The simulator trades memory for fewer garbage collections: each
		// collection's marking takes CPU from the control plane on the same
		// machine and delays the simulated agents, and either shows up as
		// the control plane's latency. Memory here is the simulator's, not
		// the control plane's; GOGC in the environment overrides this.
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.PprofListen != "" {
		ln, err := net.Listen("tcp", cfg.PprofListen)
		if err != nil {
			fmt.Fprintln(stderr, "capstan-fleetsim:", err)
			return 2
		}
		// The default mux holds net/http/pprof's handlers (imported for
		// this); nothing else is served there.
		go http.Serve(ln, http.DefaultServeMux) //nolint:errcheck,gosec // ends with the process
		defer ln.Close()
	}
	rep, err := simulate(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "capstan-fleetsim:", err)
		return 2
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "capstan-fleetsim:", err)
			return 2
		}
	} else {
		rep.write(stdout)
	}
	if rep.Errors > 0 {
		return 1
	}
	return 0
}

// sim is one simulation run.
type sim struct {
	cfg      config
	urls     []string
	runID    string
	seed     uint64
	admin    *admin
	rec      *recorder
	dispatch *dispatchTracker
	avail    *availability

	enrollSem chan struct{}

	liveMu sync.RWMutex // guards live and liveIdx
	live   []*agent
	idx    map[*agent]int

	enrolled      atomic.Int64
	stoppedAgents atomic.Int64
	queued        atomic.Int64
	completed     atomic.Int64
	driverSkipped atomic.Int64
}

func (s *sim) acquireEnroll(ctx context.Context) bool {
	select {
	case s.enrollSem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *sim) releaseEnroll() { <-s.enrollSem }

func (s *sim) addLive(a *agent) {
	s.liveMu.Lock()
	s.idx[a] = len(s.live)
	s.live = append(s.live, a)
	s.liveMu.Unlock()
}

func (s *sim) removeLive(a *agent) {
	s.liveMu.Lock()
	if i, ok := s.idx[a]; ok {
		last := s.live[len(s.live)-1]
		s.live[i] = last
		s.idx[last] = i
		s.live = s.live[:len(s.live)-1]
		delete(s.idx, a)
	}
	s.liveMu.Unlock()
}

// randomLive returns a random running agent's server id and control plane.
func (s *sim) randomLive(rng *rand.Rand) (string, int, bool) {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	if len(s.live) == 0 {
		return "", 0, false
	}
	a := s.live[rng.IntN(len(s.live))]
	return a.serverID, a.cp, true
}

func (s *sim) liveCount() int {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return len(s.live)
}

// newTransport is tuned for the administrator's concurrent calls to one
// host: idle connections are kept for reuse, and closed before the control
// plane's 120 s idle timeout would close them under a request. Simulated
// agents use the agent's own HTTP client instead (see newAgent).
func newTransport(maxIdle int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxIdle,
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

func simulate(ctx context.Context, cfg config, stderr io.Writer) (*Report, error) {
	// Each agent holds its long poll's connection and, for a moment after
	// a report, one more; the admin client and the process need some
	// beyond that.
	need := uint64(cfg.Agents + cfg.Agents/4 + 256)
	limit, err := raiseFDLimit(need)
	if err != nil {
		fmt.Fprintln(stderr, "capstan-fleetsim: warning:", err)
	}
	s := &sim{
		cfg: cfg, urls: cfg.URLs, seed: cfg.Seed, runID: strconv.FormatUint(cfg.Seed%(1<<24), 16),
		rec:       newRecorder(len(cfg.URLs)),
		enrollSem: make(chan struct{}, cfg.Concurrency),
		idx:       map[*agent]int{},
	}
	s.dispatch = newDispatchTracker(s.rec)
	adminHC := &http.Client{Transport: newTransport(cfg.Concurrency + 256), Timeout: 30 * time.Second}
	s.admin = newAdmin(cfg.URLs, adminHC, s.rec, cfg.AdminToken)
	if cfg.AdminToken == "" {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.admin.signIn(sctx, cfg.Email, cfg.Password, cfg.TOTPSecret)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("signing in as %s: %w", cfg.Email, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = s.admin.check(cctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if cfg.AdminToken != "" && cfg.Ramp+cfg.Duration > 14*time.Minute {
		fmt.Fprintln(stderr, "capstan-fleetsim: warning: an access token lasts 15 minutes and --admin-token cannot be refreshed; sign in with --email instead for long runs")
	}

	for _, pid := range cfg.PIDs {
		if _, err := readProc(strconv.Itoa(pid)); err != nil {
			return nil, fmt.Errorf("--pid %d: %w", pid, err)
		}
	}
	mon := newMonitor(cfg.PIDs)
	fmt.Fprintf(stderr, "capstan-fleetsim: %d agents against %s: ramp %s, then %s; heartbeat %s, metrics %s, inventory %s, %.3g jobs/s; fd limit %d (control plane: %s)\n",
		cfg.Agents, cfg.URL, cfg.Ramp, cfg.Duration, cfg.Heartbeat, cfg.Metrics, cfg.Inventory, cfg.JobRate, limit, mon.fdLimitText())

	start := time.Now()
	s.avail = newAvailability(start)
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	agentCtx, cancelAgents := context.WithCancel(context.Background())
	defer cancelAgents()
	go func() { // a signal ends the agents too
		select {
		case <-ctx.Done():
			cancelAgents()
		case <-agentCtx.Done():
		}
	}()

	go s.admin.keepFresh(runCtx, 10*time.Minute)

	var agents sync.WaitGroup
	slot := time.Duration(0)
	if cfg.Agents > 0 {
		slot = cfg.Ramp / time.Duration(cfg.Agents)
	}
	allEnrolled := make(chan time.Duration, 1)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				if s.enrolled.Load() >= int64(cfg.Agents) {
					allEnrolled <- time.Since(start)
					return
				}
			}
		}
	}()
	for i := range cfg.Agents {
		a := newAgent(s, i)
		at := start.Add(time.Duration(i)*slot + a.jitter(slot))
		agents.Go(func() { a.run(agentCtx, at) })
	}

	var driver sync.WaitGroup
	if cfg.JobRate > 0 {
		driver.Go(func() { s.drive(runCtx) })
	}
	if cfg.EvalEvery > 0 {
		driver.Go(func() { s.evaluateLoop(runCtx) })
	}
	restart := &restarter{cmd: cfg.RestartCmd}
	var killTimer <-chan time.Time
	if cfg.KillAfter > 0 {
		t := time.NewTimer(time.Until(start.Add(cfg.KillAfter)))
		defer t.Stop()
		killTimer = t.C
	}

	steadyAt := start.Add(cfg.Ramp)
	end := steadyAt.Add(cfg.Duration)
	var intervals []Interval
	report := time.NewTicker(max(cfg.ReportEvery, time.Second))
	defer report.Stop()
	steadyTimer := time.NewTimer(time.Until(steadyAt))
	defer steadyTimer.Stop()
	endTimer := time.NewTimer(time.Until(end))
	defer endTimer.Stop()
	load := newLoadTracker()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-endTimer.C:
			break loop
		case <-steadyTimer.C:
			s.rec.setSteady()
		case <-killTimer:
			if s.enrolled.Load() < int64(cfg.Agents) {
				// A storm is of the whole fleet: on a machine slow to
				// enroll it, the kill waits until every agent enrolled,
				// and the run after it keeps its length.
				killTimer = time.After(100 * time.Millisecond)
				continue
			}
			if late := time.Since(start.Add(cfg.KillAfter)); late > 0 {
				end = end.Add(late)
				endTimer.Reset(time.Until(end))
			}
			victim := cfg.PIDs[cfg.KillIndex]
			if err := restart.killAndRestart(ctx, victim); err != nil {
				fmt.Fprintln(stderr, "capstan-fleetsim:", err)
				break loop
			}
			mon.cps[cfg.KillIndex].switchPID(strconv.Itoa(restart.newPID))
			fmt.Fprintf(stderr, "capstan-fleetsim: killed the control plane at %s (pid %d) at %.1fs and started it again (pid %d)\n",
				cfg.URLs[cfg.KillIndex], victim, restart.killedAt.Sub(start).Seconds(), restart.newPID)
		case <-report.C:
			if cfg.ReportEvery <= 0 {
				continue
			}
			iv := s.interval(start, mon, load)
			intervals = append(intervals, iv)
			iv.write(stderr)
		}
	}
	elapsed := time.Since(start)
	cancelRun()
	driver.Wait()
	// Let the jobs queued last reach their agents and finish.
	graceEnd := time.Now().Add(cfg.Grace)
	for s.dispatch.outstanding() > 0 && time.Now().Before(graceEnd) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	final := s.interval(start, mon, load)
	if cfg.ReportEvery > 0 && final.Seconds-lastSeconds(intervals) >= 1 {
		intervals = append(intervals, final)
		final.write(stderr)
	}
	s.rec.close()
	cancelAgents()
	done := make(chan struct{})
	go func() { agents.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(stderr, "capstan-fleetsim: warning: some agents did not stop within 30 s")
	}
	adminHC.CloseIdleConnections()

	rep := s.report(elapsed, mon, load, intervals)
	rep.Restart = restart.report(start, s.avail)
	if rep.Restart != nil && len(cfg.URLs) > 1 {
		rep.Restart.URL = cfg.URLs[cfg.KillIndex]
		rep.Restart.AgentsOnIt = pinned(cfg.Agents, len(cfg.URLs))[cfg.KillIndex]
	}
	select {
	case d := <-allEnrolled:
		rep.AllEnrolledAfterS = d.Seconds()
	default:
	}
	return rep, nil
}

func lastSeconds(iv []Interval) float64 {
	if len(iv) == 0 {
		return 0
	}
	return iv[len(iv)-1].Seconds
}

// drive queues agent.ping jobs on random live servers at the job rate
// until ctx ends. Each POST runs in its own goroutine, at most 256 at
// once; a tick that finds them all busy is skipped and counted. With
// several control planes, each job is queued through the one after its
// agent's, so that its dispatch crosses from one replica to another.
func (s *sim) drive(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.seed, 1<<62))
	every := time.Duration(float64(time.Second) / s.cfg.JobRate)
	t := time.NewTicker(max(every, time.Millisecond))
	defer t.Stop()
	perTick := 1
	if every < time.Millisecond {
		perTick = int(time.Millisecond / every)
	}
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range perTick {
			id, cp, ok := s.randomLive(rng)
			if !ok {
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				s.driverSkipped.Add(1)
				continue
			}
			wg.Go(func() {
				defer func() { <-sem }()
				// A POST under way when the run ends completes: the job
				// it queues is counted and waited for like the others
				// instead of being left queued behind the report's back.
				postCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				jobID, at, err := s.admin.queuePing(postCtx, id, (cp+1)%len(s.urls))
				if err != nil {
					return
				}
				s.queued.Add(1)
				s.dispatch.posted(jobID, at)
			})
		}
	}
}

// dispatchTracker pairs each queued job's POST response time with the time
// its agent's claim returned it, in whichever order they arrive.
type dispatchTracker struct {
	rec *recorder

	mu      sync.Mutex // guards m and claimed
	m       map[string]*dispatchEntry
	claimsN int64
}

type dispatchEntry struct {
	posted, claimed time.Time
	cp              int // the control plane of the agent that claimed it
	done            bool
}

func newDispatchTracker(rec *recorder) *dispatchTracker {
	return &dispatchTracker{rec: rec, m: map[string]*dispatchEntry{}}
}

func (d *dispatchTracker) entry(id string) *dispatchEntry {
	e := d.m[id]
	if e == nil {
		e = &dispatchEntry{}
		d.m[id] = e
	}
	return e
}

func (d *dispatchTracker) settle(id string, e *dispatchEntry) {
	if !e.posted.IsZero() && !e.claimed.IsZero() && e.done {
		delete(d.m, id)
	}
}

func (d *dispatchTracker) posted(id string, at time.Time) {
	d.mu.Lock()
	e := d.entry(id)
	e.posted = at
	if !e.claimed.IsZero() {
		d.rec.recordDispatch(e.cp, e.claimed.Sub(at))
	}
	d.settle(id, e)
	d.mu.Unlock()
}

func (d *dispatchTracker) claimed(id string, cp int, at time.Time) {
	d.mu.Lock()
	d.claimsN++
	e := d.entry(id)
	e.claimed, e.cp = at, cp
	if !e.posted.IsZero() {
		d.rec.recordDispatch(cp, at.Sub(e.posted))
	}
	d.settle(id, e)
	d.mu.Unlock()
}

func (d *dispatchTracker) completed(id string) {
	d.mu.Lock()
	e := d.entry(id)
	e.done = true
	d.settle(id, e)
	d.mu.Unlock()
}

// outstanding counts queued jobs not yet claimed and completed.
func (d *dispatchTracker) outstanding() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.m {
		if !e.posted.IsZero() {
			n++
		}
	}
	return n
}

func (d *dispatchTracker) claims() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.claimsN
}

// loadTracker remembers the load averages at the start and their peak.
type loadTracker struct {
	start [3]float64
	max1  float64
}

func newLoadTracker() *loadTracker {
	l := loadAvg()
	return &loadTracker{start: l, max1: l[0]}
}

func (l *loadTracker) sample() [3]float64 {
	v := loadAvg()
	l.max1 = max(l.max1, v[0])
	return v
}

// ProcInterval is a process's use over one reporting window.
type ProcInterval struct {
	CPUPercent float64 `json:"cpu_percent"`
	RSSMB      float64 `json:"rss_mb"`
	Threads    int     `json:"threads"`
	FDs        int     `json:"fds"`
}

// Interval is one progress report.
type Interval struct {
	Seconds      float64            `json:"seconds"`
	Live         int                `json:"live_agents"`
	Calls        map[string]Summary `json:"calls"`
	Dispatch     DispatchSummary    `json:"dispatch"`
	ControlPlane *ProcInterval      `json:"control_plane,omitempty" doc:"with several control planes, all of them together"`
	// ControlPlanes has each control plane's use, in --url order, when
	// there are several.
	ControlPlanes []ProcInterval `json:"control_planes,omitempty"`
	Simulator     ProcInterval   `json:"simulator"`
	Machine       MachineCPU     `json:"machine"`
	Load          [3]float64     `json:"load_average"`
}

func (s *sim) interval(start time.Time, mon *monitor, load *loadTracker) Interval {
	calls, d := s.rec.rotate()
	cps, total, self, mc := mon.sample()
	iv := Interval{Seconds: time.Since(start).Seconds(), Live: s.liveCount(), Calls: calls, Dispatch: d, Simulator: self, Machine: mc, Load: load.sample()}
	if mon.watching() {
		iv.ControlPlane = &total
	}
	if len(cps) > 1 {
		iv.ControlPlanes = cps
	}
	return iv
}

func (iv Interval) write(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%4.0fs agents=%d load=%.2f %.2f %.2f machine busy=%.0f%% steal=%.0f%%", iv.Seconds, iv.Live,
		iv.Load[0], iv.Load[1], iv.Load[2], iv.Machine.BusyPct, iv.Machine.StealPct)
	if iv.ControlPlane != nil {
		fmt.Fprintf(&b, " | control plane cpu=%.0f%% rss=%.0fMB fds=%d", iv.ControlPlane.CPUPercent, iv.ControlPlane.RSSMB, iv.ControlPlane.FDs)
	}
	for i, cp := range iv.ControlPlanes {
		fmt.Fprintf(&b, " [%d: cpu=%.0f%% rss=%.0fMB]", i, cp.CPUPercent, cp.RSSMB)
	}
	fmt.Fprintf(&b, " | simulator cpu=%.0f%% rss=%.0fMB\n", iv.Simulator.CPUPercent, iv.Simulator.RSSMB)
	for _, c := range callOrder {
		if sm, ok := iv.Calls[c]; ok {
			fmt.Fprintf(&b, "  %-12s n=%-7d err=%-4d p50=%7.1fms p99=%7.1fms max=%7.1fms\n", c, sm.Count, sm.Errors, sm.P50ms, sm.P99ms, sm.MaxMS)
		}
	}
	if iv.Dispatch.Count > 0 {
		fmt.Fprintf(&b, "  %-12s n=%-7d         p50=%7.1fms p99=%7.1fms max=%7.1fms\n", "dispatch", iv.Dispatch.Count, iv.Dispatch.P50ms, iv.Dispatch.P99ms, iv.Dispatch.MaxMS)
	}
	io.WriteString(w, b.String()) //nolint:errcheck // progress output
}

// ProcReport is a process's use over the whole run.
type ProcReport struct {
	PID                string  `json:"pid"`
	CPUAvgPct          float64 `json:"cpu_avg_percent" doc:"of one core"`
	CPUAvgOfMachinePct float64 `json:"cpu_avg_machine_percent" doc:"of all the machine's cores"`
	CPUMaxPct          float64 `json:"cpu_max_percent" doc:"highest of the reporting windows"`
	RSSEndMB           float64 `json:"rss_end_mb"`
	RSSMaxMB           float64 `json:"rss_max_mb"`
	FDsMax             int     `json:"fds_max"`
	FDLimit            uint64  `json:"fd_limit"`
	ThreadsEnd         int     `json:"threads_end"`
}

// Jobs counts the driver's jobs.
type Jobs struct {
	Queued      int64 `json:"queued"`
	Claimed     int64 `json:"claimed"`
	Completed   int64 `json:"completed"`
	Outstanding int   `json:"outstanding" doc:"queued but not claimed and completed by the end"`
	Skipped     int64 `json:"driver_skipped" doc:"ticks skipped because 256 action POSTs were in flight"`
}

// Report is the result of a run.
type Report struct {
	URL               string             `json:"url"`
	Agents            int                `json:"agents"`
	Enrolled          int64              `json:"enrolled"`
	StoppedAgents     int64              `json:"stopped_agents"`
	AllEnrolledAfterS float64            `json:"all_enrolled_after_s"`
	Ramp              string             `json:"ramp"`
	Duration          string             `json:"duration"`
	ElapsedS          float64            `json:"elapsed_s"`
	Heartbeat         string             `json:"heartbeat"`
	Metrics           string             `json:"metrics"`
	Inventory         string             `json:"inventory"`
	JobRate           float64            `json:"job_rate"`
	Calls             map[string]Summary `json:"calls"`
	Steady            map[string]Summary `json:"steady_calls"`
	Dispatch          DispatchSummary    `json:"dispatch"`
	SteadyDispatch    DispatchSummary    `json:"steady_dispatch"`
	Jobs              Jobs               `json:"jobs"`
	Errors            uint64             `json:"errors"`
	FirstErrors       map[string]string  `json:"first_errors,omitempty"`
	ControlPlane      *ProcReport        `json:"control_plane,omitempty" doc:"with several control planes, all of them together"`
	// ControlPlanes has each control plane's part, in --url order, when
	// there are several.
	ControlPlanes []ControlPlaneReport `json:"control_planes,omitempty"`
	Simulator     ProcReport           `json:"simulator"`
	LoadStart     [3]float64           `json:"load_average_start"`
	LoadEnd       [3]float64           `json:"load_average_end"`
	LoadMax1      float64              `json:"load_average_max_1m"`
	Machine       MachineCPU           `json:"machine"`
	Intervals     []Interval           `json:"intervals,omitempty"`
	Restart       *Restart             `json:"restart,omitempty"`
}

func (s *sim) report(elapsed time.Duration, mon *monitor, load *loadTracker, intervals []Interval) *Report {
	s.rec.mu.Lock()
	calls, steady := s.rec.total.summaries(), s.rec.steady.summaries()
	errs := s.rec.total.totalErrors()
	d, sd := dispatchSummary(&s.rec.dispatch[1], s.rec.early[1]), dispatchSummary(&s.rec.dispatch[2], s.rec.early[2])
	first := map[string]string{}
	for k, v := range s.rec.firstError {
		first[k] = v
	}
	var cps []ControlPlaneReport
	if len(s.urls) > 1 {
		agents := pinned(s.cfg.Agents, len(s.urls))
		for i, u := range s.urls {
			cps = append(cps, ControlPlaneReport{URL: u, Agents: agents[i],
				Calls: s.rec.cpTotal[i].summaries(), Steady: s.rec.cpSteady[i].summaries(), Errors: s.rec.cpTotal[i].totalErrors(),
				Dispatch:       dispatchSummary(&s.rec.cpDispatch[i][0], s.rec.cpEarly[i][0]),
				SteadyDispatch: dispatchSummary(&s.rec.cpDispatch[i][1], s.rec.cpEarly[i][1])})
		}
	}
	s.rec.mu.Unlock()
	cfg := s.cfg
	rep := &Report{URL: cfg.URL, Agents: cfg.Agents, Enrolled: s.enrolled.Load(), StoppedAgents: s.stoppedAgents.Load(),
		Ramp: cfg.Ramp.String(), Duration: cfg.Duration.String(), ElapsedS: elapsed.Seconds(),
		Heartbeat: cfg.Heartbeat.String(), Metrics: cfg.Metrics.String(), Inventory: cfg.Inventory.String(), JobRate: cfg.JobRate,
		Calls: calls, Steady: steady, Dispatch: d, SteadyDispatch: sd, Errors: errs, FirstErrors: first,
		Jobs: Jobs{Queued: s.queued.Load(), Claimed: s.dispatch.claims(), Completed: s.completed.Load(),
			Outstanding: s.dispatch.outstanding(), Skipped: s.driverSkipped.Load()},
		LoadStart: load.start, LoadEnd: load.sample(), LoadMax1: load.max1, Intervals: intervals, ControlPlanes: cps}
	if len(first) == 0 {
		rep.FirstErrors = nil
	}
	if t, ok := readCPUTimes(); ok {
		rep.Machine = machineCPU(mon.cpuFirst, t)
	}
	selfLast, _ := readProc("self")
	rep.Simulator = ProcReport{PID: strconv.Itoa(os.Getpid()), CPUAvgPct: cpuPercent(mon.selfFirst, selfLast),
		RSSEndMB: float64(selfLast.rssKB) / 1024, RSSMaxMB: float64(selfLast.hwmKB) / 1024, FDLimit: fdLimit("self"), ThreadsEnd: selfLast.threads}
	for _, iv := range intervals {
		rep.Simulator.CPUMaxPct = max(rep.Simulator.CPUMaxPct, iv.Simulator.CPUPercent)
		rep.Simulator.FDsMax = max(rep.Simulator.FDsMax, iv.Simulator.FDs)
	}
	if mon.watching() {
		var procs []ProcReport
		for _, p := range mon.cps {
			procs = append(procs, p.report())
		}
		total := sumReports(procs, mon.cpuMax)
		rep.ControlPlane = &total
		for i := range rep.ControlPlanes {
			rep.ControlPlanes[i].Process = &procs[i]
		}
	}
	return rep
}

func writeCalls(w io.Writer, calls map[string]Summary, d DispatchSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "call\tcount\terrors\tp50 ms\tp99 ms\tmax ms\t")
	keys := make([]string, 0, len(calls))
	for _, c := range callOrder {
		if _, ok := calls[c]; ok {
			keys = append(keys, c)
		}
	}
	for _, c := range keys {
		sm := calls[c]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", c, sm.Count, sm.Errors, sm.P50ms, sm.P99ms, sm.MaxMS)
	}
	fmt.Fprintf(tw, "dispatch\t%d\t-\t%.1f\t%.1f\t%.1f\t\n", d.Count, d.P50ms, d.P99ms, d.MaxMS)
	tw.Flush() //nolint:errcheck // report output
}

func (r *Report) write(w io.Writer) {
	fmt.Fprintf(w, "capstan-fleetsim: %d agents (%d enrolled, all after %.0fs; %d stopped) against %s; ramp %s + %s (%.0fs elapsed)\n",
		r.Agents, r.Enrolled, r.AllEnrolledAfterS, r.StoppedAgents, r.URL, r.Ramp, r.Duration, r.ElapsedS)
	fmt.Fprintf(w, "intervals: heartbeat %s, metrics %s, inventory %s; %.3g jobs/s\n\n", r.Heartbeat, r.Metrics, r.Inventory, r.JobRate)
	fmt.Fprintln(w, "whole run:")
	writeCalls(w, r.Calls, r.Dispatch)
	fmt.Fprintln(w, "\nsteady state (after the ramp):")
	writeCalls(w, r.Steady, r.SteadyDispatch)
	for i := range r.ControlPlanes {
		r.ControlPlanes[i].write(w, i)
	}
	fmt.Fprintf(w, "\njobs: %d queued, %d claimed, %d completed, %d outstanding; %d claimed before the POST response (counted as 0 ms); %d driver ticks skipped\n",
		r.Jobs.Queued, r.Jobs.Claimed, r.Jobs.Completed, r.Jobs.Outstanding, r.Dispatch.Early, r.Jobs.Skipped)
	fmt.Fprintf(w, "errors: %d\n", r.Errors)
	for _, c := range callOrder {
		if e, ok := r.FirstErrors[c]; ok {
			fmt.Fprintf(w, "  first %s error: %s\n", c, e)
		}
	}
	if cp := r.ControlPlane; cp != nil {
		label := "control plane"
		if len(r.ControlPlanes) > 1 {
			label = fmt.Sprintf("%d control planes together", len(r.ControlPlanes))
		}
		cp.write(w, label)
	}
	sm := r.Simulator
	fmt.Fprintf(w, "simulator (pid %s): cpu avg %.0f%% (max window %.0f%%); rss %.0f MB (max %.0f MB); fds max %d (limit %d)\n",
		sm.PID, sm.CPUAvgPct, sm.CPUMaxPct, sm.RSSEndMB, sm.RSSMaxMB, sm.FDsMax, sm.FDLimit)
	if r.Restart != nil {
		r.Restart.write(w)
	}
	fmt.Fprintf(w, "load average: start %.2f %.2f %.2f; end %.2f %.2f %.2f; max 1-min %.2f (%d CPUs); machine cpu busy %.0f%%, stolen by the hypervisor %.0f%%\n",
		r.LoadStart[0], r.LoadStart[1], r.LoadStart[2], r.LoadEnd[0], r.LoadEnd[1], r.LoadEnd[2], r.LoadMax1, runtime.NumCPU(), r.Machine.BusyPct, r.Machine.StealPct)
}
