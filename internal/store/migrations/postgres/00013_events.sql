-- +goose Up

-- The event outbox: every event the control plane publishes, written in
-- the same transaction as the change it reports where possible. routed is
-- 0 until a dispatcher has recorded its deliveries.
CREATE TABLE events (
    id           TEXT PRIMARY KEY,                 -- evt_…, sorts by time
    type         TEXT NOT NULL,
    subject_type TEXT NOT NULL,
    subject_id   TEXT NOT NULL,
    payload      TEXT NOT NULL,                    -- JSON
    occurred_at  BIGINT NOT NULL,
    routed       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX events_unrouted ON events (id) WHERE routed = 0;
CREATE INDEX events_type ON events (type, id);
CREATE INDEX events_occurred ON events (occurred_at);

-- One delivery of an event to one destination ("kind:key"), at most one
-- per pair. A claim counts an attempt and holds the row until lease_until;
-- a claim that lapses (its control plane died) is taken again, with the
-- same id, so receivers can drop repeats.
CREATE TABLE event_deliveries (
    id              TEXT PRIMARY KEY,              -- dlv_…
    event_id        TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    destination     TEXT NOT NULL,
    status          TEXT NOT NULL,                 -- pending | delivered | failed
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_until     BIGINT,
    last_attempt_at BIGINT,
    response_code   INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    delivered_at    BIGINT,
    created_at      BIGINT NOT NULL,
    UNIQUE (event_id, destination)
);
CREATE INDEX event_deliveries_due ON event_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX event_deliveries_destination ON event_deliveries (destination, id);

-- Whether each enrolled server was last published online or offline, so
-- that each change is published once.
CREATE TABLE server_presence (
    server_id  TEXT PRIMARY KEY REFERENCES servers(id) ON DELETE CASCADE,
    online     INTEGER NOT NULL,
    changed_at BIGINT NOT NULL
);

-- Named leases: background work that must run in exactly one control
-- plane (of several sharing the database) runs in the lease's holder.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE leases;
DROP TABLE server_presence;
DROP TABLE event_deliveries;
DROP TABLE events;
