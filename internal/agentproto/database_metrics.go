package agentproto

import "time"

// Database metrics: the agent samples every database instance on its
// server and reports the samples in batches.
//
// The agent learns which instances to sample, and how to log in to them,
// from GET /agent/v1/databases (DBMonitorResponse). The heartbeat reply's
// DatabasesRevision names the current list; the agent fetches the list
// again when it differs from the one it holds. The passwords in the list
// stay in the agent's memory: never written to its disk, never logged.

// MaxDBMetricSamples bounds the samples of one database metrics report.
const MaxDBMetricSamples = 1000

// MaxDBMetricDatabases bounds the databases of one sample.
const MaxDBMetricDatabases = 200

// DBMonitorResponse: GET /agent/v1/databases, the instances on the
// calling agent's server that the agent samples, with how to log in.
type DBMonitorResponse struct {
	// Revision names this list; the heartbeat reply's DatabasesRevision
	// differs from it once the list changed.
	Revision  string              `json:"revision"`
	Instances []DBMonitorInstance `json:"instances"`
}

// DBMonitorInstance is an instance to sample: how to reach it and the
// password of Target.Username.
type DBMonitorInstance struct {
	Target   DBTarget `json:"target"`
	Password string   `json:"password"`
	// ContainerName is a managed instance's container, whose memory use
	// the agent reports for SQL engines; "" for an external instance.
	ContainerName string `json:"container_name,omitempty"`
}

// DBMetricsRequest: POST /agent/v1/databases/metrics. Samples carry their
// own times and instances, oldest first.
type DBMetricsRequest struct {
	Samples []DBMetricSample `json:"samples"`
}

// DBMetricSample is one measurement of an instance. A sample whose Error
// is set could not be taken: the figures are nil. Otherwise a nil figure
// is one the engine does not have (keys of a SQL engine, sizes of a
// key-value one) or, for OpsPerSecond, the first sample after the agent
// started or the engine's counters were reset.
type DBMetricSample struct {
	InstanceID string    `json:"instance_id"`
	At         time.Time `json:"at"`
	// Error says why the instance could not be sampled; "" when it was.
	Error string `json:"error,omitempty"`
	// Connections are the client connections open, with the agent's own;
	// MaxConnections is the engine's limit of them.
	Connections    *int64 `json:"connections,omitempty"`
	MaxConnections *int64 `json:"max_connections,omitempty"`
	// SizeBytes is the sum of the databases' sizes (SQL engines).
	SizeBytes *int64 `json:"size_bytes,omitempty"`
	// MemoryBytes is the memory the engine reports in use: Redis/Valkey
	// used_memory; for SQL engines the memory of a managed instance's
	// container, nil for an external one.
	MemoryBytes *int64 `json:"memory_bytes,omitempty"`
	// Keys is the number of keys in every logical database (key-value
	// engines).
	Keys *int64 `json:"keys,omitempty"`
	// OpsPerSecond is the rate of the engine's operation counter since the
	// agent's previous sample of the instance: committed and rolled back
	// transactions (PostgreSQL), Questions (MySQL/MariaDB), commands
	// processed (Redis/Valkey).
	OpsPerSecond *float64 `json:"ops_per_second,omitempty"`
	// Databases are the sizes of the databases, largest first (SQL
	// engines; at most MaxDBMetricDatabases).
	Databases []DBSize `json:"databases,omitempty"`
}

// DBSize is the size of one database.
type DBSize struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
}

// DBMetricsResult is the reply to a database metrics report.
type DBMetricsResult struct {
	// Stored counts the samples stored (a sample stored already, same
	// instance and time, counts as not stored).
	Stored int `json:"stored"`
	// Skipped counts the samples of instances that are not on the
	// agent's server (deleted meanwhile); the agent fetches the list
	// again at the next heartbeat.
	Skipped int `json:"skipped"`
}
