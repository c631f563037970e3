package store

import (
	"fmt"
	"strings"
)

// rollupTable is a time series whose raw samples (table samples, keyed by
// key and at) are rolled up into hourly rows (table hourly, keyed by key
// and hour) with the aggregates of columns.
type rollupTable struct {
	samples, hourly, key string
	columns              []rollupColumn
}

// sql is an INSERT … SELECT that aggregates the samples matching where
// (which must filter one key and one hour; its placeholders come after the
// hour's and updated_at's) into the hour's rollup. With merge, an existing
// rollup is combined with the aggregate; otherwise it is replaced.
func (t rollupTable) sql(where string, merge bool) string {
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
		SELECT ` + strings.Join(aggs, ", ") + ` FROM ` + t.samples + ` WHERE ` + where + ` GROUP BY ` + t.key + `
		ON CONFLICT (` + t.key + `, hour) DO UPDATE SET ` + strings.Join(sets, ", ")
}
