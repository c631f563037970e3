-- +goose Up

-- When the agent first showed that it holds the job since its claim: a
-- heartbeat naming it, an event, a fetch of its secrets. NULL: the claim
-- was never acknowledged; the answer may have been lost with a control
-- plane that died, so when the lease lapses the job is queued again
-- instead of failed.
ALTER TABLE jobs ADD COLUMN acked_at BIGINT;

-- How many times the job was queued again because its claim was never
-- acknowledged; bounded, so that a job the agent never takes fails in
-- the end.
ALTER TABLE jobs ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE jobs DROP COLUMN requeues;
ALTER TABLE jobs DROP COLUMN acked_at;
