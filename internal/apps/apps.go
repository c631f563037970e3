// Package apps owns applications and their deployments on the control
// plane. An application is a container image run on one server behind the
// server's reverse proxy; a deployment is one release of it: a frozen copy
// of the application's settings (image, port, health path, environment,
// memory limit) queued as an app.deploy job on the server's agent.
//
// One deployment runs at a time per application. A new deployment is
// created queued; its job is enqueued only when no other deployment of the
// application holds the application's slot (stored status running, which
// the database guarantees with a partial unique index). When the running
// deployment ends, the completion hook dispatches the next one: the newest
// queued deployment runs and older queued ones are superseded.
//
// Environment values are secrets: sealed at rest (bound to the application
// or deployment id), handed to the agent only through the deploy job's
// secrets, shown decrypted to administrators in the application's detail
// and never in lists, jobs, logs or audit entries.
package apps

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/metrics"
)

// ID prefixes.
const (
	AppIDPrefix        = "app"
	DeploymentIDPrefix = "dep"
)

// Application states (stored). Removal is a job on the agent; the
// application is deleted when it succeeds.
const (
	StateActive        = "active"
	StateRemoving      = "removing"
	StateRemovalFailed = "removal_failed"
)

// Application statuses (derived, as the API shows them).
const (
	AppNew           = "new"            // never deployed
	AppDeploying     = "deploying"      // a deployment is queued or running
	AppRunning       = "running"        // a deployment succeeded and none is in progress
	AppFailed        = "failed"         // the latest deployment failed and none ever succeeded
	AppRemoving      = "removing"       // app.remove is queued or running
	AppRemovalFailed = "removal_failed" // app.remove failed; the application stays
)

// Deployment statuses.
const (
	Queued     = "queued"
	Running    = "running"
	Succeeded  = "succeeded"
	Failed     = "failed"
	Cancelled  = "cancelled"
	Superseded = "superseded"
)

// Application kinds: what an application's deployments run. The kind is
// fixed at creation.
const (
	KindContainer = "container" // one container image
	KindCompose   = "compose"   // a multi-container stack from a compose document
	KindService   = "service"   // a program under the server's service manager
)

// availableKinds are the kinds this control plane creates applications of.
var availableKinds = map[string]bool{
	KindContainer: true,
	KindCompose:   true,
	KindService:   true,
}

// KindProblem says what is wrong with an application kind; "" means the
// default (container) or an available kind.
func KindProblem(kind string) string {
	switch kind {
	case "", KindContainer, KindCompose, KindService:
	default:
		return "must be container, compose or service"
	}
	if kind != "" && !availableKinds[kind] {
		return "kind " + kind + " is not available on this control plane"
	}
	return ""
}

// Source types.
const (
	SourceImage = "image"
	SourceGit   = "git"
)

// Defaults and limits.
const (
	DefaultHealthPath = "/"
	// HealthTimeoutSeconds bounds the agent's wait for a healthy answer.
	HealthTimeoutSeconds = 60
	// KeepImages is how many succeeded deployments' images the agent
	// keeps for rollbacks.
	KeepImages = 5
	// PruneWindow is how many succeeded deployments past the kept ones a
	// deploy names images of for pruning: an image that fell out is named
	// by this many later deploys, should one of them fail to remove it.
	PruneWindow = 20
	// Listing limits of deployments.
	DefaultDeploymentLimit = 30
	MaxDeploymentLimit     = 100
)

// Source is where an application's image comes from.
type Source struct {
	Type           string `json:"type" enum:"image,git,inline" doc:"image: a Docker image reference. git: a branch of a repository the git host app's installation can read, built on the server. inline: compose applications only, the compose document given in compose"`
	Image          string `json:"image,omitempty" doc:"type image: registry/namespace/name[:tag][@sha256:…]"`
	InstallationID int64  `json:"installation_id,omitempty" minimum:"1" doc:"type git: the Git provider installation (at least 1)"`
	RepoID         int64  `json:"repo_id,omitempty" minimum:"1" doc:"type git: the repository (at least 1)"`
	Branch         string `json:"branch,omitempty" doc:"type git: the branch deployed by default and on pushes (with auto_deploy)"`
}

// EnvVar is one environment variable of an application.
type EnvVar struct {
	Key   string `json:"key" doc:"[A-Za-z_][A-Za-z0-9_]*, unique"`
	Value string `json:"value" doc:"At most 32 KiB"`
}

// BuildSecret is a secret a build from git reads at build time only: a
// Dockerfile step mounts it (RUN --mount=type=secret,id=KEY, at
// /run/secrets/KEY by default).
type BuildSecret struct {
	Key   string `json:"key" doc:"The secret's id in the Dockerfile: 1 to 64 letters, digits, '_', '-' and '.', starting and ending with a letter or digit; unique"`
	Value string `json:"value" doc:"1 byte to 32 KiB; write-only"`
}

// App is an application as stored.
type App struct {
	ID       string
	ServerID string
	Name     string
	// Kind is KindContainer, KindCompose or KindService.
	Kind          string
	Source        Source
	ContainerPort int
	HealthPath    string
	EnvKeys       []string
	AutoDeploy    bool
	MemoryLimit   string
	State         string
	// CurrentDeploymentID is the live deployment: the last that succeeded.
	CurrentDeploymentID string
	RemoveJobID         string
	RemoveError         string
	CreatedBy           string
	CreatedAt           time.Time
	UpdatedAt           time.Time
	// Build says how a git application's image is built; zero for image
	// applications.
	Build BuildSettings
	// SealedBuildArgs are the build arguments' values, sealed and bound
	// to the application ("" when none). Never shown.
	SealedBuildArgs string
	// SealedBuildSecrets are the build secrets, sealed and bound to the
	// application ("" when none). Never shown.
	SealedBuildSecrets string
	// Compose is a compose application's stack; zero for other kinds.
	Compose ComposeSettings
	// Service is a service application's build and start; zero for
	// other kinds.
	Service ServiceSettings
	// Publish is the application's published port; nil for none. It is
	// the application's, not a deployment's: every release keeps it.
	Publish *Publish

	// Derived by the store's reads.
	LatestStatus string // status of the newest deployment, "" if none
	InProgress   bool   // a deployment is queued or running
}

// Spec is the frozen specification of a deployment: what it deploys.
// Environment values are not part of it; they are sealed with the
// deployment.
type Spec struct {
	AppName       string   `json:"app_name" doc:"The application's name when the deployment was created"`
	Image         string   `json:"image" doc:"The image reference deployed"`
	ImageID       string   `json:"pinned_image_id,omitempty" doc:"Rollbacks: the exact local image id to run"`
	ContainerPort int      `json:"container_port"`
	HealthPath    string   `json:"health_path"`
	EnvKeys       []string `json:"env_keys" doc:"Names of the environment variables; the values are never shown here"`
	MemoryLimit   string   `json:"memory_limit" doc:"e.g. 512m; empty for none"`
	// MemoryLimitBytes is MemoryLimit in bytes; 0 for none.
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// Git is set for a deployment from git: the commit it builds.
	Git *GitSpec `json:"git,omitempty" doc:"For a deployment from git: the repository and the exact commit built (a rollback runs the image built then)"`
	// Compose is set for a deployment of a compose application.
	Compose *ComposeSpec `json:"compose,omitempty" doc:"For a compose application: the frozen compose document and web service (a rollback pins every service's image)"`
	// Service is set for a deployment of a service application.
	Service *ServiceSpec `json:"service,omitempty" doc:"For a service application: its build and start commands, and for a rollback the deployment whose kept release runs again"`
}

// DeploymentRecord is one release of an application, as stored.
type DeploymentRecord struct {
	ID           string
	AppID        string
	ServerID     string
	Status       string // stored: running means it holds the app's slot
	Spec         Spec
	Ref          string
	RollbackOf   string
	JobID        string
	ImageID      string
	Result       json.RawMessage
	Error        string
	CreatedBy    string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	DispatchedAt *time.Time
	FinishedAt   *time.Time
	// SealedBuildArgs are the build arguments of a deployment from git,
	// sealed and bound to the deployment; written on insert only.
	SealedBuildArgs string
	// SealedBuildSecrets are the build secrets of a deployment from git,
	// sealed and bound to the deployment; written on insert only.
	SealedBuildSecrets string
	// Release is what a succeeded deployment of a compose application
	// keeps for rollbacks; nil for other kinds.
	Release *Release

	// Joined from the job, "" without one.
	JobStatus    string
	JobStartedAt *time.Time
}

// Finish is the outcome of a dispatched deployment.
type Finish struct {
	Status  string // Succeeded, Failed or Cancelled
	Error   string
	Result  json.RawMessage
	ImageID string
	// Release is kept with a succeeded compose deployment.
	Release *Release
	At      time.Time
}

// ComposeSettings describe a compose application's stack: an inline
// compose document, or (git sources) the compose file's path in the
// repository; and the service the proxy routes to.
type ComposeSettings struct {
	File       string `json:"compose_file,omitempty"`
	WebService string `json:"web_service,omitempty"`
	Document   string `json:"document,omitempty"`
}

// Release is what a compose deployment released: the image id every
// service ran, by service name. With the deployment's frozen compose
// document (or, from git, the document it read from its commit) it is
// enough to re-create the stack.
type Release struct {
	Services map[string]string `json:"services"`
	// Document is the compose document a deployment from git read from
	// its commit; "" for an inline document (the spec has it).
	Document string `json:"document,omitempty"`
}

// Store persists applications and deployments.
type Store interface {
	// InsertApp stores a new application; a name taken on the server is
	// fault.Conflict "application-name-taken".
	//
	// InsertApp and UpdateApp refuse a published port another application
	// of the server publishes with fault.Conflict "port-published", of
	// concurrent callers one only storing it (a unique index); they raise
	// the server's proxy revision when the published port is set or
	// changes.
	InsertApp(ctx context.Context, a App, sealedEnv string) error
	// App returns an application; fault.NotFound if none.
	App(ctx context.Context, id string) (App, error)
	// AppEnv returns an application's sealed environment ("" if none).
	AppEnv(ctx context.Context, id string) (string, error)
	// ListApps returns applications, oldest first; serverID "" means all.
	ListApps(ctx context.Context, serverID string) ([]App, error)
	// UpdateApp replaces an application's settings (not its state);
	// sealedEnv nil keeps the environment.
	UpdateApp(ctx context.Context, a App, sealedEnv *string) error
	// ReplaceAppEnv replaces an application's sealed env and its keys if
	// the env is still oldSealed; fault.Conflict "env-changed" otherwise.
	ReplaceAppEnv(ctx context.Context, id, oldSealed, newSealed string, keys []string, now time.Time) error
	// SetAppState moves an application from one of the states in from to
	// state, with the removal job and error; fault.Conflict
	// "application-removing" when it is in none of them.
	SetAppState(ctx context.Context, id string, from []string, state, removeJobID, removeError string, now time.Time) error
	// DeleteApp deletes an application with its deployments and domains.
	DeleteApp(ctx context.Context, id string) error
	// AppByRemoveJob returns the application being removed by a job.
	AppByRemoveJob(ctx context.Context, jobID string) (App, error)

	// InsertDeployment stores a queued deployment.
	InsertDeployment(ctx context.Context, d DeploymentRecord, sealedEnv string) error
	// InsertDeploymentAfter stores a queued deployment only if the newest
	// deployment of its application is still afterID ("": it has none);
	// false, and nothing stored, when another was stored since. Of
	// concurrent callers that saw the same newest deployment, one stores.
	InsertDeploymentAfter(ctx context.Context, d DeploymentRecord, sealedEnv, afterID string) (bool, error)
	// Deployment returns a deployment with its job's status.
	Deployment(ctx context.Context, id string) (DeploymentRecord, error)
	// DeploymentEnv returns a deployment's sealed environment ("" if none).
	DeploymentEnv(ctx context.Context, id string) (string, error)
	// DeploymentBuildArgs returns a deployment's sealed build arguments
	// ("" if none).
	DeploymentBuildArgs(ctx context.Context, id string) (string, error)
	// DeploymentBuildSecrets returns a deployment's sealed build secrets
	// ("" if none).
	DeploymentBuildSecrets(ctx context.Context, id string) (string, error)
	// ListDeployments returns deployments newest first; appID "" means
	// every application's.
	ListDeployments(ctx context.Context, appID string, limit int) ([]DeploymentRecord, error)
	// ClaimDeployment gives the application's slot to its newest queued
	// deployment and supersedes the older queued ones, unless a deployment
	// holds the slot already or the application is being removed. ok is
	// false when nothing was claimed.
	ClaimDeployment(ctx context.Context, appID string, now time.Time) (d DeploymentRecord, superseded []string, ok bool, err error)
	// SetDeploymentJob records the job of a running deployment that has
	// none yet.
	SetDeploymentJob(ctx context.Context, id, jobID string, now time.Time) error
	// FinishDeployment ends a running deployment; on success the
	// application's current deployment becomes it. false when it was not
	// running.
	FinishDeployment(ctx context.Context, id string, f Finish) (bool, error)
	// ReconcileDeployment turns a deployment that was failed because its
	// agent was lost into the succeeded one that f says it was, and makes
	// it the application's current deployment unless a later one is;
	// false if the deployment is not such a failed one.
	ReconcileDeployment(ctx context.Context, id string, f Finish) (bool, error)
	// CancelQueuedDeployments cancels the queued deployments (those
	// without a job) of an application, or only the one named by id when
	// id is not empty; it returns the ids cancelled.
	CancelQueuedDeployments(ctx context.Context, appID, id string, now time.Time) ([]string, error)
	// SucceededImageIDs returns the resolved image ids of the newest
	// succeeded deployments of an application, newest first, distinct.
	SucceededImageIDs(ctx context.Context, appID string, limit int) ([]string, error)
	// PrunableImageIDs returns the images of an application's succeeded
	// deployments past its newest keep ones (from at most limit of them),
	// distinct, without those among the kept or run by another
	// application on the same server.
	PrunableImageIDs(ctx context.Context, appID string, keep, limit int) ([]string, error)
	// OtherAppsImageIDs returns the images the succeeded deployments of
	// the other applications on the application's server ran (their
	// image ids and their kept compose releases' images), distinct.
	OtherAppsImageIDs(ctx context.Context, appID string) ([]string, error)
	// ServerImageIDs returns the image ids of a server's latest inventory
	// and when it was collected; known is false when the inventory does
	// not list images.
	ServerImageIDs(ctx context.Context, serverID string) (ids []string, collectedAt time.Time, known bool, err error)
	// RunningDeployments returns the deployments that hold their
	// application's slot (with their jobs' statuses); appID "" means all.
	RunningDeployments(ctx context.Context, appID string) ([]DeploymentRecord, error)

	// ProxySites returns the sites of every domain of the server's
	// applications that are not being removed, by hostname.
	ProxySites(ctx context.Context, serverID string) ([]agentproto.ProxySite, error)
	// ProxyState returns those sites with the revision of the server's
	// desired proxy state they make up. Every store change that alters
	// the sites, or the deployment an application's sites proxy to,
	// raises the revision in its own transaction.
	ProxyState(ctx context.Context, serverID string) (agentproto.ProxyConfig, error)

	// ServerInventory returns a server's latest inventory; nil if none.
	ServerInventory(ctx context.Context, serverID string) (*metrics.Inventory, error)

	// JobByIdempotencyKey finds a deployment's job after an interrupted
	// dispatch (jobs.Store).
	JobByIdempotencyKey(ctx context.Context, serverID, key string) (jobs.Job, error)
}
