-- +goose Up

-- Facts about the store itself, one row per name, each written once.
-- secret_key_id: the id of the secret key the store's secret values are
-- sealed with, recorded by the first control plane or command that opens
-- the store; every later one must run with the same key.
CREATE TABLE store_meta (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE store_meta;
