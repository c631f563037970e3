-- +goose Up

-- Whether the server's proxy took a domain's latest change: the
-- proxy.apply job of that change, its outcome (applying, applied or
-- failed) and the failure's error.
ALTER TABLE domains ADD COLUMN proxy_job_id TEXT;
ALTER TABLE domains ADD COLUMN proxy_status TEXT NOT NULL DEFAULT 'applied';
ALTER TABLE domains ADD COLUMN proxy_error TEXT;
CREATE INDEX domains_proxy_job ON domains (proxy_job_id);

-- +goose Down
DROP INDEX domains_proxy_job;
ALTER TABLE domains DROP COLUMN proxy_error;
ALTER TABLE domains DROP COLUMN proxy_status;
ALTER TABLE domains DROP COLUMN proxy_job_id;
