-- +goose Up

-- API tokens: credentials for automation, owned by a user. Only the hash
-- of the token is kept. scopes and resources are JSON arrays of strings.
-- last_used_ip is the address of the latest use ('' before the first), so
-- that a use from another address is recognised once.
CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    scopes       TEXT NOT NULL,
    resources    TEXT NOT NULL DEFAULT '[]',
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    last_used_at BIGINT,
    last_used_ip TEXT NOT NULL DEFAULT '',
    revoked_at   BIGINT
);
CREATE INDEX api_tokens_user ON api_tokens(user_id, id);

-- Which API token, if any, a person acted through.
ALTER TABLE audit_log ADD COLUMN actor_token_id TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN actor_token_name TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE audit_log DROP COLUMN actor_token_name;
ALTER TABLE audit_log DROP COLUMN actor_token_id;
DROP TABLE api_tokens;
