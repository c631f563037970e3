package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// rollupTable is a time series whose raw samples (table samples, keyed by
// key and at) are rolled up into hourly rows (table hourly, keyed by key
// and hour) with the aggregates of columns; table dirty marks the hours
// whose rollup is still to be computed.
type rollupTable struct {
	samples, hourly, dirty, key string
	columns                     []rollupColumn
}

// prune deletes up to limit raw samples older than rawBefore, except those
// of hours still marked for their rollup, and then, within what is left
// of limit, hourly rows older than rollupBefore. It returns how many rows
// it deleted.
func (t rollupTable) prune(ctx context.Context, db sqlx.ExecerContext, rebind func(string) string, rawBefore, rollupBefore time.Time, limit int) (int64, error) {
	res, err := db.ExecContext(ctx, rebind(`DELETE FROM `+t.samples+` WHERE (`+t.key+`, at) IN (
		SELECT s.`+t.key+`, s.at FROM `+t.samples+` s WHERE s.at < ? AND NOT EXISTS (
			SELECT 1 FROM `+t.dirty+` d WHERE d.`+t.key+` = s.`+t.key+` AND d.hour = s.at - s.at % ?)
		LIMIT ?)`), ms(rawBefore), hourMS, limit)
	if err != nil {
		return 0, err
	}
	total, _ := res.RowsAffected()
	if total >= int64(limit) {
		return total, nil
	}
	res, err = db.ExecContext(ctx, rebind(`DELETE FROM `+t.hourly+` WHERE (`+t.key+`, hour) IN (
		SELECT `+t.key+`, hour FROM `+t.hourly+` WHERE hour < ? LIMIT ?)`), ms(rollupBefore), int64(limit)-total)
	if err != nil {
		return total, err
	}
	n, _ := res.RowsAffected()
	return total + n, nil
}

// sql is an INSERT … SELECT that aggregates the samples matching where
// (which must filter one key and one hour; its placeholders come after the
// hour's and updated_at's) into the hour's rollup. With merge, an existing
// rollup is combined with the aggregate; otherwise it is replaced.
func (t rollupTable) sql(where string, merge bool) string {
	return t.sqlFrom(t.samples, where, merge)
}

// sqlFrom is sql over the samples in from: the samples table, or on
// PostgreSQL the name of a WITH query that returns samples' rows.
func (t rollupTable) sqlFrom(from, where string, merge bool) string {
	cols := []string{t.key, "hour"}
	aggs := []string{t.key, "CAST(? AS BIGINT)"}
	var sets []string
	for _, c := range t.columns {
		cols = append(cols, c.name)
		aggs = append(aggs, c.agg)
		switch {
		case !merge:
			sets = append(sets, fmt.Sprintf("%[1]s = excluded.%[1]s", c.name))
		case c.kind == sumKind:
			sets = append(sets, fmt.Sprintf("%[1]s = %[2]s.%[1]s + excluded.%[1]s", c.name, t.hourly))
		default:
			sets = append(sets, fmt.Sprintf("%[1]s = CASE WHEN %[2]s.%[1]s IS NULL OR excluded.%[1]s > %[2]s.%[1]s THEN excluded.%[1]s ELSE %[2]s.%[1]s END", c.name, t.hourly))
		}
	}
	cols = append(cols, "updated_at")
	aggs = append(aggs, "CAST(? AS BIGINT)")
	sets = append(sets, "updated_at = excluded.updated_at")
	// The WHERE clause also keeps SQLite from reading ON CONFLICT as a
	// join constraint.
	return `INSERT INTO ` + t.hourly + ` (` + strings.Join(cols, ", ") + `)
		SELECT ` + strings.Join(aggs, ", ") + ` FROM ` + from + ` WHERE ` + where + ` GROUP BY ` + t.key + `
		ON CONFLICT (` + t.key + `, hour) DO UPDATE SET ` + strings.Join(sets, ", ")
}
