-- +goose Up

-- A service application's build and start: JSON {build_command,
-- start_command, build_timeout_seconds}; '' for the other kinds.
ALTER TABLE applications ADD COLUMN service TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE applications DROP COLUMN service;
