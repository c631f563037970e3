-- +goose Up

-- Invitations to become a user: the hash of the one-time token mailed or
-- handed to the invitee, the role it grants and until when. open_email is
-- the address while the invitation can still be accepted and NULL once it
-- is accepted, revoked or found expired, so that an address has at most
-- one open invitation. totp_secret is the second factor issued to the
-- invitee (sealed with the secret key), proven with a code at acceptance.
CREATE TABLE user_invitations (
    id           TEXT PRIMARY KEY,
    token_hash   TEXT NOT NULL UNIQUE,
    email        TEXT NOT NULL,
    open_email   TEXT UNIQUE,
    admin        BOOLEAN NOT NULL DEFAULT FALSE,
    invited_by   TEXT NOT NULL DEFAULT '',
    totp_secret  TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    accepted_at  BIGINT,
    revoked_at   BIGINT,
    user_id      TEXT
);
CREATE INDEX user_invitations_created_at ON user_invitations(created_at);

-- +goose Down
DROP TABLE user_invitations;
