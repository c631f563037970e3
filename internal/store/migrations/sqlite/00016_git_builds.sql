-- +goose Up

-- How the image of an application from git is built: JSON {dockerfile,
-- build_context, build_arg_keys}; '' for applications of an image.
ALTER TABLE applications ADD COLUMN build TEXT NOT NULL DEFAULT '';
-- The build arguments' values: sealed JSON [{key, value}] bound to the
-- application id, '' when none.
ALTER TABLE applications ADD COLUMN build_args TEXT NOT NULL DEFAULT '';
-- The build arguments a deployment from git builds with, sealed and bound
-- to the deployment id ('' when none).
ALTER TABLE deployments ADD COLUMN build_args TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE deployments DROP COLUMN build_args;
ALTER TABLE applications DROP COLUMN build_args;
ALTER TABLE applications DROP COLUMN build;
