package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/databases"
)

// databaseRollup is how database_metric_samples roll up into
// database_metric_hourly: sums with the counts of non-NULL values, and
// maxima.
var databaseRollup = rollupTable{samples: "database_metric_samples", hourly: "database_metric_hourly", dirty: "database_metric_dirty_hours",
	key: "instance_id",
	columns: []rollupColumn{
		{"samples", "COUNT(*)", sumKind},
		{"errors", "SUM(CASE WHEN error <> '' THEN 1 ELSE 0 END)", sumKind},
		{"conn_sum", "COALESCE(SUM(CAST(connections AS DOUBLE PRECISION)), 0)", sumKind},
		{"conn_n", "COUNT(connections)", sumKind},
		{"conn_max", "MAX(connections)", maxKind},
		{"maxconn_max", "MAX(max_connections)", maxKind},
		{"size_sum", "COALESCE(SUM(CAST(size_bytes AS DOUBLE PRECISION)), 0)", sumKind},
		{"size_n", "COUNT(size_bytes)", sumKind},
		{"size_max", "MAX(size_bytes)", maxKind},
		{"mem_sum", "COALESCE(SUM(CAST(memory_bytes AS DOUBLE PRECISION)), 0)", sumKind},
		{"mem_n", "COUNT(memory_bytes)", sumKind},
		{"mem_max", "MAX(memory_bytes)", maxKind},
		{"keys_sum", "COALESCE(SUM(CAST(keys_count AS DOUBLE PRECISION)), 0)", sumKind},
		{"keys_n", "COUNT(keys_count)", sumKind},
		{"keys_max", "MAX(keys_count)", maxKind},
		{"ops_sum", "COALESCE(SUM(ops_per_s), 0)", sumKind},
		{"ops_n", "COUNT(ops_per_s)", sumKind},
		{"ops_max", "MAX(ops_per_s)", maxKind},
	}}

var recomputeDatabaseHourSQL = databaseRollup.sql("instance_id = ? AND at >= ? AND at < ?", false)

const dbSampleColumns = `instance_id, at, error, connections, max_connections, size_bytes, memory_bytes, keys_count, ops_per_s,
	databases, received_at`

const dbSampleColumnCount = 11

// ServerDatabaseInstances returns the instances on a server by name.
func (s *Store) ServerDatabaseInstances(ctx context.Context, serverID string) ([]databases.Instance, error) {
	return selectAll(ctx, s.r, always(databaseInstanceRow.instance), s.rebind(`SELECT `+databaseInstanceColumns+` FROM database_instances
		WHERE server_id = ? ORDER BY name`), serverID)
}

// DatabasesRevision names the state of a server's instances: a digest of
// each instance's id, state, address, TLS mode and latest change, so that
// an instance added, removed or changed in any way the agent's list shows
// gives another revision, also within the same millisecond.
//
// The revision is read from memory between changes (see revisionCache):
// always on SQLite, and on PostgreSQL while the control planes sharing the
// database hear each other's changes (Listen), for at most
// sharedRevisionAge.
func (s *Store) DatabasesRevision(ctx context.Context, serverID string) (string, error) {
	if s.dialect != SQLite && !s.revsHeard.Load() {
		return s.readDatabasesRevision(ctx, serverID)
	}
	rev, gen, ok := s.revs.get(serverID)
	if ok {
		return rev, nil
	}
	rev, err := s.readDatabasesRevision(ctx, serverID)
	if err != nil {
		return "", err
	}
	s.revs.put(serverID, rev, gen)
	return rev, nil
}

// sharedRevisionAge bounds how long a PostgreSQL store keeps revisions:
// should a change's message never reach a control plane (the connection
// that sends it failed after the commit), its agents still see the
// change within this much.
const sharedRevisionAge = time.Minute

// databasesChanged forgets the cached revisions after a change of
// instances was committed (or failed: forgetting is always safe), here
// and, on PostgreSQL, in the other control planes.
func (s *Store) databasesChanged() {
	s.revs.invalidate()
	if s.Shared() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Notify(ctx, msgDatabasesChanged)
	}
}

func (s *Store) readDatabasesRevision(ctx context.Context, serverID string) (string, error) {
	var rows []struct {
		ID        string `db:"id"`
		State     string `db:"state"`
		Host      string `db:"host"`
		Port      int    `db:"port"`
		TLSMode   string `db:"tls_mode"`
		UpdatedAt int64  `db:"updated_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT id, state, host, port, tls_mode, updated_at
		FROM database_instances WHERE server_id = ? ORDER BY id`), serverID); err != nil {
		return "", err
	}
	h := sha256.New()
	for _, r := range rows {
		fmt.Fprintf(h, "%q %q %q %d %q %d\n", r.ID, r.State, r.Host, r.Port, r.TLSMode, r.UpdatedAt)
	}
	return fmt.Sprintf("%d-%x", len(rows), h.Sum(nil)[:12]), nil
}

// InsertDatabaseMetricSamples stores samples and marks their hours; see
// databases.MetricsStore.
func (s *Store) InsertDatabaseMetricSamples(ctx context.Context, samples []agentproto.DBMetricSample, now time.Time) (int, error) {
	if len(samples) == 0 {
		return 0, nil
	}
	args := make([][]any, len(samples))
	for i, m := range samples {
		dbs := m.Databases
		if dbs == nil {
			dbs = []agentproto.DBSize{}
		}
		raw, err := json.Marshal(dbs)
		if err != nil {
			return 0, err
		}
		args[i] = []any{m.InstanceID, ms(m.At), m.Error, m.Connections, m.MaxConnections, m.SizeBytes, m.MemoryBytes, m.Keys,
			m.OpsPerSecond, string(raw), ms(now)}
	}
	inserted := 0
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		inserted = 0
		type mark struct {
			id   string
			hour int64
		}
		marks := map[mark]bool{}
		for start := 0; start < len(args); start += insertChunk {
			chunk := args[start:min(start+insertChunk, len(args))]
			flat := make([]any, 0, len(chunk)*dbSampleColumnCount)
			for _, a := range chunk {
				flat = append(flat, a...)
			}
			values := strings.TrimSuffix(strings.Repeat("(?"+strings.Repeat(", ?", dbSampleColumnCount-1)+"), ", len(chunk)), ", ")
			rows, err := tx.QueryContext(ctx, tx.Rebind(`INSERT INTO database_metric_samples (`+dbSampleColumns+`) VALUES `+values+`
				ON CONFLICT (instance_id, at) DO NOTHING RETURNING instance_id, at`), flat...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var m mark
				if err := rows.Scan(&m.id, &m.hour); err != nil {
					rows.Close()
					return err
				}
				m.hour = hourOf(m.hour)
				marks[m] = true
				inserted++
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		// In a fixed order, so that concurrent reports lock the marks in
		// the same order (PostgreSQL).
		sorted := make([]mark, 0, len(marks))
		for m := range marks {
			sorted = append(sorted, m)
		}
		sort.Slice(sorted, func(i, j int) bool {
			if sorted[i].id != sorted[j].id {
				return sorted[i].id < sorted[j].id
			}
			return sorted[i].hour < sorted[j].hour
		})
		for _, m := range sorted {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO database_metric_dirty_hours (instance_id, hour, rev) VALUES (?, ?, 1)
				ON CONFLICT (instance_id, hour) DO UPDATE SET rev = database_metric_dirty_hours.rev + 1`), m.id, m.hour); err != nil {
				return err
			}
		}
		return nil
	})
	return inserted, err
}

// CountDatabaseMetricSamples counts an instance's samples in [from, to).
func (s *Store) CountDatabaseMetricSamples(ctx context.Context, instanceID string, from, to time.Time) (int, error) {
	var n int
	err := s.r.GetContext(ctx, &n, s.rebind(`SELECT COUNT(*) FROM database_metric_samples WHERE instance_id = ? AND at >= ? AND at < ?`),
		instanceID, ms(from), ms(to))
	return n, err
}

type dbPointRow struct {
	T       int64           `db:"t"`
	Samples int64           `db:"samples"`
	Errors  int64           `db:"errors"`
	Error   string          `db:"error"`
	Conn    sql.NullFloat64 `db:"conn"`
	ConnMax sql.NullFloat64 `db:"conn_max"`
	MaxConn sql.NullFloat64 `db:"maxconn"`
	Size    sql.NullFloat64 `db:"size"`
	Mem     sql.NullFloat64 `db:"mem"`
	Keys    sql.NullFloat64 `db:"keys"`
	Ops     sql.NullFloat64 `db:"ops"`
	OpsMax  sql.NullFloat64 `db:"ops_max"`
}

func nullInt(v sql.NullFloat64) *int64 {
	if !v.Valid {
		return nil
	}
	n := int64(v.Float64 + 0.5)
	return &n
}

func (r dbPointRow) point() databases.MetricPoint {
	p := databases.MetricPoint{T: fromMS(r.T), Samples: int(r.Samples), Errors: int(r.Errors), Connections: nullFloat(r.Conn),
		ConnectionsMax: nullInt(r.ConnMax), MaxConnections: nullInt(r.MaxConn), SizeBytes: nullInt(r.Size), MemoryBytes: nullInt(r.Mem),
		Keys: nullInt(r.Keys), OpsPerSecond: nullFloat(r.Ops), OpsPerSecondMax: nullFloat(r.OpsMax)}
	if r.Error != "" {
		e := r.Error
		p.Error = &e
	}
	return p
}

// DatabaseMetricPoints returns samples or bucket averages; see
// databases.MetricsStore.
func (s *Store) DatabaseMetricPoints(ctx context.Context, instanceID string, from, to time.Time, bucket time.Duration) ([]databases.MetricPoint, error) {
	args := []any{instanceID, ms(from), ms(to)}
	var q string
	if bucket <= 0 {
		q = `SELECT at AS t, 1 AS samples, CASE WHEN error <> '' THEN 1 ELSE 0 END AS errors, error,
			CAST(connections AS DOUBLE PRECISION) AS conn, CAST(connections AS DOUBLE PRECISION) AS conn_max,
			CAST(max_connections AS DOUBLE PRECISION) AS maxconn, CAST(size_bytes AS DOUBLE PRECISION) AS size,
			CAST(memory_bytes AS DOUBLE PRECISION) AS mem, CAST(keys_count AS DOUBLE PRECISION) AS keys, ops_per_s AS ops, ops_per_s AS ops_max
			FROM database_metric_samples WHERE instance_id = ? AND at >= ? AND at < ? ORDER BY at`
	} else {
		q = `SELECT at - at % ? AS t, COUNT(*) AS samples, SUM(CASE WHEN error <> '' THEN 1 ELSE 0 END) AS errors, '' AS error,
			AVG(CAST(connections AS DOUBLE PRECISION)) AS conn, CAST(MAX(connections) AS DOUBLE PRECISION) AS conn_max,
			CAST(MAX(max_connections) AS DOUBLE PRECISION) AS maxconn, AVG(CAST(size_bytes AS DOUBLE PRECISION)) AS size,
			AVG(CAST(memory_bytes AS DOUBLE PRECISION)) AS mem, AVG(CAST(keys_count AS DOUBLE PRECISION)) AS keys,
			AVG(ops_per_s) AS ops, MAX(ops_per_s) AS ops_max
			FROM database_metric_samples WHERE instance_id = ? AND at >= ? AND at < ? GROUP BY t ORDER BY t`
		args = append([]any{max(bucket.Milliseconds(), 1)}, args...)
	}
	return selectAll(ctx, s.r, always(dbPointRow.point), s.rebind(q), args...)
}

type dbHourRow struct {
	Hour       int64           `db:"hour"`
	Samples    int64           `db:"samples"`
	Errors     int64           `db:"errors"`
	ConnSum    float64         `db:"conn_sum"`
	ConnN      int64           `db:"conn_n"`
	ConnMax    sql.NullFloat64 `db:"conn_max"`
	MaxConnMax sql.NullFloat64 `db:"maxconn_max"`
	SizeSum    float64         `db:"size_sum"`
	SizeN      int64           `db:"size_n"`
	MemSum     float64         `db:"mem_sum"`
	MemN       int64           `db:"mem_n"`
	KeysSum    float64         `db:"keys_sum"`
	KeysN      int64           `db:"keys_n"`
	OpsSum     float64         `db:"ops_sum"`
	OpsN       int64           `db:"ops_n"`
	OpsMax     sql.NullFloat64 `db:"ops_max"`
}

func avgInt(sum float64, n int64) *int64 {
	if n == 0 {
		return nil
	}
	v := int64(sum/float64(n) + 0.5)
	return &v
}

// DatabaseMetricHours returns hourly averages from the rollups; see
// databases.MetricsStore.
func (s *Store) DatabaseMetricHours(ctx context.Context, instanceID string, from, to time.Time) ([]databases.MetricPoint, error) {
	var rows []dbHourRow
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT hour, samples, errors, conn_sum, conn_n,
		CAST(conn_max AS DOUBLE PRECISION) AS conn_max, CAST(maxconn_max AS DOUBLE PRECISION) AS maxconn_max, size_sum, size_n,
		mem_sum, mem_n, keys_sum, keys_n, ops_sum, ops_n, ops_max
		FROM database_metric_hourly WHERE instance_id = ? AND hour >= ? AND hour < ? AND samples > 0 ORDER BY hour`),
		instanceID, ms(from), ms(to)); err != nil {
		return nil, err
	}
	out := make([]databases.MetricPoint, len(rows))
	for i, r := range rows {
		out[i] = databases.MetricPoint{T: fromMS(r.Hour), Samples: int(r.Samples), Errors: int(r.Errors),
			Connections: avgOf(r.ConnSum, r.ConnN), ConnectionsMax: nullInt(r.ConnMax), MaxConnections: nullInt(r.MaxConnMax),
			SizeBytes: avgInt(r.SizeSum, r.SizeN), MemoryBytes: avgInt(r.MemSum, r.MemN), Keys: avgInt(r.KeysSum, r.KeysN),
			OpsPerSecond: avgOf(r.OpsSum, r.OpsN), OpsPerSecondMax: nullFloat(r.OpsMax)}
	}
	return out, nil
}

type dbLatestRow struct {
	InstanceID string          `db:"instance_id"`
	At         int64           `db:"at"`
	Error      string          `db:"error"`
	Conn       sql.NullInt64   `db:"connections"`
	MaxConn    sql.NullInt64   `db:"max_connections"`
	Size       sql.NullInt64   `db:"size_bytes"`
	Mem        sql.NullInt64   `db:"memory_bytes"`
	Keys       sql.NullInt64   `db:"keys_count"`
	Ops        sql.NullFloat64 `db:"ops_per_s"`
	Databases  string          `db:"databases"`
}

func int64Of(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	n := v.Int64
	return &n
}

// LatestDatabaseMetrics returns the newest sample of each instance; see
// databases.MetricsStore.
func (s *Store) LatestDatabaseMetrics(ctx context.Context, instanceID string) (map[string]databases.LastMetrics, error) {
	where, args := "", []any{}
	if instanceID != "" {
		where, args = "WHERE instance_id = ?", append(args, instanceID)
	}
	var rows []dbLatestRow
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT s.instance_id, s.at, s.error, s.connections, s.max_connections, s.size_bytes,
		s.memory_bytes, s.keys_count, s.ops_per_s, s.databases FROM database_metric_samples s
		JOIN (SELECT instance_id, MAX(at) AS at FROM database_metric_samples `+where+` GROUP BY instance_id) m
		ON m.instance_id = s.instance_id AND m.at = s.at`), args...); err != nil {
		return nil, err
	}
	out := make(map[string]databases.LastMetrics, len(rows))
	for _, r := range rows {
		l := databases.LastMetrics{At: fromMS(r.At), Failed: r.Error != "", Connections: int64Of(r.Conn), MaxConnections: int64Of(r.MaxConn),
			SizeBytes: int64Of(r.Size), MemoryBytes: int64Of(r.Mem), Keys: int64Of(r.Keys), OpsPerSecond: nullFloat(r.Ops)}
		if r.Error != "" {
			e := r.Error
			l.Error = &e
		}
		if err := json.Unmarshal([]byte(r.Databases), &l.Databases); err != nil {
			return nil, fmt.Errorf("database metric sample %s at %d: databases: %w", r.InstanceID, r.At, err)
		}
		if len(l.Databases) == 0 {
			l.Databases = nil
		}
		out[r.InstanceID] = l
	}
	return out, nil
}

// RollupDatabaseMetrics recomputes marked hours; see databases.MetricsStore.
func (s *Store) RollupDatabaseMetrics(ctx context.Context, limit int, now time.Time) (int, error) {
	var n int
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var marks []struct {
			InstanceID string `db:"instance_id"`
			Hour       int64  `db:"hour"`
			Rev        int64  `db:"rev"`
		}
		if err := tx.SelectContext(ctx, &marks, tx.Rebind(`SELECT instance_id, hour, rev FROM database_metric_dirty_hours
			ORDER BY instance_id, hour LIMIT ?`), limit); err != nil {
			return err
		}
		n = len(marks)
		for _, m := range marks {
			if _, err := tx.ExecContext(ctx, tx.Rebind(recomputeDatabaseHourSQL), m.Hour, ms(now), m.InstanceID, m.Hour, m.Hour+hourMS); err != nil {
				return err
			}
			// A report stored meanwhile raised rev: the hour stays marked
			// and is recomputed again.
			if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM database_metric_dirty_hours WHERE instance_id = ? AND hour = ? AND rev = ?`),
				m.InstanceID, m.Hour, m.Rev); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// PruneDatabaseMetrics deletes what aged out; see databases.MetricsStore.
func (s *Store) PruneDatabaseMetrics(ctx context.Context, rawBefore, rollupBefore time.Time, limit int) (int, error) {
	n, err := databaseRollup.prune(ctx, s.w, s.rebind, rawBefore, rollupBefore, limit)
	return int(n), err
}
