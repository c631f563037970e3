-- +goose Up

-- Sign-in throttle buckets, shared by every control plane on the
-- database: key is a hash of what is throttled (an account and client
-- address, or a client address); tokens is what the bucket held at
-- updated_at (Unix ms). A bucket refills at its throttle's rate; one not
-- used for an hour is full and is pruned.
CREATE TABLE login_throttles (
    key        TEXT PRIMARY KEY,
    tokens     DOUBLE PRECISION NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX login_throttles_updated ON login_throttles(updated_at);

-- +goose Down
DROP TABLE login_throttles;
