-- +goose Up

-- The revision of each server's desired proxy state: bumped in the same
-- transaction as every change that alters what the proxy serves (domains,
-- applications being removed or deleted, deployments succeeding), so that
-- the agent can refuse a state older than one it applied. 0: none yet.
ALTER TABLE servers ADD COLUMN proxy_revision INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE servers DROP COLUMN proxy_revision;
