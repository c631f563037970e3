package backups

import (
	"context"
	"encoding/json"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Audit actions of verification and restore.
const (
	ActionVerifyQueued  = "backup.verify.queued"
	ActionRestoreQueued = "backup.restore.queued"
)

// restorable returns a run that succeeded, and the source and secrets of
// a job that loads it.
func (s *Service) restorable(ctx context.Context, runID, jobID string) (Run, agentproto.BackupRestorePayload, map[string]string, error) {
	run, err := s.store.BackupRun(ctx, runID)
	if err != nil {
		return Run{}, agentproto.BackupRestorePayload{}, nil, err
	}
	if run.Status != StatusSucceeded || run.Manifest == nil {
		return Run{}, agentproto.BackupRestorePayload{}, nil, fault.Conflictf("backup-not-succeeded",
			"The backup is %s; only a backup that succeeded can be verified or restored.", run.Status)
	}
	if run.DeletePending {
		return Run{}, agentproto.BackupRestorePayload{}, nil, fault.Conflictf("backup-deleted", "The backup is being deleted.")
	}
	if s.dbs == nil {
		return Run{}, agentproto.BackupRestorePayload{}, nil, fault.Conflictf("backups-unavailable",
			"Database instances are not available on this control plane.")
	}
	src, err := s.dbs.BackupSource(ctx, run.InstanceID, run.Database)
	if fault.Is(err, fault.NotFound) {
		return Run{}, agentproto.BackupRestorePayload{}, nil, fault.Conflictf("instance-gone", "The backup's instance was removed.")
	}
	if err != nil {
		return Run{}, agentproto.BackupRestorePayload{}, nil, err
	}
	identity, err := s.runIdentity(run)
	if err != nil {
		return Run{}, agentproto.BackupRestorePayload{}, nil, err
	}
	storage, err := s.storage(ctx, run.ServerID, jobID)
	if err != nil {
		return Run{}, agentproto.BackupRestorePayload{}, nil, err
	}
	secrets := map[string]string{agentproto.SecretDBPassword: src.Password, agentproto.SecretBackupIdentity: identity}
	p := agentproto.BackupRestorePayload{RunID: run.ID, Target: src.Target, Source: src.Load, Storage: storage, Key: run.RemoteKey,
		Size: run.Size, SHA256: run.SHA256, Manifest: *run.Manifest}
	return run, p, secrets, nil
}

// runIdentity returns the identity a job that decrypts run carries: the
// identity of the run's own instance, which opens that instance's backups
// and nothing else. A run encrypted to the fleet-wide identity (made
// before per-instance keys) is refused: that identity opens every backup
// and export of every server, and no server receives it.
func (s *Service) runIdentity(run Run) (string, error) {
	instanceID, ok := secrets.InstanceOfKeyID(run.KeyID)
	if !ok || instanceID != run.InstanceID {
		if run.KeyID == secrets.KeyIDFleet {
			return "", fault.Conflictf("backup-fleet-key",
				"The backup was made before each database instance had a key of its own: it is encrypted to the fleet-wide "+
					"key, which opens every server's backups and is never sent to a server. Run a new backup of the instance "+
					"(POST /api/v1/backups/run) and verify or restore that one; this one can still be decrypted offline with "+
					"the recovery kit (capstan recovery-kit identity --key-id fleet-v1) and loaded with a database import.")
		}
		return "", fault.Conflictf("backup-unknown-key", "The backup is encrypted to key %q, which this control plane does not hand "+
			"to the instance's server.", run.KeyID)
	}
	return s.key.InstanceIdentity(instanceID).String(), nil
}

// Verify queues backup.verify of a run that succeeded: its agent fetches
// it from the storage, checks it, restores it into a throwaway database,
// compares it with the manifest and drops the database.
func (s *Service) Verify(ctx context.Context, c audit.Caller, runID string) (jobs.Job, error) {
	jobID := jobs.NewID(s.now())
	run, p, secrets, err := s.restorable(ctx, runID, jobID)
	if err != nil {
		return jobs.Job{}, err
	}
	ok, err := s.store.SetBackupVerifyJob(ctx, run.ID, jobID)
	if err != nil {
		return jobs.Job{}, err
	}
	if !ok {
		// Deleted, or being deleted, since it was read.
		return jobs.Job{}, fault.Conflictf("backup-deleted", "The backup is being deleted.")
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: run.ServerID, Work: jobs.Of(agentproto.BackupVerify, p),
		Secrets: secrets, CreatedBy: c.Actor.ID})
	if err != nil {
		// Not queued: the run names its previous verification again,
		// so that a deletion does not wait for this one.
		if rerr := s.store.ResetBackupVerifyJob(context.WithoutCancel(ctx), run.ID, jobID, run.VerifyJobID); rerr != nil {
			s.log.Error("naming the previous verification job again", "run_id", run.ID, "err", rerr.Error())
		}
		return jobs.Job{}, err
	}
	if c.Actor.ID == "" {
		return j, nil
	}
	return j, s.audit.Record(ctx, c, ActionVerifyQueued, audit.Target{Type: "backup", ID: run.ID}, map[string]any{"job_id": j.ID})
}

// Restore queues backup.restore of a run that succeeded into a new
// database into (mode new) or in place of into ("": the backup's
// database; mode replace), which is swapped only after the restore
// succeeded. A Redis/Valkey backup replaces the whole instance's data
// (mode replace only).
func (s *Service) Restore(ctx context.Context, c audit.Caller, runID, mode, into string) (jobs.Job, error) {
	if mode != agentproto.BackupRestoreNew && mode != agentproto.BackupRestoreReplace {
		return jobs.Job{}, fault.Invalidf("mode", "must be new or replace")
	}
	jobID := jobs.NewID(s.now())
	run, p, secrets, err := s.restorable(ctx, runID, jobID)
	if err != nil {
		return jobs.Job{}, err
	}
	switch agentproto.EngineKind(run.Engine) {
	case agentproto.EngineKindSQL:
		var errs fault.Fields
		if mode == agentproto.BackupRestoreNew && into == "" {
			errs.Add("into", "is required: the name of the new database")
		}
		if into != "" {
			if p := artifactNameProblem(into); p != "" {
				errs.Add("into", "%s", p)
			}
		}
		if err := errs.Err(); err != nil {
			return jobs.Job{}, err
		}
	case agentproto.EngineKindKV:
		if err := kvRestorable(run, p, mode, into); err != nil {
			return jobs.Job{}, err
		}
	default:
		return jobs.Job{}, fault.Invalidf("run_id", "backups of %s are not restored", run.Engine)
	}
	if into == "" {
		into = run.Database
	}
	if mode == agentproto.BackupRestoreNew {
		if err := s.newDatabaseFree(ctx, run.InstanceID, into); err != nil {
			return jobs.Job{}, err
		}
	}
	p.Mode, p.Into = mode, into
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: run.ServerID, Work: jobs.Of(agentproto.BackupRestore, p),
		Secrets: secrets, CreatedBy: c.Actor.ID})
	if err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionRestoreQueued, audit.Target{Type: "backup", ID: run.ID}, map[string]any{"job_id": j.ID, "mode": mode,
		"into": into, "instance_id": run.InstanceID})
}

// kvRestorable says whether a Redis/Valkey backup can be restored so: a
// snapshot holds every numbered database of the instance, so it replaces
// the data of the whole instance (mode replace, no into), by restarting
// the managed instance's server on it; the server of an external
// instance is not Capstan's to restart.
func kvRestorable(run Run, p agentproto.BackupRestorePayload, mode, into string) error {
	var errs fault.Fields
	if mode == agentproto.BackupRestoreNew {
		errs.Add("mode", "must be replace for a %s backup: it is a snapshot of the whole instance (every numbered database), "+
			"which replaces the instance's data; to keep the current data, back it up first", run.Engine)
	}
	if into != "" {
		errs.Add("into", "must be left out for a %s backup: it replaces the whole instance's data", run.Engine)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	if p.Source.ContainerName == "" {
		return fault.Invalidf("run_id", "the backup's instance is external: Capstan does not run its server, so it cannot restart "+
			"it on the snapshot; restore it by hand (see the documentation)")
	}
	return nil
}

// artifactNameProblem says what is wrong with a database name a restore
// creates: ASCII letters, digits, '_', '$' and '-', not starting with '-',
// at most 63 bytes (PostgreSQL's limit).
func artifactNameProblem(name string) string {
	if len(name) > 63 {
		return "must be at most 63 bytes"
	}
	if name[0] == '-' {
		return "must not start with '-'"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '$' || c == '-') {
			return "must be ASCII letters, digits, '_', '$' and '-'"
		}
	}
	return ""
}

// verifyFinished is the completion hook of backup.verify: the run
// records what was compared; a failure publishes backup.verify_failed.
func (s *Service) verifyFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	var p agentproto.BackupRestorePayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return err
	}
	var res agentproto.BackupVerifyResult
	if len(j.Data) > 0 {
		_ = json.Unmarshal(j.Data, &res)
	}
	ok := j.Status == jobs.Succeeded && res.OK && res.ChecksumOK
	if !ok && res.Error == "" {
		res.Error = "the verification did not finish"
		if j.Error != nil {
			res.Error = *j.Error
		}
	}
	if res.Tables == nil {
		res.Tables = []agentproto.BackupCompared{}
	}
	details, err := json.Marshal(res)
	if err != nil {
		return err
	}
	at := s.now().UTC()
	recorded, err := s.store.FinishBackupVerify(ctx, p.RunID, j.ID, Verification{At: at, OK: ok, Details: details})
	if err != nil || !recorded || ok || s.events == nil {
		return err
	}
	run, err := s.store.BackupRun(ctx, p.RunID)
	if err != nil {
		return err
	}
	ev, err := events.New(events.BackupVerifyFailed, events.Subject{Type: "backup", ID: run.ID}, events.BackupPayload{RunID: run.ID,
		InstanceID: run.InstanceID, ServerID: run.ServerID, Database: run.Database, Trigger: run.Trigger, Error: res.Error}, at)
	if err != nil {
		return err
	}
	return s.events.Publish(ctx, ev)
}
