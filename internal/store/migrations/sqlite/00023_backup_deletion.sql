-- +goose Up

-- A backup being deleted (delete_state 'pending') names its current
-- backup.delete job; a deletion that failed (the storage refused or could
-- not be reached) is queued again at delete_retry_at, with a backoff
-- growing with delete_attempts. delete_error is the last failure.
ALTER TABLE backup_runs ADD COLUMN delete_job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE backup_runs ADD COLUMN delete_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE backup_runs ADD COLUMN delete_retry_at INTEGER;
ALTER TABLE backup_runs ADD COLUMN delete_error TEXT NOT NULL DEFAULT '';
CREATE INDEX backup_runs_delete ON backup_runs (delete_state, delete_retry_at);

-- +goose Down
DROP INDEX backup_runs_delete;
ALTER TABLE backup_runs DROP COLUMN delete_error;
ALTER TABLE backup_runs DROP COLUMN delete_retry_at;
ALTER TABLE backup_runs DROP COLUMN delete_attempts;
ALTER TABLE backup_runs DROP COLUMN delete_job_id;
