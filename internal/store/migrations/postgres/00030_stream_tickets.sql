-- +goose Up

-- Single-use tickets that open the live stream (GET /api/v1/stream): a
-- browser's EventSource sends no Authorization header, so an
-- authenticated POST takes a ticket first. Only the ticket's hash is
-- kept; redeeming deletes the row. session_id ties the stream to the
-- session that took the ticket; until is when that session's access
-- token expires, and with it the stream.
CREATE TABLE stream_tickets (
    hash       TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    until_at   BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX stream_tickets_expires_at ON stream_tickets(expires_at);

-- +goose Down
DROP TABLE stream_tickets;
