package agentproto

import "time"

// LabelHealthPath is the Docker label with an application container's
// health path, which the agent probes on its loopback port. Containers
// made before the label existed carry none and are not probed.
const LabelHealthPath = "dev.capstan.health-path"

// HealthProbeSeconds is how often an agent probes its applications'
// health, unless configured otherwise.
const HealthProbeSeconds = 30

// HealthReport: POST /agent/v1/health. The agent probes every application
// container it runs (GET health_path on the container's loopback port, not
// through the proxy) and reports the result of each. The control plane
// answers 204.
type HealthReport struct {
	Probes []AppProbe `json:"probes"`
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
