package apps

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
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

// HasEnvKey reports whether an application's env has key.
func (s *Service) HasEnvKey(ctx context.Context, appID, key string) (bool, error) {
	a, err := s.store.App(ctx, appID)
	if err != nil {
		return false, err
	}
	return slices.Contains(a.EnvKeys, key), nil
}

// ValidateEnvKey adds the problem of an env key to errs under field.
func ValidateEnvKey(key, field string, errs *fault.Fields) {
	var fe fault.Fields
	validateEnv([]EnvVar{{Key: key}}, &fe)
	for _, f := range fe {
		errs.Add(field, "%s", f.Message)
	}
}

// SetEnvValue sets key to value in an application's env, kept for its
// next deployment: nothing is redeployed. Concurrent changes of the env
// are not lost: the sealed env is replaced only if it did not change
// since it was read, and read again otherwise.
func (s *Service) SetEnvValue(ctx context.Context, appID, key, value string) error {
	for {
		old, err := s.store.AppEnv(ctx, appID)
		if err != nil {
			return err
		}
		env, err := s.openEnv("applications", appID, old)
		if err != nil {
			return err
		}
		found := false
		for i := range env {
			if env[i].Key == key {
				env[i].Value, found = value, true
			}
		}
		if !found {
			env = append(env, EnvVar{Key: key, Value: value})
		}
		sealed, err := s.sealEnv("applications", appID, env)
		if err != nil {
			return err
		}
		err = s.store.ReplaceAppEnv(ctx, appID, old, sealed, envKeys(env), s.now().UTC())
		if fe := fault.As(err); fe != nil && fe.Code == "env-changed" {
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// EnvChange changes some variables of an application's env: Set adds a
// variable (at the end) or replaces its value where it is, Remove takes
// one out. The other variables keep their values, which nobody reads.
type EnvChange struct {
	Set    []EnvVar
	Remove []string
}

// ChangeEnv applies an EnvChange for the application's next deployment:
// nothing is redeployed. It is how an editor that never reads the values
// (they are write-only) changes the env. A removed key must be in the env.
// Concurrent changes are not lost: the sealed env is replaced only if it
// did not change since it was read, and read again otherwise.
func (s *Service) ChangeEnv(ctx context.Context, c audit.Caller, id string, ch EnvChange) (ApplicationDetail, error) {
	var errs fault.Fields
	if len(ch.Set) == 0 && len(ch.Remove) == 0 {
		errs.Add("set", "name at least one variable to set or remove")
	}
	var fe fault.Fields
	validateEnv(ch.Set, &fe)
	for _, f := range fe {
		errs.Add("set"+strings.TrimPrefix(f.Field, "env"), "%s", f.Message)
	}
	setting := map[string]bool{}
	for _, e := range ch.Set {
		setting[e.Key] = true
	}
	removing := map[string]bool{}
	for i, k := range ch.Remove {
		field := fmt.Sprintf("remove[%d]", i)
		switch {
		case !envKeyPattern.MatchString(k) || len(k) > MaxEnvKeyLen:
			errs.Add(field, "must be letters, digits and '_', not starting with a digit, at most %d characters", MaxEnvKeyLen)
		case removing[k]:
			errs.Add(field, "is a duplicate")
		case setting[k]:
			errs.Add(field, "is also set: set it or remove it")
		}
		removing[k] = true
	}
	if err := errs.Err(); err != nil {
		return ApplicationDetail{}, err
	}
	var keys []string
	for {
		a, err := s.store.App(ctx, id)
		if err != nil {
			return ApplicationDetail{}, err
		}
		if a.State == StateRemoving {
			return ApplicationDetail{}, errRemoving()
		}
		old, err := s.store.AppEnv(ctx, id)
		if err != nil {
			return ApplicationDetail{}, err
		}
		env, err := s.openEnv("applications", id, old)
		if err != nil {
			return ApplicationDetail{}, err
		}
		next := make([]EnvVar, 0, len(env)+len(ch.Set))
		present := map[string]bool{}
		for _, e := range env {
			present[e.Key] = true
			if !removing[e.Key] {
				next = append(next, e)
			}
		}
		for i, k := range ch.Remove {
			if !present[k] {
				errs.Add(fmt.Sprintf("remove[%d]", i), "%s is not in the application's env", k)
			}
		}
		for _, e := range ch.Set {
			i := slices.IndexFunc(next, func(n EnvVar) bool { return n.Key == e.Key })
			if i >= 0 {
				next[i].Value = e.Value
			} else {
				next = append(next, e)
			}
		}
		if len(next) > MaxEnvVars {
			errs.Add("set", "the env would have %d variables: at most %d", len(next), MaxEnvVars)
		}
		if err := errs.Err(); err != nil {
			return ApplicationDetail{}, err
		}
		sealed, err := s.sealEnv("applications", id, next)
		if err != nil {
			return ApplicationDetail{}, err
		}
		keys = envKeys(next)
		err = s.store.ReplaceAppEnv(ctx, id, old, sealed, keys, s.now().UTC())
		if fe := fault.As(err); fe != nil && fe.Code == "env-changed" {
			if err := ctx.Err(); err != nil {
				return ApplicationDetail{}, err
			}
			continue
		}
		if err != nil {
			return ApplicationDetail{}, err
		}
		break
	}
	details := map[string]any{"fields": []string{"env"}, "env_keys": keys, "env_set": envKeys(ch.Set), "env_removed": nonNilKeys(ch.Remove)}
	if err := s.audit.Record(ctx, c, ActionUpdated, audit.Target{Type: "application", ID: id}, details); err != nil {
		return ApplicationDetail{}, err
	}
	return s.Get(ctx, id, Reading{Reader: jobs.AdminReader})
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

// Application is an application as the API shows it.
type Application struct {
	ID       string `json:"id"`
	Name     string `json:"name" doc:"DNS label, unique on its server"`
	ServerID string `json:"server_id"`
	Kind     string `json:"kind" enum:"container,compose,service" doc:"What the deployments run, fixed at creation: container (one image), compose (a multi-container stack), service (a program under the server's service manager)"`
	// Service is set for service applications only.
	Service             *ServiceSettings `json:"service,omitempty" doc:"A service application's build and start commands (empty, with commands_hidden, unless revealed as the environment values are); absent for the other kinds"`
	Source              Source           `json:"source"`
	ContainerPort       int              `json:"container_port" doc:"The port the container listens on"`
	HealthPath          string           `json:"health_path" doc:"Path that must answer 2xx or 3xx before a release takes traffic"`
	EnvKeys             []string         `json:"env_keys" doc:"Names of the environment variables (values: see the detail)"`
	AutoDeploy          bool             `json:"auto_deploy"`
	MemoryLimit         string           `json:"memory_limit" doc:"e.g. 512m or 1g; empty for none"`
	Publish             *Publish         `json:"publish" doc:"The port of the server on which the proxy serves the application over plain HTTP (bind:host_port), switched to every new release and rollback; null for none"`
	Dockerfile          string           `json:"dockerfile,omitempty" doc:"Git sources: the Dockerfile's path in the build context"`
	BuildContext        string           `json:"build_context,omitempty" doc:"Git sources: the build context's directory in the repository"`
	BuildArgKeys        []string         `json:"build_arg_keys,omitempty" doc:"Git sources: names of the build arguments (the API never shows the values; the built image's history on the server does)"`
	BuildSecretKeys     []string         `json:"build_secret_keys,omitempty" doc:"Container applications from git: names of the build secrets (their values are never shown, to anyone, and are in no layer nor the history of the images built)"`
	WebService          string           `json:"web_service,omitempty" doc:"Compose applications: the service the proxy routes to (on container_port, checked on health_path)"`
	ComposeFile         string           `json:"compose_file,omitempty" doc:"Compose applications from git: the compose file's path in the repository; empty for the default (compose.yaml, else docker-compose.yml)"`
	Compose             string           `json:"compose,omitempty" doc:"Compose applications from an inline document: the document. Unless revealed (an administrator's GET of the application with reveal=true, audited as application.env.read), every value of an environment, build argument, label, command and x- extension is ******** and comments are dropped (compose_masked true)"`
	ComposeMasked       bool             `json:"compose_masked,omitempty" doc:"True when compose is the masked form of the document"`
	Status              string           `json:"status" enum:"new,deploying,running,failed,removing,removal_failed" doc:"Derived: new (never deployed), deploying (a deployment is queued or running), running (serving its current deployment), failed (nothing ever succeeded and the latest deployment failed), removing, removal_failed"`
	CurrentDeploymentID *string          `json:"current_deployment_id" doc:"The live deployment: the last that succeeded"`
	RemoveJobID         *string          `json:"remove_job_id" doc:"The app.remove job, while removing or after it failed"`
	RemoveError         *string          `json:"remove_error" doc:"Why the removal failed; for members the error class only"`
	CreatedBy           string           `json:"created_by,omitempty"`
	CreatedAt           time.Time        `json:"created_at"`
	UpdatedAt           time.Time        `json:"updated_at"`
}

// EnvEntry is an environment variable in an application's detail.
type EnvEntry struct {
	Key string `json:"key"`
	// Value is nil unless the values were revealed.
	Value *string `json:"value,omitempty" doc:"Present only when revealed: to an administrator, on GET with reveal=true (the default), audited as application.env.read"`
	// ValueSet is true for every stored variable.
	ValueSet bool `json:"value_set" doc:"The variable has a value (stored encrypted)"`
}

// ApplicationDetail is an application with its environment and its current
// and latest deployments.
type ApplicationDetail struct {
	Application
	Env []EnvEntry `json:"env" doc:"In order; values only when revealed to an administrator"`
	// Addresses are where the application answers.
	Addresses []Address   `json:"addresses" doc:"Where the application answers: its domains (by hostname) and its published port (bind:port)"`
	Current   *Deployment `json:"current" doc:"The live deployment (the last that succeeded); null if none"`
	Latest    *Deployment `json:"latest" doc:"The newest deployment, whatever its status; null if none"`
	// Services is set for compose applications.
	Services *ServiceStates `json:"services,omitempty" doc:"Compose applications: every service's container and state, from the server's latest inventory"`
	// Slots is set for service applications.
	Slots *SlotStates `json:"slots,omitempty" doc:"Service applications: every release slot's unit, port, release and state, from the server's latest inventory"`
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// view is the application as r may read it: a member gets the class of a
// removal error, not its text (the agent's, which may carry output).
// Unless reveal, the compose document is masked and a service's commands
// are hidden (reveal is for administrators only).
func (a App) view(r jobs.Reader, reveal bool) Application {
	v := Application{ID: a.ID, Name: a.Name, ServerID: a.ServerID, Kind: a.Kind, Source: a.Source, ContainerPort: a.ContainerPort,
		HealthPath: a.HealthPath, EnvKeys: a.EnvKeys, AutoDeploy: a.AutoDeploy, MemoryLimit: a.MemoryLimit,
		CurrentDeploymentID: strp(a.CurrentDeploymentID), CreatedBy: a.CreatedBy, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
	if a.Publish != nil {
		p := *a.Publish
		v.Publish = &p
	}
	kindOf(a).view(a, &v, reveal)
	if v.EnvKeys == nil {
		v.EnvKeys = []string{}
	}
	if v.Kind == "" {
		v.Kind = KindContainer
	}
	switch {
	case a.State == StateRemoving:
		v.Status = AppRemoving
	case a.State == StateRemovalFailed:
		v.Status = AppRemovalFailed
	case a.InProgress:
		v.Status = AppDeploying
	case a.CurrentDeploymentID != "":
		v.Status = AppRunning
	case a.LatestStatus == Failed:
		v.Status = AppFailed
	default:
		v.Status = AppNew
	}
	if a.State != StateActive {
		v.RemoveJobID, v.RemoveError = strp(a.RemoveJobID), strp(a.RemoveError)
		if v.RemoveError != nil && r != jobs.AdminReader {
			c := jobs.ErrorClass(*v.RemoveError)
			v.RemoveError = &c
		}
	}
	return v
}

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

// Patch changes an application's settings for its next deployment; nil
// fields stay as they are. Env replaces the whole list.
type Patch struct {
	Name *string
	// Kind is fixed at creation: only the application's own is accepted.
	Kind          *string
	Image         *string
	Source        *Source
	ContainerPort *int
	HealthPath    *string
	Env           *[]EnvVar
	AutoDeploy    *bool
	MemoryLimit   *string
	// Git sources; BuildArgs and BuildSecrets replace the whole list.
	Dockerfile   *string
	BuildContext *string
	BuildArgs    *[]EnvVar
	BuildSecrets *[]BuildSecret
	// Compose applications.
	Compose     *string
	WebService  *string
	ComposeFile *string
	// Service changes a service application's build and start.
	Service ServicePatch
	// Publish sets the published port; HostPort 0 removes it.
	Publish *Publish
}

func envContext(prefix, id string) string { return prefix + ".env:" + id }

func (s *Service) sealEnv(prefix, id string, env []EnvVar) (string, error) {
	if len(env) == 0 {
		return "", nil
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	return s.key.Seal(envContext(prefix, id), b), nil
}

func (s *Service) openEnv(prefix, id, sealed string) ([]EnvVar, error) {
	if sealed == "" {
		return []EnvVar{}, nil
	}
	b, err := s.key.Open(envContext(prefix, id), sealed)
	if err != nil {
		return nil, err
	}
	var env []EnvVar
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, err
	}
	return env, nil
}

func envKeys(env []EnvVar) []string {
	keys := make([]string, len(env))
	for i, e := range env {
		keys[i] = e.Key
	}
	return keys
}

// enrolledServer returns the server if it has an agent to run jobs.
func (s *Service) enrolledServer(ctx context.Context, id string) (servers.Server, error) {
	srv, err := servers.RequireAgent(ctx, s.servers, "", id, "run the job")
	if fault.Is(err, fault.NotFound) {
		return servers.Server{}, fault.Conflictf("server-not-enrolled", "The application's server no longer exists.")
	}
	return srv, err
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
	if a.SealedBuildArgs, err = s.sealBuildArgs("applications", a.ID, n.BuildArgs); err != nil {
		return ApplicationDetail{}, err
	}
	if a.SealedBuildSecrets, err = s.sealBuildSecrets("applications", a.ID, n.BuildSecrets); err != nil {
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

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Reading says who reads an application's detail and whether its
// secrets are to be revealed.
type Reading struct {
	Reader jobs.Reader
	// Reveal asks for the environment values, the compose document
	// unmasked and a service's commands. It is honoured for
	// administrators only, and each read that reveals them is audited
	// (ActionEnvRead) as By.
	Reveal bool
	By     audit.Caller
}

// Get returns an application's detail as rd says: environment keys always;
// values, the compose document unmasked and a service's commands only when
// revealed to an administrator, after the read is audited.
// It first settles deployments whose jobs ended without their completion
// hook (a revoked server, a crash).
func (s *Service) Get(ctx context.Context, id string, rd Reading) (ApplicationDetail, error) {
	if _, err := s.store.App(ctx, id); err != nil {
		return ApplicationDetail{}, err
	}
	if err := s.reconcile(ctx, id); err != nil {
		s.log.WarnContext(ctx, "settling deployments", "app_id", id, "err", err.Error())
	}
	a, err := s.store.App(ctx, id)
	if err != nil {
		return ApplicationDetail{}, err
	}
	reveal := rd.Reveal && rd.Reader == jobs.AdminReader
	d := ApplicationDetail{Application: a.view(rd.Reader, reveal), Env: []EnvEntry{}}
	if d.Addresses, err = s.addresses(ctx, a); err != nil {
		return ApplicationDetail{}, err
	}
	revealed := kindOf(a).revealed(a)
	if reveal && (len(a.EnvKeys) > 0 || len(revealed) > 0) {
		var env []EnvVar
		if len(a.EnvKeys) > 0 {
			sealed, err := s.store.AppEnv(ctx, id)
			if err != nil {
				return ApplicationDetail{}, err
			}
			if env, err = s.openEnv("applications", id, sealed); err != nil {
				return ApplicationDetail{}, err
			}
		}
		// No secret leaves without its audit entry.
		details := map[string]any{"env_keys": envKeys(env)}
		for _, r := range revealed {
			details[r] = true
		}
		if err := s.audit.Record(ctx, rd.By, ActionEnvRead, audit.Target{Type: "application", ID: id}, details); err != nil {
			return ApplicationDetail{}, err
		}
		for _, e := range env {
			d.Env = append(d.Env, EnvEntry{Key: e.Key, Value: &e.Value, ValueSet: true})
		}
	} else {
		for _, k := range a.EnvKeys {
			d.Env = append(d.Env, EnvEntry{Key: k, ValueSet: true})
		}
	}
	if a.CurrentDeploymentID != "" {
		cur, err := s.store.Deployment(ctx, a.CurrentDeploymentID)
		if err != nil && !fault.Is(err, fault.NotFound) {
			return ApplicationDetail{}, err
		}
		if err == nil {
			v := cur.view(rd.Reader, reveal)
			d.Current = &v
		}
	}
	latest, err := s.store.ListDeployments(ctx, id, 1)
	if err != nil {
		return ApplicationDetail{}, err
	}
	if len(latest) == 1 {
		v := latest[0].view(rd.Reader, reveal)
		d.Latest = &v
	}
	if err := kindOf(a).runtime(ctx, s, a, &d); err != nil {
		return ApplicationDetail{}, err
	}
	return d, nil
}

// List returns applications, oldest first, as r may read them; serverID ""
// means all. Never environment values, compose documents unmasked or
// service commands.
func (s *Service) List(ctx context.Context, serverID string, r jobs.Reader) ([]Application, error) {
	list, err := s.store.ListApps(ctx, serverID)
	if err != nil {
		return nil, err
	}
	out := make([]Application, len(list))
	for i, a := range list {
		out[i] = a.view(r, false)
	}
	return out, nil
}

// App returns the stored application.
func (s *Service) App(ctx context.Context, id string) (App, error) { return s.store.App(ctx, id) }

// Update changes settings for the next deployment; the running container
// is untouched.
func (s *Service) Update(ctx context.Context, c audit.Caller, id string, p Patch) (ApplicationDetail, error) {
	a, err := s.store.App(ctx, id)
	if err != nil {
		return ApplicationDetail{}, err
	}
	k := kindOf(a)
	var errs fault.Fields
	var changed []string
	if p.Name != nil {
		if pr := NameProblem(*p.Name); pr != "" {
			errs.Add("name", "%s", pr)
		}
		if pr := k.renameProblem(a, *p.Name); pr != "" {
			errs.Add("name", "%s", pr)
		}
		a.Name = *p.Name
		changed = append(changed, "name")
	}
	if p.Kind != nil && *p.Kind != a.Kind {
		errs.Add("kind", "is fixed at creation: this is a %s application", a.Kind)
	}
	k.checkPatch(p, &errs)
	if p.Source != nil {
		a.Source = *p.Source
		changed = append(changed, "source")
	}
	if p.ComposeFile != nil {
		a.Compose.File = *p.ComposeFile
		changed = append(changed, "compose_file")
	}
	if p.Compose != nil {
		a.Compose.Document = *p.Compose
		changed = append(changed, "compose")
	}
	if p.WebService != nil {
		a.Compose.WebService = *p.WebService
		changed = append(changed, "web_service")
	}
	if p.Image != nil {
		if p.Source != nil {
			errs.Add("image", "give image or source, not both")
		} else if pr := ImageProblem(*p.Image); pr != "" {
			errs.Add("image", "%s", pr)
		}
		a.Source = Source{Type: SourceImage, Image: *p.Image}
		changed = append(changed, "image")
	}
	if p.ContainerPort != nil {
		if pr := PortProblem(*p.ContainerPort); pr != "" {
			errs.Add("container_port", "%s", pr)
		}
		a.ContainerPort = *p.ContainerPort
		changed = append(changed, "container_port")
	}
	if p.HealthPath != nil {
		if pr := HealthPathProblem(*p.HealthPath); pr != "" {
			errs.Add("health_path", "%s", pr)
		}
		a.HealthPath = *p.HealthPath
		changed = append(changed, "health_path")
	}
	var sealed *string
	if p.Env != nil {
		env := *p.Env
		if env == nil {
			env = []EnvVar{}
		}
		validateEnv(env, &errs)
		if len(errs) == 0 {
			sl, err := s.sealEnv("applications", a.ID, env)
			if err != nil {
				return ApplicationDetail{}, err
			}
			sealed = &sl
		}
		a.EnvKeys = envKeys(env)
		changed = append(changed, "env")
	}
	if p.AutoDeploy != nil {
		a.AutoDeploy = *p.AutoDeploy
		changed = append(changed, "auto_deploy")
	}
	if p.MemoryLimit != nil {
		if _, pr := ParseMemory(*p.MemoryLimit); pr != "" {
			errs.Add("memory_limit", "%s", pr)
		}
		a.MemoryLimit = lower(*p.MemoryLimit)
		changed = append(changed, "memory_limit")
	}
	publishChanged := false
	if p.Publish != nil {
		var next *Publish
		if p.Publish.HostPort != 0 || p.Publish.Bind != "" {
			addPublishProblems(*p.Publish, &errs)
			n := normalizePublish(*p.Publish)
			next = &n
		}
		publishChanged = !samePublish(a.Publish, next)
		if publishChanged {
			a.Publish = next
			changed = append(changed, "publish")
		}
	}
	changed = append(changed, p.Service.apply(&a)...)
	if p.Service != (ServicePatch{}) {
		validateService(a.Kind, a.Source, a.Service, &errs)
	}
	build := k.patchBuild(ctx, s, &a, p, &errs)
	changed = append(changed, build.changed...)
	if len(errs) == 0 && a.Source.Type == SourceGit && (p.Source != nil || p.Image != nil) {
		if err := s.gitProblems(ctx, a.Source, &errs); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if err := errs.Err(); err != nil {
		return ApplicationDetail{}, err
	}
	if build.args != nil {
		if a.SealedBuildArgs, err = s.sealBuildArgs("applications", a.ID, *build.args); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if build.secrets != nil {
		if len(*build.secrets) > 0 {
			if err := s.buildSecretsAgent(ctx, a.ServerID); err != nil {
				return ApplicationDetail{}, err
			}
		}
		if a.SealedBuildSecrets, err = s.sealBuildSecrets("applications", a.ID, *build.secrets); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if a.State == StateRemoving {
		return ApplicationDetail{}, errRemoving()
	}
	if len(changed) == 0 {
		return s.Get(ctx, id, Reading{Reader: jobs.AdminReader})
	}
	a.UpdatedAt = s.now().UTC()
	if err := s.store.UpdateApp(ctx, a, sealed); err != nil {
		return ApplicationDetail{}, err
	}
	details := map[string]any{"fields": changed}
	if p.Env != nil {
		details["env_keys"] = a.EnvKeys
	}
	if build.secrets != nil {
		details["build_secret_keys"] = nonNilKeys(a.Build.SecretKeys)
	}
	if publishChanged {
		details["publish"] = ""
		if a.Publish != nil {
			details["publish"] = a.Publish.Address()
		}
	}
	if err := s.audit.Record(ctx, c, ActionUpdated, audit.Target{Type: "application", ID: a.ID}, details); err != nil {
		return ApplicationDetail{}, err
	}
	if publishChanged && a.CurrentDeploymentID != "" {
		// The live release is served on the new port (or no longer on
		// the old one) now, not at the next deployment.
		if err := s.applyProxy(ctx, c, a.ServerID); err != nil {
			return ApplicationDetail{}, err
		}
	}
	return s.Get(ctx, id, Reading{Reader: jobs.AdminReader})
}

func errRemoving() error {
	return fault.Conflictf("application-removing", "The application is being removed.")
}

// Removal is the outcome of a delete request.
type Removal struct {
	ApplicationID string `json:"application_id"`
	// Status is "removing" (the app.remove job was queued) or "deleted"
	// (the server is gone or revoked, so nothing was left to remove).
	Status string    `json:"status" enum:"removing,deleted"`
	Job    *jobs.Job `json:"job" doc:"The app.remove job; null when the application was deleted at once"`
}

// Delete queues the removal of an application's containers and proxy
// sites (app.remove); the application, its deployments and domains are
// deleted when the job succeeds. Queued deployments are cancelled. While a
// deployment runs it is refused (409): wait for it or cancel it first.
// An application whose server is gone or revoked is deleted at once.
func (s *Service) Delete(ctx context.Context, c audit.Caller, id string) (Removal, error) {
	return s.DeleteWith(ctx, c, id, RemoveOptions{})
}

// RemoveOptions are the choices of a removal.
type RemoveOptions struct {
	// Purge removes the named volumes of a compose application with it
	// (they are kept otherwise).
	Purge bool
	// Force succeeds when the server's proxy cannot take its new state,
	// forgetting the application's sites there.
	Force bool
}

// DeleteWith is Delete with the removal's options.
func (s *Service) DeleteWith(ctx context.Context, c audit.Caller, id string, o RemoveOptions) (Removal, error) {
	purge := o.Purge
	if err := s.reconcile(ctx, id); err != nil && !fault.Is(err, fault.NotFound) {
		s.log.WarnContext(ctx, "settling deployments", "app_id", id, "err", err.Error())
	}
	a, err := s.store.App(ctx, id)
	if err != nil {
		return Removal{}, err
	}
	if a.State == StateRemoving {
		return Removal{}, errRemoving()
	}
	if err := s.refuseRunning(ctx, id); err != nil {
		return Removal{}, err
	}
	// What the application has in its server's proxy, before it is left
	// out of the proxy state.
	sites, err := s.store.ProxySites(ctx, a.ServerID)
	if err != nil {
		return Removal{}, err
	}
	var hostnames []string
	for _, site := range sites {
		if site.AppID == id {
			hostnames = append(hostnames, site.Hostname)
		}
	}
	if a.Publish != nil {
		hostnames = append(hostnames, a.Publish.Address())
	}
	prev := a.State
	now := s.now().UTC()
	if err := s.store.SetAppState(ctx, id, []string{StateActive, StateRemovalFailed}, StateRemoving, "", "", now); err != nil {
		return Removal{}, err
	}
	undo := func() {
		if err := s.store.SetAppState(context.WithoutCancel(ctx), id, []string{StateRemoving}, prev, a.RemoveJobID, a.RemoveError, s.now().UTC()); err != nil {
			s.log.ErrorContext(ctx, "restoring the application's state", "app_id", id, "err", err.Error())
		}
	}
	// No deployment starts from now on: cancel the waiting ones, and the
	// dispatched one whose job the agent has not claimed.
	if _, err := s.store.CancelQueuedDeployments(ctx, id, "", now); err != nil {
		undo()
		return Removal{}, err
	}
	running, err := s.store.RunningDeployments(ctx, id)
	if err != nil {
		undo()
		return Removal{}, err
	}
	for _, d := range running {
		if d.JobID != "" && jobs.Status(d.JobStatus) == jobs.Queued {
			if _, err := s.jobs.Cancel(ctx, d.JobID); err != nil && !fault.Is(err, fault.Conflict) {
				undo()
				return Removal{}, err
			}
		}
	}
	if err := s.refuseRunning(ctx, id); err != nil {
		undo()
		return Removal{}, err
	}

	srv, err := s.servers.Get(ctx, a.ServerID)
	if err != nil && !fault.Is(err, fault.NotFound) {
		undo()
		return Removal{}, err
	}
	if err != nil || !srv.HasAgent() {
		// Nothing can be removed on a server without an agent.
		if err := s.deleteApp(ctx, id); err != nil {
			undo()
			return Removal{}, err
		}
		return Removal{ApplicationID: id, Status: "deleted"}, s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "application", ID: id}, map[string]any{"name": a.Name, "server_id": a.ServerID, "removed_on_server": false})
	}
	proxy, err := s.ProxyConfig(ctx, a.ServerID) // without this application's: it is removing
	if err != nil {
		undo()
		return Removal{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: a.ServerID, AppID: a.ID, CreatedBy: c.Actor.ID,
		Work: jobs.Of(agentproto.AppRemove, agentproto.RemovePayload{AppID: id, AppName: serviceName(a), Proxy: proxy, PurgeVolumes: purge,
			ProxySites: hostnames, Force: o.Force})})
	if err != nil {
		undo()
		return Removal{}, err
	}
	if err := s.store.SetAppState(ctx, id, []string{StateRemoving}, StateRemoving, j.ID, "", s.now().UTC()); err != nil {
		return Removal{}, err
	}
	return Removal{ApplicationID: id, Status: "removing", Job: &j}, s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "application", ID: id}, map[string]any{"name": a.Name, "server_id": a.ServerID, "job_id": j.ID, "purge": purge, "force": o.Force})
}

// refuseRunning is a 409 when a deployment's job of the application is
// running on the agent.
func (s *Service) refuseRunning(ctx context.Context, appID string) error {
	running, err := s.store.RunningDeployments(ctx, appID)
	if err != nil {
		return err
	}
	for _, d := range running {
		if jobs.Status(d.JobStatus) == jobs.Running || (d.JobID == "" && d.Status == Running) {
			return fault.Conflictf("deployment-running", "Deployment %s is running; wait for it to finish before deleting the application.", d.ID)
		}
	}
	return nil
}

// removeFinished is the completion hook of app.remove.
func (s *Service) removeFinished(ctx context.Context, j jobs.Job) error {
	// The hook runs on the agent's request; finish even if it hangs up.
	ctx = context.WithoutCancel(ctx)
	a, err := s.store.AppByRemoveJob(ctx, j.ID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := s.now().UTC()
	switch j.Status {
	case jobs.Succeeded:
		if err := s.deleteApp(ctx, a.ID); err != nil {
			return err
		}
		return s.audit.Record(ctx, audit.System, ActionRemoved, audit.Target{Type: "application", ID: a.ID}, map[string]any{"name": a.Name, "job_id": j.ID})
	case jobs.Cancelled:
		// The removal was called off before the agent took it.
		return s.store.SetAppState(ctx, a.ID, []string{StateRemoving}, StateActive, "", "", now)
	default:
		msg := "removal failed"
		if j.Error != nil {
			msg = *j.Error
		}
		if err := s.store.SetAppState(ctx, a.ID, []string{StateRemoving}, StateRemovalFailed, j.ID, msg, now); err != nil {
			return err
		}
		return s.audit.Record(ctx, audit.System, ActionRemovalFailed, audit.Target{Type: "application", ID: a.ID}, map[string]any{"job_id": j.ID, "error": msg})
	}
}

// ProxyConfig returns the desired proxy state of a server, every domain of
// its applications that are not being removed, with its revision: jobs
// carry it, and agents apply no state older than one they applied.
func (s *Service) ProxyConfig(ctx context.Context, serverID string) (agentproto.ProxyConfig, error) {
	cfg, err := s.store.ProxyState(ctx, serverID)
	if cfg.Sites == nil {
		cfg.Sites = []agentproto.ProxySite{}
	}
	return cfg, err
}

// addPublishProblems adds p's problems under publish.<field>.
func addPublishProblems(p Publish, errs *fault.Fields) {
	for _, f := range []string{"host_port", "bind"} {
		if pr, ok := PublishProblems(p)[f]; ok {
			errs.Add("publish."+f, "%s", pr)
		}
	}
}

func samePublish(a, b *Publish) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// addresses are where a answers: its domains, by hostname, then its
// published port.
func (s *Service) addresses(ctx context.Context, a App) ([]Address, error) {
	out := []Address{}
	sites, err := s.store.ProxySites(ctx, a.ServerID)
	if err != nil {
		return nil, err
	}
	for _, site := range sites {
		if site.AppID != a.ID {
			continue
		}
		scheme := "https://"
		if site.TLSMode == agentproto.TLSOff {
			scheme = "http://"
		}
		out = append(out, Address{Kind: AddressDomain, Address: site.Hostname, URL: scheme + site.Hostname + "/"})
	}
	if a.Publish != nil {
		out = append(out, Address{Kind: AddressPort, Address: a.Publish.Address(), URL: portURL(*a.Publish)})
	}
	return out, nil
}

// applyProxy queues proxy.apply with the server's whole desired state,
// when the server has an agent.
func (s *Service) applyProxy(ctx context.Context, c audit.Caller, serverID string) error {
	srv, err := s.servers.Get(ctx, serverID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !srv.HasAgent() {
		return nil
	}
	cfg, err := s.ProxyConfig(ctx, serverID)
	if err != nil {
		return err
	}
	_, _, err = s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID,
		Work: jobs.Of(agentproto.ProxyApply, agentproto.ProxyApplyPayload{Proxy: cfg}), CreatedBy: c.Actor.ID})
	return err
}

func deref(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}
