-- +goose Up

-- One backup of one database: queued with its job, then succeeded (only
-- once the storage's read-back matched) or failed. manifest and
-- verify_details are JSON. verified_ok is NULL until a verification
-- ended. delete_state is '' or 'pending' (the remote object could not be
-- deleted yet).
CREATE TABLE backup_runs (
    id             TEXT PRIMARY KEY,
    instance_id    TEXT NOT NULL,
    server_id      TEXT NOT NULL,
    engine         TEXT NOT NULL,
    database_name  TEXT NOT NULL,
    trigger_kind   TEXT NOT NULL,
    job_id         TEXT NOT NULL,
    status         TEXT NOT NULL,
    remote_key     TEXT NOT NULL,
    local_path     TEXT NOT NULL DEFAULT '',
    size           INTEGER NOT NULL DEFAULT 0,
    sha256         TEXT NOT NULL DEFAULT '',
    manifest       TEXT NOT NULL DEFAULT '',
    error          TEXT NOT NULL DEFAULT '',
    verified_at    INTEGER,
    verified_ok    BOOLEAN,
    verify_details TEXT NOT NULL DEFAULT '',
    verify_job_id  TEXT NOT NULL DEFAULT '',
    delete_state   TEXT NOT NULL DEFAULT '',
    created_by     TEXT NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    started_at     INTEGER,
    finished_at    INTEGER
);
CREATE INDEX backup_runs_instance ON backup_runs (instance_id, id);
CREATE INDEX backup_runs_job ON backup_runs (job_id);

-- Each instance's backup policy; an instance without a row has the
-- default (disabled). databases is a JSON list. next_due_at is when the
-- scheduler queues its next backup.
CREATE TABLE backup_policies (
    instance_id  TEXT PRIMARY KEY,
    enabled      BOOLEAN NOT NULL DEFAULT FALSE,
    every_hours  INTEGER NOT NULL,
    keep_count   INTEGER NOT NULL,
    databases    TEXT NOT NULL DEFAULT '[]',
    verify       BOOLEAN NOT NULL DEFAULT TRUE,
    next_due_at  INTEGER,
    stale_since  INTEGER,
    updated_by   TEXT NOT NULL DEFAULT '',
    updated_at   INTEGER NOT NULL
);

-- +goose Down
DROP TABLE backup_policies;
DROP TABLE backup_runs;
