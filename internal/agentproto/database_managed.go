package agentproto

// Managed database instances: containers the agent runs on its server's
// Docker engine, one named volume each, on the server's user-defined
// bridge network DBNetwork, with the engine's port published on
// 127.0.0.1 only.

// DBNetwork is the per-server Docker network of managed instances;
// application containers on it reach an instance by its container name.
const DBNetwork = "capstan"

// Labels of a managed instance's container and volume.
const (
	LabelDBInstance = "dev.capstan.database"
	LabelDBEngine   = "dev.capstan.database.engine"
)

// Job types of managed instances.
const (
	// JobDBCreate creates (or, retried, reuses) the network, volume and
	// container of an instance and waits until the engine accepts the
	// admin login on the initial database: DBCreatePayload →
	// DBCreateResult. The admin password is in SecretDBPassword.
	JobDBCreate = "db.create"
	// JobDBControl starts, stops or restarts an instance's container:
	// DBControlPayload → DBControlResult.
	JobDBControl = "db.control"
	// JobDBRemove removes an instance's container, and its volume with
	// Purge: DBRemovePayload → DBRemoveResult.
	JobDBRemove = "db.remove"
)

// DBCreatePayload is the payload of db.create.
type DBCreatePayload struct {
	InstanceID string `json:"instance_id"`
	Engine     string `json:"engine"`
	Version    string `json:"version"`
	// Image is the container image of Version.
	Image string `json:"image"`
	// ContainerName is the container's name, and its host name on Network.
	ContainerName string `json:"container_name"`
	// Network is DBNetwork.
	Network string `json:"network"`
	// Volume is the named volume of the engine's data.
	Volume string `json:"volume"`
	// MemoryLimitBytes is the container's memory limit; 0 for none.
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// Database is the initial database; "" for key-value engines.
	Database string `json:"database,omitempty"`
	// Username is the admin login (postgres: POSTGRES_USER; mysql and
	// mariadb: root; redis and valkey: default).
	Username string `json:"username"`
}

// DBCreateResult is the data of a finished db.create.
type DBCreateResult struct {
	ContainerID string `json:"container_id"`
	// HostPort is the port the engine's port is published on, on
	// 127.0.0.1.
	HostPort      int    `json:"host_port"`
	ServerVersion string `json:"server_version"`
}

// Actions of db.control.
const (
	DBControlStart   = "start"
	DBControlStop    = "stop"
	DBControlRestart = "restart"
)

// DBControlPayload is the payload of db.control. Target is how the agent
// reaches the instance to wait for it after start and restart (its
// password in SecretDBPassword).
type DBControlPayload struct {
	Target        DBTarget `json:"target"`
	ContainerName string   `json:"container_name"`
	Action        string   `json:"action"`
}

// DBControlResult is the data of a finished db.control.
type DBControlResult struct {
	Action  string `json:"action"`
	Running bool   `json:"running"`
	// ServerVersion is set once a started instance accepted the login.
	ServerVersion string `json:"server_version,omitempty"`
}

// DBRemovePayload is the payload of db.remove.
type DBRemovePayload struct {
	InstanceID    string `json:"instance_id"`
	ContainerName string `json:"container_name"`
	Volume        string `json:"volume"`
	// Purge removes the volume (the data) too.
	Purge bool `json:"purge"`
}

// DBRemoveResult is the data of a finished db.remove.
type DBRemoveResult struct {
	ContainerRemoved bool `json:"container_removed"`
	VolumeRemoved    bool `json:"volume_removed"`
}
