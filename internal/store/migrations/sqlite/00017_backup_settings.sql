-- +goose Up

-- Where backups are stored (at most one row: id is always 1). provider
-- is 's3' (an S3-compatible bucket) or 'clouddrive' (a folder of the
-- connected cloud drive). The access key pair is sealed with the control
-- plane's key, bound to the row.
CREATE TABLE backup_settings (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    provider          TEXT NOT NULL,
    endpoint          TEXT NOT NULL DEFAULT '',
    region            TEXT NOT NULL DEFAULT '',
    bucket            TEXT NOT NULL DEFAULT '',
    prefix            TEXT NOT NULL DEFAULT '',
    path_style        BOOLEAN NOT NULL DEFAULT FALSE,
    tls               BOOLEAN NOT NULL DEFAULT TRUE,
    ca                TEXT NOT NULL DEFAULT '',
    folder            TEXT NOT NULL DEFAULT '',
    access_key_id     TEXT NOT NULL DEFAULT '',  -- sealed
    secret_access_key TEXT NOT NULL DEFAULT '',  -- sealed
    revision          INTEGER NOT NULL,
    updated_by        TEXT NOT NULL DEFAULT '',
    updated_at        INTEGER NOT NULL
);

-- +goose Down
DROP TABLE backup_settings;
