package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
)

type backupSettingsRow struct {
	Provider        string `db:"provider"`
	Endpoint        string `db:"endpoint"`
	Region          string `db:"region"`
	Bucket          string `db:"bucket"`
	Prefix          string `db:"prefix"`
	PathStyle       bool   `db:"path_style"`
	TLS             bool   `db:"tls"`
	CA              string `db:"ca"`
	Folder          string `db:"folder"`
	AccessKeyID     string `db:"access_key_id"`
	SecretAccessKey string `db:"secret_access_key"`
	Revision        int64  `db:"revision"`
	UpdatedBy       string `db:"updated_by"`
	UpdatedAt       int64  `db:"updated_at"`
}

// BackupSettings returns the backup storage settings.
func (s *Store) BackupSettings(ctx context.Context) (backups.Settings, error) {
	var r backupSettingsRow
	err := s.r.GetContext(ctx, &r, `SELECT provider, endpoint, region, bucket, prefix, path_style, tls, ca, folder, access_key_id,
		secret_access_key, revision, updated_by, updated_at FROM backup_settings WHERE id = 1`)
	if notFound(err) {
		return backups.Settings{}, fault.NotFoundf("No backup storage settings are saved.")
	}
	if err != nil {
		return backups.Settings{}, err
	}
	return backups.Settings{Provider: r.Provider, Endpoint: r.Endpoint, Region: r.Region, Bucket: r.Bucket, Prefix: r.Prefix,
		PathStyle: r.PathStyle, TLS: r.TLS, CA: r.CA, Folder: r.Folder, SealedAccessKeyID: r.AccessKeyID,
		SealedSecretAccessKey: r.SecretAccessKey, Revision: r.Revision, UpdatedBy: r.UpdatedBy, UpdatedAt: fromMS(r.UpdatedAt)}, nil
}

// PutBackupSettings saves the settings if the stored ones are at
// prevRevision (0: none stored); false if they are not.
func (s *Store) PutBackupSettings(ctx context.Context, b backups.Settings, prevRevision int64) (bool, error) {
	args := []any{b.Provider, b.Endpoint, b.Region, b.Bucket, b.Prefix, b.PathStyle, b.TLS, b.CA, b.Folder, b.SealedAccessKeyID,
		b.SealedSecretAccessKey, b.Revision, b.UpdatedBy, ms(b.UpdatedAt)}
	if prevRevision == 0 {
		_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO backup_settings (id, provider, endpoint, region, bucket, prefix, path_style,
			tls, ca, folder, access_key_id, secret_access_key, revision, updated_by, updated_at)
			VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), args...)
		if isUniqueViolation(err) {
			return false, nil
		}
		return err == nil, err
	}
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_settings SET provider = ?, endpoint = ?, region = ?, bucket = ?,
		prefix = ?, path_style = ?, tls = ?, ca = ?, folder = ?, access_key_id = ?, secret_access_key = ?, revision = ?,
		updated_by = ?, updated_at = ? WHERE id = 1 AND revision = ?`), append(args, prevRevision)...))
}

type backupRunRow struct {
	ID            string        `db:"id"`
	InstanceID    string        `db:"instance_id"`
	ServerID      string        `db:"server_id"`
	Engine        string        `db:"engine"`
	Database      string        `db:"database_name"`
	Trigger       string        `db:"trigger_kind"`
	JobID         string        `db:"job_id"`
	Status        string        `db:"status"`
	RemoteKey     string        `db:"remote_key"`
	LocalPath     string        `db:"local_path"`
	Size          int64         `db:"size"`
	SHA256        string        `db:"sha256"`
	Manifest      string        `db:"manifest"`
	Error         string        `db:"error"`
	VerifiedAt    sql.NullInt64 `db:"verified_at"`
	VerifiedOK    sql.NullBool  `db:"verified_ok"`
	VerifyDetails string        `db:"verify_details"`
	VerifyJobID   string        `db:"verify_job_id"`
	DeleteState   string        `db:"delete_state"`
	DeleteJobID   string        `db:"delete_job_id"`
	DeleteTries   int           `db:"delete_attempts"`
	DeleteError   string        `db:"delete_error"`
	KeyID         string        `db:"key_id"`
	CreatedBy     string        `db:"created_by"`
	CreatedAt     int64         `db:"created_at"`
	StartedAt     sql.NullInt64 `db:"started_at"`
	FinishedAt    sql.NullInt64 `db:"finished_at"`
}

const backupRunColumns = `id, instance_id, server_id, engine, database_name, trigger_kind, job_id, status, remote_key, local_path, size,
	sha256, manifest, error, verified_at, verified_ok, verify_details, verify_job_id, delete_state, created_by, created_at, started_at,
	finished_at, delete_job_id, delete_attempts, delete_error, key_id`

func nullTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

func msOrNull(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: ms(*t), Valid: true}
}

func (r backupRunRow) run() backups.Run {
	out := backups.Run{ID: r.ID, InstanceID: r.InstanceID, ServerID: r.ServerID, Engine: r.Engine, Database: r.Database,
		Trigger: r.Trigger, JobID: r.JobID, Status: r.Status, RemoteKey: r.RemoteKey, LocalPath: r.LocalPath, Size: r.Size,
		SHA256: r.SHA256, Error: r.Error, VerifyJobID: r.VerifyJobID, DeletePending: r.DeleteState == "pending",
		DeleteJobID: r.DeleteJobID, DeleteAttempts: r.DeleteTries, DeleteError: r.DeleteError, KeyID: r.KeyID,
		CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt), StartedAt: nullTime(r.StartedAt), FinishedAt: nullTime(r.FinishedAt)}
	if r.Manifest != "" {
		var m agentproto.BackupManifest
		if json.Unmarshal([]byte(r.Manifest), &m) == nil {
			out.Manifest = &m
		}
	}
	if r.VerifiedOK.Valid && r.VerifiedAt.Valid {
		out.Verified = &backups.Verification{At: fromMS(r.VerifiedAt.Int64), OK: r.VerifiedOK.Bool, Details: json.RawMessage(r.VerifyDetails)}
		if r.VerifyDetails == "" {
			out.Verified.Details = json.RawMessage("{}")
		}
	}
	return out
}

// InsertBackupRun stores a new run.
func (s *Store) InsertBackupRun(ctx context.Context, r backups.Run) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO backup_runs (id, instance_id, server_id, engine, database_name, trigger_kind,
		job_id, status, remote_key, key_id, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, r.InstanceID, r.ServerID, r.Engine, r.Database, r.Trigger, r.JobID, r.Status, r.RemoteKey, r.KeyID, r.CreatedBy, ms(r.CreatedAt))
	return err
}

// BackupRun returns a run.
func (s *Store) BackupRun(ctx context.Context, id string) (backups.Run, error) {
	return s.backupRunWhere(ctx, "id = ?", id)
}

// BackupRunByJob returns the run of a backup job.
func (s *Store) BackupRunByJob(ctx context.Context, jobID string) (backups.Run, error) {
	return s.backupRunWhere(ctx, "job_id = ?", jobID)
}

func (s *Store) backupRunWhere(ctx context.Context, where string, arg any) (backups.Run, error) {
	return getOne(ctx, s.r, always(backupRunRow.run), "backup", s.rebind(`SELECT `+backupRunColumns+` FROM backup_runs WHERE `+where), arg)
}

// FinishBackupRun records the end of a queued run.
func (s *Store) FinishBackupRun(ctx context.Context, id string, f backups.RunFinish) (bool, error) {
	manifest := ""
	if f.Manifest != nil {
		b, err := json.Marshal(f.Manifest)
		if err != nil {
			return false, err
		}
		manifest = string(b)
	}
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET status = ?, size = ?, sha256 = ?, manifest = ?, local_path = ?,
		error = ?, started_at = ?, finished_at = ? WHERE id = ? AND status = ?`),
		f.Status, f.Size, f.SHA256, manifest, f.LocalPath, f.Error, msOrNull(f.StartedAt), ms(f.FinishedAt), id, backups.StatusQueued))
}

// BackupRuns lists runs, newest first.
func (s *Store) BackupRuns(ctx context.Context, q backups.RunQuery) ([]backups.Run, error) {
	var c conds
	c.equal("instance_id", q.InstanceID)
	c.equal("status", q.Status)
	if q.Verified != nil {
		if *q.Verified {
			c.add("verified_ok = TRUE")
		} else {
			c.add("(verified_ok IS NULL OR verified_ok = FALSE)")
		}
	}
	if q.Before != "" {
		c.add("id < ?", q.Before)
	}
	if q.Kept {
		c.add("delete_state = ''")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	return selectAll(ctx, s.r, always(backupRunRow.run), s.rebind(`SELECT `+backupRunColumns+` FROM backup_runs WHERE `+c.where()+
		` ORDER BY id DESC LIMIT `+strconv.Itoa(limit)), c.args...)
}

// BackupSummary counts the runs and returns the newest failures. A run
// being deleted counts only as being deleted.
func (s *Store) BackupSummary(ctx context.Context, recentFailures int) (backups.Summary, []backups.Run, error) {
	var sum backups.Summary
	var totals struct {
		Count        int64 `db:"n"`
		Size         int64 `db:"size"`
		Verified     int64 `db:"verified"`
		Unverified   int64 `db:"unverified"`
		Deleting     int64 `db:"deleting"`
		DeletingSize int64 `db:"deleting_size"`
	}
	err := s.r.GetContext(ctx, &totals, s.rebind(`SELECT
		coalesce(sum(CASE WHEN kept THEN 1 ELSE 0 END), 0) AS n,
		coalesce(sum(CASE WHEN kept THEN size ELSE 0 END), 0) AS size,
		coalesce(sum(CASE WHEN kept AND verified_ok = TRUE THEN 1 ELSE 0 END), 0) AS verified,
		coalesce(sum(CASE WHEN kept AND (verified_ok IS NULL OR verified_ok = FALSE) THEN 1 ELSE 0 END), 0) AS unverified,
		coalesce(sum(CASE WHEN kept THEN 0 ELSE 1 END), 0) AS deleting,
		coalesce(sum(CASE WHEN kept THEN 0 ELSE size END), 0) AS deleting_size
		FROM (SELECT size, verified_ok, delete_state = '' AS kept FROM backup_runs WHERE status = ?) r`), backups.StatusSucceeded)
	if err != nil {
		return sum, nil, err
	}
	sum.Count, sum.TotalSize, sum.VerifiedCount, sum.UnverifiedCount = totals.Count, totals.Size, totals.Verified, totals.Unverified
	sum.DeletePendingCount, sum.DeletePendingSize = totals.Deleting, totals.DeletingSize
	var per []struct {
		InstanceID   string        `db:"instance_id"`
		LastSuccess  sql.NullInt64 `db:"last_success"`
		LastVerified sql.NullInt64 `db:"last_verified"`
		Failures     int64         `db:"failures"`
	}
	err = s.r.SelectContext(ctx, &per, s.rebind(`SELECT instance_id,
		max(CASE WHEN status = ? THEN finished_at END) AS last_success,
		max(CASE WHEN verified_ok = TRUE THEN verified_at END) AS last_verified,
		coalesce(sum(CASE WHEN status = ? THEN 1 ELSE 0 END), 0) AS failures
		FROM backup_runs WHERE delete_state = '' GROUP BY instance_id ORDER BY instance_id`),
		backups.StatusSucceeded, backups.StatusFailed)
	if err != nil {
		return sum, nil, err
	}
	for _, p := range per {
		sum.Instances = append(sum.Instances, backups.InstanceSummary{InstanceID: p.InstanceID, LastSuccessAt: nullTime(p.LastSuccess),
			LastVerifiedAt: nullTime(p.LastVerified), Failures: p.Failures})
	}
	failed, err := s.BackupRuns(ctx, backups.RunQuery{Status: backups.StatusFailed, Limit: recentFailures, Kept: true})
	return sum, failed, err
}

// ForgetBackupLocalCopies clears the local path of the runs of a
// database on a server.
func (s *Store) ForgetBackupLocalCopies(ctx context.Context, serverID, instanceID, database string, runIDs []string) error {
	for _, id := range runIDs {
		if _, err := s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET local_path = '' WHERE id = ? AND server_id = ?
			AND instance_id = ? AND database_name = ?`), id, serverID, instanceID, database); err != nil {
			return err
		}
	}
	return nil
}

// SetBackupVerifyJob names the run's current verification job, unless
// the run is being deleted.
func (s *Store) SetBackupVerifyJob(ctx context.Context, runID, jobID string) (bool, error) {
	// Never for a backup being deleted: its deletion checked for a
	// verification under way at the same revision of this row.
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET verify_job_id = ? WHERE id = ? AND delete_state = ''`),
		jobID, runID))
}

// FinishBackupVerify records a verification if jobID is still the run's
// current verification job.
func (s *Store) FinishBackupVerify(ctx context.Context, runID, jobID string, v backups.Verification) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET verified_at = ?, verified_ok = ?, verify_details = ?
		WHERE id = ? AND verify_job_id = ?`), ms(v.At), v.OK, string(v.Details), runID, jobID))
}
