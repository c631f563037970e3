-- +goose Up

-- Database instances: external ones registered by address (managed ones,
-- run by Capstan, come later). The server's agent is the one that connects.
-- A server with instances cannot be deleted (the foreign key refuses).
CREATE TABLE database_instances (
    id             TEXT PRIMARY KEY,                     -- db_…, time-ordered
    name           TEXT NOT NULL UNIQUE,
    server_id      TEXT NOT NULL REFERENCES servers(id), -- no cascade: delete the instances first
    engine         TEXT NOT NULL,                        -- postgres | mysql | mariadb | redis | valkey
    version        TEXT NOT NULL DEFAULT '',             -- major; external: from the reported version, '' until checked
    managed        BOOLEAN NOT NULL DEFAULT FALSE,
    host           TEXT NOT NULL,
    port           BIGINT NOT NULL,
    database_name  TEXT NOT NULL DEFAULT '',             -- the initial database; '' for key-value engines
    tls_mode       TEXT NOT NULL,                        -- disable | require | verify-ca | verify-full
    ca             TEXT NOT NULL DEFAULT '',             -- PEM, '' for the system's roots
    state          TEXT NOT NULL,                        -- checking | ready | unreachable
    last_error     TEXT NOT NULL DEFAULT '',
    server_version TEXT NOT NULL DEFAULT '',
    check_job_id   TEXT NOT NULL DEFAULT '',             -- the latest db.connect job
    created_by     TEXT NOT NULL DEFAULT '',
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX database_instances_server ON database_instances(server_id);

-- Logins of an instance. password is sealed with the secret key, bound to
-- the login's id. access: admin (the login an instance was registered
-- with); readonly | readwrite for logins Capstan creates later.
CREATE TABLE database_credentials (
    id            TEXT PRIMARY KEY,                      -- dbc_…
    instance_id   TEXT NOT NULL REFERENCES database_instances(id) ON DELETE CASCADE,
    username      TEXT NOT NULL,
    database_name TEXT NOT NULL DEFAULT '',
    password      TEXT NOT NULL,
    access        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    UNIQUE (instance_id, username)
);

-- +goose Down
DROP TABLE database_credentials;
DROP TABLE database_instances;
