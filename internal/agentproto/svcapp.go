package agentproto

// Service applications: an application built on the server from git and
// run by systemd, one unit per release slot, instead of a container.

// ServiceSpec, in DeployPayload.Service, makes app.deploy release a
// service application: DeployPayload.Build names the commit to fetch
// (its Dockerfile and Context are unused), Image and ContainerPort are
// unused.
type ServiceSpec struct {
	// BuildCommand runs with /bin/sh -c in the checkout, as the server's
	// unprivileged build account; "" means nothing to build.
	BuildCommand string `json:"build_command"`
	// StartCommand runs with /bin/sh -c in the release directory under
	// the slot's unit; PORT in its environment is the loopback port to
	// listen on.
	StartCommand string `json:"start_command"`
	// BuildTimeoutSeconds bounds the build; 0 means the agent's default.
	BuildTimeoutSeconds int `json:"build_timeout_seconds,omitempty"`
	// Release, when set (a rollback), is the deployment id whose kept
	// release starts again; nothing is fetched or built.
	Release string `json:"release,omitempty"`
	// KeepReleases are the deployment ids whose releases are kept for
	// rollbacks; after a successful release the others are removed (the
	// new one is always kept). Nil keeps them all.
	KeepReleases []string `json:"keep_releases,omitempty"`
}

// ServiceRelease reports a released service application in
// DeployResult.Service.
type ServiceRelease struct {
	// Unit is the slot's systemd unit, capstan-app-<name>@<port>.service.
	Unit string `json:"unit"`
	// Port is the loopback port the slot listens on.
	Port int `json:"port"`
	// Release is the deployment id whose release the slot runs.
	Release string `json:"release"`
	// Dir is the release directory on the server.
	Dir string `json:"dir"`
	// Built is false for a rollback to a kept release.
	Built bool `json:"built"`
	// BuildMillis is how long the build command ran; 0 when not built.
	BuildMillis int64 `json:"build_ms,omitempty"`
	// Retired are the units of the slots stopped after the switch.
	Retired []string `json:"retired_units"`
	// Pruned are the deployment ids whose releases were removed.
	Pruned []string `json:"pruned_releases"`
}

// ServiceSlot is the state of one release slot of a service application.
type ServiceSlot struct {
	Unit    string `json:"unit"`
	Port    int    `json:"port"`
	Release string `json:"release"`
	// ActiveState and SubState are systemd's (active/running, …).
	ActiveState string `json:"active_state"`
	SubState    string `json:"sub_state"`
	// Live says the proxy sends the application's requests to this slot.
	Live bool `json:"live"`
}
