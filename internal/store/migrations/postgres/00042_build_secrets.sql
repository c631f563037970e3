-- +goose Up

-- The build secrets of a container application from git: sealed JSON
-- [{key, value}] bound to the application id, '' when none. Their keys
-- are in the build column (build_secret_keys).
ALTER TABLE applications ADD COLUMN build_secrets TEXT NOT NULL DEFAULT '';
-- The build secrets a deployment from git builds with, sealed and bound
-- to the deployment id ('' when none).
ALTER TABLE deployments ADD COLUMN build_secrets TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE deployments DROP COLUMN build_secrets;
ALTER TABLE applications DROP COLUMN build_secrets;
