-- +goose Up

-- What an application runs, fixed at creation: container (one image),
-- compose (a multi-container stack) or service (a program under the
-- server's service manager).
ALTER TABLE applications ADD COLUMN kind TEXT NOT NULL DEFAULT 'container';
-- A compose application's stack: JSON {compose_file, web_service,
-- document}; '' for the other kinds.
ALTER TABLE applications ADD COLUMN compose TEXT NOT NULL DEFAULT '';
-- The release a succeeded deployment of a multi-container application
-- keeps for rollbacks: JSON {services: {name: image id}}; '' otherwise.
ALTER TABLE deployments ADD COLUMN kept_release TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE deployments DROP COLUMN kept_release;
ALTER TABLE applications DROP COLUMN compose;
ALTER TABLE applications DROP COLUMN kind;
