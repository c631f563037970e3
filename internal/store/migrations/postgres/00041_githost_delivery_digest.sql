-- +goose Up

-- Webhook deliveries are remembered by the SHA-256 of their signed body,
-- not by X-GitHub-Delivery, which the signature does not cover: a captured
-- body sent again under a new delivery id is the same delivery. The
-- delivery id stays, for the log. Rows remembered by id alone cannot be
-- carried over (their bodies were never kept); a push among them sent
-- again is still refused if its commit is older than the one deployed.
DROP TABLE githost_deliveries;
CREATE TABLE githost_deliveries (
    body_sha256 TEXT PRIMARY KEY,   -- hex
    delivery_id TEXT NOT NULL,      -- X-GitHub-Delivery of the first one
    event       TEXT NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE INDEX githost_deliveries_received ON githost_deliveries (received_at);

-- +goose Down
DROP TABLE githost_deliveries;
CREATE TABLE githost_deliveries (
    id          TEXT PRIMARY KEY,
    event       TEXT NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE INDEX githost_deliveries_received ON githost_deliveries (received_at);
