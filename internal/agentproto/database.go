package agentproto

// Database engines, TLS modes of a connection, and the payloads and
// results of the database job types. The agent is the one that connects
// to a database instance: the control plane never does. How to reach the
// instance travels in the payload (DBTarget); its password travels only in
// the job's secrets, under SecretDBPassword.

// Database engines.
const (
	EnginePostgres = "postgres"
	EngineMySQL    = "mysql"
	EngineMariaDB  = "mariadb"
	EngineRedis    = "redis"
	EngineValkey   = "valkey"
)

// Engine kinds.
const (
	EngineKindSQL = "sql"
	EngineKindKV  = "kv"
)

// EngineKind returns the kind of an engine, "" for an unknown one.
func EngineKind(engine string) string {
	switch engine {
	case EnginePostgres, EngineMySQL, EngineMariaDB:
		return EngineKindSQL
	case EngineRedis, EngineValkey:
		return EngineKindKV
	}
	return ""
}

// TLS modes of a database connection, with PostgreSQL's sslmode meaning:
// disable (plain), require (TLS, certificate not checked), verify-ca (TLS,
// certificate signed by the CA), verify-full (verify-ca and the host name
// matches). MySQL/MariaDB and Redis/Valkey map them to their own settings.
const (
	DBTLSDisable    = "disable"
	DBTLSRequire    = "require"
	DBTLSVerifyCA   = "verify-ca"
	DBTLSVerifyFull = "verify-full"
)

// SecretDBPassword is the job secret that holds the password of
// DBTarget.Username.
const SecretDBPassword = "db_password"

// SecretDBReaderPassword is the job secret that holds the password of
// DBQueryPayload.Reader.
const SecretDBReaderPassword = "db_reader_password"

// Database job types.
const (
	// JobDBConnect tests a connection: DBConnectPayload → DBConnectResult.
	JobDBConnect = "db.connect"
	// JobDBQuery runs one SQL statement: DBQueryPayload → DBQueryResult.
	JobDBQuery = "db.query"
	// JobDBExplore describes a SQL instance: DBExplorePayload →
	// DBExploreResult.
	JobDBExplore = "db.explore"
	// JobDBKV browses a key-value instance: DBKVPayload → DBKVResult.
	JobDBKV = "db.kv"
)

// DBTarget says how the agent reaches a database instance.
type DBTarget struct {
	InstanceID string `json:"instance_id"`
	Engine     string `json:"engine"`
	// Host and Port are as seen from the agent's server (127.0.0.1 and the
	// published port for a managed instance).
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Username string `json:"username"`
	// Database is the database to connect to when the job names none: the
	// instance's initial database. For Redis/Valkey it is unused.
	Database string `json:"database,omitempty"`
	// TLSMode is one of the DBTLS* modes; "" means disable.
	TLSMode string `json:"tls_mode,omitempty"`
	// CA is a PEM bundle that verify-ca and verify-full check the server's
	// certificate against; empty means the system's roots.
	CA string `json:"ca,omitempty"`
}

// DBConnectPayload is the payload of db.connect.
type DBConnectPayload struct {
	Target DBTarget `json:"target"`
}

// DBConnectResult is the data of a finished db.connect.
type DBConnectResult struct {
	// ServerVersion is what the engine reports of itself, e.g. "16.4" or
	// "10.11.6-MariaDB" or "7.0.15".
	ServerVersion string `json:"server_version"`
	// TLS says whether the connection used TLS.
	TLS bool `json:"tls"`
}

// DBError is an error the engine returned, in the Data of a failed
// database job (the job's error is its message).
type DBError struct {
	// Code is the engine's code: SQLSTATE for PostgreSQL ("42P01"), the
	// error number for MySQL/MariaDB ("1146"), the error prefix for
	// Redis ("WRONGTYPE"). Empty when the engine gave none (a failed
	// connection, a timeout).
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	// Position is the 1-based character position in the statement the
	// engine points at; 0 when it gave none.
	Position int `json:"position,omitempty"`
}

// DBFailure is the Data of a failed database job.
type DBFailure struct {
	Error DBError `json:"error"`
}

// DBQueryPayload is the payload of db.query.
type DBQueryPayload struct {
	Target DBTarget `json:"target"`
	// Database to run the statement in; "" means Target.Database.
	Database string `json:"database,omitempty"`
	SQL      string `json:"sql"`
	// ReadOnly runs the statement in a transaction the engine itself keeps
	// read-only (never by looking at the SQL).
	ReadOnly bool `json:"readonly"`
	// MaxRows is how many rows are fetched at most (1 to 1000); rows past
	// it are not fetched from the engine.
	MaxRows int `json:"max_rows"`
	// TimeoutMS is the statement timeout in milliseconds.
	TimeoutMS int `json:"timeout_ms"`
	// Reader, for a read-only statement, is the read-only login to run it
	// as (its password is the job secret SecretDBReaderPassword). When it
	// cannot sign in, the agent makes it, or resets its password, as
	// Target.Username: on PostgreSQL 14 and later a role with
	// pg_read_all_data, on MySQL/MariaDB an account with SELECT and SHOW
	// VIEW on every database. An engine without such a role runs the
	// statement as Target.Username, in a read-only transaction. Empty:
	// run as Target.Username (control planes before 2026-12-01).
	Reader string `json:"reader,omitempty"`
}

// DBColumn is a column of a query's result.
type DBColumn struct {
	Name string `json:"name"`
	// Type is the engine's name of the column type (int4, text, VARCHAR…).
	Type string `json:"type"`
}

// DBQueryResult is the data of a finished db.query. A value in Rows is a
// JSON number, boolean, string or null as its type says; timestamps are
// RFC 3339 strings; binary values are objects {"$base64": "…"}.
type DBQueryResult struct {
	Columns  []DBColumn `json:"columns"`
	Rows     [][]any    `json:"rows"`
	RowCount int        `json:"row_count"`
	// Truncated says there were more rows than MaxRows.
	Truncated bool `json:"truncated"`
	// RowsAffected is what a writing statement changed; nil for a read.
	RowsAffected *int64  `json:"rows_affected,omitempty"`
	DurationMS   float64 `json:"duration_ms"`
	// Notices are the engine's notices and warnings, in order.
	Notices []string `json:"notices"`
	// RanAs is the login the statement ran as; empty from agents before
	// 2026-12-01.
	RanAs string `json:"ran_as,omitempty"`
}

// What db.explore describes.
const (
	ExploreDatabases = "databases"
	ExploreUsers     = "users"
	ExploreStats     = "stats"
	ExploreTables    = "tables"
	ExploreColumns   = "columns"
)

// DBExplorePayload is the payload of db.explore.
type DBExplorePayload struct {
	Target DBTarget `json:"target"`
	What   string   `json:"what"`
	// Database for tables and columns; "" means Target.Database.
	Database string `json:"database,omitempty"`
	// Schema narrows tables and columns (PostgreSQL; "" means every
	// schema but the system ones). Table is required for columns.
	Schema string `json:"schema,omitempty"`
	Table  string `json:"table,omitempty"`
}

// DBExploreResult is the data of a finished db.explore: the list that
// What names is set, the others are nil.
type DBExploreResult struct {
	What      string           `json:"what"`
	Databases []DBDatabaseInfo `json:"databases,omitempty"`
	Users     []DBUserInfo     `json:"users,omitempty"`
	Stats     *DBStats         `json:"stats,omitempty"`
	Tables    []DBTableInfo    `json:"tables,omitempty"`
	Columns   []DBColumnInfo   `json:"columns,omitempty"`
}

// DBDatabaseInfo is a database of an instance.
type DBDatabaseInfo struct {
	Name      string `json:"name"`
	Owner     string `json:"owner,omitempty"`
	SizeBytes int64  `json:"size_bytes"`
}

// DBUserInfo is a login of an instance.
type DBUserInfo struct {
	Name      string `json:"name"`
	Superuser bool   `json:"superuser"`
	CanLogin  bool   `json:"can_login"`
	// Grants are the engine's grants of the user, one per line as the
	// engine states them.
	Grants []string `json:"grants"`
}

// DBStats describes a running instance.
type DBStats struct {
	Version        string `json:"version"`
	UptimeSeconds  int64  `json:"uptime_seconds"`
	Connections    int    `json:"connections"`
	MaxConnections int    `json:"max_connections"`
	// CacheHitRatio is 0 to 1; nil when the engine has no such figure.
	CacheHitRatio *float64 `json:"cache_hit_ratio"`
	// Role is primary or replica.
	Role string `json:"role"`
}

// DBTableInfo is a table of a database.
type DBTableInfo struct {
	Schema        string `json:"schema,omitempty"`
	Name          string `json:"name"`
	EstimatedRows int64  `json:"estimated_rows"`
	TotalBytes    int64  `json:"total_bytes"`
	IndexBytes    int64  `json:"index_bytes"`
}

// DBColumnInfo is a column of a table.
type DBColumnInfo struct {
	Name       string  `json:"name"`
	Type       string  `json:"type"`
	Nullable   bool    `json:"nullable"`
	Default    *string `json:"default"`
	PrimaryKey bool    `json:"primary_key"`
	// References is "table(column)" (with "schema." on PostgreSQL) for a
	// foreign key column, "" otherwise.
	References string `json:"references,omitempty"`
	// Indexes are the names of the indexes the column is part of.
	Indexes []string `json:"indexes"`
}

// Actions of db.kv.
const (
	KVInfo    = "info"
	KVScan    = "scan"
	KVGet     = "get"
	KVDelete  = "delete"
	KVACLList = "acl_list"
)

// DBKVPayload is the payload of db.kv.
type DBKVPayload struct {
	Target DBTarget `json:"target"`
	Action string   `json:"action"`
	// DB is the logical database number (SELECT), 0 by default.
	DB int `json:"db,omitempty"`
	// Scan: Cursor ("" or "0" to start), Match (a glob; "" means *),
	// Count (a hint, 1 to 1000).
	Cursor string `json:"cursor,omitempty"`
	Match  string `json:"match,omitempty"`
	Count  int    `json:"count,omitempty"`
	// Get: Key, and MaxItems/MaxBytes bounding what is returned of it.
	Key      string `json:"key,omitempty"`
	MaxItems int    `json:"max_items,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
	// Delete: the keys, explicitly.
	Keys []string `json:"keys,omitempty"`
}

// DBKVResult is the data of a finished db.kv: the part of its action.
type DBKVResult struct {
	Action string `json:"action"`
	// Info: INFO's sections, each field to its value.
	Info map[string]map[string]string `json:"info,omitempty"`
	// Scan: the cursor to continue from ("0" when the scan is complete)
	// and the keys of this step.
	Cursor string     `json:"cursor,omitempty"`
	Keys   []KVKeyRef `json:"keys,omitempty"`
	// Get: the key's value.
	Value *KVValue `json:"value,omitempty"`
	// Delete: how many of the keys existed and were deleted.
	Deleted *int64 `json:"deleted,omitempty"`
	// ACL list.
	ACLUsers []KVACLUser `json:"acl_users,omitempty"`
}

// KVKeyRef is a key found by a scan.
type KVKeyRef struct {
	Key  string `json:"key"`
	Type string `json:"type"`
	// TTLSeconds is -1 for a key without expiry.
	TTLSeconds int64 `json:"ttl_seconds"`
}

// KVValue is a key's value. Exactly the field of its Type is set.
type KVValue struct {
	Key        string `json:"key"`
	Type       string `json:"type"` // string, hash, list, set, zset, stream
	TTLSeconds int64  `json:"ttl_seconds"`
	// Size is the full size: bytes of a string, items of the others.
	Size int64 `json:"size"`
	// Truncated says only part of the value is returned.
	Truncated bool              `json:"truncated"`
	String    *string           `json:"string,omitempty"`
	Hash      map[string]string `json:"hash,omitempty"`
	List      []string          `json:"list,omitempty"`
	Set       []string          `json:"set,omitempty"`
	ZSet      []KVScored        `json:"zset,omitempty"`
	Stream    []KVStreamEntry   `json:"stream,omitempty"`
}

// KVScored is a member of a sorted set.
type KVScored struct {
	Member string  `json:"member"`
	Score  float64 `json:"score"`
}

// KVStreamEntry is an entry of a stream.
type KVStreamEntry struct {
	ID     string            `json:"id"`
	Fields map[string]string `json:"fields"`
}

// KVACLUser is an ACL user of a Redis/Valkey instance.
type KVACLUser struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// KeyPatterns are the user's key patterns (~pattern), e.g. "app:*".
	KeyPatterns []string `json:"key_patterns"`
	// Commands is the user's command rules as ACL LIST states them, e.g.
	// "-@all +@read".
	Commands string `json:"commands"`
}
