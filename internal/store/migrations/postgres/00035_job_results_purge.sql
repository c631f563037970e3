-- +goose Up

-- results_purged_at: when what the agent reported of the job (data,
-- output, late result, events) was removed after the retention period;
-- NULL while it is kept. The job's own row stays.
ALTER TABLE jobs ADD COLUMN results_purged_at BIGINT;
CREATE INDEX jobs_results_kept ON jobs (finished_at) WHERE results_purged_at IS NULL;

-- +goose Down
DROP INDEX jobs_results_kept;
ALTER TABLE jobs DROP COLUMN results_purged_at;
