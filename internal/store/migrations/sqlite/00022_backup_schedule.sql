-- +goose Up

-- The scheduler claims a due policy by moving next_due_at on at the
-- revision it read; every change of the policy (or a claim) raises the
-- revision, so a claim made from an older read changes nothing.
-- enabled_at is when the policy was last enabled (NULL while disabled):
-- a database without a verified backup is stale counted from it.
ALTER TABLE backup_policies ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE backup_policies ADD COLUMN enabled_at INTEGER;

-- The databases found stale (no verified backup within twice their
-- policy's interval), each recorded once so that backup.stale is
-- published once; the row goes when the database is fresh again.
CREATE TABLE backup_stale (
    instance_id   TEXT NOT NULL,
    database_name TEXT NOT NULL,
    since         INTEGER NOT NULL,
    PRIMARY KEY (instance_id, database_name)
);

-- The default rule of the backup_stale kind (monitoring.Defaults lists
-- the same values).
INSERT INTO alert_rules (id, kind, name, scope, scope_id, threshold, duration_seconds, severity, enabled, created_at, updated_at) VALUES
    ('rul_default_backup_stale', 'backup_stale', 'backup_stale', 'all', '', 1, 0, 'warning', 1, CAST(strftime('%s', 'now') AS INTEGER) * 1000, CAST(strftime('%s', 'now') AS INTEGER) * 1000)
    ON CONFLICT (id) DO NOTHING;

-- +goose Down
DELETE FROM alert_rules WHERE id = 'rul_default_backup_stale';
DROP TABLE backup_stale;
ALTER TABLE backup_policies DROP COLUMN enabled_at;
ALTER TABLE backup_policies DROP COLUMN revision;
