package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/backup"
	"github.com/capstan-dev/capstan/internal/agent/console"
	"github.com/capstan-dev/capstan/internal/agent/container"
	"github.com/capstan-dev/capstan/internal/agent/dbmetrics"
	"github.com/capstan-dev/capstan/internal/agent/deploy"
	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agent/managed"
	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agent/service"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type runCmd struct {
	configFlag
	LogLevel  string        `name:"log-level" env:"CAPSTAN_AGENT_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level (${enum})."`
	DBMetrics time.Duration `name:"database-metrics-interval" env:"CAPSTAN_AGENT_DATABASE_METRICS_INTERVAL" default:"1m" help:"How often each database instance on this server is sampled (1s to 1h)."`
	proxyFlags
	healthFlags
}

func (r *runCmd) Run(ctx context.Context, io stdio) error {
	var level slog.Level
	_ = level.UnmarshalText([]byte(r.LogLevel))
	log := slog.New(slog.NewJSONHandler(io.err, &slog.HandlerOptions{Level: level}))
	cfg, err := agent.LoadConfig(r.Config)
	if err != nil {
		log.Error("cannot start", "err", err)
		return err
	}
	if st, err := os.Stat(r.Config); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("agent configuration is readable by other users; it holds the agent's credential (chmod 600)",
			"path", r.Config, "mode", st.Mode().Perm().String())
	}
	if r.DBMetrics < time.Second || r.DBMetrics > time.Hour {
		err := errors.New("--database-metrics-interval must be between 1s and 1h")
		log.Error("invalid settings", "err", err)
		return err
	}
	if r.HealthProbeInterval < time.Second || r.HealthProbeInterval > time.Hour {
		log.Error("--health-probe-interval must be between 1s and 1h")
		return errors.New("--health-probe-interval must be between 1s and 1h")
	}
	ps := r.settings("/")
	if err := ps.Check(); err != nil {
		log.Error("invalid proxy settings", "err", err)
		return err
	}
	warnTCPMigrateReq(log)
	// The applied proxy revision is kept per enrollment, next to the
	// traffic report's state.
	ps.StateDir, ps.ServerID = r.StateDir, cfg.ServerID
	// The traffic report counts the configured sites by name: it reads
	// them again after every configuration the proxy loads.
	rep := r.trafficReporter(log)
	desired := &controlPlaneProxy{}
	// Database instances on this server are sampled with the logins the
	// control plane lists, held in memory only.
	dbs := dbmetrics.NewMonitor(r.DBMetrics, dbmetrics.DockerMemory(""), log)
	arts := &controlPlaneArtifacts{}
	a, err := agent.New(agent.Options{
		Config:      cfg,
		Version:     version,
		Executors:   executorsFor(ps, desired, rep.SitesChanged, arts),
		Logger:      log,
		Loops:       []agent.Loop{trafficLoop(rep), dbs.Loop(), healthLoop(r.HealthProbeInterval, r.StateDir, log)},
		StateDir:    r.StateDir,
		OnHeartbeat: dbs.Heartbeat,
	})
	if err != nil {
		log.Error("invalid agent configuration", "path", r.Config, "err", err)
		return err
	}
	desired.client = a.Client() // before Run: no job runs yet
	arts.client = a.Client()
	return a.Run(ctx)
}

// controlPlaneProxy fetches the server's desired proxy state through the
// agent's client, which is set once the agent is made and before it runs
// any job.
type controlPlaneProxy struct {
	client *agent.Client
}

func (c *controlPlaneProxy) Proxy(ctx context.Context) (agentproto.ProxyConfig, error) {
	if c.client == nil {
		return agentproto.ProxyConfig{}, errors.New("no control plane client")
	}
	return c.client.Proxy(ctx)
}

// controlPlaneArtifacts moves database export and import files, and
// asks for the grants of backup jobs' storage requests, through the
// agent's client, which is set once the agent is made and before it runs
// any job.
type controlPlaneArtifacts struct {
	client *agent.Client
}

func (c *controlPlaneArtifacts) UploadArtifact(ctx context.Context, jobID string, body io.Reader) (agentproto.ArtifactReceipt, error) {
	if c.client == nil {
		return agentproto.ArtifactReceipt{}, errors.New("no control plane client")
	}
	return c.client.UploadArtifact(ctx, jobID, body)
}

func (c *controlPlaneArtifacts) StorageGrant(ctx context.Context, jobID string, req agentproto.StorageGrantRequest) (agentproto.StorageGrant, error) {
	if c.client == nil {
		return agentproto.StorageGrant{}, errors.New("no control plane client")
	}
	return c.client.StorageGrant(ctx, jobID, req)
}

func (c *controlPlaneArtifacts) StorageObject(ctx context.Context, jobID, key string) (io.ReadCloser, int64, error) {
	if c.client == nil {
		return nil, 0, errors.New("no control plane client")
	}
	return c.client.StorageObject(ctx, jobID, key)
}

func (c *controlPlaneArtifacts) DownloadArtifact(ctx context.Context, jobID string) (io.ReadCloser, int64, error) {
	if c.client == nil {
		return nil, 0, errors.New("no control plane client")
	}
	return c.client.DownloadArtifact(ctx, jobID)
}

// executors are the job types this build runs, the proxy's with its
// default settings.
func executors() agent.Registry { return executorsFor(proxy.Settings{}, nil, nil, nil) }

// controlPlaneMover is what moves files and grants through the control
// plane.
type controlPlaneMover interface {
	dump.Artifacts
	objstore.Grantor
}

// executorsFor are the job types this build runs, the proxy's on ps;
// desired (nil: none) fetches the server's current desired proxy state;
// onLoad (nil: none) is told of every configuration the proxy loads;
// arts (nil: none) moves database export and import files and asks for
// storage grants.
func executorsFor(ps proxy.Settings, desired deploy.DesiredProxy, onLoad func(), arts controlPlaneMover) agent.Registry {
	r := agent.Registry{}
	agent.Ping{Version: version}.Register(r)

	systemd := &service.Systemd{}
	systemd.Register(r)

	docker := &container.Docker{}
	docker.Register(r)

	logs.Readers{Journal: systemd, Container: docker}.Register(r)

	// One proxy for every job that applies it (app.*, proxy.apply): its
	// applies are serialized.
	var proxyDocker proxy.Docker // nil (no discovery) if the client cannot be made
	if c, err := proxy.LocalDocker(); err == nil {
		proxyDocker = c
	}
	px := proxy.New(ps, proxyDocker)
	px.OnLoad(onLoad)
	px.Register(r)
	// Service applications keep their checkouts and live slots in the
	// agent's state directory; the proxy finds their upstreams there.
	apps := deploy.New(deploy.Options{Proxy: px, Desired: desired, StateDir: ps.StateDir, Journal: systemd})
	px.OtherUpstreams(apps.LiveServiceUpstreams)
	apps.Register(r)

	console.Executors{}.Register(r)
	instances := &managed.Managed{}
	instances.Register(r)
	var stores objstore.Opener
	var files dump.Artifacts
	if arts != nil {
		stores.Grants, files = arts, arts
	}
	transfer := &dump.Transfer{Artifacts: files, Docker: instances}
	transfer.Register(r)
	backups := &backup.Backups{Transfer: transfer, OpenStore: stores.Open}
	if ps.StateDir != "" {
		// Objects being verified or restored wait for their check here.
		backups.StagingDir = filepath.Join(ps.StateDir, "restore")
	}
	backups.Register(r)
	backups.RegisterRestores(r)
	backup.Executors{Open: stores.Open}.Register(r)
	return r
}

// tcpMigrateReqPath is the kernel setting that hands the connections
// waiting on a listening socket that closes to another socket of the same
// port (Linux 5.14+).
const tcpMigrateReqPath = "/proc/sys/net/ipv4/tcp_migrate_req"

// warnTCPMigrateReq warns when the kernel resets the connections waiting
// on a listener Caddy closes at a reload (every release and proxy change)
// instead of handing them over: the installer sets it, a server set up by
// hand may not.
func warnTCPMigrateReq(log *slog.Logger) {
	b, err := os.ReadFile(tcpMigrateReqPath)
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		return
	}
	log.Warn("net.ipv4.tcp_migrate_req is 0: a new connection reaching the proxy while it reloads (at every release) may be reset; " +
		"set it to 1 (echo net.ipv4.tcp_migrate_req = 1 > /etc/sysctl.d/60-capstan.conf; sysctl --system), as the installer does")
}
