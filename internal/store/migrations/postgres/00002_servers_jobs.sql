-- +goose Up
CREATE TABLE servers (
    id                    TEXT PRIMARY KEY,
    name                  TEXT NOT NULL UNIQUE,
    tags                  TEXT NOT NULL DEFAULT '[]',
    status                TEXT NOT NULL,              -- pending | online | revoked (offline is derived from last_seen_at)
    facts                 TEXT NOT NULL DEFAULT '{}',
    agent_version         TEXT NOT NULL DEFAULT '',
    enrollment_token_hash TEXT UNIQUE,
    enrollment_expires_at BIGINT,
    agent_token_hash      TEXT UNIQUE,
    enrolled_at           BIGINT,
    last_seen_at          BIGINT,
    revoked_at            BIGINT,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL
);

-- Agent tokens of revoked or deleted servers, so their agents are told to
-- stop (and not merely that the token is unknown).
CREATE TABLE revoked_agent_tokens (
    token_hash TEXT PRIMARY KEY,
    server_id  TEXT NOT NULL,
    revoked_at BIGINT NOT NULL
);

CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,           -- time-ordered
    server_id        TEXT NOT NULL,              -- no foreign key: jobs outlive deleted servers
    type             TEXT NOT NULL,
    status           TEXT NOT NULL,              -- queued | running | succeeded | failed | cancelled
    payload          TEXT NOT NULL DEFAULT '{}',
    secrets          TEXT NOT NULL DEFAULT '',   -- sealed JSON object, '' when none
    idempotency_key  TEXT,
    request_hash     TEXT NOT NULL DEFAULT '',
    created_by       TEXT NOT NULL DEFAULT '',
    timeout_seconds  BIGINT NOT NULL,
    lease_seconds    BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    started_at       BIGINT,
    lease_expires_at BIGINT,
    deadline_at      BIGINT,
    finished_at      BIGINT,
    error            TEXT,
    data             TEXT,
    output           TEXT
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs(server_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_server_status ON jobs(server_id, status, id);
CREATE INDEX jobs_running_lease ON jobs(status, lease_expires_at);
CREATE INDEX jobs_server_id ON jobs(server_id, id);

CREATE TABLE job_events (
    job_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    at      BIGINT NOT NULL,
    level   TEXT NOT NULL,
    message TEXT NOT NULL,
    data    TEXT,
    PRIMARY KEY (job_id, seq)
);

-- The audit log is append-only: TRUNCATE is refused too.
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- +goose Down
DROP TRIGGER audit_log_no_truncate ON audit_log;
DROP TABLE job_events;
DROP TABLE jobs;
DROP TABLE revoked_agent_tokens;
DROP TABLE servers;
