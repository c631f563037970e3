// Package agentproto is the wire contract between the control plane and its
// agents: the request and response bodies of /agent/v1 and the payload and
// result of every job type. Both binaries import it; it imports only the
// standard library.
//
// Agents and control planes of different ages talk to each other, so this
// package changes by adding, never by editing: new fields are optional and
// say what their zero value means, enums grow at the end, nothing is removed.
//
// History of protocol changes (newest last):
//
//	2026-11-22  v1: enroll, heartbeat, jobs claim/secrets/events/complete;
//	            job types agent.ping, service.*, container.*.
//	2026-11-22  v1: metrics and inventory reports; job type logs.read;
//	            results of service.*, container.* and the log reads.
//	2026-11-22  v1: applications: app.deploy, app.remove, app.logs,
//	            proxy.apply, domain.check; request traffic reports.
//	2026-11-24  v1: proxy state revisions: ProxyConfig.Revision, numbered
//	            per server by the control plane; GET /agent/v1/proxy
//	            (ProxyStateResponse) returns the server's current desired
//	            proxy state. An agent never applies a revision older than
//	            one it applied, and takes the proxy state of app.deploy's
//	            switch and of app.remove from GET /agent/v1/proxy rather
//	            than from the payload (kept for older agents).
//	2026-11-24  v1: request reports carry Other (the requests to hosts
//	            that are not configured sites, one bucket per server); the
//	            control plane answers 200 RequestsResult naming the entries
//	            it skipped instead of refusing the whole report. Inventory
//	            reports carry Images. DeployPayload.PruneImageIDs.
//	            Problem.Errors (the field errors every 422 already carried).
//	2026-11-24  v1: limits per server: at most two claim long-polls wait
//	            at once (a newer claim answers the oldest 204 at once);
//	            metrics, inventory, job events and request reports answer
//	            429 with Retry-After over their rate, and an agent waits
//	            that long before sending the same report again.
//	2026-11-24  v1: databases (database.go): job types db.connect,
//	            db.query, db.explore and db.kv with DBTarget, the
//	            password in the job secret db_password.
//	2026-11-24  v1: databases and logins (database_admin.go): job types
//	            db.database.create, db.database.drop, db.user.create,
//	            db.user.rotate and db.user.drop; the login's new password
//	            in the job secret db_new_password.
//	2026-11-24  v1: managed database instances (database_managed.go):
//	            job types db.create, db.control and db.remove; the admin
//	            password of db.create in the job secret db_password.
//	2026-11-24  v1: database metrics (database_metrics.go):
//	            HeartbeatResponse.DatabasesRevision; GET /agent/v1/databases
//	            (DBMonitorResponse) lists the instances to sample with
//	            their login; POST /agent/v1/databases/metrics
//	            (DBMetricsRequest) reports the samples.
//	2026-11-24  v1: deploys from git (build.go): DeployPayload.Build has
//	            the agent fetch one commit and build the image; the
//	            installation token in the job secret SecretGitToken and
//	            build arguments under SecretBuildArgPrefix;
//	            DeployResult.Build reports the build.
//	2026-11-24  v1: database exports and imports (database_artifact.go):
//	            job types db.export and db.import; PUT and GET
//	            /agent/v1/jobs/{id}/artifact stream the job's file (the
//	            upload answers ArtifactReceipt).
//	2026-11-24  v1: application health (health.go): POST /agent/v1/health
//	            with HealthReport, the results of probing every
//	            application container's health path (LabelHealthPath) on
//	            its loopback port every 30 s.
//	2026-11-24  v1: backups (backup.go): job type backup.storage_test
//	            with BackupStorage; the S3 access key pair in the job
//	            secrets s3_access_key_id and s3_secret_access_key;
//	            job type backup.run (BackupRunPayload, BackupRunResult);
//	            provider clouddrive with BackupStorage.Folder and APIURL,
//	            its access token in the job secret clouddrive_access_token.
//	2026-11-24  v1: service applications (svcapp.go):
//	            DeployPayload.Service, DeployResult.Service,
//	            RemovePayload.AppName, AppLogsResult.Unit and Slots.
//	2026-11-24  v1: backup verification and restore (backup.go): job
//	            types backup.verify and backup.restore
//	            (BackupRestorePayload, BackupVerifyResult), the identity in
//	            the job secret backup_identity.
//	2026-11-24  v1: DomainCheckResult.CertNotBefore, so that tls_expiring
//	            judges a certificate against its lifetime.
//	2026-11-24  v1: compose applications from git: ComposeSpec.File with
//	            DeployPayload.Build, services built from the commit;
//	            DeployResult.ComposeDocument.
//	2026-11-24  v1: HealthReport.WantTargets; the control plane answers it
//	            with HealthTargets (200): every application with a live
//	            release, of every kind, to probe.
//	2026-11-24  v1: backup deletion (backup_delete.go): job type
//	            backup.delete (BackupDeletePayload, BackupDeleteResult).
//	2026-12-01  v1: DBQueryPayload.Reader with the job secret
//	            SecretDBReaderPassword: a read-only statement runs as that
//	            read-only login, which the agent makes when it does not
//	            work yet; DBQueryResult.RanAs names the login it ran as.
//	2026-12-01  v1: storage grants (backup_grant.go): Facts.Capabilities
//	            with CapabilityStorageGrants; BackupStorage.GrantJobID;
//	            POST /agent/v1/jobs/{id}/storage (StorageGrantRequest →
//	            StorageGrant) and GET /agent/v1/jobs/{id}/storage?key=
//	            (a cloud drive object's content);
//	            BackupStorageTestPayload.Key. Backup jobs carry no storage
//	            credential, and are not queued for an agent without the
//	            capability.
//	2026-12-01  v1: loads into a same or newer version (version.go):
//	            LoadVersion; DBArtifactSource.ImageVersion and Versions;
//	            BackupVerifyResult.EngineVersion, Loader, LoaderVersion and
//	            LoaderRef say what a backup was loaded into.
//	2026-12-02  v1: build secrets (build.go): Facts.Capabilities with
//	            CapabilityBuildSecrets; BuildSpec.BuildSecretKeys, the
//	            values in the job secrets under SecretBuildSecretPrefix,
//	            served to a BuildKit build. No build secret is sent to an
//	            agent without the capability.
//	2026-12-02  v1: published ports: ProxyConfig.Ports, a listener of
//	            the proxy on bind:port per application that publishes
//	            one, proxied to its live release like its domains;
//	            RemovePayload.ProxySites names the published addresses
//	            too. An older agent ignores Ports.
//	2026-12-02  v1: the agent follows the engine's events and sends the
//	            inventory soon after a change. MetricSample.Containers:
//	            per-container CPU, memory and network on the newest sample
//	            of a report.
//	2026-12-02  v1: Docker housekeeping (docker.go): job types
//	            container.inspect (environment values hidden) and
//	            docker.prune (DockerPrunePayload, DockerPruneResult);
//	            inventory reports carry Volumes and Networks;
//	            Facts.Capabilities with CapabilityDockerHousekeeping.
package agentproto

import (
	"encoding/json"
	"net"
	"strconv"
	"time"
)

// Version is the protocol version, the path segment after /agent/.
const Version = "v1"

// Token prefixes.
const (
	EnrollmentTokenPrefix = "ept_"
	AgentTokenPrefix      = "agt_"
)

// ProblemTypeBase prefixes every problem type URI the control plane sends.
const ProblemTypeBase = "https://capstan.dev/problems/"

// Problem types an agent acts on.
const (
	// ProblemAgentRevoked: the server was revoked or deleted; the agent must
	// stop and exit with ExitRevoked.
	ProblemAgentRevoked = ProblemTypeBase + "agent-revoked"
	// ProblemInvalidAgentToken: the token is unknown (never issued here).
	ProblemInvalidAgentToken = ProblemTypeBase + "invalid-agent-token"
	// ProblemInvalidEnrollmentToken: the enrollment token is unknown, used
	// or expired.
	ProblemInvalidEnrollmentToken = ProblemTypeBase + "invalid-enrollment-token"
)

// ExitRevoked is the agent's exit status when its credential is revoked;
// the service manager is told not to restart it (RestartPreventExitStatus).
const ExitRevoked = 78

// Problem is the RFC 9457 body of every error response.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Errors name the invalid fields of a validation problem (422); nil
	// when the problem names none.
	Errors []ProblemField `json:"errors,omitempty"`
}

// ProblemField is one invalid field of a validation problem.
type ProblemField struct {
	// Field is the field's path in the request body, e.g. minutes[3].host.
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Facts describe the host an agent runs on.
type Facts struct {
	Hostname         string   `json:"hostname"`
	OS               string   `json:"os" doc:"Operating system id, e.g. debian"`
	OSVersion        string   `json:"os_version"`
	Kernel           string   `json:"kernel"`
	Arch             string   `json:"arch" doc:"amd64 or arm64"`
	CPUCount         int      `json:"cpu_count"`
	MemoryBytes      uint64   `json:"memory_bytes"`
	AgentVersion     string   `json:"agent_version"`
	PublicAddresses  []string `json:"public_addresses" doc:"Globally routable addresses of the host's interfaces"`
	PrivateAddresses []string `json:"private_addresses" doc:"Private and loopback-excluded local addresses"`
	// Capabilities are what the agent can do beyond the job types it
	// runs (Capability*); nil from agents older than the field.
	Capabilities []string `json:"capabilities,omitempty" doc:"What the agent can do beyond its job types, e.g. storage_grants (backups without a storage credential on the server)"`
	// JobTypes are the job types the agent runs, from its registry; the
	// control plane queues no other type for it. Nil from agents older
	// than the field, which are sent any type.
	JobTypes []string `json:"job_types,omitempty" doc:"The job types the agent runs; the control plane queues no other for it (409 agent-upgrade-required)"`
	// Protocol is the agent protocol version the agent speaks
	// (ProtocolVersion when it was built); 0 from older agents.
	Protocol int `json:"protocol,omitempty" doc:"The agent protocol version the agent speaks"`
}

// ProtocolVersion is the version of the agent protocol this build speaks.
// It goes up when the agent calls change in a way an older control plane
// or agent must know about.
const ProtocolVersion = 1

// EnrollRequest redeems a one-time enrollment token: POST /agent/v1/enroll.
type EnrollRequest struct {
	Token string `json:"token"`
	Facts Facts  `json:"facts"`
}

// EnrollResponse carries the agent's credential; it is shown once.
type EnrollResponse struct {
	ServerID         string `json:"server_id"`
	ServerName       string `json:"server_name"`
	AgentToken       string `json:"agent_token"`
	HeartbeatSeconds int    `json:"heartbeat_seconds"`
	MetricsSeconds   int    `json:"metrics_seconds"`
}

// HeartbeatRequest: POST /agent/v1/heartbeat.
type HeartbeatRequest struct {
	AgentVersion  string `json:"agent_version"`
	UptimeSeconds int64  `json:"uptime_seconds" doc:"Seconds since the agent process started"`
	// RunningJobIDs are the jobs the agent is running; their leases are
	// extended. Nil means none.
	RunningJobIDs []string `json:"running_job_ids"`
	// Facts, when set, replace the stored host facts. Nil means unchanged.
	Facts *Facts `json:"facts,omitempty"`
}

// Config is the agent's runtime configuration, sent with every heartbeat.
// A zero field means "keep the agent's current value".
type Config struct {
	HeartbeatSeconds int `json:"heartbeat_seconds"`
	MetricsSeconds   int `json:"metrics_seconds"`
	// ClaimWaitSeconds is how long a claim long-poll should wait (≤ 30).
	ClaimWaitSeconds int `json:"claim_wait_seconds"`
	// MaxConcurrentJobs bounds how many jobs the agent runs at once.
	MaxConcurrentJobs int `json:"max_concurrent_jobs"`
}

// HeartbeatResponse: the agent's configuration and the control plane's clock.
type HeartbeatResponse struct {
	Config     Config    `json:"config"`
	ServerTime time.Time `json:"server_time"`
	// DatabasesRevision names the current list of the database instances
	// the agent samples (GET /agent/v1/databases); the agent fetches the
	// list when it differs from the one it holds. "" means the control
	// plane does not serve the list.
	DatabasesRevision string `json:"databases_revision,omitempty"`
}

// MaxClaimWaitSeconds bounds ClaimRequest.WaitSeconds.
const MaxClaimWaitSeconds = 30

// ClaimRequest: POST /agent/v1/jobs/claim. The reply is 200 ClaimResponse
// when a job was claimed, or 204 with no body when none came within the wait.
type ClaimRequest struct {
	WaitSeconds int `json:"wait_seconds"`
}

// Job is a unit of work claimed by an agent.
type Job struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	// HasSecrets says the agent must fetch GET /agent/v1/jobs/{id}/secrets.
	HasSecrets bool `json:"has_secrets"`
	// TimeoutSeconds is how long the job may run before it is failed.
	TimeoutSeconds int `json:"timeout_seconds"`
	// LeaseSeconds is how long the claim lasts without a heartbeat or event.
	LeaseSeconds int       `json:"lease_seconds"`
	CreatedAt    time.Time `json:"created_at"`
}

// ClaimResponse holds the claimed job.
type ClaimResponse struct {
	Job Job `json:"job"`
}

// SecretsResponse: GET /agent/v1/jobs/{id}/secrets.
type SecretsResponse struct {
	Secrets map[string]string `json:"secrets"`
}

// Event levels.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Event is one progress event of a job.
type Event struct {
	At      time.Time       `json:"at"`
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// EventsRequest: POST /agent/v1/jobs/{id}/events.
type EventsRequest struct {
	Events []Event `json:"events"`
}

// Job outcomes an agent reports.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// CompleteRequest: POST /agent/v1/jobs/{id}/complete. Completing a job
// twice is idempotent.
type CompleteRequest struct {
	Status string          `json:"status"`
	Error  string          `json:"error,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
}

// Job types.
const (
	JobAgentPing        = "agent.ping"
	JobServiceStart     = "service.start"
	JobServiceStop      = "service.stop"
	JobServiceRestart   = "service.restart"
	JobServiceLogs      = "service.logs"
	JobContainerStart   = "container.start"
	JobContainerStop    = "container.stop"
	JobContainerRestart = "container.restart"
	JobContainerLogs    = "container.logs"
)

// PingPayload is the payload of agent.ping.
type PingPayload struct {
	// Message is echoed back; it may be empty.
	Message string `json:"message,omitempty"`
}

// PingResult is the data of a finished agent.ping.
type PingResult struct {
	Message      string    `json:"message,omitempty"`
	AgentVersion string    `json:"agent_version"`
	Facts        Facts     `json:"facts"`
	AgentTime    time.Time `json:"agent_time"`
}

// ServicePayload is the payload of service.start|stop|restart.
type ServicePayload struct {
	Unit string `json:"unit"`
}

// ServiceLogsPayload is the payload of service.logs.
type ServiceLogsPayload struct {
	Unit  string `json:"unit"`
	Lines int    `json:"lines"`
}

// ContainerPayload is the payload of container.start|stop|restart.
type ContainerPayload struct {
	Container string `json:"container"`
}

// ContainerLogsPayload is the payload of container.logs.
type ContainerLogsPayload struct {
	Container string `json:"container"`
	Lines     int    `json:"lines"`
}

// Limits of a metrics report.
const (
	MaxMetricSamples     = 720 // one hour of 5 s samples
	MaxFilesystemsSample = 64
)

// MetricsRequest: POST /agent/v1/metrics. Samples carry their own times;
// an agent that could not reach the control plane sends what it buffered,
// oldest first, and each sample is stored at its own time.
type MetricsRequest struct {
	Samples []MetricSample `json:"samples"`
}

// MetricSample is one measurement of a host. Byte counts are bytes;
// percentages are 0 to 100.
type MetricSample struct {
	At         time.Time `json:"at"`
	CPUPercent float64   `json:"cpu_percent"`
	Load1      float64   `json:"load1"`
	Load5      float64   `json:"load5"`
	Load15     float64   `json:"load15"`
	// MemoryUsed excludes page cache and reclaimable memory:
	// total − available, as the kernel's MemAvailable estimates it.
	MemoryTotal     uint64 `json:"memory_total"`
	MemoryUsed      uint64 `json:"memory_used"`
	MemoryAvailable uint64 `json:"memory_available"`
	SwapTotal       uint64 `json:"swap_total"`
	SwapUsed        uint64 `json:"swap_used"`
	// Filesystems lists real filesystems only (no tmpfs, overlay, proc…).
	Filesystems    []FilesystemSample `json:"filesystems"`
	NetRxBytesPerS float64            `json:"net_rx_bytes_per_s"`
	NetTxBytesPerS float64            `json:"net_tx_bytes_per_s"`
	UptimeSeconds  uint64             `json:"uptime_seconds"`
	// Containers are the running Docker containers' figures at At. Nil
	// means the agent did not measure them (no Docker, an older agent, or
	// a sample that is not the newest of its report: an agent keeps them
	// only on the newest sample it holds).
	Containers []ContainerSample `json:"containers,omitempty"`
}

// MaxContainerSamples bounds the containers of one sample.
const MaxContainerSamples = 2000

// ContainerSample is one running container's use of the host, from the
// engine's stats. Rates are over the time since the agent's previous
// sample of the container; 0 on its first.
type ContainerSample struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// CPUPercent is the container's CPU time as a share of the whole
	// host's (all CPUs), 0 to 100, like MetricSample.CPUPercent.
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryUsed excludes the page cache the kernel can reclaim
	// (inactive files), as docker stats shows it; MemoryLimit is the
	// container's limit, or the host's memory without one.
	MemoryUsed     uint64  `json:"memory_used"`
	MemoryLimit    uint64  `json:"memory_limit"`
	NetRxBytesPerS float64 `json:"net_rx_bytes_per_s"`
	NetTxBytesPerS float64 `json:"net_tx_bytes_per_s"`
}

// FilesystemSample is the usage of one mounted filesystem.
type FilesystemSample struct {
	Mount       string `json:"mount"`
	Device      string `json:"device"`
	FSType      string `json:"fstype"`
	BytesTotal  uint64 `json:"bytes_total"`
	BytesUsed   uint64 `json:"bytes_used"`
	InodesTotal uint64 `json:"inodes_total"`
	InodesUsed  uint64 `json:"inodes_used"`
}

// InventoryRequest: POST /agent/v1/inventory. The agent sends it at start,
// every few minutes, and when it changes. A nil list means the agent could
// not read that part (e.g. no Docker); an empty list means there is none.
type InventoryRequest struct {
	CollectedAt time.Time       `json:"collected_at"`
	Services    []ServiceInfo   `json:"services"`
	Containers  []ContainerInfo `json:"containers"`
	Ports       []ListeningPort `json:"ports"`
	// Images are the Docker images on the host. Nil means the agent could
	// not read them, or is older than this field; the control plane then
	// assumes nothing about which images are present.
	Images []ImageInfo `json:"images,omitempty"`
	// Volumes and Networks are the engine's; nil means the agent could
	// not read them, or is older than these fields.
	Volumes  []VolumeInfo  `json:"volumes,omitempty"`
	Networks []NetworkInfo `json:"networks,omitempty"`
}

// ImageInfo is one Docker image on the host.
type ImageInfo struct {
	// ID is the full image id, sha256:….
	ID string `json:"id"`
	// Tags are the image's repository:tag references; empty when untagged.
	Tags      []string  `json:"tags"`
	SizeBytes int64     `json:"size_bytes"`
	Created   time.Time `json:"created"`
}

// ServiceInfo is one systemd service unit.
type ServiceInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	LoadState   string `json:"load_state"`
	ActiveState string `json:"active_state"`
	SubState    string `json:"sub_state"`
	// Enabled is the unit file state: enabled, disabled, static, masked…
	Enabled string `json:"enabled"`
}

// ContainerInfo is one Docker container.
type ContainerInfo struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Image        string            `json:"image"`
	State        string            `json:"state"`
	Status       string            `json:"status"`
	Ports        []ContainerPort   `json:"ports"`
	Labels       map[string]string `json:"labels"`
	RestartCount int               `json:"restart_count"`
}

// ContainerPort is a published container port.
type ContainerPort struct {
	IP            string `json:"ip,omitempty"`
	HostPort      int    `json:"host_port,omitempty"`
	ContainerPort int    `json:"container_port"`
	Protocol      string `json:"protocol"`
}

// ListeningPort is a socket listening on the host.
type ListeningPort struct {
	Protocol string `json:"protocol"` // tcp, tcp6, udp, udp6
	Address  string `json:"address"`
	Port     int    `json:"port"`
	// Process and PID are empty when the agent may not read them.
	Process string `json:"process,omitempty"`
	PID     int    `json:"pid,omitempty"`
}

// UnitState is the data of a finished service.start|stop|restart.
type UnitState struct {
	Unit        string `json:"unit"`
	LoadState   string `json:"load_state"`
	ActiveState string `json:"active_state"`
	SubState    string `json:"sub_state"`
}

// ContainerState is the data of a finished container.start|stop|restart.
type ContainerState struct {
	Container    string    `json:"container"`
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Status       string    `json:"status"`
	RestartCount int       `json:"restart_count"`
	StartedAt    time.Time `json:"started_at"`
}

// LogLine is one line of a journal or container log.
type LogLine struct {
	At time.Time `json:"at"`
	// Priority is the syslog priority (0 emergency … 7 debug); container
	// lines are 6 (info) on stdout and 3 (error) on stderr.
	Priority int    `json:"priority"`
	Message  string `json:"message"`
	// Stream is stdout or stderr for container lines, empty for journal.
	Stream string `json:"stream,omitempty"`
}

// LogsResult is the data of service.logs, container.logs and logs.read.
type LogsResult struct {
	Lines []LogLine `json:"lines"`
	// Cursor continues a logs.read after the last line returned; pass it
	// back to read what came since, without duplicates or gaps.
	Cursor string `json:"cursor,omitempty"`
}

// JobLogsRead reads a journal unit or a container log, optionally after a
// cursor. Appended at the end of the job types.
const JobLogsRead = "logs.read"

// Log sources of logs.read.
const (
	LogSourceJournal   = "journal"
	LogSourceContainer = "container"
)

// LogsReadPayload is the payload of logs.read.
type LogsReadPayload struct {
	Source    string `json:"source"`
	Unit      string `json:"unit,omitempty"`
	Container string `json:"container,omitempty"`
	Lines     int    `json:"lines"`
	// Priority, journal only: lines of this priority or more urgent. Nil
	// means all.
	Priority *int `json:"priority,omitempty"`
	// Cursor, when set, reads the lines after it (up to Lines).
	Cursor string `json:"cursor,omitempty"`
}

// Application job types. Appended at the end of the job types.
const (
	JobAppDeploy   = "app.deploy"
	JobAppRemove   = "app.remove"
	JobAppLogs     = "app.logs"
	JobProxyApply  = "proxy.apply"
	JobDomainCheck = "domain.check"
)

// Docker labels the agent puts on application containers. The agent finds
// an application's live container, and so its proxy upstream, by them.
const (
	LabelApp        = "dev.capstan.app"
	LabelAppName    = "dev.capstan.app.name"
	LabelDeployment = "dev.capstan.deployment"
	LabelPort       = "dev.capstan.container-port"
	// The containers of a compose application's services other than its
	// web service carry LabelComposeApp instead of LabelApp (the proxy
	// routes to none of them); every service's containers carry
	// LabelService, and LabelServiceConfig, a digest of what they were
	// created with.
	LabelComposeApp    = "dev.capstan.compose.app"
	LabelService       = "dev.capstan.compose.service"
	LabelServiceConfig = "dev.capstan.compose.config"
	LabelComposeVolume = "dev.capstan.compose.volume"
)

// TLS modes of a proxied site.
const (
	TLSAuto     = "auto"     // publicly trusted certificate through ACME
	TLSInternal = "internal" // certificate from the proxy's local CA
	TLSOff      = "off"      // plain HTTP only
)

// ProxyConfig is the desired reverse-proxy state of one server: every
// domain of every application on it. The agent renders the whole proxy
// configuration from it, with each site's upstream being the application's
// live container, and loads it atomically.
//
// Revision orders the states of one server: the control plane raises it
// with every change to what the proxy serves, and an agent never applies a
// state whose revision is lower than one it has applied (an equal one is
// applied again). Zero means unknown (a control plane from before
// revisions): such a state is applied as it comes and orders nothing.
type ProxyConfig struct {
	Sites    []ProxySite `json:"sites"`
	Revision int64       `json:"revision,omitempty" doc:"Revision of the server's desired proxy state; 0 means unknown"`
	// Ports are the published ports of the server's applications: the
	// proxy listens on each and sends its requests to the application's
	// live release, as it does for a domain. Nil means none.
	Ports []ProxyPort `json:"ports,omitempty"`
}

// ProxyPort is a port an application publishes on its server: plain
// HTTP on Bind:Port, every request proxied to the application.
type ProxyPort struct {
	AppID string `json:"app_id"`
	// Bind is an IP address literal (127.0.0.1, 0.0.0.0, ::1, …).
	Bind string `json:"bind"`
	Port int    `json:"port"`
}

// Address is p's bind:port ([v6]:port for IPv6).
func (p ProxyPort) Address() string {
	return net.JoinHostPort(p.Bind, strconv.Itoa(p.Port))
}

// ProxyStateResponse: GET /agent/v1/proxy, the server's current desired
// proxy state with its revision. A control plane from before revisions
// answers 404.
type ProxyStateResponse struct {
	Proxy ProxyConfig `json:"proxy"`
}

// ProxySite is one hostname served by the proxy.
type ProxySite struct {
	Hostname string `json:"hostname"`
	AppID    string `json:"app_id"`
	TLSMode  string `json:"tls_mode"`
	// RedirectWWW serves www.<hostname> as a permanent redirect to hostname.
	RedirectWWW bool `json:"redirect_www"`
}

// DeployPayload is the payload of app.deploy: release one application's
// image with health check and no downtime. Environment values travel in the
// job's secrets, keyed by name; EnvKeys lists them in order.
type DeployPayload struct {
	AppID        string `json:"app_id"`
	AppName      string `json:"app_name"`
	DeploymentID string `json:"deployment_id"`
	// Image is the reference to run. ImageID, when set (rollback), is the
	// exact local image id to run instead; the job fails if it is gone.
	Image         string   `json:"image"`
	ImageID       string   `json:"image_id,omitempty"`
	ContainerPort int      `json:"container_port"`
	HealthPath    string   `json:"health_path"`
	EnvKeys       []string `json:"env_keys"`
	// MemoryLimitBytes is 0 for no limit.
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// HealthTimeoutSeconds bounds the wait for a healthy answer.
	HealthTimeoutSeconds int `json:"health_timeout_seconds"`
	// KeepImageIDs are the images rollbacks may need; others of this app
	// may be pruned after a successful release.
	KeepImageIDs []string `json:"keep_image_ids"`
	// PruneImageIDs are images of this application's earlier deployments
	// that fell out of the ones kept for rollbacks; the agent removes them
	// after a successful release unless a container uses them or they are
	// in KeepImageIDs. Nil means none.
	PruneImageIDs []string `json:"prune_image_ids,omitempty"`
	// Proxy is the server's desired proxy state when the job was made,
	// with its revision. An agent that can fetch GET /agent/v1/proxy
	// applies the state current at the switch instead (with this
	// application's upstream switched to the new container), and this one
	// only when the control plane does not answer that route.
	Proxy ProxyConfig `json:"proxy"`
	// Build, when set and ImageID is empty, has the agent build Image from
	// a commit of a git repository instead of pulling it. Nil means pull.
	Build *BuildSpec `json:"build,omitempty"`
	// Service, when set, releases a service application (svcapp.go):
	// built from Build's commit (or a kept release) and run by systemd.
	// Nil means a container application.
	Service *ServiceSpec `json:"service,omitempty"`
	// Compose, when set, makes the deployment a release of a compose
	// application: Image and ImageID are unused, and ContainerPort and
	// HealthPath are its web service's.
	Compose *ComposeSpec `json:"compose,omitempty"`
}

// ComposeSpec is the stack of a compose application's deployment.
type ComposeSpec struct {
	// Document is the frozen compose document.
	Document string `json:"document"`
	// WebService is the service the proxy routes to.
	WebService string `json:"web_service"`
	// ImageIDs, for a rollback, are the exact local images to run, by
	// service; the job fails if one is gone.
	ImageIDs map[string]string `json:"image_ids,omitempty"`
	// File, with DeployPayload.Build and an empty Document (a deployment
	// from git), is the compose file's path in the commit; "" means
	// compose.yaml, else docker-compose.yml. Its services may build their
	// image from the commit (build.context and build.dockerfile inside
	// it); each is tagged <Image's repository>-<service>:<Image's tag>.
	File string `json:"file,omitempty"`
}

// DeployResult is the data of a finished app.deploy.
type DeployResult struct {
	ContainerID   string `json:"container_id"`
	ContainerName string `json:"container_name"`
	ImageID       string `json:"image_id"`
	HostPort      int    `json:"host_port"`
	// Pulled is false when the registry was unreachable and a local image
	// with that exact reference was used.
	Pulled bool `json:"pulled"`
	// RemovedIDs and PrunedImageIDs are the old containers removed and
	// images pruned before the result. An image release leaves both for
	// after its result (empty here; the job's later events say what was
	// removed); a compose release removes its old web container first.
	RemovedIDs      []string `json:"removed_container_ids"`
	PrunedImageIDs  []string `json:"pruned_image_ids"`
	HealthStatus    int      `json:"health_status"`
	HealthCheckedAt string   `json:"health_checked_at"`
	// Build reports the build of a deploy from git; nil when nothing was
	// built.
	Build *BuildResult `json:"build,omitempty"`
	// Service reports the release of a service application; nil for a
	// container application.
	Service *ServiceRelease `json:"service,omitempty"`
	// Services are the image ids every service of a compose application
	// runs, by service name; nil for other applications.
	Services map[string]string `json:"services,omitempty"`
	// ComposeDocument is the compose document a deployment from git read
	// from its commit, for the release to keep; "" otherwise.
	ComposeDocument string `json:"compose_document,omitempty"`
}

// RemovePayload is the payload of app.remove: remove the application's
// containers and apply the proxy state without its sites. As for
// app.deploy, Proxy is the state when the job was made; an agent applies
// the current one from GET /agent/v1/proxy when it can.
type RemovePayload struct {
	AppID string `json:"app_id"`
	// AppName, for a service application, names its units and release
	// directories; "" means a container application.
	AppName string      `json:"app_name,omitempty"`
	Proxy   ProxyConfig `json:"proxy"`
	// PurgeVolumes removes the named volumes of a compose application
	// too; they are kept otherwise.
	PurgeVolumes bool `json:"purge_volumes,omitempty"`
	// ProxySites are the hostnames (and published addresses, bind:port)
	// the application had in the server's proxy state: with none, a proxy that cannot be reached keeps nothing
	// of it, and the removal succeeds without applying the state.
	ProxySites []string `json:"proxy_sites,omitempty"`
	// Force succeeds when the proxy state cannot be applied, forgetting
	// the application's sites there (the proxy may serve them until it
	// takes the server's next state).
	Force bool `json:"force,omitempty"`
}

// ProxyApplyPayload is the payload of proxy.apply. An agent that applied
// a newer revision than Proxy.Revision skips it and succeeds.
type ProxyApplyPayload struct {
	Proxy ProxyConfig `json:"proxy"`
}

// RemoveResult is the data of a finished app.remove.
type RemoveResult struct {
	RemovedIDs []string `json:"removed_container_ids"`
}

// ProxyApplyResult is the data of a finished proxy.apply.
type ProxyApplyResult struct {
	Sites int `json:"sites"`
	// Upstreams maps app ids to the address their sites proxy to.
	Upstreams map[string]string `json:"upstreams"`
	// NoUpstream lists the apps without a live container; their sites
	// answer 503.
	NoUpstream []string `json:"no_upstream,omitempty"`
	// Revision is the payload's proxy state revision (0: unknown).
	Revision int64 `json:"revision,omitempty"`
	// Skipped says the state was not applied: the agent applied a newer
	// revision (AppliedRevision) already.
	Skipped         bool  `json:"skipped,omitempty"`
	AppliedRevision int64 `json:"applied_revision,omitempty"`
}

// AppLogsPayload is the payload of app.logs.
type AppLogsPayload struct {
	AppID string `json:"app_id"`
	Lines int    `json:"lines"`
	// Since, when set, returns only lines at or after it.
	Since *time.Time `json:"since,omitempty"`
	// Service is a compose application's service to read; "" is its
	// web service.
	Service string `json:"service,omitempty"`
}

// AppLogsResult is the data of app.logs: the live container's log.
type AppLogsResult struct {
	Lines        []LogLine `json:"lines"`
	State        string    `json:"state"`
	StartedAt    time.Time `json:"started_at"`
	RestartCount int       `json:"restart_count"`
	ContainerID  string    `json:"container_id"`
	// Unit is the live slot's unit of a service application, whose
	// journal the lines are from; "" for a container application.
	Unit string `json:"unit,omitempty"`
	// Slots are the release slots of a service application; nil for a
	// container application.
	Slots []ServiceSlot `json:"slots,omitempty"`
}

// DomainCheckPayload is the payload of domain.check.
type DomainCheckPayload struct {
	Hostname string `json:"hostname"`
	TLSMode  string `json:"tls_mode"`
}

// DomainCheckResult is the data of domain.check: what the host's resolver
// answers for the name, and the certificate the local proxy serves for it.
type DomainCheckResult struct {
	Addresses []string `json:"addresses"`
	DNSError  string   `json:"dns_error,omitempty"`
	// Certificate fields are empty when TLS is off or no certificate is
	// served yet.
	CertIssuer   string    `json:"cert_issuer,omitempty"`
	CertNotAfter time.Time `json:"cert_not_after,omitempty"`
	// CertNotBefore is the start of the certificate's validity: with
	// CertNotAfter, its lifetime. Zero from agents older than the field.
	CertNotBefore time.Time `json:"cert_not_before,omitempty"`
	CertDNSNames  []string  `json:"cert_dns_names,omitempty"`
	CertError     string    `json:"cert_error,omitempty"`
	CheckedAt     time.Time `json:"checked_at"`
}

// RequestsReport: POST /agent/v1/requests. Per-host, per-minute aggregates
// from the proxy's access log. A minute may be reported again with more
// requests as the log grows; the control plane keeps the latest counts of
// each (host, minute), so reports are idempotent.
type RequestsReport struct {
	// Minutes are the requests to the proxy's configured sites.
	Minutes []RequestMinute `json:"minutes"`
	// Other is the server's "other" bucket: per minute, the requests to
	// every host that is not a configured site (scanners, IP literals,
	// stale DNS), summed without their names; Host is empty. Nil means
	// none.
	Other []RequestMinute `json:"other,omitempty"`
}

// RequestsResult is the reply to a request report.
type RequestsResult struct {
	// Stored counts the minutes stored (of Minutes and Other).
	Stored int `json:"stored"`
	// SkippedCount counts the entries that were invalid and not stored;
	// the rest of the report was.
	SkippedCount int `json:"skipped_count"`
	// Skipped names the first of them (at most 100). Empty when
	// everything was stored.
	Skipped []SkippedMinute `json:"skipped"`
}

// SkippedMinute names one entry of a request report that was not stored.
type SkippedMinute struct {
	// Field is the entry's bad field: minutes[i].host, other[j].minute….
	Field  string `json:"field"`
	Reason string `json:"reason"`
	// Host and Minute identify the entry.
	Host   string    `json:"host"`
	Minute time.Time `json:"minute"`
}

// RequestMinute aggregates one host's requests in one minute.
type RequestMinute struct {
	Host      string    `json:"host"`
	Minute    time.Time `json:"minute"`
	Count     int64     `json:"count"`
	Status2xx int64     `json:"status_2xx"`
	Status3xx int64     `json:"status_3xx"`
	Status4xx int64     `json:"status_4xx"`
	Status5xx int64     `json:"status_5xx"`
	BytesOut  int64     `json:"bytes_out"`
	P50Ms     float64   `json:"p50_ms"`
	P95Ms     float64   `json:"p95_ms"`
}
