-- +goose Up

-- Logins Capstan creates on an instance. state: creating (its
-- db.user.create job, job_id, runs; forgotten if it fails) | ready |
-- dropping (its db.user.drop job, job_id, runs; ready again if it fails).
-- A rotation keeps the new password sealed in pending_password while its
-- db.user.rotate job (rotate_job_id) runs: it replaces password only when
-- the job succeeded. key_pattern: the keys of a Redis/Valkey login.
ALTER TABLE database_credentials ADD COLUMN state TEXT NOT NULL DEFAULT 'ready';
ALTER TABLE database_credentials ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE database_credentials ADD COLUMN key_pattern TEXT NOT NULL DEFAULT '';
ALTER TABLE database_credentials ADD COLUMN pending_password TEXT NOT NULL DEFAULT '';
ALTER TABLE database_credentials ADD COLUMN rotate_job_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE database_credentials DROP COLUMN rotate_job_id;
ALTER TABLE database_credentials DROP COLUMN pending_password;
ALTER TABLE database_credentials DROP COLUMN key_pattern;
ALTER TABLE database_credentials DROP COLUMN job_id;
ALTER TABLE database_credentials DROP COLUMN state;
