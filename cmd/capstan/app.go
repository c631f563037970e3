package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/artifacts"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/clouddrive"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/logs"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/notify"
	"github.com/capstan-dev/capstan/internal/platform"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/stream"
)

// app holds the opened store and the domain services built on it.
type app struct {
	store    *store.Store
	key      *secrets.Key
	audit    *audit.Log
	auth     *auth.Service
	platform *platform.Service
	jobs     *jobs.Service
	servers  *servers.Service
	metrics  *metrics.Service
	logs     *logs.Service
	apps     *apps.Service
	domains  *domains.Service
	dbs      *databases.Service
	events   *events.Dispatcher
	presence *monitoring.Presence
	githost  *githost.Service // nil unless a provider was given
	monitor  *monitoring.Service
	inbox    *notify.Inbox
	backups  *backups.Service
	// clouddrive is nil unless capstan serve configured one.
	clouddrive *clouddrive.Service
	channels   *notify.Channels
	// live carries job, event and inbox changes to the web console.
	live   *stream.Hub
	schema int64
}

// openApp prepares the data dir, opens the store, applies migrations and
// loads (or, for a store that expects none, creates) the secret key, which
// must be the one the store's secrets are sealed with.
func openApp(ctx context.Context, f StoreFlags, publicURL string) (*app, error) {
	return openAppWith(ctx, f, appOptions{PublicURL: publicURL})
}

// appOptions are the settings of capstan serve that shape the services;
// the zero value is what the other commands need.
type appOptions struct {
	PublicURL     string
	EnrollmentTTL time.Duration // 0: an hour
	Catalog       databases.Catalog
	// Provider, when not nil, is the git host the git host service talks
	// to.
	Provider githost.Provider
	// Artifacts, when not nil, enables database exports and imports, their
	// files encrypted in dataDir/artifacts to the artifact identity (also
	// written to the data dir for operators).
	Artifacts *databases.ArtifactOptions
	// CloudDrive, when not nil, configures the cloud drive backups can go
	// to.
	CloudDrive *clouddrive.Config
	BackupRun  backups.RunOptions
	Schedule   backups.ScheduleOptions
	Logger     *slog.Logger
}

// openAppWith is openApp with the settings of capstan serve.
func openAppWith(ctx context.Context, f StoreFlags, o appOptions) (*app, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(f.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(f.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	st, err := store.Open(ctx, f.DatabaseURL, f.DataDir)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	v, err := st.Migrate(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	now := func() time.Time { return time.Now().UTC() }
	key, err := storeKey(ctx, st, f.DataDir, os.Getenv("CAPSTAN_SECRET_KEY"), now())
	if err != nil {
		st.Close()
		return nil, err
	}
	st.SealJobResults(key)
	a, err := wire(st, key, f.DataDir, o, logger)
	if err != nil {
		st.Close()
		return nil, err
	}
	a.schema = v
	return a, nil
}

// wire makes every service on the store, each given what it needs.
func wire(st *store.Store, key *secrets.Key, dataDir string, o appOptions, logger *slog.Logger) (*app, error) {
	now := func() time.Time { return time.Now().UTC() }
	// Control planes sharing the database wake each other's claims and
	// readers, and drop revoked agents' tokens, over the store's bus
	// (PostgreSQL LISTEN/NOTIFY).
	var bus jobs.Bus
	if st.Shared() {
		bus = st
	}
	var artifactOpts databases.ArtifactOptions
	if o.Artifacts != nil {
		if err := key.WriteArtifactIdentity(dataDir); err != nil {
			return nil, fmt.Errorf("artifact identity: %w", err)
		}
		dir, err := artifacts.Open(filepath.Join(dataDir, "artifacts"))
		if err != nil {
			return nil, err
		}
		artifactOpts = *o.Artifacts
		artifactOpts.Dir = dir
	}
	log := audit.NewLog(st, now)
	var drive *clouddrive.Service
	if o.CloudDrive != nil {
		d, err := clouddrive.NewService(st, key, log, *o.CloudDrive, now, logger)
		if err != nil {
			return nil, err
		}
		drive = d
	}
	js := jobs.NewService(jobs.Deps{Store: st, Key: key, Now: now, Log: logger, Bus: bus})
	srv := servers.NewService(servers.Deps{Store: st, Jobs: js, Audit: log, Now: now, PublicURL: o.PublicURL,
		EnrollmentTTL: o.EnrollmentTTL, KeptImages: apps.KeptImages(st), Bus: bus})
	ms := metrics.NewService(st, srv, now, logger)
	var gh *githost.Service
	appDeps := apps.Deps{Store: st, Jobs: js, Servers: srv, Audit: log, Key: key, Now: now, Log: logger}
	if o.Provider != nil {
		gh = githost.NewService(st, o.Provider, key, log, o.PublicURL, now, logger)
		appDeps.GitHost = gh
	}
	as := apps.NewService(appDeps)
	if gh != nil {
		gh.OnPush(as.AutoDeploy)
	}
	ds := domains.NewService(domains.Deps{Store: st, Apps: as, Jobs: js, Servers: srv, Audit: log, Now: now, Log: logger})
	// Request traffic ages out with the metrics' maintenance runs.
	ms.AddMaintenance("request traffic retention", ds.PruneTraffic)
	dbs := databases.NewService(databases.Deps{Store: st, Jobs: js, Servers: srv, Audit: log, Key: key, Catalog: o.Catalog,
		Now: now, Log: logger, Apps: as, Artifacts: artifactOpts})
	dispatcher := events.NewDispatcher(st, now, logger)
	st.OnPublish(dispatcher.Notify)
	authSvc := auth.NewService(st, key, log, now, platform.Name)
	inbox := notify.NewInbox(st, authSvc)
	live := stream.NewHub(stream.DefaultRing)
	js.Watch(live.PublishJob)
	dispatcher.Watch(live.PublishEvent)
	dispatcher.Register(live.Inbox(inbox))
	// Delivered events age out with the metrics' maintenance runs.
	ms.AddMaintenance("event retention", func(ctx context.Context, now time.Time) (int, error) {
		return st.PruneEvents(ctx, now.Add(-events.Retention), 1000)
	})
	// Database metrics roll up and age out with the metrics' maintenance.
	ms.AddMaintenance("database metrics", dbs.MaintainMetrics)
	return &app{
		store:      st,
		key:        key,
		audit:      log,
		auth:       authSvc,
		platform:   platform.NewService(st, key, o.PublicURL, version, now),
		jobs:       js,
		servers:    srv,
		metrics:    ms,
		logs:       logs.NewService(js, srv, ms),
		apps:       as,
		domains:    ds,
		dbs:        dbs,
		events:     dispatcher,
		presence:   monitoring.NewPresence(st, srv, now),
		githost:    gh,
		monitor:    monitoring.NewService(st, srv, log, now, logger),
		inbox:      inbox,
		live:       live,
		clouddrive: drive,
		backups: backups.NewService(backups.Deps{Store: st, Jobs: js, Servers: srv, Databases: dbs, Events: st, Audit: log, Key: key,
			Now: now, Log: logger, CloudDrive: drive, Run: o.BackupRun, Schedule: o.Schedule}),
	}, nil
}

func (a *app) Close() error { return a.store.Close() }

// storeKey loads the secret key (env, else dataDir/secret.key) and makes
// sure it is the key the store's secrets are sealed with before anything
// is written with it: a store that has no key yet takes this one and
// expects it from then on. A data dir without a key gets a new one only
// when the store expects none.
func storeKey(ctx context.Context, st *store.Store, dataDir, env string, now time.Time) (*secrets.Key, error) {
	source := "CAPSTAN_SECRET_KEY"
	if env == "" {
		source = filepath.Join(dataDir, secrets.KeyFile)
	}
	key, err := secrets.Load(dataDir, env)
	if errors.Is(err, os.ErrNotExist) {
		want, idErr := st.SecretKeyID(ctx)
		if idErr != nil {
			return nil, fmt.Errorf("secret key: %w", idErr)
		}
		if want != "" {
			return nil, keyMismatch(&secrets.KeyMismatchError{Want: want}, source)
		}
		key, err = secrets.LoadOrCreate(dataDir, env)
	}
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	want, err := st.ClaimSecretKeyID(ctx, key.ID(), now)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	if want != key.ID() {
		return nil, keyMismatch(&secrets.KeyMismatchError{Want: want, Have: key.ID()}, source)
	}
	return key, nil
}

// keyMismatch explains a refused key to the operator: which key was
// given, which the store expects, and how to give that one.
func keyMismatch(e *secrets.KeyMismatchError, source string) error {
	have := "there is no key at " + source
	if e.Have != "" {
		have = "this command has key " + e.Have + " (from " + source + ")"
	}
	return fmt.Errorf("secret key: the store's secrets are sealed with key %s, but %s. "+
		"Run with the control plane's key: pass --data-dir of the server (the directory of its %s), or set "+
		"CAPSTAN_SECRET_KEY to that key (a recovery kit holds it). Nothing was written with this key", e.Want, have, secrets.KeyFile)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
