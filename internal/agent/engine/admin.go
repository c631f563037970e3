package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Databases and logins. Every name is checked with
// agentproto.DBIdentifierProblem and then quoted by the engine's rules
// (PostgreSQL: pgx.Identifier.Sanitize; MySQL/MariaDB: backticks, doubled
// inside, and user names as parameters); passwords reach the engine as
// parameters or as literals the server itself quotes (PostgreSQL's
// format('%L')). No statement is built from unchecked input.

// adminConn is a connection, as an instance's admin login, that manages
// databases and logins.
type Admin interface {
	Conn
	CreateDatabase(ctx context.Context, name, owner string) ([]string, error)
	DropDatabase(ctx context.Context, name string) ([]string, bool, error)
	CreateUser(ctx context.Context, p agentproto.DBUserPayload, password string) ([]string, error)
	RotateUser(ctx context.Context, username, password string) ([]string, error)
	DropUser(ctx context.Context, p agentproto.DBUserPayload) ([]string, bool, error)
}

// PostgreSQL.

func pgIdent(name string) string { return pgx.Identifier{name}.Sanitize() }

// pgFormatExec has the server build a statement with format() from
// parameters (%I identifiers, %L literals) and runs it: a password is
// quoted by the server, never spliced in here.
func (c *postgresConn) pgFormatExec(ctx context.Context, format string, args ...any) error {
	var stmt string
	if err := c.conn.QueryRow(ctx, "SELECT format($1::text, VARIADIC $2::text[])", format, args).Scan(&stmt); err != nil {
		return err
	}
	return c.exec(ctx, stmt)
}

func (c *postgresConn) CreateDatabase(ctx context.Context, name, owner string) ([]string, error) {
	stmt := "CREATE DATABASE " + pgIdent(name)
	if owner != "" {
		stmt += " OWNER " + pgIdent(owner)
	}
	st := []string{stmt}
	if err := c.exec(ctx, stmt); err != nil {
		return st, err
	}
	// Other logins do not reach it unless granted.
	revoke := "REVOKE CONNECT, TEMPORARY ON DATABASE " + pgIdent(name) + " FROM PUBLIC"
	st = append(st, revoke)
	if err := c.exec(ctx, revoke); err != nil {
		_ = c.exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+pgIdent(name))
		return st, err
	}
	return st, nil
}

func (c *postgresConn) DropDatabase(ctx context.Context, name string) ([]string, bool, error) {
	var existed bool
	if err := c.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&existed); err != nil {
		return nil, false, err
	}
	stmt := "DROP DATABASE IF EXISTS " + pgIdent(name) + " WITH (FORCE)"
	return []string{stmt}, existed, c.exec(ctx, stmt)
}

// pgGrants are the statements of an access level, run in the login's
// database; owner is the database's owner, whose future tables the
// default privileges cover.
func pgGrants(access, user, owner string) []string {
	u, o := pgIdent(user), pgIdent(owner)
	tables, seqs, schema := "SELECT", "SELECT", "USAGE"
	switch access {
	case agentproto.DBAccessReadWrite:
		tables, seqs, schema = "SELECT, INSERT, UPDATE, DELETE, TRUNCATE", "USAGE, SELECT, UPDATE", "USAGE, CREATE"
	case agentproto.DBAccessAdmin:
		tables, seqs, schema = "ALL PRIVILEGES", "ALL PRIVILEGES", "ALL PRIVILEGES"
	}
	return []string{
		"GRANT " + schema + " ON SCHEMA public TO " + u,
		"GRANT " + tables + " ON ALL TABLES IN SCHEMA public TO " + u,
		"GRANT " + seqs + " ON ALL SEQUENCES IN SCHEMA public TO " + u,
		"ALTER DEFAULT PRIVILEGES FOR ROLE " + o + " IN SCHEMA public GRANT " + tables + " ON TABLES TO " + u,
		"ALTER DEFAULT PRIVILEGES FOR ROLE " + o + " IN SCHEMA public GRANT " + seqs + " ON SEQUENCES TO " + u,
	}
}

func (c *postgresConn) CreateUser(ctx context.Context, p agentproto.DBUserPayload, password string) (st []string, err error) {
	var owner string
	if err := c.conn.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", p.Database).Scan(&owner); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("database %q does not exist", p.Database)
		}
		return nil, err
	}
	st = append(st, "CREATE ROLE "+pgIdent(p.Username)+" LOGIN PASSWORD '***'")
	if err := c.pgFormatExec(ctx, "CREATE ROLE %I LOGIN PASSWORD %L", p.Username, password); err != nil {
		return st, err
	}
	defer func() {
		if err != nil {
			// Leave nothing behind: the login is not half made.
			c.cleanupRole(context.WithoutCancel(ctx), p.Username, p.Database)
		}
	}()
	dbPriv := "CONNECT, TEMPORARY"
	if p.Access == agentproto.DBAccessAdmin {
		dbPriv = "ALL PRIVILEGES"
	}
	grant := "GRANT " + dbPriv + " ON DATABASE " + pgIdent(p.Database) + " TO " + pgIdent(p.Username)
	st = append(st, grant)
	if err := c.exec(ctx, grant); err != nil {
		return st, err
	}
	in, err := c.reconnect(ctx, p.Database)
	if err != nil {
		return st, err
	}
	defer in.Close()
	for _, g := range pgGrants(p.Access, p.Username, owner) {
		st = append(st, g)
		if err := in.exec(ctx, g); err != nil {
			return st, err
		}
	}
	return st, nil
}

// reconnect opens a connection like c's to another database.
func (c *postgresConn) reconnect(ctx context.Context, database string) (*postgresConn, error) {
	cfg := c.conn.Config().Copy()
	cfg.Database = database
	cfg.OnNotice = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &postgresConn{conn: conn}, nil
}

// cleanupRole drops what a login owns and holds in database, then the
// login.
func (c *postgresConn) cleanupRole(ctx context.Context, user, database string) []string {
	var st []string
	if database != "" {
		if in, err := c.reconnect(ctx, database); err == nil {
			for _, s := range []string{"REASSIGN OWNED BY " + pgIdent(user) + " TO CURRENT_USER", "DROP OWNED BY " + pgIdent(user)} {
				st = append(st, s)
				_ = in.exec(ctx, s)
			}
			in.Close()
		}
	}
	for _, s := range []string{"REASSIGN OWNED BY " + pgIdent(user) + " TO CURRENT_USER", "DROP OWNED BY " + pgIdent(user),
		"DROP ROLE IF EXISTS " + pgIdent(user)} {
		st = append(st, s)
		_ = c.exec(ctx, s)
	}
	return st
}

func (c *postgresConn) RotateUser(ctx context.Context, username, password string) ([]string, error) {
	var exists bool
	if err := c.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", username).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("role %q does not exist", username)
	}
	st := []string{"ALTER ROLE " + pgIdent(username) + " PASSWORD '***'"}
	return st, c.pgFormatExec(ctx, "ALTER ROLE %I PASSWORD %L", username, password)
}

func (c *postgresConn) DropUser(ctx context.Context, p agentproto.DBUserPayload) ([]string, bool, error) {
	var existed bool
	if err := c.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", p.Username).Scan(&existed); err != nil {
		return nil, false, err
	}
	if !existed {
		return nil, false, nil
	}
	var st []string
	if p.Database != "" {
		var dbExists bool
		if err := c.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", p.Database).Scan(&dbExists); err != nil {
			return nil, true, err
		}
		if dbExists {
			in, err := c.reconnect(ctx, p.Database)
			if err != nil {
				return nil, true, err
			}
			for _, s := range []string{"REASSIGN OWNED BY " + pgIdent(p.Username) + " TO CURRENT_USER", "DROP OWNED BY " + pgIdent(p.Username)} {
				st = append(st, s)
				if err := in.exec(ctx, s); err != nil {
					in.Close()
					return st, true, err
				}
			}
			in.Close()
		}
	}
	for _, s := range []string{"REASSIGN OWNED BY " + pgIdent(p.Username) + " TO CURRENT_USER", "DROP OWNED BY " + pgIdent(p.Username),
		"DROP ROLE " + pgIdent(p.Username)} {
		st = append(st, s)
		if err := c.exec(ctx, s); err != nil {
			return st, true, err
		}
	}
	return st, true, nil
}

// MySQL and MariaDB.

// myIdent quotes a name with backticks, doubling any inside.
func myIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// myGrantDB is a database name in GRANT … ON `db`.*, where '_' and '%'
// are wildcards unless escaped.
func myGrantDB(name string) string {
	return myIdent(strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(name))
}

// myLiteral quotes s as a string literal for the session's sql_mode:
// with NO_BACKSLASH_ESCAPES only quotes are doubled; otherwise
// backslashes and the characters the server's own escaping covers are
// escaped too. NUL is refused.
func (c *mysqlConn) myLiteral(ctx context.Context, s string) (string, error) {
	if strings.ContainsRune(s, 0) {
		return "", errors.New("a literal must not contain NUL")
	}
	var noBackslash bool
	if err := c.conn.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode LIKE '%NO_BACKSLASH_ESCAPES%'").Scan(&noBackslash); err != nil {
		return "", err
	}
	if noBackslash {
		return "'" + strings.ReplaceAll(s, "'", "''") + "'", nil
	}
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`, "\n", `\n`, "\r", `\r`, "\x1a", `\Z`).Replace(s) + "'", nil
}

// myAccount is 'user'@'%' with the user name quoted as a literal.
func (c *mysqlConn) myAccount(ctx context.Context, user string) (string, error) {
	u, err := c.myLiteral(ctx, user)
	return u + "@'%'", err
}

func (c *mysqlConn) CreateDatabase(ctx context.Context, name, owner string) ([]string, error) {
	st := []string{"CREATE DATABASE " + myIdent(name)}
	if _, err := c.conn.ExecContext(ctx, st[0]); err != nil {
		return st, err
	}
	if owner != "" {
		acct, err := c.myAccount(ctx, owner)
		if err == nil {
			g := "GRANT ALL PRIVILEGES ON " + myGrantDB(name) + ".* TO " + acct
			st = append(st, g)
			_, err = c.conn.ExecContext(ctx, g)
		}
		if err != nil {
			_, _ = c.conn.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+myIdent(name))
			return st, err
		}
	}
	return st, nil
}

func (c *mysqlConn) DropDatabase(ctx context.Context, name string) ([]string, bool, error) {
	var n int
	if err := c.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
		return nil, false, err
	}
	st := []string{"DROP DATABASE IF EXISTS " + myIdent(name)}
	_, err := c.conn.ExecContext(ctx, st[0])
	return st, n > 0, err
}

// myPrivileges are the privileges of an access level on a database.
func myPrivileges(access string) string {
	switch access {
	case agentproto.DBAccessReadWrite:
		return "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, REFERENCES, CREATE TEMPORARY TABLES, LOCK TABLES, CREATE VIEW, SHOW VIEW, TRIGGER, EXECUTE"
	case agentproto.DBAccessAdmin:
		return "ALL PRIVILEGES"
	}
	return "SELECT, SHOW VIEW"
}

func (c *mysqlConn) userExists(ctx context.Context, username string) (bool, error) {
	var n int
	err := c.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE user = ? AND host = '%'", username).Scan(&n)
	return n > 0, err
}

func (c *mysqlConn) CreateUser(ctx context.Context, p agentproto.DBUserPayload, password string) (st []string, err error) {
	var n int
	if err := c.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", p.Database).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("database %q does not exist", p.Database)
	}
	acct, err := c.myAccount(ctx, p.Username)
	if err != nil {
		return nil, err
	}
	pw, err := c.myLiteral(ctx, password)
	if err != nil {
		return nil, err
	}
	st = append(st, "CREATE USER "+acct+" IDENTIFIED BY '***'")
	if _, err := c.conn.ExecContext(ctx, "CREATE USER "+acct+" IDENTIFIED BY "+pw); err != nil {
		return st, err
	}
	g := "GRANT " + myPrivileges(p.Access) + " ON " + myGrantDB(p.Database) + ".* TO " + acct
	st = append(st, g)
	if _, err := c.conn.ExecContext(ctx, g); err != nil {
		// Leave nothing behind: the login is not half made.
		_, _ = c.conn.ExecContext(context.WithoutCancel(ctx), "DROP USER IF EXISTS "+acct)
		return st, err
	}
	return st, nil
}

func (c *mysqlConn) RotateUser(ctx context.Context, username, password string) ([]string, error) {
	exists, err := c.userExists(ctx, username)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("user '%s'@'%%' does not exist", username)
	}
	acct, err := c.myAccount(ctx, username)
	if err != nil {
		return nil, err
	}
	pw, err := c.myLiteral(ctx, password)
	if err != nil {
		return nil, err
	}
	st := []string{"ALTER USER " + acct + " IDENTIFIED BY '***'"}
	_, err = c.conn.ExecContext(ctx, "ALTER USER "+acct+" IDENTIFIED BY "+pw)
	return st, err
}

func (c *mysqlConn) DropUser(ctx context.Context, p agentproto.DBUserPayload) ([]string, bool, error) {
	existed, err := c.userExists(ctx, p.Username)
	if err != nil {
		return nil, false, err
	}
	acct, err := c.myAccount(ctx, p.Username)
	if err != nil {
		return nil, existed, err
	}
	st := []string{"DROP USER IF EXISTS " + acct}
	_, err = c.conn.ExecContext(ctx, st[0])
	return st, existed, err
}

// Redis and Valkey: databases are numbers, not made or dropped.

var errKVDatabases = errors.New("redis and valkey have numbered databases only: there is nothing to create or drop")

func (c *redisConn) CreateDatabase(context.Context, string, string) ([]string, error) {
	return nil, errKVDatabases
}

func (c *redisConn) DropDatabase(context.Context, string) ([]string, bool, error) {
	return nil, false, errKVDatabases
}

// redisRules are the ACL rules of an access level.
func redisRules(access string) []string {
	if access == agentproto.DBAccessReadWrite {
		return []string{"-@all", "+@read", "+@write", "+@connection", "-@dangerous"}
	}
	return []string{"-@all", "+@read", "+@connection", "-@dangerous"}
}

func (c *redisConn) aclExists(ctx context.Context, username string) (bool, error) {
	err := c.client.Do(ctx, "ACL", "GETUSER", username).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

// aclSave writes the ACL file when the server has one, as a managed
// instance does (redisACL); a server without one keeps its users in
// memory (and in its configuration file only if the operator rewrites
// it).
func (c *redisConn) aclSave(ctx context.Context) []string {
	if err := c.client.Do(ctx, "ACL", "SAVE").Err(); err != nil {
		return []string{"ACL SAVE: " + err.Error()}
	}
	return []string{"ACL SAVE"}
}

func (c *redisConn) CreateUser(ctx context.Context, p agentproto.DBUserPayload, password string) ([]string, error) {
	exists, err := c.aclExists(ctx, p.Username)
	if err != nil {
		return nil, err
	}
	if exists {
		return nil, fmt.Errorf("ACL user %q exists already", p.Username)
	}
	rules := append([]string{"reset", "on", "~" + p.KeyPattern, "resetchannels"}, redisRules(p.Access)...)
	args := append([]any{"ACL", "SETUSER", p.Username}, toAny(rules)...)
	st := []string{"ACL SETUSER " + p.Username + " " + strings.Join(rules, " ") + " >***"}
	if err := c.client.Do(ctx, append(args, ">"+password)...).Err(); err != nil {
		return st, err
	}
	return append(st, c.aclSave(ctx)...), nil
}

func (c *redisConn) RotateUser(ctx context.Context, username, password string) ([]string, error) {
	exists, err := c.aclExists(ctx, username)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("ACL user %q does not exist", username)
	}
	st := []string{"ACL SETUSER " + username + " resetpass >***"}
	if err := c.client.Do(ctx, "ACL", "SETUSER", username, "resetpass", ">"+password).Err(); err != nil {
		return st, err
	}
	return append(st, c.aclSave(ctx)...), nil
}

func (c *redisConn) DropUser(ctx context.Context, p agentproto.DBUserPayload) ([]string, bool, error) {
	n, err := c.client.Do(ctx, "ACL", "DELUSER", p.Username).Int64()
	st := []string{"ACL DELUSER " + p.Username}
	if err != nil {
		return st, false, err
	}
	return append(st, c.aclSave(ctx)...), n > 0, nil
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
