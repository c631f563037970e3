-- +goose Up

-- Failed credential checks in a row per account, from any address, and the
-- lock they put on it at the ceiling (lifted by capstan user unlock).
ALTER TABLE users ADD COLUMN failed_sign_ins INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN locked_at INTEGER;

-- +goose Down
ALTER TABLE users DROP COLUMN locked_at;
ALTER TABLE users DROP COLUMN failed_sign_ins;
