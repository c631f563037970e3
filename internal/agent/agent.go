// Package agent is capstan-agent's runtime: its configuration file, the
// /agent/v1 client, host facts, and Agent, which runs the heartbeat, job
// claim, metrics and inventory loops and executes claimed jobs with the
// executors of a Registry.
//
// The agent only makes outbound calls. Every loop backs off exponentially
// with full jitter while the control plane is unreachable (Backoff,
// RunLoop). A reply saying the agent's credential is revoked stops
// everything: Run returns an error matching ErrRevoked, and the process
// exits with agentproto.ExitRevoked.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/metrics"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Defaults of the runtime configuration, used until a heartbeat says
// otherwise.
const (
	DefaultHeartbeatSeconds  = 30
	DefaultMetricsSeconds    = 15
	DefaultClaimWaitSeconds  = 25
	DefaultMaxConcurrentJobs = 4
	// DefaultJobTimeout applies to a job without timeout_seconds.
	DefaultJobTimeout = time.Hour
	// DefaultShutdownGrace is how long Run lets running jobs finish after
	// its context ends.
	DefaultShutdownGrace = 10 * time.Second

	maxConcurrentJobsLimit = 256
	// stopGrace is how long an executor has to return once its context
	// ended, and how long completions may still be sent after the
	// shutdown grace.
	stopGrace = 5 * time.Second
	// minClaimSpacing keeps a control plane that answers claims with 204 at
	// once from being polled in a tight loop.
	minClaimSpacing = time.Second

	// InventoryCheckInterval is how often the inventory is collected and
	// compared with the one last sent; it is sent when it differs.
	InventoryCheckInterval = 30 * time.Second
	// InventoryRefreshInterval is how often an unchanged inventory is sent
	// again.
	InventoryRefreshInterval = 5 * time.Minute
	// InventoryDebounce is how long the inventory loop waits after a
	// change an InventoryWatcher told of for more to follow (a deploy
	// changes several containers in a row) before it collects again.
	InventoryDebounce = time.Second
)

// processStart is when this process started, for uptime_seconds.
var processStart = time.Now()

// Options configure an Agent.
type Options struct {
	Config    Config   // from the config file; must Validate
	Version   string   // agent build version
	Executors Registry // job type → executor
	Logger    *slog.Logger
	// HTTPClient, if nil, is NewHTTPClient().
	HTTPClient *http.Client
	// ShutdownGrace, if zero, is DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Backoff is the retry policy of every loop; zero: 1 s to 30 s.
	Backoff Backoff
	// Sampler takes the metric samples; nil: this host's
	// (metrics.NewSampler("/")).
	Sampler MetricsSampler
	// ContainerStats samples the running containers with each metric
	// sample; nil: the local engine's (inventory.NewContainerStats) when
	// Sampler is nil too, else none.
	ContainerStats ContainerStatsSampler
	// Inventory collects the inventory; nil: this host's
	// (inventory.New("/")), closed when Run returns.
	Inventory InventoryCollector
	// Loops are further background loops (e.g. the proxy's traffic
	// report), run next to the agent's own until Run's context ends.
	Loops []Loop
	// StateDir, if not empty, is the agent's state directory: the metric
	// samples and job results not delivered yet are kept in its
	// subdirectory pending/<server id>, so that a restart or a reboot loses
	// neither; they are sent when the agent starts again.
	StateDir string
	// OnHeartbeat, if not nil, is given every heartbeat reply (e.g. so a
	// loop learns that its list of database instances changed). It must
	// not block.
	OnHeartbeat func(agentproto.HeartbeatResponse)

	// Intervals for tests (export_test.go); zero: metrics_seconds,
	// InventoryCheckInterval, InventoryRefreshInterval.
	metricsInterval  time.Duration
	inventoryCheck   time.Duration
	inventoryRefresh time.Duration
	// inventoryDebounce, zero: InventoryDebounce.
	inventoryDebounce time.Duration
}

// MetricsSampler takes a sample of the host at now. An error names the
// figures it could not read; the sample is sent anyway.
type MetricsSampler interface {
	Sample(now time.Time) (agentproto.MetricSample, error)
}

// ContainerStatsSampler samples the running containers' use of the host.
// Nil, nil means there is no container engine; an error names the
// containers left out.
type ContainerStatsSampler interface {
	Sample(ctx context.Context) ([]agentproto.ContainerSample, error)
}

// InventoryCollector collects the host's inventory. An error names the
// parts it could not read (nil in the report); the report is sent anyway.
type InventoryCollector interface {
	Collect(ctx context.Context) (agentproto.InventoryRequest, error)
}

// InventoryWatcher is an InventoryCollector that tells of changes as
// they happen (inventory.Collector follows Docker's events). Watch runs
// until ctx ends; changed must not block.
type InventoryWatcher interface {
	InventoryCollector
	Watch(ctx context.Context, changed func())
}

// Agent runs the agent's loops. Make one with New and call Run once.
type Agent struct {
	opts    Options
	log     *slog.Logger
	client  *Client
	recent  *recentJobs
	pending *pendingStore // nil: nothing kept across restarts

	revokeOnce sync.Once
	revoked    chan struct{}
	revokedErr *RevokedError

	mu        sync.Mutex
	settings  agentproto.Config
	executing int                 // jobs whose executor runs (they hold a slot)
	active    map[string]struct{} // executing or completing: reported in heartbeats
	slotFree  chan struct{}       // signalled when a slot may have freed up
	started   bool

	// Contexts of running jobs and of their calls to the control plane;
	// set by Run.
	execCtx context.Context
	sendCtx context.Context
	jobs    sync.WaitGroup
}

// New checks opts and returns an Agent.
func New(opts Options) (*Agent, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Executors == nil {
		opts.Executors = Registry{}
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	a := &Agent{
		opts:     opts,
		log:      opts.Logger,
		recent:   newRecentJobs(RecentJobs, recentResultBytes),
		revoked:  make(chan struct{}),
		active:   map[string]struct{}{},
		slotFree: make(chan struct{}, 1),
		settings: agentproto.Config{
			HeartbeatSeconds:  orDefault(opts.Config.HeartbeatSeconds, DefaultHeartbeatSeconds),
			MetricsSeconds:    orDefault(opts.Config.MetricsSeconds, DefaultMetricsSeconds),
			ClaimWaitSeconds:  DefaultClaimWaitSeconds,
			MaxConcurrentJobs: DefaultMaxConcurrentJobs,
		},
	}
	p, err := openPending(opts.StateDir, opts.Config.ServerID, opts.Logger)
	if err != nil {
		// The agent still works; it only loses the undelivered on a restart.
		opts.Logger.Error("metric samples and job results cannot be kept across restarts", "err", err)
	}
	a.pending = p
	c, err := NewClient(opts.Config.APIURL, opts.Config.AgentToken, opts.Version, opts.HTTPClient, a.revoke)
	if err != nil {
		return nil, err
	}
	a.client = c
	return a, nil
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Client returns the agent's control plane client.
func (a *Agent) Client() *Client { return a.client }

// Settings returns the runtime configuration in effect.
func (a *Agent) Settings() agentproto.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settings
}

// revoke is called by the client for every revocation reply.
func (a *Agent) revoke(err *RevokedError) {
	a.revokeOnce.Do(func() {
		a.revokedErr = err
		close(a.revoked)
	})
}

// Run runs the heartbeat, claim, metrics and inventory loops until ctx
// ends or the control plane revokes the agent.
//
// When ctx ends, Run stops claiming, lets running jobs finish and report
// for up to ShutdownGrace, then cancels them, and returns nil. On
// revocation it stops everything at once and returns a *RevokedError
// (errors.Is(err, ErrRevoked)). No goroutine of the agent outlives Run,
// unless an executor ignores its context (Run then gives up waiting for it
// after a few seconds).
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.started = true
	a.mu.Unlock()

	base := context.WithoutCancel(ctx)
	execCtx, stopExec := context.WithCancel(base)
	sendCtx, stopSend := context.WithCancel(base)
	defer stopExec()
	defer stopSend()
	a.execCtx, a.sendCtx = execCtx, sendCtx

	a.log.Info("agent started", "version", a.opts.Version, "api_url", a.opts.Config.APIURL,
		"server_id", a.opts.Config.ServerID, "job_types", a.opts.Executors.Types(),
		"metrics_seconds", a.Settings().MetricsSeconds)
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	samples := metrics.NewBuffer(metrics.BufferCapacity(a.metricsInterval()))
	// Before the first claim: a job kept by the last run is not run again.
	a.resumePending(samples)
	var loops sync.WaitGroup
	loops.Go(func() { a.heartbeatLoop(loopCtx) })
	loops.Go(func() { a.claimLoop(loopCtx) })
	loops.Go(func() { a.sampleLoop(loopCtx, samples) })
	loops.Go(func() { a.metricsSendLoop(loopCtx, samples) })
	loops.Go(func() { a.inventoryLoop(loopCtx) })
	for _, l := range a.opts.Loops {
		loops.Go(func() { a.extraLoop(loopCtx, l) })
	}

	revoked := false
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", "running_jobs", a.runningCount(), "grace", a.opts.ShutdownGrace.String())
	case <-a.revoked:
		revoked = true
		a.logRevoked()
		stopExec()
		stopSend()
	}
	stopLoops()
	loops.Wait()

	// No job starts after the claim loop ended.
	done := make(chan struct{})
	go func() { a.jobs.Wait(); close(done) }()
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-done:
			return true
		case <-t.C:
			return false
		}
	}
	finished := false
	if !revoked {
		t := time.NewTimer(a.opts.ShutdownGrace)
		select {
		case <-done:
			finished = true
		case <-t.C:
		case <-a.revoked:
			revoked = true
			a.logRevoked()
			stopSend()
		}
		t.Stop()
	}
	if !finished {
		// Cancel what still runs; unless revoked, completions (as failed)
		// get a few more seconds.
		stopExec()
		if !wait(stopGrace) {
			stopSend()
			if !wait(stopGrace) {
				a.log.Error("jobs did not stop; exiting anyway", "running_jobs", a.runningCount())
			}
		}
	}
	if revoked || a.isRevoked() {
		if !revoked {
			a.logRevoked()
		}
		return a.revokedErr
	}
	a.log.Info("agent stopped")
	return nil
}

func (a *Agent) isRevoked() bool {
	select {
	case <-a.revoked:
		return true
	default:
		return false
	}
}

func (a *Agent) logRevoked() {
	a.log.Error("control plane revoked this agent; stopping", "problem_type", a.revokedErr.Problem.Type,
		"detail", a.revokedErr.Problem.Detail, "err", a.revokedErr.Error(), "exit_status", agentproto.ExitRevoked)
}

func (a *Agent) runningCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

// runningJobIDs are the jobs executing or being completed, sorted.
func (a *Agent) runningJobIDs() []string {
	a.mu.Lock()
	ids := make([]string, 0, len(a.active))
	for id := range a.active {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	slices.Sort(ids)
	return ids
}

func (a *Agent) heartbeatLoop(ctx context.Context) {
	b := a.opts.Backoff
	factsSent := false
	contact := newContactLog(a.opts.StateDir, a.opts.Version)
	RunLoop(ctx, a.log, "heartbeat", &b, func(ctx context.Context) (time.Duration, error) {
		req := agentproto.HeartbeatRequest{
			AgentVersion:  a.opts.Version,
			UptimeSeconds: int64(time.Since(processStart).Seconds()),
			RunningJobIDs: a.runningJobIDs(),
		}
		if !factsSent {
			// Facts may have changed since enrollment (upgrade, reboot).
			f := CollectFacts(a.opts.Version)
			f.JobTypes = a.opts.Executors.Types()
			req.Facts = &f
		}
		resp, err := a.client.Heartbeat(ctx, req)
		if ctx.Err() == nil {
			if werr := contact.record(time.Now(), err); werr != nil {
				a.log.Debug("recording the contact with the control plane", "err", werr)
			}
		}
		if err != nil {
			return 0, err
		}
		factsSent = true
		a.applyConfig(resp.Config)
		if a.opts.OnHeartbeat != nil {
			a.opts.OnHeartbeat(resp)
		}
		return time.Duration(a.Settings().HeartbeatSeconds) * time.Second, nil
	})
}

// applyConfig applies the non-zero fields of c.
func (a *Agent) applyConfig(c agentproto.Config) {
	a.mu.Lock()
	old := a.settings
	s := &a.settings
	if c.HeartbeatSeconds > 0 {
		s.HeartbeatSeconds = c.HeartbeatSeconds
	}
	if c.MetricsSeconds > 0 {
		s.MetricsSeconds = c.MetricsSeconds
	}
	if c.ClaimWaitSeconds > 0 {
		s.ClaimWaitSeconds = min(c.ClaimWaitSeconds, agentproto.MaxClaimWaitSeconds)
	}
	if c.MaxConcurrentJobs > 0 {
		s.MaxConcurrentJobs = min(c.MaxConcurrentJobs, maxConcurrentJobsLimit)
	}
	changed := *s != old
	cur := *s
	a.mu.Unlock()
	if changed {
		a.signalSlot()
		a.log.Info("configuration changed", "heartbeat_seconds", cur.HeartbeatSeconds, "metrics_seconds", cur.MetricsSeconds,
			"claim_wait_seconds", cur.ClaimWaitSeconds, "max_concurrent_jobs", cur.MaxConcurrentJobs)
	}
}

func (a *Agent) signalSlot() {
	select {
	case a.slotFree <- struct{}{}:
	default:
	}
}

// waitSlot returns once fewer than max_concurrent_jobs jobs execute, or
// false when ctx ends.
func (a *Agent) waitSlot(ctx context.Context) bool {
	for {
		a.mu.Lock()
		free := a.executing < a.settings.MaxConcurrentJobs
		a.mu.Unlock()
		if free {
			return true
		}
		select {
		case <-a.slotFree:
		case <-ctx.Done():
			return false
		}
	}
}

// claimLoop keeps one claim outstanding whenever a job slot is free.
func (a *Agent) claimLoop(ctx context.Context) {
	b := a.opts.Backoff
	RunLoop(ctx, a.log, "claim", &b, func(ctx context.Context) (time.Duration, error) {
		if !a.waitSlot(ctx) {
			return 0, nil
		}
		start := time.Now()
		job, err := a.client.Claim(ctx, a.Settings().ClaimWaitSeconds)
		if err != nil {
			return 0, err
		}
		if job == nil {
			return minClaimSpacing - time.Since(start), nil
		}
		a.dispatch(*job)
		return 0, nil
	})
}
