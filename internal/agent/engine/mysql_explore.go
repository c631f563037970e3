package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Explore describes the server (databases, users, stats) or the database
// the connection is in (tables, columns). On MySQL/MariaDB a schema is a
// database, so Schema is not used. Names are parameters of the
// information_schema queries.
func (c *mysqlConn) Explore(ctx context.Context, p agentproto.DBExplorePayload) (*agentproto.DBExploreResult, error) {
	return explore(ctx, c, p)
}

func (c *mysqlConn) databases(ctx context.Context) ([]agentproto.DBDatabaseInfo, error) {
	rows, err := c.conn.QueryContext(ctx, `
SELECT s.schema_name, CAST(COALESCE(SUM(t.data_length + t.index_length), 0) AS SIGNED)
FROM information_schema.schemata s LEFT JOIN information_schema.tables t ON t.table_schema = s.schema_name
GROUP BY s.schema_name ORDER BY s.schema_name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var dbs []agentproto.DBDatabaseInfo
	for rows.Next() {
		var d agentproto.DBDatabaseInfo
		if err := rows.Scan(&d.Name, &d.SizeBytes); err != nil {
			return nil, err
		}
		dbs = append(dbs, d)
	}
	return dbs, rows.Err()
}

// users lists the accounts with SHOW GRANTS of each.
func (c *mysqlConn) users(ctx context.Context) ([]agentproto.DBUserInfo, error) {
	q := "SELECT user, host, super_priv = 'Y', account_locked = 'Y' FROM mysql.user ORDER BY user, host"
	if c.mariadb {
		q = "SELECT user, host, super_priv = 'Y', is_role = 'Y' FROM mysql.user ORDER BY user, host"
	}
	rows, err := c.conn.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	type account struct {
		user, host  string
		super, nope bool
	}
	var accounts []account
	for rows.Next() {
		var a account
		if err := rows.Scan(&a.user, &a.host, &a.super, &a.nope); err != nil {
			rows.Close()
			return nil, err
		}
		accounts = append(accounts, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	backslash, err := c.backslashEscapes(ctx)
	if err != nil {
		return nil, err
	}
	users := []agentproto.DBUserInfo{}
	for _, a := range accounts {
		// SHOW GRANTS takes no parameters: the account, as the server
		// listed it, is quoted as a string literal by the server's rules.
		who := mysqlQuote(a.user, backslash)
		name := a.user
		if a.host != "" {
			who += "@" + mysqlQuote(a.host, backslash)
			name += "@" + a.host
		}
		grants, err := c.strings(ctx, "SHOW GRANTS FOR "+who)
		if err != nil {
			return nil, err
		}
		users = append(users, agentproto.DBUserInfo{Name: name, Superuser: a.super, CanLogin: !a.nope, Grants: grants})
	}
	return users, nil
}

// backslashEscapes says whether a backslash escapes in the session's
// string literals.
func (c *mysqlConn) backslashEscapes(ctx context.Context) (bool, error) {
	var mode string
	if err := c.conn.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
		return false, err
	}
	return !strings.Contains(mode, "NO_BACKSLASH_ESCAPES"), nil
}

// mysqlQuote is s as a string literal.
func mysqlQuote(s string, backslash bool) string {
	if backslash {
		s = strings.ReplaceAll(s, `\`, `\\`)
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// strings returns the first column of a statement's rows.
func (c *mysqlConn) strings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := c.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectRows(rows, func(s *string) []any { return []any{s} })
}

func (c *mysqlConn) stats(ctx context.Context) (*agentproto.DBStats, error) {
	s := &agentproto.DBStats{Version: c.version}
	if err := c.conn.QueryRowContext(ctx, "SELECT @@max_connections").Scan(&s.MaxConnections); err != nil {
		return nil, err
	}
	rows, err := c.conn.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Uptime', 'Threads_connected', 'Innodb_buffer_pool_read_requests', 'Innodb_buffer_pool_reads')")
	if err != nil {
		return nil, err
	}
	status := map[string]int64{}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			rows.Close()
			return nil, err
		}
		status[strings.ToLower(name)] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.UptimeSeconds = status["uptime"]
	s.Connections = int(status["threads_connected"])
	if req := status["innodb_buffer_pool_read_requests"]; req > 0 {
		r := 1 - float64(status["innodb_buffer_pool_reads"])/float64(req)
		s.CacheHitRatio = &r
	}
	replica, err := c.isReplica(ctx)
	if err != nil {
		return nil, err
	}
	s.Role = "primary"
	if replica {
		s.Role = "replica"
	}
	return s, nil
}

// isReplica says whether the server replicates from a source.
func (c *mysqlConn) isReplica(ctx context.Context) (bool, error) {
	rows, err := c.conn.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		// Servers before the REPLICA spelling.
		rows, err = c.conn.QueryContext(ctx, "SHOW SLAVE STATUS")
	}
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return rows.Next(), rows.Err()
}

// errNoDatabase is the error of tables and columns without a database.
var errNoDatabase = errors.New("no database: name one, or give the instance an initial database")

func (c *mysqlConn) current(ctx context.Context) (string, error) {
	var db sql.NullString
	if err := c.conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		return "", err
	}
	if !db.Valid {
		return "", errNoDatabase
	}
	return db.String, nil
}

func (c *mysqlConn) tables(ctx context.Context, _ string) ([]agentproto.DBTableInfo, error) {
	if _, err := c.current(ctx); err != nil {
		return nil, err
	}
	rows, err := c.conn.QueryContext(ctx, `
SELECT table_schema, table_name, CAST(COALESCE(table_rows, 0) AS SIGNED),
  CAST(COALESCE(data_length, 0) + COALESCE(index_length, 0) AS SIGNED), CAST(COALESCE(index_length, 0) AS SIGNED)
FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'
ORDER BY table_name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectRows(rows, func(t *agentproto.DBTableInfo) []any {
		return []any{&t.Schema, &t.Name, &t.EstimatedRows, &t.TotalBytes, &t.IndexBytes}
	})
}

func (c *mysqlConn) columns(ctx context.Context, _, table string) ([]agentproto.DBColumnInfo, error) {
	if table == "" {
		return nil, errors.New("columns needs a table")
	}
	if _, err := c.current(ctx); err != nil {
		return nil, err
	}
	indexes := map[string][]string{}
	rows, err := c.conn.QueryContext(ctx, `
SELECT column_name, index_name FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ? ORDER BY index_name`, table)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var col, idx string
		if err := rows.Scan(&col, &idx); err != nil {
			rows.Close()
			return nil, err
		}
		indexes[col] = append(indexes[col], idx)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = c.conn.QueryContext(ctx, `
SELECT c.column_name, c.column_type, c.is_nullable = 'YES', c.column_default, c.column_key = 'PRI',
  COALESCE((SELECT CONCAT(k.referenced_table_name, '(', k.referenced_column_name, ')')
    FROM information_schema.key_column_usage k
    WHERE k.table_schema = c.table_schema AND k.table_name = c.table_name AND k.column_name = c.column_name
      AND k.referenced_table_name IS NOT NULL LIMIT 1), '')
FROM information_schema.columns c WHERE c.table_schema = DATABASE() AND c.table_name = ?
ORDER BY c.ordinal_position`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []agentproto.DBColumnInfo
	for rows.Next() {
		var col agentproto.DBColumnInfo
		var def sql.NullString
		if err := rows.Scan(&col.Name, &col.Type, &col.Nullable, &def, &col.PrimaryKey, &col.References); err != nil {
			return nil, err
		}
		// MariaDB states a string default quoted and no default as NULL.
		if def.Valid && !(c.mariadb && def.String == "NULL") {
			col.Default = &def.String
		}
		col.Indexes = indexes[col.Name]
		if col.Indexes == nil {
			col.Indexes = []string{}
		}
		cols = append(cols, col)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: %q", errNoTable, table)
	}
	return cols, nil
}
