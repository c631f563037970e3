package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/metrics"
)

var _ metrics.Store = (*Store)(nil)

// hourMS is an hour in the stored time unit.
const hourMS = int64(time.Hour / time.Millisecond)

// hourOf returns the start of the hour of a stored time.
func hourOf(at int64) int64 { return at - at%hourMS }

// sampleColumns are the columns of metric_samples in insert order.
const sampleColumns = `server_id, at, cpu_percent, load1, load5, load15, memory_total, memory_used, memory_available,
	swap_total, swap_used, net_rx_bytes_per_s, net_tx_bytes_per_s, uptime_seconds,
	memory_used_percent, swap_used_percent, disk_used_percent, filesystems, received_at`

const sampleColumnCount = 19

// insertChunk is how many samples go into one INSERT statement.
const insertChunk = 100

// rollupColumn is one column of metric_hourly: how it is computed from the
// samples of an hour and how two partial rollups of the same hour combine.
type rollupColumn struct {
	name string
	agg  string // aggregate over metric_samples
	kind int    // sumKind, maxKind
}

const (
	sumKind = iota // sums and counts add up
	maxKind        // the larger value wins; NULL means none
)

var rollupColumns = []rollupColumn{
	{"samples", "COUNT(*)", sumKind},
	{"cpu_sum", "SUM(cpu_percent)", sumKind},
	{"cpu_max", "MAX(cpu_percent)", maxKind},
	{"load1_sum", "SUM(load1)", sumKind},
	{"load1_max", "MAX(load1)", maxKind},
	{"load5_sum", "SUM(load5)", sumKind},
	{"load15_sum", "SUM(load15)", sumKind},
	{"mem_used_sum", "SUM(CAST(memory_used AS DOUBLE PRECISION))", sumKind},
	{"mem_total_sum", "SUM(CAST(memory_total AS DOUBLE PRECISION))", sumKind},
	{"mem_pct_sum", "COALESCE(SUM(memory_used_percent), 0)", sumKind},
	{"mem_pct_n", "COUNT(memory_used_percent)", sumKind},
	{"mem_pct_max", "MAX(memory_used_percent)", maxKind},
	{"swap_pct_sum", "COALESCE(SUM(swap_used_percent), 0)", sumKind},
	{"swap_pct_n", "COUNT(swap_used_percent)", sumKind},
	{"swap_pct_max", "MAX(swap_used_percent)", maxKind},
	{"disk_pct_sum", "COALESCE(SUM(disk_used_percent), 0)", sumKind},
	{"disk_pct_n", "COUNT(disk_used_percent)", sumKind},
	{"disk_pct_max", "MAX(disk_used_percent)", maxKind},
	{"net_rx_sum", "SUM(net_rx_bytes_per_s)", sumKind},
	{"net_rx_max", "MAX(net_rx_bytes_per_s)", maxKind},
	{"net_tx_sum", "SUM(net_tx_bytes_per_s)", sumKind},
	{"net_tx_max", "MAX(net_tx_bytes_per_s)", maxKind},
}

// serverRollup is how metric_samples roll up into metric_hourly.
var serverRollup = rollupTable{samples: "metric_samples", hourly: "metric_hourly", dirty: "metric_dirty_hours", key: "server_id",
	columns: rollupColumns}

// rollupSQL is serverRollup's rollup statement; see rollupTable.sql.
func rollupSQL(where string, merge bool) string { return serverRollup.sql(where, merge) }

var (
	recomputeHourSQL = rollupSQL("server_id = ? AND at >= ? AND at < ?", false)
)

// lockServerMetrics serializes the transaction with every other that
// writes the server's samples or rollups (PostgreSQL; SQLite has one
// writer at a time anyway): ingest takes the same row lock first.
func (s *Store) lockServerMetrics(ctx context.Context, tx *sqlx.Tx, serverID string) error {
	if s.dialect != Postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT server_id FROM metric_latest WHERE server_id = $1 FOR UPDATE`, serverID)
	return err
}

// InsertMetricSamples stores samples, ignoring the ones stored already; see
// metrics.Store.
func (s *Store) InsertMetricSamples(ctx context.Context, serverID string, samples []metrics.Sample, now time.Time) (int, error) {
	if len(samples) == 0 {
		return 0, nil
	}
	args := make([][]any, len(samples))
	newest := 0
	for i, m := range samples {
		fs := m.Filesystems
		if fs == nil {
			fs = []agentproto.FilesystemSample{}
		}
		raw, err := json.Marshal(fs)
		if err != nil {
			return 0, err
		}
		args[i] = []any{serverID, ms(m.At), m.CPUPercent, m.Load1, m.Load5, m.Load15,
			int64(m.MemoryTotal), int64(m.MemoryUsed), int64(m.MemoryAvailable), int64(m.SwapTotal), int64(m.SwapUsed),
			m.NetRxBytesPerS, m.NetTxBytesPerS, int64(m.UptimeSeconds),
			m.MemoryUsedPercent, m.SwapUsedPercent, m.DiskUsedPercent, string(raw), ms(now)}
		if ms(m.At) > ms(samples[newest].At) { // the first of a millisecond is the one stored
			newest = i
		}
	}
	containers, err := latestContainers(samples[newest])
	if err != nil {
		return 0, err
	}
	if s.dialect == Postgres {
		return s.insertMetricSamplesPG(ctx, serverID, samples, args, newest, containers, now)
	}
	// SQLite: the statements this report needs are prepared before its
	// transaction (see stmtcache.go).
	queries := []string{latestUpsertSQL}
	for start := 0; start < len(args); start += insertChunk {
		queries = append(queries, sampleInsertSQL(min(insertChunk, len(args)-start)))
	}
	perHour := map[int64]int{}
	for _, m := range samples {
		perHour[hourOf(ms(m.At))]++
	}
	for _, n := range perHour {
		queries = append(queries, mergeSamplesSQL(n))
	}
	if err := s.prepareWrites(ctx, queries...); err != nil {
		return 0, err
	}
	var inserted []int64
	unit := func(ctx context.Context, tx *sqlx.Tx) error {
		inserted = inserted[:0]
		l := samples[newest]
		if _, err := s.execIn(ctx, tx, latestUpsertSQL,
			serverID, ms(l.At), l.CPUPercent, l.Load1, l.MemoryUsedPercent, l.DiskUsedPercent, int64(l.UptimeSeconds), containers); err != nil {
			return err
		}
		for start := 0; start < len(args); start += insertChunk {
			chunk := args[start:min(start+insertChunk, len(args))]
			flat := make([]any, 0, len(chunk)*sampleColumnCount)
			for _, a := range chunk {
				flat = append(flat, a...)
			}
			rows, err := s.queryIn(ctx, tx, sampleInsertSQL(len(chunk)), flat...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var at int64
				if err := rows.Scan(&at); err != nil {
					rows.Close()
					return err
				}
				inserted = append(inserted, at)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		// Each new sample is added to its hour's rollup at once, so that
		// the rollup is always current and no later pass has to read the
		// hour's samples again (a recompute of every server's hour reads
		// more rows the later in the hour it runs). Sums, counts and
		// maxima merge exactly.
		byHour := map[int64][]int64{}
		for _, at := range inserted {
			h := hourOf(at)
			byHour[h] = append(byHour[h], at)
		}
		for _, h := range sortedKeys(byHour) {
			ats := byHour[h]
			a := make([]any, 0, 3+len(ats))
			a = append(a, h, ms(now), serverID)
			for _, at := range ats {
				a = append(a, at)
			}
			if _, err := s.execIn(ctx, tx, mergeSamplesSQL(len(ats)), a...); err != nil {
				return err
			}
		}
		return nil
	}
	// Committed together with other reports that arrive meanwhile (see
	// groupcommit.go); the unit locks the server's rows only.
	if err := s.group.do(ctx, serverID, unit); err != nil {
		// The unit may still be running when the request went away:
		// inserted is not ours to read then.
		return 0, err
	}
	return len(inserted), nil
}

// insertMetricSamplesPG is InsertMetricSamples on PostgreSQL, in two
// statements per report (of up to insertChunk samples) instead of one per
// step: every statement of a unit is a round trip made while the batch
// holds its row locks, and on a busy machine each costs a wake-up of the
// server process. The first statement stores the latest sample, which
// locks the server's row (as the rollup does) before anything else is
// written; the second inserts the samples and adds those that were new to
// their hours' rollups, reading them from the insert's RETURNING.
func (s *Store) insertMetricSamplesPG(ctx context.Context, serverID string, samples []metrics.Sample, args [][]any, newest int, containers any, now time.Time) (int, error) {
	var inserted int
	unit := func(ctx context.Context, tx *sqlx.Tx) error {
		inserted = 0
		l := samples[newest]
		if _, err := tx.ExecContext(ctx, latestUpsertPG,
			serverID, ms(l.At), l.CPUPercent, l.Load1, l.MemoryUsedPercent, l.DiskUsedPercent, int64(l.UptimeSeconds), containers); err != nil {
			return err
		}
		for start := 0; start < len(args); start += insertChunk {
			chunk := args[start:min(start+insertChunk, len(args))]
			flat := make([]any, 0, len(chunk)*sampleColumnCount)
			hours := map[int64]bool{}
			for _, a := range chunk {
				flat = append(flat, a...)
				hours[hourOf(a[1].(int64))] = true
			}
			hs := sortedKeys(hours)
			for _, h := range hs {
				flat = append(flat, h, ms(now), h, h+hourMS)
			}
			var n int
			if err := tx.GetContext(ctx, &n, ingestSQLPG(len(chunk), len(hs)), flat...); err != nil {
				return err
			}
			inserted += n
		}
		return nil
	}
	if err := s.group.do(ctx, serverID, unit); err != nil {
		return 0, err // the unit may still run: inserted is not ours to read
	}
	return inserted, nil
}

// latestUpsertPG is latestUpsertSQL with PostgreSQL's placeholders.
var latestUpsertPG = sqlx.Rebind(sqlx.DOLLAR, latestUpsertSQL)

// ingestSQLPG inserts n samples of one server and adds those that were
// not stored already to the rollups of hours hours, returning how many
// were new; with PostgreSQL's placeholders: the samples' columns, then per
// hour its start, updated_at, and the hour's bounds. The statements of
// reports within one or two hours are built once and kept (see
// sqlByCount).
func ingestSQLPG(n, hours int) string {
	if hours < len(pgIngests) {
		return pgIngests[hours].get(n)
	}
	return buildIngestSQLPG(n, hours)
}

// pgIngests holds the statements of ingestSQLPG by their number of hours.
var pgIngests = [...]sqlByCount{
	1: {build: func(n int) string { return buildIngestSQLPG(n, 1) }},
	2: {build: func(n int) string { return buildIngestSQLPG(n, 2) }},
}

func buildIngestSQLPG(n, hours int) string {
	var b strings.Builder
	b.WriteString(`WITH ins AS (INSERT INTO metric_samples (` + sampleColumns + `) VALUES ` + sampleValues(n) + `
		ON CONFLICT (server_id, at) DO NOTHING RETURNING *)`)
	for i := range hours {
		fmt.Fprintf(&b, `, merged%d AS (%s)`, i, serverRollup.sqlFrom("ins", "at >= ? AND at < ?", true))
	}
	b.WriteString(` SELECT COUNT(*) FROM ins`)
	return sqlx.Rebind(sqlx.DOLLAR, b.String())
}

// latestUpsertSQL stores a server's newest sample, unless it has a newer one.
const latestUpsertSQL = `INSERT INTO metric_latest (server_id, at, cpu_percent, load1, memory_used_percent, disk_used_percent, uptime_seconds, containers)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (server_id) DO UPDATE SET at = excluded.at, cpu_percent = excluded.cpu_percent, load1 = excluded.load1,
		memory_used_percent = excluded.memory_used_percent, disk_used_percent = excluded.disk_used_percent, uptime_seconds = excluded.uptime_seconds,
		containers = excluded.containers
	WHERE excluded.at > metric_latest.at`

// latestContainers is the stored JSON of a sample's containers; nil
// (NULL) when it has none.
func latestContainers(m metrics.Sample) (any, error) {
	if m.Containers == nil {
		return nil, nil
	}
	b, err := json.Marshal(m.Containers)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// sampleInsertSQL inserts n samples, returning the times of those that
// were not stored already.
func sampleInsertSQL(n int) string { return sampleInserts.get(n) }

var sampleInserts = sqlByCount{build: func(n int) string {
	return `INSERT INTO metric_samples (` + sampleColumns + `) VALUES ` + sampleValues(n) + `
		ON CONFLICT (server_id, at) DO NOTHING RETURNING at`
}}

// sampleValues is the VALUES list of n samples' placeholders.
func sampleValues(n int) string {
	return strings.TrimSuffix(strings.Repeat("(?"+strings.Repeat(", ?", sampleColumnCount-1)+"), ", n), ", ")
}

// mergeSamplesSQL adds n samples of one server and hour, named by their
// times, to the hour's rollup.
func mergeSamplesSQL(n int) string { return sampleMerges.get(n) }

var sampleMerges = sqlByCount{build: func(n int) string {
	return rollupSQL("server_id = ? AND at IN (?"+strings.Repeat(", ?", n-1)+")", true)
}}

// sqlByCount keeps the statements built for n values, for the small n
// that every report asks for: building one anew (a rollup's is over a
// kilobyte, put together with fmt) was a third of all the control
// plane's allocations at 10,000 agents.
type sqlByCount struct {
	build func(n int) string
	built sync.Map // int → string
}

// maxKeptSQL bounds which n are kept: a larger batch (an agent sending
// what it buffered while the control plane was away) is rare.
const maxKeptSQL = 64

func (c *sqlByCount) get(n int) string {
	if v, ok := c.built.Load(n); ok {
		return v.(string)
	}
	q := c.build(n)
	if n <= maxKeptSQL {
		c.built.Store(n, q)
	}
	return q
}

func sortedKeys[V any](m map[int64]V) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// CountMetricSamples counts a server's raw samples in [from, to).
func (s *Store) CountMetricSamples(ctx context.Context, serverID string, from, to time.Time) (int, error) {
	var n int
	err := s.r.GetContext(ctx, &n, s.rebind(`SELECT COUNT(*) FROM metric_samples WHERE server_id = ? AND at >= ? AND at < ?`),
		serverID, ms(from), ms(to))
	return n, err
}

type pointRow struct {
	ServerID   string          `db:"server_id"`
	T          int64           `db:"t"`
	Samples    int64           `db:"samples"`
	CPU        float64         `db:"cpu"`
	CPUMax     float64         `db:"cpu_max"`
	Load1      float64         `db:"load1"`
	Load5      float64         `db:"load5"`
	Load15     float64         `db:"load15"`
	MemPct     sql.NullFloat64 `db:"mem_pct"`
	MemPctMax  sql.NullFloat64 `db:"mem_pct_max"`
	MemUsed    float64         `db:"mem_used"`
	MemTotal   float64         `db:"mem_total"`
	SwapPct    sql.NullFloat64 `db:"swap_pct"`
	DiskPct    sql.NullFloat64 `db:"disk_pct"`
	DiskPctMax sql.NullFloat64 `db:"disk_pct_max"`
	NetRx      float64         `db:"net_rx"`
	NetTx      float64         `db:"net_tx"`
}

func nullFloat(v sql.NullFloat64) *float64 {
	if !v.Valid {
		return nil
	}
	f := v.Float64
	return &f
}

func (r pointRow) point() metrics.SeriesPoint {
	return metrics.SeriesPoint{T: fromMS(r.T), Samples: int(r.Samples), CPUPercent: r.CPU, CPUPercentMax: r.CPUMax,
		Load1: r.Load1, Load5: r.Load5, Load15: r.Load15,
		MemoryUsedPercent: nullFloat(r.MemPct), MemoryUsedPercentMax: nullFloat(r.MemPctMax),
		MemoryUsed: int64(r.MemUsed + 0.5), MemoryTotal: int64(r.MemTotal + 0.5),
		SwapUsedPercent: nullFloat(r.SwapPct), DiskUsedPercent: nullFloat(r.DiskPct), DiskUsedPercentMax: nullFloat(r.DiskPctMax),
		NetRxBytesPerS: r.NetRx, NetTxBytesPerS: r.NetTx}
}

func groupPoints(rows []pointRow) map[string][]metrics.SeriesPoint {
	out := map[string][]metrics.SeriesPoint{}
	for _, r := range rows {
		out[r.ServerID] = append(out[r.ServerID], r.point())
	}
	return out
}

// MetricPoints returns raw samples or bucket averages; see metrics.Store.
func (s *Store) MetricPoints(ctx context.Context, serverID string, from, to time.Time, bucket time.Duration) (map[string][]metrics.SeriesPoint, error) {
	where := `at >= ? AND at < ?`
	args := []any{ms(from), ms(to)}
	if serverID != "" {
		where = `server_id = ? AND ` + where
		args = append([]any{serverID}, args...)
	}
	var q string
	if bucket <= 0 {
		q = `SELECT server_id, at AS t, 1 AS samples, cpu_percent AS cpu, cpu_percent AS cpu_max, load1, load5, load15,
			memory_used_percent AS mem_pct, memory_used_percent AS mem_pct_max, memory_used AS mem_used, memory_total AS mem_total,
			swap_used_percent AS swap_pct, disk_used_percent AS disk_pct, disk_used_percent AS disk_pct_max,
			net_rx_bytes_per_s AS net_rx, net_tx_bytes_per_s AS net_tx
			FROM metric_samples WHERE ` + where + ` ORDER BY server_id, at`
	} else {
		w := bucket.Milliseconds()
		if w < 1 {
			w = 1
		}
		q = `SELECT server_id, at - at % ? AS t, COUNT(*) AS samples, AVG(cpu_percent) AS cpu, MAX(cpu_percent) AS cpu_max,
			AVG(load1) AS load1, AVG(load5) AS load5, AVG(load15) AS load15,
			AVG(memory_used_percent) AS mem_pct, MAX(memory_used_percent) AS mem_pct_max,
			AVG(CAST(memory_used AS DOUBLE PRECISION)) AS mem_used, AVG(CAST(memory_total AS DOUBLE PRECISION)) AS mem_total,
			AVG(swap_used_percent) AS swap_pct, AVG(disk_used_percent) AS disk_pct, MAX(disk_used_percent) AS disk_pct_max,
			AVG(net_rx_bytes_per_s) AS net_rx, AVG(net_tx_bytes_per_s) AS net_tx
			FROM metric_samples WHERE ` + where + ` GROUP BY server_id, t ORDER BY server_id, t`
		args = append([]any{w}, args...)
	}
	var rows []pointRow
	if err := s.r.SelectContext(ctx, &rows, s.rebind(q), args...); err != nil {
		return nil, err
	}
	return groupPoints(rows), nil
}

type hourlyRow struct {
	ServerID    string          `db:"server_id"`
	Hour        int64           `db:"hour"`
	Samples     int64           `db:"samples"`
	CPUSum      float64         `db:"cpu_sum"`
	CPUMax      float64         `db:"cpu_max"`
	Load1Sum    float64         `db:"load1_sum"`
	Load5Sum    float64         `db:"load5_sum"`
	Load15Sum   float64         `db:"load15_sum"`
	MemUsedSum  float64         `db:"mem_used_sum"`
	MemTotalSum float64         `db:"mem_total_sum"`
	MemPctSum   float64         `db:"mem_pct_sum"`
	MemPctN     int64           `db:"mem_pct_n"`
	MemPctMax   sql.NullFloat64 `db:"mem_pct_max"`
	SwapPctSum  float64         `db:"swap_pct_sum"`
	SwapPctN    int64           `db:"swap_pct_n"`
	DiskPctSum  float64         `db:"disk_pct_sum"`
	DiskPctN    int64           `db:"disk_pct_n"`
	DiskPctMax  sql.NullFloat64 `db:"disk_pct_max"`
	NetRxSum    float64         `db:"net_rx_sum"`
	NetTxSum    float64         `db:"net_tx_sum"`
}

func avgOf(sum float64, n int64) *float64 {
	if n == 0 {
		return nil
	}
	v := sum / float64(n)
	return &v
}

func (r hourlyRow) point() metrics.SeriesPoint {
	n := float64(r.Samples)
	return metrics.SeriesPoint{T: fromMS(r.Hour), Samples: int(r.Samples), CPUPercent: r.CPUSum / n, CPUPercentMax: r.CPUMax,
		Load1: r.Load1Sum / n, Load5: r.Load5Sum / n, Load15: r.Load15Sum / n,
		MemoryUsedPercent: avgOf(r.MemPctSum, r.MemPctN), MemoryUsedPercentMax: nullFloat(r.MemPctMax),
		MemoryUsed: int64(r.MemUsedSum/n + 0.5), MemoryTotal: int64(r.MemTotalSum/n + 0.5),
		SwapUsedPercent: avgOf(r.SwapPctSum, r.SwapPctN), DiskUsedPercent: avgOf(r.DiskPctSum, r.DiskPctN),
		DiskUsedPercentMax: nullFloat(r.DiskPctMax), NetRxBytesPerS: r.NetRxSum / n, NetTxBytesPerS: r.NetTxSum / n}
}

// HourlyPoints returns hourly averages from the rollups; see metrics.Store.
func (s *Store) HourlyPoints(ctx context.Context, serverID string, from, to time.Time) (map[string][]metrics.SeriesPoint, error) {
	where := `hour >= ? AND hour < ? AND samples > 0`
	args := []any{ms(from), ms(to)}
	if serverID != "" {
		where = `server_id = ? AND ` + where
		args = append([]any{serverID}, args...)
	}
	var rows []hourlyRow
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT server_id, hour, samples, cpu_sum, cpu_max, load1_sum, load5_sum, load15_sum,
		mem_used_sum, mem_total_sum, mem_pct_sum, mem_pct_n, mem_pct_max, swap_pct_sum, swap_pct_n, disk_pct_sum, disk_pct_n, disk_pct_max,
		net_rx_sum, net_tx_sum FROM metric_hourly WHERE `+where+` ORDER BY server_id, hour`), args...); err != nil {
		return nil, err
	}
	out := map[string][]metrics.SeriesPoint{}
	for _, r := range rows {
		out[r.ServerID] = append(out[r.ServerID], r.point())
	}
	return out, nil
}

// RollupMetrics recomputes marked hours; see metrics.Store.
func (s *Store) RollupMetrics(ctx context.Context, limit int, now time.Time) (int, error) {
	var n int
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var marks []struct {
			ServerID string `db:"server_id"`
			Hour     int64  `db:"hour"`
		}
		if err := tx.SelectContext(ctx, &marks, tx.Rebind(`SELECT server_id, hour FROM metric_dirty_hours ORDER BY server_id, hour LIMIT ?`), limit); err != nil {
			return err
		}
		n = len(marks)
		for i, m := range marks {
			if i == 0 || marks[i-1].ServerID != m.ServerID {
				if err := s.lockServerMetrics(ctx, tx, m.ServerID); err != nil {
					return err
				}
			}
			// An hour without samples (they were pruned, which the marks
			// prevent) keeps its rollup: GROUP BY yields no row.
			if _, err := tx.ExecContext(ctx, tx.Rebind(recomputeHourSQL), m.Hour, ms(now), m.ServerID, m.Hour, m.Hour+hourMS); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM metric_dirty_hours WHERE server_id = ? AND hour = ?`), m.ServerID, m.Hour); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// PruneMetrics deletes what aged out; see metrics.Store.
func (s *Store) PruneMetrics(ctx context.Context, rawBefore, rollupBefore time.Time, limit int) (int, error) {
	// Raw samples of marked hours stay until their rollup is computed.
	total, err := serverRollup.prune(ctx, s.w, s.rebind, rawBefore, rollupBefore, limit)
	if err != nil || total >= int64(limit) {
		return int(total), err
	}
	// The latest sample and the inventory of deleted servers.
	for _, q := range []string{
		`DELETE FROM metric_latest WHERE server_id NOT IN (SELECT id FROM servers)`,
		`DELETE FROM server_inventory WHERE server_id NOT IN (SELECT id FROM servers)`,
	} {
		res, err := s.w.ExecContext(ctx, q)
		if err != nil {
			return int(total), err
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return int(total), nil
}

type latestRow struct {
	ServerID string          `db:"server_id"`
	At       int64           `db:"at"`
	CPU      float64         `db:"cpu_percent"`
	Load1    float64         `db:"load1"`
	MemPct   sql.NullFloat64 `db:"memory_used_percent"`
	DiskPct  sql.NullFloat64 `db:"disk_used_percent"`
	Uptime   int64           `db:"uptime_seconds"`
}

func (r latestRow) latest() metrics.LatestMetrics {
	return metrics.LatestMetrics{At: fromMS(r.At), CPUPercent: r.CPU, Load1: r.Load1,
		MemoryUsedPercent: nullFloat(r.MemPct), DiskUsedPercent: nullFloat(r.DiskPct), UptimeSeconds: r.Uptime}
}

const latestColumns = `server_id, at, cpu_percent, load1, memory_used_percent, disk_used_percent, uptime_seconds`

// LatestMetrics returns the newest sample of every server, in one query.
func (s *Store) LatestMetrics(ctx context.Context) (map[string]metrics.LatestMetrics, error) {
	var rows []latestRow
	if err := s.r.SelectContext(ctx, &rows, `SELECT `+latestColumns+` FROM metric_latest`); err != nil {
		return nil, err
	}
	out := make(map[string]metrics.LatestMetrics, len(rows))
	for _, r := range rows {
		out[r.ServerID] = r.latest()
	}
	return out, nil
}

// LatestContainerMetrics returns the containers' figures of a server's
// newest sample; nil if it has none.
func (s *Store) LatestContainerMetrics(ctx context.Context, serverID string) (*metrics.ContainerMetrics, error) {
	var r struct {
		At         int64          `db:"at"`
		Containers sql.NullString `db:"containers"`
	}
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT at, containers FROM metric_latest WHERE server_id = ?`), serverID)
	if notFound(err) || (err == nil && !r.Containers.Valid) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := &metrics.ContainerMetrics{At: fromMS(r.At)}
	if err := json.Unmarshal([]byte(r.Containers.String), &out.Containers); err != nil {
		return nil, err
	}
	return out, nil
}

// LatestMetric returns a server's newest sample; nil if none.
func (s *Store) LatestMetric(ctx context.Context, serverID string) (*metrics.LatestMetrics, error) {
	var r latestRow
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT `+latestColumns+` FROM metric_latest WHERE server_id = ?`), serverID)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l := r.latest()
	return &l, nil
}
