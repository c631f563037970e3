package agentproto

// Docker housekeeping on a server: reading one container's configuration
// and removing the images and networks nothing uses.

// Job types of Docker housekeeping.
const (
	// JobContainerInspect reads one container's configuration and state
	// (ContainerPayload → ContainerInspectResult).
	JobContainerInspect = "container.inspect"
	// JobDockerPrune lists (DryRun) or removes the engine's images and
	// networks that no container uses and no application keeps
	// (DockerPrunePayload → DockerPruneResult).
	JobDockerPrune = "docker.prune"
)

// CapabilityDockerHousekeeping, in Facts.Capabilities, says the agent runs
// container.inspect and docker.prune and reports volumes and networks in
// its inventory. The control plane queues neither job for an agent
// without it.
const CapabilityDockerHousekeeping = "docker_housekeeping"

// HiddenEnvValue replaces the value of every environment variable in a
// container.inspect result: they hold the applications' secrets.
const HiddenEnvValue = "(hidden)"

// ContainerInspectResult is the data of a finished container.inspect: the
// engine's inspect document (GET /containers/{id}/json) as the engine
// sent it, except that Config.Env has every value replaced by
// HiddenEnvValue ("KEY=(hidden)").
type ContainerInspectResult struct {
	Container string `json:"container"`
	ID        string `json:"id"`
	// Inspect is the engine's document, a JSON object.
	Inspect map[string]any `json:"inspect"`
}

// MaxPruneItems bounds the images and the networks of one docker.prune.
const MaxPruneItems = 1000

// DockerPrunePayload is the payload of docker.prune.
type DockerPrunePayload struct {
	// DryRun lists what would be removed and removes nothing.
	DryRun bool `json:"dry_run"`
	// ImageIDs and NetworkIDs are what to remove (full ids, as a dry run
	// listed them); an agent removes nothing else. Each is checked again
	// before it goes: one a container or an application now uses is kept.
	// Both empty on a dry run.
	ImageIDs   []string `json:"image_ids,omitempty"`
	NetworkIDs []string `json:"network_ids,omitempty"`
	// KeepImageIDs are the images the server's applications keep (their
	// live release and the releases a rollback returns to); never
	// removed, whether a container uses them or not.
	KeepImageIDs []string `json:"keep_image_ids"`
}

// DockerPruneResult is the data of a finished docker.prune.
type DockerPruneResult struct {
	DryRun bool `json:"dry_run"`
	// Images and Networks are what a dry run would remove, or what a
	// removal removed.
	Images   []PruneImage   `json:"images"`
	Networks []PruneNetwork `json:"networks"`
	// ReclaimBytes is the images' size: what removing them frees at
	// most (layers another image shares stay).
	ReclaimBytes int64 `json:"reclaim_bytes"`
	// Kept are the images not removed and why: an application keeps
	// them, or a container uses them.
	Kept []PruneKept `json:"kept"`
	// Skipped are the ids of a removal that were not removed, and why
	// (no longer present, now in use, the engine refused).
	Skipped []PruneSkipped `json:"skipped"`
}

// PruneImage is one image a prune lists or removed.
type PruneImage struct {
	ID        string   `json:"id"`
	Tags      []string `json:"tags"`
	SizeBytes int64    `json:"size_bytes"`
}

// PruneNetwork is one network a prune lists or removed.
type PruneNetwork struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Driver string `json:"driver"`
}

// Reasons an image is kept.
const (
	KeptByApplication = "application"
	KeptInUse         = "in_use"
)

// PruneKept is an image a prune keeps.
type PruneKept struct {
	ID     string   `json:"id"`
	Tags   []string `json:"tags"`
	Reason string   `json:"reason"`
}

// PruneSkipped is an id a removal did not remove.
type PruneSkipped struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// VolumeInfo is one Docker volume on the host.
type VolumeInfo struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// SizeBytes is the volume's disk use as the engine measures it
	// (local volumes only); -1 when unknown.
	SizeBytes int64 `json:"size_bytes"`
	// Containers is how many containers mount it; -1 when unknown.
	Containers int               `json:"containers"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// NetworkInfo is one Docker network on the host.
type NetworkInfo struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Scope  string `json:"scope"`
	// Containers is how many containers, running or not, are attached.
	Containers int `json:"containers"`
}
