-- +goose Up

-- An application attached to a database instance: a dedicated login
-- (credential_id) whose URL is kept in the application's env under
-- env_key. One attachment per application and instance, and per
-- application and env key. Forgotten with the instance, the login or the
-- application; the application's env value stays.
CREATE TABLE database_attachments (
    id             TEXT PRIMARY KEY,                     -- dba_…
    instance_id    TEXT NOT NULL REFERENCES database_instances(id) ON DELETE CASCADE,
    credential_id  TEXT NOT NULL UNIQUE REFERENCES database_credentials(id) ON DELETE CASCADE,
    application_id TEXT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
    env_key        TEXT NOT NULL,
    created_by     TEXT NOT NULL DEFAULT '',
    created_at     BIGINT NOT NULL,
    UNIQUE (instance_id, application_id),
    UNIQUE (application_id, env_key)
);

-- +goose Down
DROP TABLE database_attachments;
