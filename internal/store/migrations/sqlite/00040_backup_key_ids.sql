-- +goose Up

-- Which identity a backup or a database artifact is encrypted to
-- ("inst-v1:<instance id>", or "fleet-v1": the fleet-wide identity, which
-- everything made before per-instance keys is encrypted to).
ALTER TABLE backup_runs ADD COLUMN key_id TEXT NOT NULL DEFAULT 'fleet-v1';
ALTER TABLE database_artifacts ADD COLUMN key_id TEXT NOT NULL DEFAULT 'fleet-v1';

-- +goose Down
ALTER TABLE database_artifacts DROP COLUMN key_id;
ALTER TABLE backup_runs DROP COLUMN key_id;
