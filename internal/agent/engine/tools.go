package engine

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// The engines' dump and load tools, and how each is told where to
// connect. The password travels in the tool's environment (PGPASSWORD,
// MYSQL_PWD), never in its arguments; names reach the tools as single
// arguments, never through a shell.

// CAPath is where a throwaway container or the host tool finds the CA
// bundle of a verify-ca or verify-full target.
const CAPath = "/tmp/capstan-db-ca.pem"

// ToolCall is one run of a tool: its arguments and environment.
type ToolCall struct {
	Args []string
	Env  []string
}

// conn says where a tool connects: the target's host and port, or, in a
// managed instance's own container, the engine on 127.0.0.1 and its
// default port.
type ToolConn struct {
	Host     string
	Port     int
	Username string
	Password string
	TLSMode  string
	// CAFile is the CA bundle's path where the tool runs; "" for none.
	CAFile string
}

// pgConnEnv is libpq's environment for c.
func pgConnEnv(c ToolConn) []string {
	env := []string{"PGHOST=" + c.Host, fmt.Sprintf("PGPORT=%d", c.Port), "PGUSER=" + c.Username, "PGPASSWORD=" + c.Password,
		"PGCONNECT_TIMEOUT=15", "PGAPPNAME=capstan"}
	mode := c.TLSMode
	if mode == "" {
		mode = agentproto.DBTLSDisable
	}
	env = append(env, "PGSSLMODE="+mode)
	if c.CAFile != "" {
		env = append(env, "PGSSLROOTCERT="+c.CAFile)
	} else if mode == agentproto.DBTLSVerifyCA || mode == agentproto.DBTLSVerifyFull {
		env = append(env, "PGSSLROOTCERT=system")
	}
	return env
}

// mysqlConnArgs are the MySQL/MariaDB client options for c (the password
// is MYSQL_PWD in the environment).
func mysqlConnArgs(engine string, c ToolConn) []string {
	args := []string{"--protocol=tcp", "--host=" + c.Host, fmt.Sprintf("--port=%d", c.Port), "--user=" + c.Username}
	if engine == agentproto.EngineMySQL {
		mode := map[string]string{"": "DISABLED", agentproto.DBTLSDisable: "DISABLED", agentproto.DBTLSRequire: "REQUIRED",
			agentproto.DBTLSVerifyCA: "VERIFY_CA", agentproto.DBTLSVerifyFull: "VERIFY_IDENTITY"}[c.TLSMode]
		args = append(args, "--ssl-mode="+mode)
	} else {
		switch c.TLSMode {
		case "", agentproto.DBTLSDisable:
			args = append(args, "--skip-ssl")
		case agentproto.DBTLSRequire:
			args = append(args, "--ssl", "--skip-ssl-verify-server-cert")
		default:
			// MariaDB's client checks the chain and the name together.
			args = append(args, "--ssl", "--ssl-verify-server-cert")
		}
	}
	if c.CAFile != "" {
		args = append(args, "--ssl-ca="+c.CAFile)
	}
	return args
}

// DumpCall is the dump of database on engine as c, plain SQL on stdout.
// PostgreSQL's leaves out ownership and grants, so it loads into a
// database of any instance whatever its roles; MySQL/MariaDB's is of the
// one database without CREATE DATABASE or USE, so it loads into a
// database of any name, in one consistent snapshot (InnoDB).
func DumpCall(engine, database string, c ToolConn) ToolCall {
	switch engine {
	case agentproto.EnginePostgres:
		return ToolCall{Args: []string{"pg_dump", "--no-password", "--no-owner", "--no-privileges", "--format=plain", "--dbname=" + database},
			Env: pgConnEnv(c)}
	case agentproto.EngineMySQL:
		args := append([]string{"mysqldump"}, mysqlConnArgs(engine, c)...)
		args = append(args, "--single-transaction", "--routines", "--triggers", "--events", "--hex-blob", "--no-tablespaces",
			"--set-gtid-purged=OFF", "--", database)
		return ToolCall{Args: args, Env: []string{"MYSQL_PWD=" + c.Password}}
	}
	args := append([]string{"mariadb-dump"}, mysqlConnArgs(engine, c)...)
	args = append(args, "--single-transaction", "--routines", "--triggers", "--events", "--hex-blob", "--", database)
	return ToolCall{Args: args, Env: []string{"MYSQL_PWD=" + c.Password}}
}

// LoadCall is the load into database on engine as c of a file of format
// on stdin. PostgreSQL's plain SQL arrives already wrapped in BEGIN and
// COMMIT (see dump.Transfer.load) and stops at the first error; a custom
// archive is restored in one transaction. MySQL/MariaDB's client runs the
// statements in order and stops at the first error; --binary-mode keeps
// it from taking client commands (such as system) from the file.
func LoadCall(engine, format, database string, c ToolConn) ToolCall {
	switch {
	case engine == agentproto.EnginePostgres && format == agentproto.DBFormatPGCustom:
		return ToolCall{Args: []string{"pg_restore", "--no-password", "--single-transaction", "--exit-on-error", "--no-owner",
			"--no-privileges", "--dbname=" + database}, Env: pgConnEnv(c)}
	case engine == agentproto.EnginePostgres:
		return ToolCall{Args: []string{"psql", "--no-password", "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1",
			"--dbname=" + database}, Env: pgConnEnv(c)}
	}
	client := "mariadb"
	if engine == agentproto.EngineMySQL {
		client = "mysql"
	}
	args := append([]string{client}, mysqlConnArgs(engine, c)...)
	args = append(args, "--batch", "--binary-mode", "--database="+database)
	return ToolCall{Args: args, Env: []string{"MYSQL_PWD=" + c.Password}}
}

// VersionCall asks a dump tool for its version.
func VersionCall(engine string) []string {
	switch engine {
	case agentproto.EnginePostgres:
		return []string{"pg_dump", "--version"}
	case agentproto.EngineMySQL:
		return []string{"mysqldump", "--version"}
	}
	return []string{"mariadb-dump", "--version"}
}

var (
	// "pg_dump (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
	pgToolVersion = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)(\.\d+)?`)
	// "… Distrib 10.11.14-MariaDB, …" or "mariadb-dump from 11.4.2-MariaDB, …"
	mariadbToolVersion = regexp.MustCompile(`(\d+)\.(\d+)\.\d+-MariaDB`)
	// "mysqldump  Ver 8.0.36 for Linux on x86_64 (MySQL Community Server - GPL)"
	mysqlToolVersion = regexp.MustCompile(`Ver\s+(\d+)\.(\d+)\.\d+`)
)

// ToolMajor is the major version, as Capstan lists the engine's versions,
// of a dump tool's --version output; "" if it cannot tell.
func ToolMajor(engine, out string) string {
	switch engine {
	case agentproto.EnginePostgres:
		if m := pgToolVersion.FindStringSubmatch(out); m != nil {
			return m[1]
		}
	case agentproto.EngineMariaDB:
		if m := mariadbToolVersion.FindStringSubmatch(out); m != nil {
			return m[1] + "." + m[2]
		}
	case agentproto.EngineMySQL:
		if strings.Contains(out, "MariaDB") {
			return ""
		}
		if m := mysqlToolVersion.FindStringSubmatch(out); m != nil {
			return m[1] + "." + m[2]
		}
	}
	return ""
}

// MariaDBSandbox is the first line of a dump by a recent mariadb-dump: it
// tells MariaDB's client to refuse client commands from the rest of the
// file. MySQL's client rejects it (an unknown command '\-').
const MariaDBSandbox = `/*M!999999\- enable the sandbox mode */`
