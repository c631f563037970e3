package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/capstan-dev/capstan/internal/telemetry"
)

var _ telemetry.Fleet = (*Store)(nil)

// JobCounts counts the stored jobs by type and state.
func (s *Store) JobCounts(ctx context.Context) ([]telemetry.JobCount, error) {
	var rows []struct {
		Type   string `db:"type"`
		Status string `db:"status"`
		Count  int64  `db:"n"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT type, status, COUNT(*) AS n FROM jobs GROUP BY type, status ORDER BY type, status`); err != nil {
		return nil, err
	}
	out := make([]telemetry.JobCount, len(rows))
	for i, r := range rows {
		out[i] = telemetry.JobCount{Type: r.Type, Status: r.Status, Count: r.Count}
	}
	return out, nil
}

// JobQueue returns how many jobs are queued and when the oldest was created.
func (s *Store) JobQueue(ctx context.Context) (int64, time.Time, error) {
	var row struct {
		N      int64         `db:"n"`
		Oldest sql.NullInt64 `db:"oldest"`
	}
	if err := s.r.GetContext(ctx, &row, `SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM jobs WHERE status = 'queued'`); err != nil {
		return 0, time.Time{}, err
	}
	if !row.Oldest.Valid {
		return row.N, time.Time{}, nil
	}
	return row.N, fromMS(row.Oldest.Int64), nil
}

// AgentsOnline counts the enrolled servers whose agent was seen since then.
func (s *Store) AgentsOnline(ctx context.Context, since time.Time) (int64, error) {
	var n int64
	err := s.r.GetContext(ctx, &n, s.rebind(`SELECT COUNT(*) FROM servers WHERE status = 'online' AND last_seen_at >= ?`), ms(since))
	return n, err
}
