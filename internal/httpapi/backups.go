package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
)

var errNoBackups = fault.Conflictf("backups-unavailable", "Backups are not configured on this control plane.")

type backupSettingsInput struct {
	Body struct {
		Provider        string `json:"provider,omitempty" enum:"s3,clouddrive" doc:"s3 (the default): an S3-compatible bucket; clouddrive: a folder of the connected cloud drive"`
		Endpoint        string `json:"endpoint,omitempty" maxLength:"261" doc:"host[:port] of the S3 service, without a scheme (s3.eu-central-1.amazonaws.com, minio.internal:9000)"`
		Region          string `json:"region,omitempty" maxLength:"64" doc:"The bucket's region; us-east-1 when absent"`
		Bucket          string `json:"bucket,omitempty" maxLength:"63" doc:"The bucket (S3 naming rules: 3 to 63 lowercase letters, digits, '.' and '-')"`
		Prefix          string `json:"prefix,omitempty" maxLength:"512" doc:"Put before every object's key, as a folder (a trailing / is added); none when absent"`
		AccessKeyID     string `json:"access_key_id,omitempty" maxLength:"128" doc:"Stored encrypted, never returned. Absent: the stored one is kept, unless the endpoint changes"`
		SecretAccessKey string `json:"secret_access_key,omitempty" maxLength:"256" doc:"Stored encrypted, never returned. Absent: the stored one is kept, unless the endpoint changes"`
		PathStyle       bool   `json:"path_style,omitempty" doc:"Address the bucket in the URL's path (https://host/bucket/key) instead of its host name; most self-hosted services need it"`
		TLS             *bool  `json:"tls,omitempty" doc:"https (true, the default when absent) or plain http (false), for a service on a private network"`
		CA              string `json:"ca,omitempty" maxLength:"65536" doc:"PEM certificate authority the agents trust besides the system's, for a service with a private CA"`
		Folder          string `json:"folder,omitempty" maxLength:"256" doc:"The cloud drive folder (provider clouddrive)"`
	}
}

type backupStorageTestInput struct {
	ServerID string `query:"server_id" maxLength:"64" required:"true" doc:"The server whose agent tests the storage"`
}

type backupJobInput struct {
	JobID string `path:"job_id" maxLength:"64"`
	Wait  int    `query:"wait" minimum:"0" maximum:"30" doc:"Seconds to wait for the job to end, 0 to 30: the call answers as soon as the job is finished, or after this long with its state then"`
}

type backupRunInput struct {
	Body struct {
		InstanceID string `json:"instance_id" maxLength:"64" doc:"The database instance (a ready PostgreSQL, MariaDB, MySQL, Redis or Valkey instance)"`
		Database   string `json:"database,omitempty" maxLength:"64" doc:"The database to back up; the instance's initial database when absent. Left out for Redis and Valkey, whose backup is an RDB snapshot of the whole instance"`
	}
}

type backupRunOutput struct {
	Location string `header:"Location" doc:"The job's URL"`
	Body     struct {
		JobID  string          `json:"job_id"`
		Status string          `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
		Run    backups.RunView `json:"run"`
	}
}

type backupListInput struct {
	InstanceID string `query:"instance_id" maxLength:"64" doc:"Only this instance's backups"`
	Status     string `query:"status" enum:"queued,running,succeeded,failed" doc:"Only backups in this status"`
	Verified   string `query:"verified" enum:"true,false" doc:"true: only backups verified ok; false: backups not verified ok (never verified, or failed verification)"`
	Limit      int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"How many: 1 to 200; default 50"`
	Before     string `query:"before" maxLength:"64" doc:"The next_cursor of the previous page: backups older than this run id"`
}

type backupListOutput struct {
	Body struct {
		Runs       []backups.RunView `json:"runs" doc:"Newest first"`
		NextCursor string            `json:"next_cursor,omitempty" doc:"Pass as before for the next page; absent on the last"`
	}
}

type backupVerifyInput struct {
	RunID string `path:"run_id" maxLength:"64"`
}

type backupRestoreInput struct {
	RunID string `path:"run_id" maxLength:"64"`
	Body  struct {
		Mode string `json:"mode" enum:"new,replace" doc:"new: into a new database named into; replace: into a temporary database, swapped in place of into only after it succeeded (Redis/Valkey: replace only, the whole instance's data)"`
		Into string `json:"into,omitempty" maxLength:"63" doc:"new: the new database (required); replace: the database replaced (default: the backup's). Left out for Redis/Valkey"`
	}
}

type backupPoliciesOutput struct {
	Body struct {
		Policies []backups.PolicyView `json:"policies" doc:"One per database instance, in the order of the instances' list"`
	}
}

type backupPolicyInput struct {
	InstanceID string `path:"instance_id" maxLength:"64"`
	Body       struct {
		Enabled    bool     `json:"enabled" doc:"Whether the scheduler backs the databases up"`
		EveryHours int      `json:"every_hours" minimum:"1" maximum:"168" doc:"Hours between scheduled backups, 1 to 168"`
		Keep       int      `json:"keep" minimum:"1" maximum:"365" doc:"Successful backups kept per database (manual ones included), 1 to 365; older ones are deleted locally and in storage, never the newest verified one"`
		Databases  []string `json:"databases,omitempty" maxItems:"64" doc:"The databases to back up; each must be the instance's initial database or one its agent listed in its newest metric sample. Absent or empty: the initial database (a key-value instance is backed up whole)"`
		Verify     *bool    `json:"verify,omitempty" doc:"Verify (test-restore) every backup of these databases once it succeeded; default true"`
	}
}

func (s *Server) registerBackups() {
	tags := []string{"Backups"}
	op(s, huma.Operation{
		OperationID: "list-backup-policies", Method: http.MethodGet, Path: "/api/v1/backups/policies", Tags: tags,
		Summary: "Every database instance's backup policy",
		Description: "Each instance has one policy; an instance whose policy was never saved has the default: disabled, every_hours " +
			"24, keep 7, databases empty (the initial database), verify true. next_due_at is when the scheduler queues the next " +
			"backups; stale lists the databases without a verified backup within twice every_hours.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*backupPoliciesOutput, error) {
		if s.deps.Backups == nil {
			return nil, errNoBackups
		}
		list, err := s.deps.Backups.Policies(ctx)
		if err != nil {
			return nil, err
		}
		out := &backupPoliciesOutput{}
		out.Body.Policies = list
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "put-backup-policy", Method: http.MethodPut, Path: "/api/v1/backups/policies/{instance_id}", Tags: tags,
		Summary: "Save an instance's backup policy",
		Description: "Replaces the policy. Enabled, the scheduler (in one control plane of those sharing a database) queues a " +
			"backup of each database every every_hours; a newly enabled policy (or a new interval) first fires within the " +
			"scheduler's jitter window, so a fleet's policies do not all fire at once. A scheduled backup is not queued while the " +
			"previous scheduled backup of the database is still queued or running. With verify, every successful backup of the " +
			"databases is verified. Backups beyond keep are deleted. 422 with field errors for out-of-range values or a database " +
			"the control plane does not know the instance has (its initial database and those its agent listed in its newest " +
			"metric sample are known); nothing changes. 404 for an unknown instance. Audited.",
		Errors: []int{http.StatusNotFound},
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupPolicyInput) (*bodyOutput[backups.PolicyView], error) {
		c := caller(ctx)
		b := in.Body
		verify := b.Verify == nil || *b.Verify
		v, err := s.deps.Backups.PutPolicy(ctx, c, in.InstanceID, backups.PolicyInput{Enabled: b.Enabled, EveryHours: b.EveryHours,
			Keep: b.Keep, Databases: b.Databases, Verify: verify})
		if err != nil {
			return nil, err
		}
		return &bodyOutput[backups.PolicyView]{Body: v}, nil
	}))
	op(s, huma.Operation{
		OperationID: "verify-backup", Method: http.MethodPost, Path: "/api/v1/backups/{run_id}/verify", Tags: tags,
		Summary: "Test-restore a backup into a throwaway database",
		Description: "Queues backup.verify (202) on the backup's server. Its agent fetches the object from the storage (not the " +
			"local copy) to its disk, checks its size and SHA-256 against the run's record (never the storage's own sidecar), " +
			"and only then decrypts it, with the identity of the backup's instance alone (it reaches the agent in this job's " +
			"secrets only), " +
			"restores it into a throwaway database on the same server, compares every table's rows and checksum with the " +
			"manifest, and drops the throwaway database (Redis/Valkey: loads the snapshot into a throwaway server in a container " +
			"of the engine's image and compares each database's keys). The run's verified becomes {at, ok, details} with what was compared; " +
			"a failure publishes backup.verify_failed. 409 for a backup that did not succeed, and backup-fleet-key for one " +
			"made before per-instance keys (encrypted to the fleet-wide key, which no server receives). Audited.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupVerifyInput) (*acceptedOutput, error) {
		j, err := s.deps.Backups.Verify(ctx, caller(ctx), in.RunID)
		if err != nil {
			return nil, err
		}
		return backupAccepted(accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "restore-backup", Method: http.MethodPost, Path: "/api/v1/backups/{run_id}/restore", Tags: tags,
		Summary: "Restore a backup into a new database or in place of one",
		Description: "Queues backup.restore (202). mode new restores into a new database named into: 422 up front when the " +
			"control plane knows the instance has it (its initial database, or one its agent listed in its newest metric " +
			"sample); one created since then is found by the job, which fails saying so without touching it. mode replace " +
			"restores into a temporary database first, compares it with the manifest, and only then swaps " +
			"it in place of into (PostgreSQL: renaming both databases after ending the sessions connected to into; " +
			"MariaDB/MySQL: one RENAME TABLE statement moving every table), so a failed restore never leaves the target " +
			"half-written. The object is fetched from the storage and checked like a verification. A Redis/Valkey backup " +
			"(a snapshot of every numbered database) is restored with mode replace and no into, in place of a managed " +
			"instance's data: once the snapshot loaded in a throwaway server and matched the manifest, and was staged in the " +
			"instance's volume, the server is stopped, its snapshot file and append-only directory are moved aside, and it " +
			"starts on the restored snapshot (with the append-only file switched off for that start, then rewritten from the " +
			"loaded data); if it does not come up with the manifest's number of keys, the previous data is put back. Writes " +
			"since the backup are lost. 422 for an invalid mode or name, for mode new or an into with a Redis/Valkey backup, " +
			"and for one of an external Redis/Valkey instance (restored by hand); 409 for a backup that did not succeed, and " +
			"backup-fleet-key for one made before per-instance keys. " +
			"Audited.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupRestoreInput) (*acceptedOutput, error) {
		j, err := s.deps.Backups.Restore(ctx, caller(ctx), in.RunID, in.Body.Mode, in.Body.Into)
		if err != nil {
			return nil, err
		}
		return backupAccepted(accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "delete-backup", Method: http.MethodDelete, Path: "/api/v1/backups/{run_id}", Tags: tags,
		Summary: "Delete a backup locally and in storage",
		Description: "Queues backup.delete (202) on the backup's server: its agent deletes the local copy and the object in the " +
			"storage and reports each ({local: {ok, gone, error}, remote: {ok, gone, error}} in the job's data). From this call on " +
			"the backup is delete_pending: never verified or restored again. It leaves the list once both copies are gone; when " +
			"the storage refuses or cannot be reached it stays delete_pending with delete_error, and the scheduler tries again " +
			"(after 1 minute, doubling up to 6 hours). 409 for a backup still running, being verified, or being deleted already. " +
			"Audited.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupVerifyInput) (*acceptedOutput, error) {
		j, err := s.deps.Backups.Delete(ctx, caller(ctx), in.RunID)
		if err != nil {
			return nil, err
		}
		return backupAccepted(accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "run-backup", Method: http.MethodPost, Path: "/api/v1/backups/run", Tags: tags,
		Summary: "Back up a database now",
		Description: "Queues backup.run (202) on the instance's server. Its agent takes a snapshot, counts and checksums every " +
			"table in it (the manifest), dumps the database in that same snapshot (pg_dump --snapshot), compresses and encrypts " +
			"the dump on the server (age, to the control plane's backup recipient), writes a local copy and uploads the object " +
			"at once, then reads back its size and SHA-256 from the storage. The run is succeeded only when the read-back " +
			"matched. 422 for an unknown instance or database, or an engine whose backups are not supported; 409 when the " +
			"instance is not ready or no storage is configured. Audited.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupRunInput) (*backupRunOutput, error) {
		run, j, err := s.deps.Backups.Backup(ctx, caller(ctx), in.Body.InstanceID, in.Body.Database, backups.TriggerManual)
		if err != nil {
			return nil, err
		}
		out := &backupRunOutput{Location: "/api/v1/backups/jobs/" + j.ID}
		out.Body.JobID, out.Body.Status, out.Body.Run = j.ID, string(j.Status), run
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "list-backups", Method: http.MethodGet, Path: "/api/v1/backups", Tags: tags,
		Summary: "Backups, newest first",
		Description: "Each run: id, instance_id, database, trigger (schedule or manual), started_at, finished_at, size, sha256, key_id, " +
			"manifest, locations {local, remote}, status (queued, running, succeeded, failed), verified (null or {at, ok, " +
			"details}), error, and delete_pending with delete_error for a backup being deleted. Members get a failed run's error " +
			"(and delete_error) as its class only.",
	}, SignedIn, needs(s.hasBackups, func(ctx context.Context, in *backupListInput) (*backupListOutput, error) {
		q := backups.RunQuery{InstanceID: in.InstanceID, Status: in.Status, Limit: in.Limit, Before: in.Before}
		if in.Verified != "" {
			v := in.Verified == "true"
			q.Verified = &v
		}
		list, err := s.deps.Backups.Runs(ctx, q, reader(ctx))
		if err != nil {
			return nil, err
		}
		out := &backupListOutput{}
		if len(list) == in.Limit && len(list) > 0 {
			out.Body.NextCursor = list[len(list)-1].ID
		}
		out.Body.Runs, err = narrowList(ctx, s, list, func(r backups.RunView) target { return target{db: r.InstanceID, server: r.ServerID} })
		return out, err
	}))
	op(s, huma.Operation{
		OperationID: "get-backup", Method: http.MethodGet, Path: "/api/v1/backups/{run_id}", Tags: tags,
		Summary: "One backup", Errors: []int{http.StatusNotFound},
		Description: "The run as the list shows it: status, size, sha256, manifest, locations, verified (with what the last " +
			"verification compared), error, delete_pending. 404 for an unknown run and for one whose deletion finished. Members " +
			"get a failed run's error (and delete_error) as its class only.",
	}, SignedIn, needs(s.hasBackups, func(ctx context.Context, in *backupVerifyInput) (*bodyOutput[backups.RunView], error) {
		return reply(s.deps.Backups.Run(ctx, in.RunID, reader(ctx)))
	}))
	op(s, huma.Operation{
		OperationID: "backup-summary", Method: http.MethodGet, Path: "/api/v1/backups/summary", Tags: tags,
		Summary: "Backup counts, size, recent failures and verified backups",
		Description: "count, total_size, verified_count and unverified_count of the backups kept (succeeded and not being " +
			"deleted); delete_pending_count and delete_pending_size of those being deleted, which count nowhere else; the 10 " +
			"newest failures; and per instance the last success, the last verified backup and its failures, all of runs not " +
			"being deleted.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*bodyOutput[backups.Summary], error) {
		if s.deps.Backups == nil {
			return nil, errNoBackups
		}
		return reply(s.deps.Backups.Summary(ctx, reader(ctx)))
	})
	op(s, huma.Operation{
		OperationID: "get-backup-settings", Method: http.MethodGet, Path: "/api/v1/backups/settings", Tags: tags,
		Summary: "Backup storage settings, without credentials",
		Description: "Where backups are stored. The access key pair is never returned: access_key_id_set and " +
			"secret_access_key_set say whether one is stored. configured is false until settings are saved.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*bodyOutput[backups.SettingsView], error) {
		if s.deps.Backups == nil {
			return nil, errNoBackups
		}
		return reply(s.deps.Backups.Settings(ctx))
	})
	op(s, huma.Operation{
		OperationID: "put-backup-settings", Method: http.MethodPut, Path: "/api/v1/backups/settings", Tags: tags,
		Summary: "Save the backup storage settings",
		Description: "Replaces the settings. The access key pair is stored encrypted with the control plane's key and never " +
			"returned; leaving it out keeps the stored pair as long as the endpoint stays the same. 422 with field errors for " +
			"invalid settings (nothing changes). Nothing is contacted: test the storage from a server with POST " +
			"/api/v1/backups/settings/test. Audited.",
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupSettingsInput) (*bodyOutput[backups.SettingsView], error) {
		c := caller(ctx)
		b := in.Body
		v, err := s.deps.Backups.PutSettings(ctx, c, backups.SettingsInput{Provider: b.Provider, Endpoint: b.Endpoint,
			Region: b.Region, Bucket: b.Bucket, Prefix: b.Prefix, AccessKeyID: b.AccessKeyID, SecretAccessKey: b.SecretAccessKey,
			PathStyle: b.PathStyle, TLS: b.TLS, CA: b.CA, Folder: b.Folder})
		if err != nil {
			return nil, err
		}
		return &bodyOutput[backups.SettingsView]{Body: v}, nil
	}))
	op(s, huma.Operation{
		OperationID: "test-backup-storage", Method: http.MethodPost, Path: "/api/v1/backups/settings/test", Tags: tags,
		Summary: "Test the backup storage from a server",
		Description: "Queues backup.storage_test (202) on the server: its agent writes a probe object under capstan-probe/, " +
			"reads back its size and SHA-256, downloads it, lists it and deletes it. Read the job at GET " +
			"/api/v1/backups/jobs/{job_id}: data {key, bytes, steps: [{step, ok, duration_ms, error}]}, error holding the " +
			"provider's error text when a step failed. 409 when no settings are saved or the server has no agent.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasBackups, func(ctx context.Context, in *backupStorageTestInput) (*acceptedOutput, error) {
		j, err := s.deps.Backups.TestStorage(ctx, caller(ctx), in.ServerID)
		if err != nil {
			return nil, err
		}
		return backupAccepted(accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "get-backup-job", Method: http.MethodGet, Path: "/api/v1/backups/jobs/{job_id}", Tags: tags,
		Summary: "The status of a backup job", Errors: []int{http.StatusNotFound},
		Description: "A job of the backups (backup.*) with its events; 404 for any other job. With wait, the call answers as " +
			"soon as the job is finished, or after wait seconds with its state then. Members get the job's status and error " +
			"class, not its data, events or error text (redacted true).",
	}, SignedIn, needs(s.hasBackups, func(ctx context.Context, in *backupJobInput) (*bodyOutput[jobDetail], error) {
		j, ev, err := s.deps.Backups.Job(ctx, in.JobID, time.Duration(in.Wait)*time.Second, reader(ctx))
		if err != nil {
			return nil, err
		}
		return &bodyOutput[jobDetail]{Body: jobDetail{Job: j, Events: ev}}, nil
	}))
}

// backupAccepted points the reply of a backup call at the backup job
// path.
func backupAccepted(out *acceptedOutput) *acceptedOutput {
	out.Location = "/api/v1/backups/jobs/" + out.Body.JobID
	return out
}
