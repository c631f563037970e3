package agentproto

import "time"

// LabelHealthPath is the Docker label with an application container's
// health path, which the agent probes on its loopback port until the
// control plane has told it the applications to probe (HealthTargets).
const LabelHealthPath = "dev.capstan.health-path"

// HealthProbeSeconds is how often an agent probes its applications'
// health, unless configured otherwise.
const HealthProbeSeconds = 30

// HealthReport: POST /agent/v1/health. The agent probes every application
// it runs (GET health_path on the loopback port of the application's live
// container, of a compose application's web service, or of a service
// application's live slot; not through the proxy) and reports the result
// of each. The control plane answers 204, or with WantTargets 200 and
// HealthTargets: the applications to probe from then on.
type HealthReport struct {
	Probes []AppProbe `json:"probes"`
	// WantTargets asks for the applications to probe in the answer
	// (HealthTargets). False (older agents) gets 204.
	WantTargets bool `json:"want_targets,omitempty"`
}

// HealthTargets answers a HealthReport with WantTargets: the applications
// of the agent's server that have a live release, each with what the
// agent needs to find and probe it. It does not depend on the labels of
// their containers, so containers made before LabelHealthPath existed are
// probed too.
type HealthTargets struct {
	Apps []HealthTarget `json:"apps"`
}

// Kinds of HealthTarget.Kind.
const (
	AppKindContainer = "container"
	AppKindCompose   = "compose"
	AppKindService   = "service"
)

// HealthTarget is an application to probe.
type HealthTarget struct {
	AppID string `json:"app_id"`
	// Kind is AppKindContainer, AppKindCompose (its web service's
	// container, labelled LabelApp like a container application's) or
	// AppKindService (its live slot).
	Kind string `json:"kind"`
	// DeploymentID is the live deployment.
	DeploymentID string `json:"deployment_id"`
	// HealthPath is the live deployment's health path.
	HealthPath string `json:"health_path"`
	// ContainerPort is the port the container listens on (LabelPort
	// says the same on containers that carry it); 0 for service
	// applications.
	ContainerPort int `json:"container_port,omitempty"`
}

// AppProbe is the result of probing one application.
type AppProbe struct {
	AppID        string `json:"app_id"`
	DeploymentID string `json:"deployment_id"`
	// Healthy is true when the probe answered 2xx or 3xx.
	Healthy bool `json:"healthy"`
	// StatusCode is the probe's HTTP status; 0 when none came (no running
	// container, connection refused, timeout).
	StatusCode int `json:"status_code"`
	// Error says why an unhealthy probe failed; empty when healthy.
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
}

// MaxHealthProbes bounds the probes of one report.
const MaxHealthProbes = 1000
