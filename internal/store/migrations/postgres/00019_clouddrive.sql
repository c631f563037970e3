-- +goose Up

-- The connected cloud drive (at most one: id is always 1). The refresh
-- token is sealed with the control plane's key, bound to grant_id.
CREATE TABLE clouddrive_connections (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    grant_id      TEXT NOT NULL,
    provider      TEXT NOT NULL,
    account_email TEXT NOT NULL DEFAULT '',
    scope         TEXT NOT NULL DEFAULT '',
    refresh_token TEXT NOT NULL,             -- sealed
    connected_by  TEXT NOT NULL DEFAULT '',
    connected_at  BIGINT NOT NULL
);

-- Single-use states of the sign-in with the cloud drive, bound to the
-- session that started it and to that browser (browser_hash is the
-- SHA-256 of a cookie set with the consent URL). Only the state's
-- SHA-256 is kept; the PKCE verifier is sealed, bound to the state hash.
CREATE TABLE clouddrive_states (
    state_hash   TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    browser_hash TEXT NOT NULL,
    verifier     TEXT NOT NULL,              -- sealed
    expires_at   BIGINT NOT NULL,
    used_at      BIGINT
);
CREATE INDEX clouddrive_states_expires ON clouddrive_states (expires_at);

-- +goose Down
DROP TABLE clouddrive_states;
DROP TABLE clouddrive_connections;
