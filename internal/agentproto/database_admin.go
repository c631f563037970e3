package agentproto

import (
	"strconv"
	"strings"
)

// Databases and logins of an instance: the agent creates and drops them
// as the instance's admin login (DBTarget.Username with SecretDBPassword).
// A login's new password travels only in the job's secrets, under
// SecretDBNewPassword.

// SecretDBNewPassword is the job secret that holds the password a login
// gets from db.user.create or db.user.rotate.
const SecretDBNewPassword = "db_new_password"

// Database and login job types. Each succeeds with DBAdminResult or fails
// with DBFailure.
const (
	// JobDBDatabaseCreate creates a database: DBDatabasePayload.
	JobDBDatabaseCreate = "db.database.create"
	// JobDBDatabaseDrop drops a database: DBDatabasePayload.
	JobDBDatabaseDrop = "db.database.drop"
	// JobDBUserCreate creates a login with its grants: DBUserPayload.
	JobDBUserCreate = "db.user.create"
	// JobDBUserRotate sets a login's password: DBUserPayload.
	JobDBUserRotate = "db.user.rotate"
	// JobDBUserDrop drops a login: DBUserPayload.
	JobDBUserDrop = "db.user.drop"
)

// Access levels of a login.
const (
	// DBAccessReadOnly reads the login's database (SQL) or the keys of
	// its pattern (key-value).
	DBAccessReadOnly = "readonly"
	// DBAccessReadWrite also writes them (and, for SQL, creates tables).
	DBAccessReadWrite = "readwrite"
	// DBAccessAdmin owns the database (SQL only).
	DBAccessAdmin = "admin"
)

// DBDatabasePayload is the payload of db.database.create and
// db.database.drop.
type DBDatabasePayload struct {
	Target DBTarget `json:"target"`
	Name   string   `json:"name"`
	// Owner is an existing login that owns the new database (create only;
	// "" keeps the admin login as owner). PostgreSQL makes it the owner;
	// MySQL/MariaDB grant it ALL on the database.
	Owner string `json:"owner,omitempty"`
}

// DBUserPayload is the payload of db.user.create, db.user.rotate and
// db.user.drop.
type DBUserPayload struct {
	Target   DBTarget `json:"target"`
	Username string   `json:"username"`
	// Database the login is for (SQL engines, create).
	Database string `json:"database,omitempty"`
	// Access is one of the DBAccess* levels (create).
	Access string `json:"access,omitempty"`
	// KeyPattern is the glob of keys the login reaches (key-value
	// engines, create), e.g. "app:*".
	KeyPattern string `json:"key_pattern,omitempty"`
}

// DBAdminResult is the data of a finished database or login job.
type DBAdminResult struct {
	// Statements are the statements the agent ran, with any password
	// replaced by '***'.
	Statements []string `json:"statements"`
	// Existed says, for a drop, whether there was something to drop.
	Existed *bool `json:"existed,omitempty"`
}

// Identifier kinds DBIdentifierProblem checks.
const (
	DBIdentDatabase = "database"
	DBIdentUser     = "username"
)

// DBIdentifierMaxLen is the longest identifier of kind an engine takes,
// in bytes: PostgreSQL 63 (NAMEDATALEN-1) for both; MySQL 64 for
// databases and 32 for users; MariaDB 64 and 80; Redis/Valkey users 128
// (a limit of Capstan's: the engine sets none).
func DBIdentifierMaxLen(engine, kind string) int {
	switch engine {
	case EnginePostgres:
		return 63
	case EngineMySQL:
		if kind == DBIdentUser {
			return 32
		}
		return 64
	case EngineMariaDB:
		if kind == DBIdentUser {
			return 80
		}
		return 64
	case EngineRedis, EngineValkey:
		return 128
	}
	return 0
}

// dbReserved are names an engine refuses or keeps for itself, by engine
// and kind.
var dbReserved = map[string]map[string][]string{
	EnginePostgres: {
		DBIdentDatabase: {"postgres", "template0", "template1"},
		DBIdentUser:     {"public", "none", "current_user", "current_role", "session_user", "user", "postgres", "all"},
	},
	EngineMySQL: {
		DBIdentDatabase: {"mysql", "information_schema", "performance_schema", "sys"},
		DBIdentUser:     {"root", "mysql", "public"},
	},
	EngineMariaDB: {
		DBIdentDatabase: {"mysql", "information_schema", "performance_schema", "sys"},
		DBIdentUser:     {"root", "mysql", "mariadb", "public", "none"},
	},
	EngineRedis:  {DBIdentUser: {"default"}},
	EngineValkey: {DBIdentUser: {"default"}},
}

// DBIdentifierProblem says what is wrong with a database or user name
// Capstan creates on engine, "" if nothing. Names are 1 to
// DBIdentifierMaxLen bytes of ASCII letters, digits and '_', starting with
// a letter or '_'; PostgreSQL's "pg_" prefix and the engine's own names
// are refused. Each engine's quoting is applied as well: this check keeps
// names portable and unambiguous, it is not the only defence.
func DBIdentifierProblem(engine, kind, name string) string {
	maxLen := DBIdentifierMaxLen(engine, kind)
	switch {
	case name == "":
		return "is required"
	case maxLen == 0:
		return "unknown engine " + engine
	case len(name) > maxLen:
		return "must be at most " + strconv.Itoa(maxLen) + " bytes on " + engine
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && !('0' <= c && c <= '9' && i > 0) {
			return "must be ASCII letters, digits and '_', starting with a letter or '_'"
		}
	}
	lower := strings.ToLower(name)
	if engine == EnginePostgres && strings.HasPrefix(lower, "pg_") {
		return "must not start with pg_: PostgreSQL reserves it"
	}
	for _, r := range dbReserved[engine][kind] {
		if lower == r {
			return "is reserved on " + engine
		}
	}
	return ""
}

// DBKeyPatternProblem says what is wrong with a key pattern of a
// key-value login: 1 to 256 printable ASCII characters without spaces.
func DBKeyPatternProblem(p string) string {
	if p == "" {
		return "is required: the glob of keys the login reaches, e.g. app:*"
	}
	if len(p) > 256 {
		return "must be at most 256 bytes"
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] > '~' {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}
