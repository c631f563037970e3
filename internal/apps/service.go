package apps

import (
	"context"
	"log/slog"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Audit actions of this package. Details never hold environment values.
const (
	ActionCreated             = "application.created"
	ActionUpdated             = "application.updated"
	ActionDeleted             = "application.deleted" // removal requested (or done at once)
	ActionRemoved             = "application.removed" // the agent removed it; the record is gone
	ActionRemovalFailed       = "application.removal_failed"
	ActionDeploymentCreated   = "deployment.created"
	ActionRollback            = "deployment.rollback"
	ActionDeploymentCancelled = "deployment.cancelled"
	// ActionEnvRead records a read that returned environment values.
	ActionEnvRead = "application.env.read"
)

// Servers is what applications need of the fleet.
type Servers interface {
	Get(ctx context.Context, id string) (servers.Server, error)
}

// Service manages applications and deployments.
type Service struct {
	store   Store
	jobs    *jobs.Service
	servers Servers
	audit   *audit.Log
	key     *secrets.Key
	now     func() time.Time
	log     *slog.Logger
	// deleting runs before an application is deleted from the store.
	deleting []func(ctx context.Context, appID string)
	// git is the git host; nil without the integration.
	git GitHost
}

// OnDelete registers f to run before an application is deleted (its
// removal succeeded, or its server had nothing to remove). f logs its own
// failures: the application is deleted anyway.
func (s *Service) OnDelete(f func(ctx context.Context, appID string)) {
	s.deleting = append(s.deleting, f)
}

func (s *Service) deleteApp(ctx context.Context, id string) error {
	for _, f := range s.deleting {
		f(ctx, id)
	}
	return s.store.DeleteApp(ctx, id)
}

// Deps is what an application service is made of.
type Deps struct {
	Store   Store
	Jobs    *jobs.Service
	Servers Servers
	Audit   *audit.Log
	// Key seals environment values and build secrets.
	Key *secrets.Key
	Now func() time.Time
	Log *slog.Logger
	// GitHost lets applications deploy from git; nil: git sources are
	// refused.
	GitHost GitHost
}

// NewService returns an application service and registers its job types
// (app.deploy, app.remove, app.logs) with the job service.
func NewService(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Service{store: d.Store, jobs: d.Jobs, servers: d.Servers, audit: d.Audit, key: d.Key, now: d.Now, log: d.Log, git: d.GitHost}
	j := d.Jobs
	j.Register(agentproto.AppDeploy, jobs.Spec{Timeout: 15 * time.Minute, OnComplete: s.deployFinished, OnLateResult: s.deployLateResult})
	j.Register(agentproto.AppRemove, jobs.Spec{Timeout: 5 * time.Minute, OnComplete: s.removeFinished})
	j.Register(agentproto.AppLogs, jobs.Spec{Timeout: time.Minute})
	return s
}

// enrolledServer returns the server if it has an agent to run jobs.
func (s *Service) enrolledServer(ctx context.Context, id string) (servers.Server, error) {
	srv, err := servers.RequireAgent(ctx, s.servers, "", id, "run the job")
	if fault.Is(err, fault.NotFound) {
		return servers.Server{}, fault.Conflictf("server-not-enrolled", "The application's server no longer exists.")
	}
	return srv, err
}
