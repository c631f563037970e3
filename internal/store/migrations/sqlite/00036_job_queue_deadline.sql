-- +goose Up

-- When the job fails with queue_timed_out if no agent has claimed it by
-- then (its type's queue timeout after it was queued). NULL: never.
ALTER TABLE jobs ADD COLUMN queue_deadline_at BIGINT;

-- Jobs queued before this column existed get the shortest queue timeout.
UPDATE jobs SET queue_deadline_at = created_at + 3600000 WHERE status = 'queued';

-- The reaper looks for queued jobs past their deadline every round.
CREATE INDEX jobs_queue_deadline ON jobs(status, queue_deadline_at);

-- +goose Down
DROP INDEX jobs_queue_deadline;
ALTER TABLE jobs DROP COLUMN queue_deadline_at;
