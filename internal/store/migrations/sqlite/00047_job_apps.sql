-- +goose Up

-- The application a job works for (deploy, remove, logs, a domain check),
-- so the job list can name it and filter by it; NULL for a job that is
-- not an application's. Jobs from before are matched to their
-- application through its deployments, its removal and its domains' checks.
ALTER TABLE jobs ADD COLUMN app_id TEXT;
UPDATE jobs SET app_id = (SELECT d.app_id FROM deployments d WHERE d.job_id = jobs.id)
    WHERE id IN (SELECT job_id FROM deployments WHERE job_id IS NOT NULL);
UPDATE jobs SET app_id = (SELECT a.id FROM applications a WHERE a.remove_job_id = jobs.id)
    WHERE app_id IS NULL AND id IN (SELECT remove_job_id FROM applications WHERE remove_job_id IS NOT NULL);
UPDATE jobs SET app_id = (SELECT MIN(m.app_id) FROM domains m WHERE m.check_job_id = jobs.id)
    WHERE app_id IS NULL AND id IN (SELECT check_job_id FROM domains WHERE check_job_id IS NOT NULL);

-- The list's filters, each newest first by id: by application, type,
-- state and who created the job (a server's jobs have theirs already).
CREATE INDEX jobs_app ON jobs (app_id, id) WHERE app_id IS NOT NULL;
CREATE INDEX jobs_type ON jobs (type, id);
CREATE INDEX jobs_status ON jobs (status, id);
CREATE INDEX jobs_created_by ON jobs (created_by, id);

-- +goose Down
DROP INDEX jobs_created_by;
DROP INDEX jobs_status;
DROP INDEX jobs_type;
DROP INDEX jobs_app;
ALTER TABLE jobs DROP COLUMN app_id;
