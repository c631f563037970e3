package apps

import (
	"context"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// NewApp is a request to create an application.
type NewApp struct {
	Name     string
	ServerID string
	// Kind "" means KindContainer.
	Kind          string
	Source        Source
	ContainerPort int
	// HealthPath nil means "/"; an explicit "" is refused.
	HealthPath  *string
	Env         []EnvVar
	AutoDeploy  bool
	MemoryLimit string
	// Deploy, when false, creates the application without deploying it.
	Deploy bool
	// Git sources: Dockerfile and BuildContext nil mean the defaults;
	// BuildArgs are sealed like the environment, and so are BuildSecrets
	// (container applications only), which are never read back.
	Dockerfile   *string
	BuildContext *string
	BuildArgs    []EnvVar
	BuildSecrets []BuildSecret
	// Compose applications: the document (source inline) and the service
	// the proxy routes to.
	Compose    string
	WebService string
	// ComposeFile is a compose application's compose file in its
	// repository (git sources); "" means the default.
	ComposeFile string
	// Service is a service application's build and start (nil for the
	// other kinds); BuildTimeoutSeconds 0 means the default.
	Service *ServiceSettings
	// Publish is the port to publish; nil for none, Bind "" for the
	// default.
	Publish *Publish
}

// Create validates and stores an application and, unless n.Deploy is
// false, queues its first deployment.
func (s *Service) Create(ctx context.Context, c audit.Caller, n NewApp) (ApplicationDetail, error) {
	var errs fault.Fields
	if p := NameProblem(n.Name); p != "" {
		errs.Add("name", "%s", p)
	}
	if p := KindProblem(n.Kind); p != "" {
		errs.Add("kind", "%s", p)
	}
	if n.Kind == "" {
		n.Kind = KindContainer
	}
	k := kindNamed(n.Kind)
	svc := k.checkNew(ctx, n, &errs)
	healthPath := DefaultHealthPath
	if n.HealthPath != nil {
		healthPath = *n.HealthPath
	}
	if p := HealthPathProblem(healthPath); p != "" {
		errs.Add("health_path", "%s", p)
	}
	if n.Env == nil {
		n.Env = []EnvVar{}
	}
	validateEnv(n.Env, &errs)
	build := BuildSettings{Dockerfile: deref(n.Dockerfile, ""), Context: deref(n.BuildContext, "")}
	if n.Source.Type == SourceGit {
		build = BuildSettings{Dockerfile: deref(n.Dockerfile, DefaultDockerfile), Context: deref(n.BuildContext, DefaultBuildContext),
			ArgKeys: buildArgKeys(n.BuildArgs), SecretKeys: buildSecretKeys(n.BuildSecrets)}
	}
	build = k.newBuild(n, build, &errs)
	validateBuildSecrets(n.Kind, n.Source, n.BuildSecrets, &errs)
	if _, p := ParseMemory(n.MemoryLimit); p != "" {
		errs.Add("memory_limit", "%s", p)
	}
	var publish *Publish
	if n.Publish != nil {
		addPublishProblems(*n.Publish, &errs)
		p := normalizePublish(*n.Publish)
		publish = &p
	}
	if n.ServerID == "" {
		errs.Add("server_id", "is required")
	} else if srv, err := s.servers.Get(ctx, n.ServerID); fault.Is(err, fault.NotFound) {
		errs.Add("server_id", "no such server")
	} else if err != nil {
		return ApplicationDetail{}, err
	} else if !srv.HasAgent() {
		errs.Add("server_id", "the server is %s; only an enrolled server runs applications", srv.Status)
	}
	if len(errs) == 0 && n.Source.Type == SourceGit {
		if err := s.gitProblems(ctx, n.Source, &errs); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if err := errs.Err(); err != nil {
		return ApplicationDetail{}, err
	}
	if len(n.BuildSecrets) > 0 {
		if err := s.buildSecretsAgent(ctx, n.ServerID); err != nil {
			return ApplicationDetail{}, err
		}
	}
	now := s.now().UTC()
	a := App{ID: ids.NewAt(AppIDPrefix, now), ServerID: n.ServerID, Name: n.Name, Kind: n.Kind, Source: n.Source,
		ContainerPort: n.ContainerPort, HealthPath: healthPath, EnvKeys: envKeys(n.Env), AutoDeploy: n.AutoDeploy,
		MemoryLimit: lower(n.MemoryLimit), State: StateActive, CreatedBy: c.Actor.ID, CreatedAt: now, UpdatedAt: now, Build: build,
		Service: svc, Publish: publish, Compose: n.stack()}
	sealed, err := s.sealEnv("applications", a.ID, n.Env)
	if err != nil {
		return ApplicationDetail{}, err
	}
	if a.SealedBuildArgs, a.SealedBuildSecrets, err = s.sealBuild("applications", a.ID, buildValues{args: n.BuildArgs, secrets: n.BuildSecrets}); err != nil {
		return ApplicationDetail{}, err
	}
	if err := s.store.InsertApp(ctx, a, sealed); err != nil {
		return ApplicationDetail{}, err
	}
	details := map[string]any{"name": a.Name, "server_id": a.ServerID, "kind": a.Kind, "image": a.Source.Image, "env_keys": a.EnvKeys}
	if a.Publish != nil {
		details["publish"] = a.Publish.Address()
	}
	if len(a.Build.SecretKeys) > 0 {
		details["build_secret_keys"] = a.Build.SecretKeys
	}
	if err := s.audit.Record(ctx, c, ActionCreated, audit.Target{Type: "application", ID: a.ID}, details); err != nil {
		return ApplicationDetail{}, err
	}
	if n.Deploy {
		if _, err := s.Deploy(ctx, c, a.ID, ""); err != nil {
			return ApplicationDetail{}, err
		}
	}
	return s.Get(ctx, a.ID, Reading{Reader: jobs.AdminReader})
}

func deref(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}
