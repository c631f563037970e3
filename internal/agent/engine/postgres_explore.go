package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Explore describes the server (databases, users, stats) or the database
// the connection is in (tables, columns). Schema and table names are
// parameters of the catalog queries.
func (c *postgresConn) Explore(ctx context.Context, p agentproto.DBExplorePayload) (*agentproto.DBExploreResult, error) {
	return explore(ctx, c, p)
}

func (c *postgresConn) databases(ctx context.Context) ([]agentproto.DBDatabaseInfo, error) {
	rows, _ := c.conn.Query(ctx, `
SELECT d.datname, pg_get_userbyid(d.datdba),
       CASE WHEN has_database_privilege(d.oid, 'CONNECT') THEN pg_database_size(d.oid) ELSE 0 END
FROM pg_database d WHERE NOT d.datistemplate ORDER BY d.datname`)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (agentproto.DBDatabaseInfo, error) {
		var d agentproto.DBDatabaseInfo
		err := r.Scan(&d.Name, &d.Owner, &d.SizeBytes)
		return d, err
	})
}

// users lists the roles but the predefined pg_* ones, with their
// privileges on databases, schemas and (in this database) tables, and the
// roles they are members of.
func (c *postgresConn) users(ctx context.Context) ([]agentproto.DBUserInfo, error) {
	rows, _ := c.conn.Query(ctx, `
SELECT r.rolname, r.rolsuper, r.rolcanlogin, ARRAY(
  SELECT g FROM (
    SELECT string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) || ' ON DATABASE ' || quote_ident(d.datname) AS g
    FROM pg_database d, aclexplode(d.datacl) a WHERE a.grantee = r.oid GROUP BY d.datname
    UNION ALL
    SELECT string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) || ' ON SCHEMA ' || quote_ident(n.nspname)
    FROM pg_namespace n, aclexplode(n.nspacl) a WHERE a.grantee = r.oid GROUP BY n.nspname
    UNION ALL
    SELECT string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) || ' ON TABLE ' || quote_ident(n.nspname) || '.' || quote_ident(t.relname)
    FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace, aclexplode(t.relacl) a
    WHERE a.grantee = r.oid AND t.relkind IN ('r', 'v', 'm', 'p', 'f') GROUP BY n.nspname, t.relname
    UNION ALL
    SELECT 'MEMBER OF ' || quote_ident(b.rolname) FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid WHERE m.member = r.oid
  ) grants ORDER BY g)
FROM pg_roles r WHERE r.rolname !~ '^pg_' ORDER BY r.rolname`)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (agentproto.DBUserInfo, error) {
		var u agentproto.DBUserInfo
		err := r.Scan(&u.Name, &u.Superuser, &u.CanLogin, &u.Grants)
		return u, err
	})
}

func (c *postgresConn) stats(ctx context.Context) (*agentproto.DBStats, error) {
	var (
		s       agentproto.DBStats
		replica bool
	)
	err := c.conn.QueryRow(ctx, `
SELECT current_setting('server_version'),
       extract(epoch FROM now() - pg_postmaster_start_time())::bigint,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
       current_setting('max_connections')::int,
       (SELECT CASE WHEN sum(blks_hit + blks_read) > 0 THEN sum(blks_hit)::float8 / sum(blks_hit + blks_read) END FROM pg_stat_database),
       pg_is_in_recovery()`).Scan(&s.Version, &s.UptimeSeconds, &s.Connections, &s.MaxConnections, &s.CacheHitRatio, &replica)
	if err != nil {
		return nil, err
	}
	s.Role = "primary"
	if replica {
		s.Role = "replica"
	}
	return &s, nil
}

// tables lists the tables of schema, or of every schema but the system
// ones when schema is "".
func (c *postgresConn) tables(ctx context.Context, schema string) ([]agentproto.DBTableInfo, error) {
	rows, _ := c.conn.Query(ctx, `
SELECT n.nspname, t.relname, GREATEST(t.reltuples, 0)::bigint, pg_total_relation_size(t.oid), pg_indexes_size(t.oid)
FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE t.relkind IN ('r', 'p', 'm', 'f')
  AND CASE WHEN $1 = '' THEN n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast'
           ELSE n.nspname = $1 END
ORDER BY n.nspname, t.relname`, schema)
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (agentproto.DBTableInfo, error) {
		var t agentproto.DBTableInfo
		err := r.Scan(&t.Schema, &t.Name, &t.EstimatedRows, &t.TotalBytes, &t.IndexBytes)
		return t, err
	})
	if tables == nil && err == nil {
		tables = []agentproto.DBTableInfo{}
	}
	return tables, err
}

// errNoTable is the error of columns for a table that does not exist.
var errNoTable = errors.New("no such table")

// columns describes the columns of table in schema, or of the table
// the search path finds when schema is "".
func (c *postgresConn) columns(ctx context.Context, schema, table string) ([]agentproto.DBColumnInfo, error) {
	if table == "" {
		return nil, errors.New("columns needs a table")
	}
	var oid uint32
	err := c.conn.QueryRow(ctx, `
SELECT t.oid FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE t.relname = $2 AND t.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND CASE WHEN $1 = '' THEN pg_table_is_visible(t.oid) ELSE n.nspname = $1 END
LIMIT 1`, schema, table).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", errNoTable, table)
	}
	if err != nil {
		return nil, err
	}
	rows, _ := c.conn.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
  EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY (i.indkey)),
  COALESCE((SELECT fn.nspname || '.' || ft.relname || '(' || fa.attname || ')'
    FROM pg_constraint k
    JOIN pg_class ft ON ft.oid = k.confrelid
    JOIN pg_namespace fn ON fn.oid = ft.relnamespace
    JOIN pg_attribute fa ON fa.attrelid = k.confrelid AND fa.attnum = k.confkey[array_position(k.conkey, a.attnum)]
    WHERE k.conrelid = a.attrelid AND k.contype = 'f' AND a.attnum = ANY (k.conkey) LIMIT 1), ''),
  ARRAY(SELECT ic.relname::text FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
    WHERE i.indrelid = a.attrelid AND a.attnum = ANY (i.indkey) ORDER BY ic.relname)
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, oid)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (agentproto.DBColumnInfo, error) {
		var col agentproto.DBColumnInfo
		err := r.Scan(&col.Name, &col.Type, &col.Nullable, &col.Default, &col.PrimaryKey, &col.References, &col.Indexes)
		return col, err
	})
}
