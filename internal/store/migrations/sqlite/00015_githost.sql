-- +goose Up

-- The connected git host app (at most one: id is always 1). Its client
-- secret, private key and webhook secret are sealed with the control
-- plane's key, bound to the row.
CREATE TABLE githost_apps (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    provider       TEXT NOT NULL,
    app_id         INTEGER NOT NULL,
    slug           TEXT NOT NULL,
    name           TEXT NOT NULL,
    owner_login    TEXT NOT NULL DEFAULT '',
    owner_type     TEXT NOT NULL DEFAULT '',
    html_url       TEXT NOT NULL DEFAULT '',
    client_id      TEXT NOT NULL DEFAULT '',
    client_secret  TEXT NOT NULL DEFAULT '',  -- sealed
    private_key    TEXT NOT NULL,             -- sealed PEM
    webhook_secret TEXT NOT NULL DEFAULT '',  -- sealed
    created_by     TEXT NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL
);

-- Installations of the app, as the provider last described them.
-- Forgotten with the app.
CREATE TABLE githost_installations (
    id                   INTEGER PRIMARY KEY,   -- the provider's installation id
    app_ref              INTEGER NOT NULL DEFAULT 1 REFERENCES githost_apps(id) ON DELETE CASCADE,
    account_login        TEXT NOT NULL,
    account_type         TEXT NOT NULL DEFAULT '',
    repository_selection TEXT NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);

-- Single-use states of the app manifest flow, bound to the session that
-- started it. Only the state's SHA-256 is kept.
CREATE TABLE githost_states (
    state_hash   TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    organization TEXT NOT NULL DEFAULT '',
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER
);
CREATE INDEX githost_states_expires ON githost_states (expires_at);

-- Webhook deliveries already handled, by the provider's delivery id, so
-- that a replayed delivery does nothing.
CREATE TABLE githost_deliveries (
    id          TEXT PRIMARY KEY,
    event       TEXT NOT NULL,
    received_at INTEGER NOT NULL
);
CREATE INDEX githost_deliveries_received ON githost_deliveries (received_at);

-- +goose Down
DROP TABLE githost_deliveries;
DROP TABLE githost_states;
DROP TABLE githost_installations;
DROP TABLE githost_apps;
