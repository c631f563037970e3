-- +goose Up

-- The file of a database export or import job, encrypted in the control
-- plane's data dir (file names it there). size_bytes and sha256 are of
-- the plaintext. Deleted, with the file, once expires_at passed (imports
-- as soon as their job ended).
CREATE TABLE database_artifacts (
    job_id        TEXT PRIMARY KEY,
    instance_id   TEXT NOT NULL,
    kind          TEXT NOT NULL,                         -- export | import
    database_name TEXT NOT NULL,
    format        TEXT NOT NULL,                         -- sql.gz | sql | pgdump
    file          TEXT NOT NULL UNIQUE,
    size_bytes    INTEGER NOT NULL,
    sha256        TEXT NOT NULL,
    created_by    TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);
CREATE INDEX database_artifacts_expires_at ON database_artifacts (expires_at);

-- +goose Down
DROP TABLE database_artifacts;
