-- +goose Up

-- When a job ended and its completion hook has not run yet: readers see the
-- job still running until the hook cleared it. A value older than a few
-- minutes means the control plane that ended the job died before its hook
-- ran; the lease reaper runs it then. NULL: no hook pending.
ALTER TABLE jobs ADD COLUMN hook_pending_at BIGINT;

-- A result that the agent reported after the job had been failed because
-- its lease lapsed (agent_lost): status succeeded or failed, the agent's
-- error text, its data, and when it came. NULL: none came.
ALTER TABLE jobs ADD COLUMN late_status TEXT;
ALTER TABLE jobs ADD COLUMN late_error TEXT;
ALTER TABLE jobs ADD COLUMN late_data TEXT;
ALTER TABLE jobs ADD COLUMN late_at BIGINT;

CREATE INDEX jobs_hook_pending ON jobs(hook_pending_at) WHERE hook_pending_at IS NOT NULL;

-- +goose Down
DROP INDEX jobs_hook_pending;
ALTER TABLE jobs DROP COLUMN late_at;
ALTER TABLE jobs DROP COLUMN late_data;
ALTER TABLE jobs DROP COLUMN late_error;
ALTER TABLE jobs DROP COLUMN late_status;
ALTER TABLE jobs DROP COLUMN hook_pending_at;
