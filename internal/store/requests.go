package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/domains"
)

// requestChunk is how many minutes go into one INSERT statement (12
// values each, well under both dialects' parameter limits).
const requestChunk = 200

// PutRequestMinutes upserts per (server, host, minute), replacing the
// stored counts with the reported ones, in one transaction.
func (s *Store) PutRequestMinutes(ctx context.Context, serverID string, minutes []agentproto.RequestMinute, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		for len(minutes) > 0 {
			chunk := minutes[:min(requestChunk, len(minutes))]
			minutes = minutes[len(chunk):]
			var b strings.Builder
			b.WriteString(`INSERT INTO request_minutes (server_id, host, minute, count, status_2xx, status_3xx, status_4xx, status_5xx,
				bytes_out, p50_ms, p95_ms, received_at) VALUES `)
			args := make([]any, 0, len(chunk)*12)
			for i, m := range chunk {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
				args = append(args, serverID, m.Host, ms(m.Minute), m.Count, m.Status2xx, m.Status3xx, m.Status4xx, m.Status5xx,
					m.BytesOut, m.P50Ms, m.P95Ms, ms(now))
			}
			b.WriteString(` ON CONFLICT (server_id, host, minute) DO UPDATE SET count = excluded.count, status_2xx = excluded.status_2xx,
				status_3xx = excluded.status_3xx, status_4xx = excluded.status_4xx, status_5xx = excluded.status_5xx,
				bytes_out = excluded.bytes_out, p50_ms = excluded.p50_ms, p95_ms = excluded.p95_ms, received_at = excluded.received_at`)
			if _, err := tx.ExecContext(ctx, tx.Rebind(b.String()), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// RequestBuckets sums requests to hosts per bucket.
func (s *Store) RequestBuckets(ctx context.Context, serverID string, hosts []string, from, to time.Time, bucket time.Duration) ([]domains.TrafficPoint, error) {
	width := bucket.Milliseconds()
	if width <= 0 {
		return nil, fmt.Errorf("bucket must be positive")
	}
	// The width is an integer the code chose, not input: it goes into the
	// SQL text so that GROUP BY and SELECT use the same expression.
	b := fmt.Sprintf("(minute - minute %% %d)", width)
	q, args, err := sqlx.In(`SELECT `+b+` AS t, CAST(SUM(count) AS BIGINT) AS count, CAST(SUM(status_2xx) AS BIGINT) AS s2,
		CAST(SUM(status_3xx) AS BIGINT) AS s3, CAST(SUM(status_4xx) AS BIGINT) AS s4, CAST(SUM(status_5xx) AS BIGINT) AS s5,
		CAST(SUM(bytes_out) AS BIGINT) AS bytes_out, MAX(p95_ms) AS p95
		FROM request_minutes WHERE server_id = ? AND host IN (?) AND minute >= ? AND minute < ?
		GROUP BY `+b+` ORDER BY t`, serverID, hosts, ms(from), ms(to))
	if err != nil {
		return nil, err
	}
	var rows []struct {
		T        int64   `db:"t"`
		Count    int64   `db:"count"`
		S2       int64   `db:"s2"`
		S3       int64   `db:"s3"`
		S4       int64   `db:"s4"`
		S5       int64   `db:"s5"`
		BytesOut int64   `db:"bytes_out"`
		P95      float64 `db:"p95"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(q), args...); err != nil {
		return nil, err
	}
	out := make([]domains.TrafficPoint, len(rows))
	for i, r := range rows {
		p95 := r.P95
		out[i] = domains.TrafficPoint{T: fromMS(r.T), Count: r.Count, Status2xx: r.S2, Status3xx: r.S3, Status4xx: r.S4,
			Status5xx: r.S5, BytesOut: r.BytesOut, P95Ms: &p95}
	}
	return out, nil
}

// PruneRequestMinutes deletes up to limit minutes before before.
func (s *Store) PruneRequestMinutes(ctx context.Context, before time.Time, limit int) (int, error) {
	// Through the primary key, so that SQLite (which has no DELETE …
	// LIMIT by default) and PostgreSQL delete the same bounded batch.
	res, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM request_minutes WHERE (server_id, host, minute) IN
		(SELECT server_id, host, minute FROM request_minutes WHERE minute < ? LIMIT ?)`), ms(before), limit)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
