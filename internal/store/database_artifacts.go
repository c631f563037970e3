package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
)

type artifactRow struct {
	JobID      string `db:"job_id"`
	InstanceID string `db:"instance_id"`
	Kind       string `db:"kind"`
	Database   string `db:"database_name"`
	Format     string `db:"format"`
	File       string `db:"file"`
	Size       int64  `db:"size_bytes"`
	SHA256     string `db:"sha256"`
	KeyID      string `db:"key_id"`
	CreatedBy  string `db:"created_by"`
	CreatedAt  int64  `db:"created_at"`
	ExpiresAt  int64  `db:"expires_at"`
}

const artifactColumns = `job_id, instance_id, kind, database_name, format, file, size_bytes, sha256, created_by, created_at, expires_at,
	key_id`

func (r artifactRow) artifact() databases.Artifact {
	return databases.Artifact{JobID: r.JobID, InstanceID: r.InstanceID, Kind: r.Kind, Database: r.Database, Format: r.Format,
		File: r.File, Size: r.Size, SHA256: r.SHA256, KeyID: r.KeyID, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt), ExpiresAt: fromMS(r.ExpiresAt)}
}

// InsertDatabaseArtifact stores the artifact of a job; a job with one
// already is fault.Conflict "artifact-exists".
func (s *Store) InsertDatabaseArtifact(ctx context.Context, a databases.Artifact) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO database_artifacts (`+artifactColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), a.JobID, a.InstanceID, a.Kind, a.Database, a.Format, a.File, a.Size, a.SHA256,
		a.CreatedBy, ms(a.CreatedAt), ms(a.ExpiresAt), a.KeyID)
	if isUniqueViolation(err) {
		return fault.Conflictf("artifact-exists", "The job has its file already.")
	}
	return err
}

// DatabaseArtifact returns the artifact of a job; fault.NotFound if it has
// none.
func (s *Store) DatabaseArtifact(ctx context.Context, jobID string) (databases.Artifact, error) {
	var r artifactRow
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT `+artifactColumns+` FROM database_artifacts WHERE job_id = ?`), jobID)
	if errors.Is(err, sql.ErrNoRows) {
		return databases.Artifact{}, fault.NotFoundf("The job has no file.")
	}
	return r.artifact(), err
}

// ExpiredDatabaseArtifacts returns up to limit artifacts that expired by
// now, oldest first.
func (s *Store) ExpiredDatabaseArtifacts(ctx context.Context, now time.Time, limit int) ([]databases.Artifact, error) {
	return selectAll(ctx, s.r, always(artifactRow.artifact), s.rebind(`SELECT `+artifactColumns+` FROM database_artifacts
		WHERE expires_at <= ? ORDER BY expires_at, job_id LIMIT ?`), ms(now), limit)
}

// DatabaseArtifactFiles returns the file names of every stored artifact.
func (s *Store) DatabaseArtifactFiles(ctx context.Context) (map[string]bool, error) {
	var files []string
	if err := s.r.SelectContext(ctx, &files, `SELECT file FROM database_artifacts`); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(files))
	for _, f := range files {
		out[f] = true
	}
	return out, nil
}

// DeleteDatabaseArtifact deletes the artifact of jobID if it is still the
// file named; false if it was deleted already (by another replica's
// reaper, say).
func (s *Store) DeleteDatabaseArtifact(ctx context.Context, jobID, file string) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`DELETE FROM database_artifacts WHERE job_id = ? AND file = ?`), jobID, file))
}
