-- +goose Up

-- Applications: a container image run on one server behind its proxy.
-- Settings apply to the next deployment; env holds the environment values
-- sealed with the secret key (bound to the application id).
CREATE TABLE applications (
    id                    TEXT PRIMARY KEY,             -- time-ordered
    server_id             TEXT NOT NULL,                -- no foreign key: an application of a deleted server can still be deleted
    name                  TEXT NOT NULL,                -- DNS label, unique per server
    source                TEXT NOT NULL,                -- JSON {type, image} (git later)
    container_port        BIGINT NOT NULL,
    health_path           TEXT NOT NULL,
    env                   TEXT NOT NULL DEFAULT '',     -- sealed JSON [{key, value}], '' when none
    env_keys              TEXT NOT NULL DEFAULT '[]',   -- JSON array of the keys, in order
    auto_deploy           BOOLEAN NOT NULL DEFAULT FALSE,
    memory_limit          TEXT NOT NULL DEFAULT '',     -- e.g. 512m; '' for none
    state                 TEXT NOT NULL,                -- active | removing | removal_failed
    current_deployment_id TEXT,                         -- the last deployment that succeeded
    remove_job_id         TEXT,
    remove_error          TEXT,
    created_by            TEXT NOT NULL DEFAULT '',
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL,
    UNIQUE (server_id, name)
);
CREATE INDEX applications_remove_job ON applications(remove_job_id);

-- Deployments: one release of an application with its frozen spec (and
-- its environment values, sealed and bound to the deployment id, for
-- rollbacks). status 'running' means the deployment holds its
-- application's slot (its job is queued or running); at most one does.
CREATE TABLE deployments (
    id            TEXT PRIMARY KEY,                     -- time-ordered: newest first is ORDER BY id DESC
    app_id        TEXT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
    server_id     TEXT NOT NULL,
    status        TEXT NOT NULL,                        -- queued | running | succeeded | failed | cancelled | superseded
    spec          TEXT NOT NULL,                        -- JSON apps.Spec (no env values)
    env           TEXT NOT NULL DEFAULT '',             -- sealed JSON [{key, value}], '' when none
    ref           TEXT NOT NULL DEFAULT '',
    rollback_of   TEXT,
    job_id        TEXT UNIQUE,
    image_id      TEXT NOT NULL DEFAULT '',             -- resolved by the agent
    result        TEXT,                                 -- JSON agentproto.DeployResult
    error         TEXT,
    created_by    TEXT NOT NULL DEFAULT '',
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    dispatched_at BIGINT,
    finished_at   BIGINT
);
CREATE INDEX deployments_app ON deployments(app_id, id);
CREATE INDEX deployments_app_status ON deployments(app_id, status, id);
CREATE UNIQUE INDEX deployments_one_running ON deployments(app_id) WHERE status = 'running';

-- Domains served by the proxy of their application's server.
CREATE TABLE domains (
    id           TEXT PRIMARY KEY,
    hostname     TEXT NOT NULL UNIQUE,
    app_id       TEXT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
    server_id    TEXT NOT NULL,                         -- the application's
    tls_mode     TEXT NOT NULL,                         -- auto | internal | off
    redirect_www BOOLEAN NOT NULL DEFAULT FALSE,
    check_job_id TEXT,                                  -- the latest domain.check job
    check_result TEXT,                                  -- JSON of the latest finished check
    checked_at   BIGINT,
    created_by   TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX domains_app ON domains(app_id);
CREATE INDEX domains_server ON domains(server_id);
CREATE INDEX domains_check_job ON domains(check_job_id);

-- Every name a domain takes: its hostname, and www.<hostname> when it
-- redirects www. The primary key keeps names unique across the control
-- plane.
CREATE TABLE domain_names (
    name      TEXT PRIMARY KEY,
    domain_id TEXT NOT NULL REFERENCES domains(id) ON DELETE CASCADE
);
CREATE INDEX domain_names_domain ON domain_names(domain_id);

-- Request traffic per server, host and minute, as the agents report it
-- from the proxy's access log. A report replaces the minute's row (counts
-- are cumulative for the minute). Kept 8 days.
CREATE TABLE request_minutes (
    server_id   TEXT NOT NULL,
    host        TEXT NOT NULL,
    minute      BIGINT NOT NULL,
    count       BIGINT NOT NULL,
    status_2xx  BIGINT NOT NULL,
    status_3xx  BIGINT NOT NULL,
    status_4xx  BIGINT NOT NULL,
    status_5xx  BIGINT NOT NULL,
    bytes_out   BIGINT NOT NULL,
    p50_ms      DOUBLE PRECISION NOT NULL,
    p95_ms      DOUBLE PRECISION NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (server_id, host, minute)
);
CREATE INDEX request_minutes_minute ON request_minutes(minute);

-- +goose Down
DROP TABLE request_minutes;
DROP TABLE domain_names;
DROP TABLE domains;
DROP TABLE deployments;
DROP TABLE applications;
