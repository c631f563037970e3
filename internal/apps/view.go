package apps

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

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
			if _, env, err = s.appEnv(ctx, id); err != nil {
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
