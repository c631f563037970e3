package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
)

// MigrateSkipping applies every migration but version skip, as a store
// migrated before that migration existed would have them.
func (s *Store) MigrateSkipping(ctx context.Context, skip int64) error {
	sub, err := fs.Sub(migrations, "migrations/"+string(s.dialect))
	if err != nil {
		return err
	}
	files := fstest.MapFS{}
	err = fs.WalkDir(sub, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(path, fmt.Sprintf("%05d_", skip)) {
			return err
		}
		b, err := fs.ReadFile(sub, path)
		files[path] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		return err
	}
	p, err := s.providerOf(files)
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	return err
}

// MarkMetricHour marks a server's hour for a recompute from its raw
// samples, as versions that rolled up later than at ingest did.
func (s *Store) MarkMetricHour(ctx context.Context, serverID string, hour int64) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO metric_dirty_hours (server_id, hour) VALUES (?, ?)
		ON CONFLICT (server_id, hour) DO NOTHING`), serverID, hour)
	return err
}

// FailedGroups counts the write batches that failed and ran again unit by
// unit.
func (s *Store) FailedGroups() int64 { return s.group.failed.Load() }

// RawJobColumns returns, as stored, what the jobs table and its events
// hold of a job's results: data, output, late data, then each event's
// message and data.
func (s *Store) RawJobColumns(ctx context.Context, id string) ([]string, error) {
	var row struct {
		Data, Output, LateData sql.NullString
	}
	if err := s.r.QueryRowxContext(ctx, s.rebind(`SELECT data, output, late_data FROM jobs WHERE id = ?`), id).
		Scan(&row.Data, &row.Output, &row.LateData); err != nil {
		return nil, err
	}
	out := []string{row.Data.String, row.Output.String, row.LateData.String}
	rows, err := s.r.QueryContext(ctx, s.rebind(`SELECT message, COALESCE(data, '') FROM job_events WHERE job_id = ?`), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var m, d string
		if err := rows.Scan(&m, &d); err != nil {
			return nil, err
		}
		out = append(out, m, d)
	}
	return out, rows.Err()
}
