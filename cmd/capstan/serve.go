package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentapi"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/httpapi"
	"github.com/capstan-dev/capstan/internal/httpconn"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/notify"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/singleton"
	"github.com/capstan-dev/capstan/internal/stream"
	"github.com/capstan-dev/capstan/internal/telemetry"
	"github.com/capstan-dev/capstan/web"
)

type serveCmd struct {
	StoreFlags
	cloudDriveFlags
	smtpFlags
	Listen          string        `env:"CAPSTAN_LISTEN" default:"127.0.0.1:8080" help:"Address to listen on (host:port; port 0 picks a free one)."`
	PublicURL       string        `name:"public-url" env:"CAPSTAN_PUBLIC_URL" help:"URL that agents and browsers use to reach this control plane. Default: derived from --listen."`
	LogLevel        string        `name:"log-level" env:"CAPSTAN_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level."`
	AgentInFlight   int           `name:"agent-max-in-flight" env:"CAPSTAN_AGENT_MAX_IN_FLIGHT" default:"1024" help:"Most agent requests handled at once; more are answered 503 with Retry-After, and the agents retry. Waiting claims do not count."`
	TrustedProxy    bool          `name:"trusted-proxy" env:"CAPSTAN_TRUSTED_PROXY" help:"Take the client address from X-Forwarded-For (only behind a proxy that sets it)."`
	ShutdownWait    time.Duration `name:"shutdown-timeout" default:"30s" help:"How long in-flight requests may take to finish on SIGTERM."`
	AgentDir        string        `name:"agent-dir" env:"CAPSTAN_AGENT_DIR" help:"Directory with agent binaries (capstan-agent-linux-<arch>, or capstan-agent for this host's arch). Default: the directory of this executable."`
	AllowInsecure   bool          `name:"allow-insecure-agents" env:"CAPSTAN_ALLOW_INSECURE_AGENTS" help:"Serve the agent installer even when the public URL is plain http:// to an address other than loopback. Agent tokens and job secrets then cross the network in clear: only on a network you trust."`
	EnrollmentTTL   time.Duration `name:"enrollment-ttl" env:"CAPSTAN_ENROLLMENT_TTL" default:"1h" help:"How long an enrollment token stays valid."`
	MetricsEvery    time.Duration `name:"metrics-rollup-interval" env:"CAPSTAN_METRICS_ROLLUP_INTERVAL" default:"2m" help:"How often old metric samples are pruned and the hourly rollups of database metrics brought up to date (a server's samples are added to their hour's rollup as they are stored)."`
	DBImages        string        `name:"database-images" env:"CAPSTAN_DATABASE_IMAGES" help:"JSON file mapping database engine versions to the container images to use instead of the official ones (see the README). Versions it does not name keep their official image."`
	GitHostAPIURL   string        `name:"githost-api-url" env:"CAPSTAN_GITHOST_API_URL" default:"https://api.github.com" help:"REST API base URL of the git host (GitHub). For GitHub Enterprise Server: https://HOST/api/v3. Its TLS certificate is checked against the system's trusted CAs (SSL_CERT_FILE, SSL_CERT_DIR)."`
	GitHostWebURL   string        `name:"githost-web-url" env:"CAPSTAN_GITHOST_WEB_URL" default:"https://github.com" help:"Web base URL of the git host (GitHub), where browsers create and install the app. For GitHub Enterprise Server: https://HOST."`
	EvaluateEvery   time.Duration `name:"alert-evaluation-interval" env:"CAPSTAN_ALERT_EVALUATION_INTERVAL" default:"30s" help:"How often alert rules are evaluated (in one control plane of those sharing a database)."`
	DomainChecks    time.Duration `name:"domain-check-interval" env:"CAPSTAN_DOMAIN_CHECK_INTERVAL" default:"24h" help:"How often the certificate of every domain with auto or internal TLS is checked, for the tls_expiring alert rule."`
	NotifyAllow     []string      `name:"notify-allow-destinations" env:"CAPSTAN_NOTIFY_ALLOW_DESTINATIONS" sep:"," help:"Address ranges (CIDR, comma-separated) that notification deliveries may reach although they are loopback, private or link-local; by default deliveries refuse every internal address."`
	NotifyRetry     time.Duration `name:"notify-retry-base" hidden:"" default:"10s" help:"Wait after a first failed notification delivery; each further failure doubles it (at most an hour)."`
	NotifyTimeout   time.Duration `name:"notify-attempt-timeout" hidden:"" default:"30s" help:"How long one notification delivery attempt may take; a control plane that dies mid-attempt has it made again after four times this."`
	PprofListen     string        `name:"debug-pprof-listen" hidden:"" help:"Serve net/http/pprof on this loopback address (host:port), for profiling."`
	MemoryLimit     string        `name:"memory-limit" env:"CAPSTAN_MEMORY_LIMIT" default:"auto" help:"Soft limit of the process's Go memory (e.g. 256MiB; off to have none): near it the garbage collector runs more often instead of letting the heap grow to twice what is live. auto: 80% of the memory limit of the control plane's cgroup when it has one, else none. GOMEMLIMIT, when set, takes precedence."`
	MetricsListen   string        `name:"metrics-listen" env:"CAPSTAN_METRICS_LISTEN" help:"Serve Prometheus metrics at /metrics on this address (host:port), apart from the API; off when empty. The metrics carry no secrets but describe the fleet: listen on loopback or a private network. Names: docs/metrics.md."`
	JobRetention    time.Duration `name:"job-output-retention" env:"CAPSTAN_JOB_OUTPUT_RETENTION" default:"720h" help:"How long what agents report of a job (query rows, key values, logs, build output: kept encrypted) is kept after the job ended; the job itself stays listed. At least 1h."`
	ExportTTL       time.Duration `name:"database-export-ttl" env:"CAPSTAN_DATABASE_EXPORT_TTL" default:"168h" help:"How long a database export can be downloaded before it is deleted."`
	ImportMax       string        `name:"database-import-max-size" env:"CAPSTAN_DATABASE_IMPORT_MAX_SIZE" default:"10GiB" help:"Largest database import upload taken (e.g. 512MiB, 10GiB); larger ones are refused with 413."`
	ExportMax       string        `name:"database-export-max-size" env:"CAPSTAN_DATABASE_EXPORT_MAX_SIZE" default:"100GiB" help:"Largest database export an agent may upload (compressed)."`
	BackupLocalDir  string        `name:"backup-local-dir" env:"CAPSTAN_BACKUP_LOCAL_DIR" help:"Directory on each server where agents keep local copies of backups (encrypted, like the uploaded ones). Default: /var/lib/capstan-agent/backups, the agent's state directory."`
	BackupLocalKeep int           `name:"backup-local-keep" env:"CAPSTAN_BACKUP_LOCAL_KEEP" default:"2" help:"How many local copies of each database a server keeps (0 to 100; 0 keeps none), besides the newest verified backup's, which it always keeps."`
	RestartGrace    time.Duration `name:"restart-lease-grace" env:"CAPSTAN_RESTART_LEASE_GRACE" default:"60s" help:"When the control plane starts, the leases of running jobs last at least this long, so that agents that backed off while it was down can come back before their jobs fail as agent_lost (agents back off up to 30 s)."`
	BackupSchedule  time.Duration `name:"backup-schedule-interval" env:"CAPSTAN_BACKUP_SCHEDULE_INTERVAL" default:"1m" help:"How often the backup scheduler (in one control plane of those sharing a database) queues due backups and looks for stale ones."`
	BackupJitter    time.Duration `name:"backup-schedule-jitter" env:"CAPSTAN_BACKUP_SCHEDULE_JITTER" default:"15m" help:"Window over which newly enabled backup policies first fire, spread by instance (never more than a policy's interval; 0 fires at once)."`
	BackupRetry     time.Duration `name:"backup-delete-retry" env:"CAPSTAN_BACKUP_DELETE_RETRY" hidden:"" default:"1m" help:"First wait before a backup deletion the storage refused is tried again (doubling up to 6h)."`
	ReapEvery       time.Duration `name:"artifact-reap-interval" env:"CAPSTAN_ARTIFACT_REAP_INTERVAL" hidden:"" default:"1m" help:"How often expired database exports are deleted."`
}

func (c *serveCmd) Run(ctx context.Context) error {
	if err := execWithRuntimeSettings(); err != nil {
		return err
	}
	log := newLogger(c.LogLevel)
	limit, err := applyMemoryLimit(c.MemoryLimit)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	publicURL, err := derivePublicURL(c.PublicURL, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	mailer, err := c.smtp(publicURL)
	if err != nil {
		ln.Close()
		return err
	}
	catalog, err := databases.LoadCatalog(c.DBImages)
	if err != nil {
		ln.Close()
		return err
	}
	artifactOpts, err := c.artifactOptions()
	if err != nil {
		ln.Close()
		return err
	}
	agentDir := c.AgentDir
	if agentDir == "" {
		exe, err := os.Executable()
		if err != nil {
			ln.Close()
			return err
		}
		agentDir = filepath.Dir(exe)
	}
	provider, err := githost.NewGitHub(c.GitHostAPIURL, c.GitHostWebURL, nil)
	if err != nil {
		ln.Close()
		return err
	}
	driveConfig, err := c.cloudDriveFlags.config(publicURL)
	if err != nil {
		ln.Close()
		return err
	}
	var pprofLn net.Listener
	if c.PprofListen != "" {
		if pprofLn, err = listenPprof(c.PprofListen); err != nil {
			ln.Close()
			return err
		}
		defer pprofLn.Close()
	}
	var metricsLn net.Listener
	if c.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", c.MetricsListen); err != nil {
			ln.Close()
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer metricsLn.Close()
	}
	a, err := openAppWith(ctx, c.StoreFlags, appOptions{PublicURL: publicURL, EnrollmentTTL: c.EnrollmentTTL, Catalog: catalog,
		Provider: provider, Artifacts: &artifactOpts, CloudDrive: &driveConfig, Logger: log,
		BackupRun: backups.RunOptions{LocalDir: c.BackupLocalDir, LocalKeep: c.BackupLocalKeep},
		Schedule:  backups.ScheduleOptions{Jitter: c.BackupJitter, DeleteRetry: c.BackupRetry}})
	if err != nil {
		ln.Close()
		return err
	}
	defer a.Close()
	var tel *telemetry.Metrics
	if metricsLn != nil {
		tel = newTelemetry(a, log)
	}
	if pprofLn != nil {
		log.Info("pprof listening", "addr", pprofLn.Addr().String())
		go servePprof(pprofLn) //nolint:errcheck // ends when the listener closes
	}

	a.events.Register(notify.NewEmail(mailer, a.store, a.auth))
	a.channels = notify.NewChannels(a.store, a.key, a.audit, c.notifyGuard(), time.Now, log)
	a.events.Register(a.channels)
	a.events.RetryBase, a.events.AttemptTimeout, a.events.Lease = c.NotifyRetry, c.NotifyTimeout, 4*c.NotifyTimeout
	// Waiting claim long polls are taken out of the HTTP server while they
	// wait (see httpconn); their connections come back to it here.
	const idleTimeout = 120 * time.Second
	returns := httpconn.NewReturns(ln.Addr(), idleTimeout)
	api := httpapi.New(httpapi.Deps{
		Auth: a.auth, Audit: a.audit, Platform: a.platform, Servers: a.servers, Jobs: a.jobs, Metrics: a.metrics, Logs: a.logs, Logger: log,
		Apps: a.apps, Domains: a.domains, Databases: a.dbs, Events: a.store, GitHost: a.githost, Monitoring: a.monitor, Inbox: a.inbox,
		Backups: a.backups, Channels: a.channels, Preferences: notify.NewPreferences(a.store, time.Now),
		SMTP:    mailer,
		Version: version, PublicURL: publicURL, TrustedProxy: c.TrustedProxy, Console: web.Dist(), AgentInFlight: c.AgentInFlight,
		Stream: a.live, StreamTickets: a.store, Requests: requestObserver(tel), Conns: returns,
	}, agentapi.Mount(agentapi.Deps{Servers: a.servers, Jobs: a.jobs, Metrics: a.metrics, Domains: a.domains,
		Monitoring: a.monitor, Databases: a.dbs, Backups: a.backups, PublicURL: publicURL, AgentDir: agentDir, Version: version,
		AllowInsecureAgents: c.AllowInsecure}), httpapi.CloudDrive(a.clouddrive))
	// Heartbeats are written in batches; the last batch is written after
	// the HTTP server has shut down, before the store closes.
	stopTouches := a.servers.StartTouchBatching(servers.TouchFlushInterval, log)
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := stopTouches(fctx); err != nil {
			log.Error("writing the last heartbeats", "err", err.Error())
		}
	}()
	if n, err := a.jobs.Grace(ctx, c.RestartGrace); err != nil {
		return fmt.Errorf("extending running jobs' leases: %w", err)
	} else if n > 0 {
		log.Info("running jobs get a grace period for their agents to come back", "jobs", n, "grace", c.RestartGrace.String())
	}
	// Background loops end (and are waited for) before the store closes.
	var loops sync.WaitGroup
	defer loops.Wait()
	bg, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	if a.store.Shared() {
		// The job and server services tell the others over the store's
		// bus (see wire); here each hears what the others said.
		// The live stream of each shows the changes the others made.
		relay := stream.NewRelay(a.live, a.store, ids.New("cp"), func(ctx context.Context, id string) (jobs.Job, error) {
			j, _, err := a.jobs.Get(ctx, id)
			return j, err
		}, log)
		loops.Go(func() { relay.Run(bg) })
		loops.Go(func() {
			a.store.Listen(bg, func(msg string) {
				if !a.jobs.Deliver(msg) && !relay.Deliver(bg, msg) {
					a.servers.Deliver(msg)
				}
			}, func(up bool) {
				a.servers.BusConnected(up)
				if up {
					a.jobs.WakeAll()
					// What the others sent while this one was not
					// listening is lost: browsers reload what they show.
					relay.Missed()
				} else {
					log.Warn("lost the connection that hears the other control planes; reconnecting")
				}
			})
		})
	}
	// The event dispatcher runs in every control plane (it claims each
	// delivery in the store); the other background work runs in one.
	loops.Go(func() { a.events.Run(bg, time.Second) })
	for _, t := range a.backgroundTasks(c, log) {
		loops.Go(func() { t.Loop(bg) })
	}
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
	// Claim long polls wait up to 30 s; end them when shutdown begins.
	srv.RegisterOnShutdown(a.jobs.StopClaims)
	log.Info("listening", "addr", ln.Addr().String(), "public_url", publicURL, "store", a.store.DialectName(),
		"schema_version", a.schema, "version", version, "memory_limit", limit)
	if agentapi.InsecurePublicURL(publicURL) {
		if c.AllowInsecure {
			log.Warn("the public URL is plain http:// to an address other than loopback: agent tokens and job secrets cross the network in clear",
				"public_url", publicURL)
		} else {
			log.Warn("the public URL is plain http:// to an address other than loopback, so the agent installer is not served; "+
				"set --public-url to an https:// URL, or pass --allow-insecure-agents on a network you trust", "public_url", publicURL)
		}
	}
	if users, err := a.auth.ListUsers(ctx); err == nil && len(users) == 0 {
		log.Info("no users yet; create the first administrator with: capstan user create --data-dir " +
			c.DataDir + " --email you@example.com --admin --password-stdin")
	}

	if metricsLn != nil {
		log.Info("metrics listening", "addr", metricsLn.Addr().String())
		go serveMetrics(metricsLn, tel) //nolint:errcheck // ends when the listener closes
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	go srv.Serve(returns) //nolint:errcheck // ends with the server's Shutdown, like Serve(ln)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; waiting for in-flight requests", "timeout", c.ShutdownWait.String())
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownWait)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// The claims that waited outside the server were answered when the
	// shutdown began (StopClaims); wait until each answer was written.
	if err := returns.Wait(sctx); err != nil {
		return fmt.Errorf("shutdown: %d waiting claims not answered: %w", returns.Out(), err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// Validate checks the flags that need no listener, store or network
// before anything starts: a wrong one is a usage error.
func (c *serveCmd) Validate() error {
	type bound struct {
		flag      string
		v, lo, hi time.Duration
		say       string
	}
	for _, b := range []bound{
		{"--enrollment-ttl", c.EnrollmentTTL, time.Minute, 30 * 24 * time.Hour, "between 1m and 720h"},
		{"--metrics-rollup-interval", c.MetricsEvery, time.Second, time.Hour, "between 1s and 1h"},
		{"--alert-evaluation-interval", c.EvaluateEvery, time.Second, 10 * time.Minute, "between 1s and 10m"},
		{"--domain-check-interval", c.DomainChecks, time.Second, 7 * 24 * time.Hour, "between 1s and 168h"},
		{"--notify-retry-base", c.NotifyRetry, 10 * time.Millisecond, time.Hour, "between 10ms and 1h"},
		{"--notify-attempt-timeout", c.NotifyTimeout, 100 * time.Millisecond, time.Hour, "between 100ms and 1h"},
		{"--job-output-retention", c.JobRetention, time.Hour, 100 * 365 * 24 * time.Hour, "at least 1h"},
		{"--database-export-ttl", c.ExportTTL, time.Minute, 365 * 24 * time.Hour, "between 1m and 8760h"},
		{"--artifact-reap-interval", c.ReapEvery, time.Second, time.Hour, "between 1s and 1h"},
		{"--backup-schedule-interval", c.BackupSchedule, time.Second, time.Hour, "between 1s and 1h"},
		{"--backup-schedule-jitter", c.BackupJitter, 0, 24 * time.Hour, "between 0 and 24h"},
		{"--backup-delete-retry", c.BackupRetry, time.Second, time.Hour, "between 1s and 1h"},
		{"--restart-lease-grace", c.RestartGrace, 0, time.Hour, "between 0s and 1h"},
	} {
		if b.v < b.lo || b.v > b.hi {
			return fmt.Errorf("%s must be %s", b.flag, b.say)
		}
	}
	if c.AgentInFlight < 16 || c.AgentInFlight > 1_000_000 {
		return fmt.Errorf("--agent-max-in-flight must be between 16 and 1000000")
	}
	if c.BackupLocalKeep < 0 || c.BackupLocalKeep > 100 {
		return fmt.Errorf("--backup-local-keep must be between 0 and 100")
	}
	if c.BackupLocalDir != "" && !filepath.IsAbs(c.BackupLocalDir) {
		return fmt.Errorf("--backup-local-dir must be an absolute path")
	}
	for _, a := range c.NotifyAllow {
		if _, err := netip.ParsePrefix(strings.TrimSpace(a)); err != nil {
			return fmt.Errorf("--notify-allow-destinations: %q is not a CIDR range (e.g. 127.0.0.0/8)", a)
		}
	}
	if _, err := c.artifactOptions(); err != nil {
		return err
	}
	return nil
}

// notifyGuard is where notification deliveries may go: every public
// address, and the internal ranges --notify-allow-destinations names
// (checked by Validate).
func (c *serveCmd) notifyGuard() notify.Guard {
	g := notify.Guard{}
	for _, a := range c.NotifyAllow {
		if p, err := netip.ParsePrefix(strings.TrimSpace(a)); err == nil {
			g.Allowed = append(g.Allowed, p)
		}
	}
	return g
}

// backgroundTasks are the loops that must not run twice at once: each is
// a singleton.Task, run in one control plane of those sharing the
// database. (The event dispatcher claims each delivery in the store
// instead, so every control plane delivers.)
func (a *app) backgroundTasks(c *serveCmd, log *slog.Logger) []*singleton.Task {
	checks := &monitoring.DomainChecks{Due: a.store, Domains: a.domains, Every: c.DomainChecks, Now: time.Now}
	logged := func(what string, n int, err error, args ...any) error {
		if n > 0 {
			log.Info(what, append([]any{"count", n}, args...)...)
		}
		return err
	}
	tasks := []struct {
		name  string
		every time.Duration
		run   func(ctx context.Context) error
	}{
		{"job-reaper", 2 * time.Second, func(ctx context.Context) error {
			_, err := a.jobs.Expire(ctx)
			return err
		}},
		{"job-output-retention", 10 * time.Minute, func(ctx context.Context) error {
			n, err := a.jobs.PurgeResults(ctx, c.JobRetention)
			return logged("job output past its retention removed", n, err, "retention", c.JobRetention.String())
		}},
		{"metrics-maintenance", c.MetricsEvery, func(ctx context.Context) error {
			st, err := a.metrics.Maintain(ctx)
			if err == nil && (st.HoursRolledUp > 0 || st.RowsPruned > 0) {
				log.Debug("metrics maintenance", "hours_rolled_up", st.HoursRolledUp, "rows_pruned", st.RowsPruned)
			}
			return err
		}},
		{"artifact-reaper", c.ReapEvery, func(ctx context.Context) error {
			n, err := a.dbs.ReapArtifacts(ctx)
			return logged("deleted expired database artifacts", n, err)
		}},
		{"login-throttle-prune", 10 * time.Minute, func(ctx context.Context) error {
			_, err := a.auth.PruneThrottles(ctx)
			return err
		}},
		{"server-presence", 5 * time.Second, func(ctx context.Context) error {
			_, err := a.presence.Check(ctx)
			return err
		}},
		{"alert-evaluation", c.EvaluateEvery, func(ctx context.Context) error {
			_, err := a.monitor.Evaluate(ctx)
			return err
		}},
		{"domain-checks", min(max(c.DomainChecks/4, time.Second), 10*time.Minute), func(ctx context.Context) error {
			_, err := checks.Run(ctx)
			return err
		}},
		{"backup-scheduler", c.BackupSchedule, func(ctx context.Context) error {
			_, err := a.backups.Tick(ctx)
			return err
		}},
	}
	holder := singleton.Holder()
	out := make([]*singleton.Task, len(tasks))
	for i, t := range tasks {
		out[i] = &singleton.Task{Leases: a.store, Name: t.name, Holder: holder, Interval: t.every, Now: time.Now, Log: log, Run: t.run}
	}
	return out
}

// derivePublicURL validates an explicit public URL or derives one from the
// address the server listens on.
func derivePublicURL(explicit, addr string) (string, error) {
	if explicit != "" {
		u, err := url.Parse(explicit)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--public-url must be an absolute http:// or https:// URL")
		}
		return strings.TrimRight(u.String(), "/"), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// artifactOptions checks the export and import flags.
func (c *serveCmd) artifactOptions() (databases.ArtifactOptions, error) {
	if c.ExportTTL < time.Minute || c.ExportTTL > 365*24*time.Hour {
		return databases.ArtifactOptions{}, fmt.Errorf("--database-export-ttl must be between 1m and 8760h")
	}
	if c.ReapEvery < time.Second || c.ReapEvery > time.Hour {
		return databases.ArtifactOptions{}, fmt.Errorf("--artifact-reap-interval must be between 1s and 1h")
	}
	importMax, err := parseSize(c.ImportMax)
	if err != nil {
		return databases.ArtifactOptions{}, fmt.Errorf("--database-import-max-size: %w", err)
	}
	exportMax, err := parseSize(c.ExportMax)
	if err != nil {
		return databases.ArtifactOptions{}, fmt.Errorf("--database-export-max-size: %w", err)
	}
	return databases.ArtifactOptions{TTL: c.ExportTTL, MaxImportBytes: importMax, MaxExportBytes: exportMax}, nil
}

// parseSize reads a size in bytes: a whole number with an optional unit,
// B, KiB, MiB, GiB or TiB (binary), or KB, MB, GB, TB (decimal).
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || n > (1<<53)/mult {
		return 0, fmt.Errorf("%q is not a size such as 10GiB", s)
	}
	return n * mult, nil
}
