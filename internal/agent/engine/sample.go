package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Reading an instance's figures for database metrics: one connection per
// sample, as the instance's admin login. Each engine reports its client
// connections and their limit, and an operation counter whose rate the
// monitor computes between samples; SQL engines the size of each database
// the login may connect to, key-value engines their keys and memory.

// figures is what one sample of an instance read: the sample's figures
// (without instance and time) and the engine's operation counter.
type Figures struct {
	Sample agentproto.DBMetricSample
	Ops    uint64
}

// sampler is a connection that can take a sample.
type sampler interface {
	Conn
	figures(ctx context.Context) (Figures, error)
}

// ReadFigures connects to target as its login with password and reads the
// instance's figures.
func ReadFigures(ctx context.Context, target agentproto.DBTarget, password string) (Figures, error) {
	conn, err := Connect(ctx, target, password, "")
	if err != nil {
		return Figures{}, err
	}
	defer conn.Close()
	s, ok := conn.(sampler)
	if !ok {
		return Figures{}, fmt.Errorf("%s instances cannot be sampled", target.Engine)
	}
	return s.figures(ctx)
}

func ptr[T any](v T) *T { return &v }

// sortSizes orders database sizes largest first (then by name) and keeps
// at most agentproto.MaxDBMetricDatabases.
func sortSizes(dbs []agentproto.DBSize) []agentproto.DBSize {
	sort.Slice(dbs, func(i, j int) bool {
		if dbs[i].SizeBytes != dbs[j].SizeBytes {
			return dbs[i].SizeBytes > dbs[j].SizeBytes
		}
		return dbs[i].Name < dbs[j].Name
	})
	if len(dbs) > agentproto.MaxDBMetricDatabases {
		dbs = dbs[:agentproto.MaxDBMetricDatabases]
	}
	return dbs
}

// sqlSample is a SQL engine's sample: its client connections, their
// limit, and the sizes of its databases, which sizes lists (name, size).
func sqlSample(conns, maxConns int64, sizes rows) (agentproto.DBMetricSample, error) {
	dbs, err := collectRows(sizes, func(d *agentproto.DBSize) []any { return []any{&d.Name, &d.SizeBytes} })
	if err != nil {
		return agentproto.DBMetricSample{}, err
	}
	return agentproto.DBMetricSample{Connections: &conns, MaxConnections: &maxConns, SizeBytes: ptr(totalSize(dbs)),
		Databases: sortSizes(dbs)}, nil
}

func totalSize(dbs []agentproto.DBSize) int64 {
	var n int64
	for _, d := range dbs {
		n += d.SizeBytes
	}
	return n
}

// figures of PostgreSQL: client backends, max_connections, the size of
// each database the login may connect to, and committed plus rolled back
// transactions.
func (c *postgresConn) figures(ctx context.Context) (Figures, error) {
	var f Figures
	var conns, maxConns int64
	var ops int64
	if err := c.conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
		current_setting('max_connections')::bigint,
		(SELECT COALESCE(sum(xact_commit + xact_rollback), 0)::bigint FROM pg_stat_database)`).Scan(&conns, &maxConns, &ops); err != nil {
		return f, err
	}
	rows, err := c.conn.Query(ctx, `SELECT datname, pg_database_size(oid) FROM pg_database
		WHERE datallowconn AND NOT datistemplate AND has_database_privilege(oid, 'CONNECT')`)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	if f.Sample, err = sqlSample(conns, maxConns, rows); err != nil {
		return f, err
	}
	f.Ops = uint64(max(ops, 0))
	return f, nil
}

// figures of MySQL/MariaDB: Threads_connected, max_connections, the data
// and index size of each database but the system ones, and Questions.
func (c *mysqlConn) figures(ctx context.Context) (Figures, error) {
	var f Figures
	rows, err := c.conn.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN ('Threads_connected', 'Questions')`)
	if err != nil {
		return f, err
	}
	status := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return f, err
		}
		status[strings.ToLower(k)] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return f, err
	}
	conns, err1 := strconv.ParseInt(status["threads_connected"], 10, 64)
	questions, err2 := strconv.ParseUint(status["questions"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return f, fmt.Errorf("global status: %w", err)
	}
	var maxConns int64
	if err := c.conn.QueryRowContext(ctx, `SELECT @@max_connections`).Scan(&maxConns); err != nil {
		return f, err
	}
	rows, err = c.conn.QueryContext(ctx, `SELECT s.schema_name, CAST(COALESCE(SUM(t.data_length + t.index_length), 0) AS SIGNED)
		FROM information_schema.schemata s LEFT JOIN information_schema.tables t ON t.table_schema = s.schema_name
		WHERE s.schema_name NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
		GROUP BY s.schema_name`)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	if f.Sample, err = sqlSample(conns, maxConns, rows); err != nil {
		return f, err
	}
	f.Ops = questions
	return f, nil
}

// figures of Redis/Valkey: connected_clients, maxclients (when CONFIG is
// allowed), used_memory, the keys of every logical database and
// total_commands_processed.
func (c *redisConn) figures(ctx context.Context) (Figures, error) {
	var f Figures
	raw, err := c.client.Info(ctx, "clients", "memory", "stats", "keyspace").Result()
	if err != nil {
		return f, err
	}
	info := parseInfo(raw)
	conns, err1 := strconv.ParseInt(info["clients"]["connected_clients"], 10, 64)
	mem, err2 := strconv.ParseInt(info["memory"]["used_memory"], 10, 64)
	cmds, err3 := strconv.ParseUint(info["stats"]["total_commands_processed"], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return f, fmt.Errorf("INFO: %w", err)
	}
	var keys int64
	for _, v := range info["keyspace"] { // db0:keys=5,expires=0,avg_ttl=0
		for _, field := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(field, "keys="); ok {
				k, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return f, fmt.Errorf("INFO keyspace: %w", err)
				}
				keys += k
			}
		}
	}
	f.Sample = agentproto.DBMetricSample{Connections: &conns, MemoryBytes: &mem, Keys: &keys}
	// CONFIG may be refused to the login or renamed away: the limit is
	// then unknown.
	if kv, err := c.client.ConfigGet(ctx, "maxclients").Result(); err == nil {
		if n, err := strconv.ParseInt(kv["maxclients"], 10, 64); err == nil {
			f.Sample.MaxConnections = &n
		}
	}
	f.Ops = cmds
	return f, nil
}
