-- +goose Up

-- Devices that completed a sign-in: the hash of the device cookie each
-- was given, bound to its account. A sign-in from a live device has a
-- failure budget of its own and is not held back by strangers' failures.
CREATE TABLE sign_in_devices (
    token_hash   TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);
CREATE INDEX sign_in_devices_user ON sign_in_devices(user_id);

-- Strangers' failures now delay an account for a while instead of
-- locking it: the lock and its count go.
ALTER TABLE users DROP COLUMN locked_at;
ALTER TABLE users DROP COLUMN failed_sign_ins;

-- +goose Down
ALTER TABLE users ADD COLUMN failed_sign_ins INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN locked_at BIGINT;
DROP TABLE sign_in_devices;
