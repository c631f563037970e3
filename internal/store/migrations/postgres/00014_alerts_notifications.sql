-- +goose Up

-- Alert rules. scope says which subjects a rule watches: all, the servers
-- with a tag (scope_id is the tag), one server, application or domain
-- (scope_id is its id).
CREATE TABLE alert_rules (
    id               TEXT PRIMARY KEY,              -- rul_…
    kind             TEXT NOT NULL,
    name             TEXT NOT NULL,
    scope            TEXT NOT NULL,
    scope_id         TEXT NOT NULL DEFAULT '',
    threshold        DOUBLE PRECISION NOT NULL,
    duration_seconds INTEGER NOT NULL,
    severity         TEXT NOT NULL,
    enabled          INTEGER NOT NULL,
    created_by       TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);

-- A fresh control plane watches everything with one enabled rule of every
-- kind (monitoring.Defaults lists the same values).
INSERT INTO alert_rules (id, kind, name, scope, scope_id, threshold, duration_seconds, severity, enabled, created_at, updated_at) VALUES
    ('rul_default_agent_offline', 'agent_offline', 'agent_offline', 'all', '', 5, 0, 'critical', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_cpu_high', 'cpu_high', 'cpu_high', 'all', '', 90, 300, 'warning', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_memory_high', 'memory_high', 'memory_high', 'all', '', 90, 300, 'warning', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_disk_high', 'disk_high', 'disk_high', 'all', '', 90, 300, 'critical', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_inode_high', 'inode_high', 'inode_high', 'all', '', 90, 300, 'critical', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_swap_high', 'swap_high', 'swap_high', 'all', '', 80, 600, 'warning', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_app_down', 'app_down', 'app_down', 'all', '', 0, 120, 'critical', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)),
    ('rul_default_tls_expiring', 'tls_expiring', 'tls_expiring', 'all', '', 14, 0, 'warning', 1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT));

-- Since when a rule's condition has held for a subject without an alert
-- open yet (the condition must hold for the rule's duration).
CREATE TABLE alert_conditions (
    rule_id TEXT NOT NULL REFERENCES alert_rules(id) ON DELETE CASCADE,
    subject TEXT NOT NULL,
    since   BIGINT NOT NULL,
    PRIMARY KEY (rule_id, subject)
);

-- Alerts, open and resolved. subject is the rule's subject key (a server,
-- a server's filesystem "srv_…:/mount", an application, a domain); at most
-- one open alert per rule and subject. rule_id stays when the rule is
-- deleted (its open alerts are resolved then).
CREATE TABLE alerts (
    id              TEXT PRIMARY KEY,               -- alr_…, sorts by time
    rule_id         TEXT NOT NULL,
    kind            TEXT NOT NULL,
    severity        TEXT NOT NULL,
    subject         TEXT NOT NULL,
    subject_type    TEXT NOT NULL,
    subject_id      TEXT NOT NULL,
    subject_name    TEXT NOT NULL,
    detail          TEXT NOT NULL DEFAULT '',
    value           DOUBLE PRECISION NOT NULL,
    threshold       DOUBLE PRECISION NOT NULL,
    state           TEXT NOT NULL,                  -- open | resolved
    opened_at       BIGINT NOT NULL,
    resolved_at     BIGINT,
    acknowledged_by TEXT,
    acknowledged_at BIGINT
);
CREATE UNIQUE INDEX alerts_one_open ON alerts (rule_id, subject) WHERE state = 'open';
CREATE INDEX alerts_state ON alerts (state, id);

-- The latest health probe of each application's running container, as
-- its agent reported it; failing_since is set while probes fail.
CREATE TABLE app_health (
    app_id        TEXT PRIMARY KEY REFERENCES applications(id) ON DELETE CASCADE,
    server_id     TEXT NOT NULL,
    healthy       INTEGER NOT NULL,
    failing_since BIGINT,
    status_code   INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT NOT NULL DEFAULT '',
    probed_at     BIGINT NOT NULL
);

-- Each user's inbox: one item per event the user is told about.
CREATE TABLE notifications (
    id           TEXT PRIMARY KEY,                  -- ntf_…, sorts by time
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    event_id     TEXT NOT NULL,
    event_type   TEXT NOT NULL,
    title        TEXT NOT NULL,
    body         TEXT NOT NULL,
    link         TEXT NOT NULL DEFAULT '',
    subject_type TEXT NOT NULL,
    subject_id   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    read_at      BIGINT,
    UNIQUE (user_id, event_id)
);
CREATE INDEX notifications_user ON notifications (user_id, id);
CREATE INDEX notifications_unread ON notifications (user_id) WHERE read_at IS NULL;

-- Each user's e-mail preferences; a user without a row has the defaults.
CREATE TABLE notification_settings (
    user_id              TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    email_deploy_success INTEGER NOT NULL,
    email_deploy_failure INTEGER NOT NULL,
    email_alerts         INTEGER NOT NULL,
    updated_at           BIGINT NOT NULL
);

-- Notification channels. config is the sealed JSON of the destination
-- settings; config_fields names the fields that are set (the only part of
-- config ever shown). secret is a webhook's sealed signing secret; after a
-- rotation previous_secret signs too, until previous_expires_at.
CREATE TABLE notification_channels (
    id                  TEXT PRIMARY KEY,           -- chn_…
    kind                TEXT NOT NULL,
    name                TEXT NOT NULL UNIQUE,
    events              TEXT NOT NULL,              -- JSON array of event types
    enabled             INTEGER NOT NULL,
    config              TEXT NOT NULL,
    config_fields       TEXT NOT NULL,
    secret              TEXT NOT NULL DEFAULT '',
    previous_secret     TEXT NOT NULL DEFAULT '',
    previous_expires_at BIGINT,
    created_by          TEXT NOT NULL DEFAULT '',
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);

-- +goose Down
DROP TABLE notification_channels;
DROP TABLE notification_settings;
DROP TABLE notifications;
DROP TABLE app_health;
DROP TABLE alerts;
DROP TABLE alert_conditions;
DROP TABLE alert_rules;
