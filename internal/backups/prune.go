package backups

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/backoff"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Audit actions of deletion.
const (
	ActionDeleteQueued = "backup.delete.queued"
	ActionPruned       = "backup.pruned"
)

// Deletion retries back off from the scheduler's DeleteRetry, doubling
// up to maxDeleteRetry.
const (
	DefaultDeleteRetry = time.Minute
	maxDeleteRetry     = 6 * time.Hour
)

// DeleteStore is what deletion and pruning need of the store.
type DeleteStore interface {
	// MarkBackupDeleting marks a run that is not queued and not being
	// deleted as being deleted by the job deleteJobID, if its
	// verification job is still verifyJobID (none started since it was
	// read); false otherwise.
	MarkBackupDeleting(ctx context.Context, runID, verifyJobID, deleteJobID string, retryAt time.Time) (bool, error)
	// DeleteBackupRun removes a run whose current deletion job is
	// deleteJobID.
	DeleteBackupRun(ctx context.Context, runID, deleteJobID string) (bool, error)
	// FailBackupDelete records why the deletion job deleteJobID failed
	// and when to try again.
	FailBackupDelete(ctx context.Context, runID, deleteJobID, reason string, retryAt time.Time) (bool, error)
	// DueBackupDeletes returns the runs being deleted whose retry is due.
	DueBackupDeletes(ctx context.Context, now time.Time) ([]Run, error)
	// RequeueBackupDelete replaces a run's deletion job oldJobID by
	// newJobID, counting an attempt; false if oldJobID is not its job.
	RequeueBackupDelete(ctx context.Context, runID, oldJobID, newJobID string, retryAt time.Time) (bool, error)
	// ResetBackupVerifyJob names prev again as the run's verification
	// job if jobID (which could not be queued) still is.
	ResetBackupVerifyJob(ctx context.Context, runID, jobID, prev string) error
	// DatabaseBackups returns a database's succeeded runs that are not
	// being deleted, newest first.
	DatabaseBackups(ctx context.Context, instanceID, database string) ([]Run, error)
	// OldFailedBackups returns the failed runs that are not being
	// deleted beyond the newest keep of each database, oldest first (a
	// bounded batch).
	OldFailedBackups(ctx context.Context, keep int) ([]Run, error)
}

// KeepFailed is how many failed backups of each database the scheduler
// keeps for diagnosis; older ones are deleted with what they left in the
// storage.
const KeepFailed = 10

// retryAfter is the wait before the attempt-th retry of a deletion.
func (s *Service) retryAfter(attempt int) time.Duration {
	d := s.sched.DeleteRetry
	if d <= 0 {
		d = DefaultDeleteRetry
	}
	return backoff.Exponential{Base: d, Max: maxDeleteRetry}.Delay(attempt)
}

// Delete deletes a backup: its local copy on the server and its object in
// the storage, through backup.delete. From then on the run is never
// verified or restored; it is gone from the list once both copies are; a
// storage that refuses leaves it delete_pending, and the scheduler tries
// again. 409 for a backup still running or being verified.
func (s *Service) Delete(ctx context.Context, c audit.Caller, runID string) (jobs.Job, error) {
	run, err := s.store.BackupRun(ctx, runID)
	if err != nil {
		return jobs.Job{}, err
	}
	j, err := s.deleteRun(ctx, c, run)
	if err != nil {
		return jobs.Job{}, err
	}
	if err := s.audit.Record(ctx, c, ActionDeleteQueued, audit.Target{Type: "backup", ID: run.ID}, map[string]any{"job_id": j.ID,
		"instance_id": run.InstanceID, "database": run.Database}); err != nil {
		return jobs.Job{}, err
	}
	return j, nil
}

// deleteRun marks a run as being deleted and queues its deletion.
func (s *Service) deleteRun(ctx context.Context, c audit.Caller, run Run) (jobs.Job, error) {
	switch {
	case run.Status == StatusQueued:
		return jobs.Job{}, fault.Conflictf("backup-running", "The backup is still running; delete it once it ended.")
	case run.DeletePending:
		return jobs.Job{}, fault.Conflictf("backup-deleted", "The backup is being deleted already; a failed deletion is retried.")
	}
	if run.VerifyJobID != "" {
		// A verification job that does not exist yet is being queued
		// (Verify names it on the run first); one that could not be
		// queued is taken off the run again.
		vj, _, err := s.jobs.Get(ctx, run.VerifyJobID)
		if err != nil && !fault.Is(err, fault.NotFound) {
			return jobs.Job{}, err
		}
		if err != nil || !vj.Status.Finished() {
			return jobs.Job{}, fault.Conflictf("backup-verifying", "The backup is being verified; delete it once the verification ended.")
		}
	}
	now := s.now().UTC()
	jobID := jobs.NewID(now)
	storage, err := s.storage(ctx, run.ServerID, jobID)
	if err != nil {
		return jobs.Job{}, err
	}
	marked, err := s.store.MarkBackupDeleting(ctx, run.ID, run.VerifyJobID, jobID, now.Add(s.retryAfter(1)))
	if err != nil {
		return jobs.Job{}, err
	}
	if !marked {
		// Something changed since it was read: a verification started,
		// or another deletion.
		return jobs.Job{}, fault.Conflictf("backup-busy", "The backup changed meanwhile (a verification or a deletion started); try again.")
	}
	return s.enqueueDelete(ctx, c, run, jobID, storage)
}

func (s *Service) enqueueDelete(ctx context.Context, c audit.Caller, run Run, jobID string, storage agentproto.BackupStorage) (jobs.Job, error) {
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: run.ServerID,
		Work:      jobs.Of(agentproto.BackupDelete, agentproto.BackupDeletePayload{RunID: run.ID, Storage: storage, Key: run.RemoteKey, Local: run.LocalPath}),
		CreatedBy: c.Actor.ID})
	if err != nil {
		// The run stays delete_pending with a job that does not exist:
		// the scheduler queues another.
		return jobs.Job{}, err
	}
	return j, nil
}

// deleteFinished is the completion hook of backup.delete: the run goes
// once both copies are gone; otherwise it stays delete_pending with the
// reason, and the scheduler tries again after a backoff.
func (s *Service) deleteFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	var p agentproto.BackupDeletePayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return err
	}
	if j.Status == jobs.Succeeded {
		_, err := s.store.DeleteBackupRun(ctx, p.RunID, j.ID)
		return err
	}
	run, err := s.store.BackupRun(ctx, p.RunID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	reason := "the deletion did not finish"
	if j.Error != nil {
		reason = *j.Error
	}
	// The attempt-th attempt failed: the next comes after its backoff.
	_, err = s.store.FailBackupDelete(ctx, p.RunID, j.ID, reason, s.now().UTC().Add(s.retryAfter(run.DeleteAttempts)))
	return err
}

// retryDeletes queues again the deletions that failed (or whose job was
// lost) once their backoff passed; one still queued or running is left.
func (s *Service) retryDeletes(ctx context.Context, now time.Time) error {
	due, err := s.store.DueBackupDeletes(ctx, now)
	if err != nil {
		return err
	}
	for _, run := range due {
		if run.DeleteJobID != "" {
			j, _, err := s.jobs.Get(ctx, run.DeleteJobID)
			if err != nil && !fault.Is(err, fault.NotFound) {
				return err
			}
			if err == nil && !j.Status.Finished() {
				continue
			}
		}
		jobID := jobs.NewID(now)
		storage, err := s.storage(ctx, run.ServerID, jobID)
		if fault.Is(err, fault.Conflict) {
			// This server's agent cannot take the job now (too old, or
			// the storage went): the others' deletions go on.
			s.log.Warn("a backup deletion waits", "run_id", run.ID, "server_id", run.ServerID, "err", err.Error())
			continue
		}
		if err != nil {
			return err
		}
		ok, err := s.store.RequeueBackupDelete(ctx, run.ID, run.DeleteJobID, jobID, now.Add(s.retryAfter(run.DeleteAttempts+1)))
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if _, err := s.enqueueDelete(ctx, audit.System, run, jobID, storage); err != nil {
			return err
		}
	}
	return nil
}

// prune deletes, for every database of an enabled policy, the successful
// backups beyond the policy's keep (newest first), except the newest
// verified one, which is always kept, and for every database the failed
// backups beyond the newest KeepFailed. A backup being verified is left
// for a later round.
func (s *Service) prune(ctx context.Context, res *TickResult) error {
	if err := s.pruneSucceeded(ctx, res); err != nil {
		return err
	}
	return s.pruneFailed(ctx, res)
}

// pruneFailed deletes the failed backups of each database beyond the
// newest KeepFailed: a failed upload may have left an object (or part of
// one) in the storage.
func (s *Service) pruneFailed(ctx context.Context, res *TickResult) error {
	old, err := s.store.OldFailedBackups(ctx, KeepFailed)
	if err != nil {
		return err
	}
	for _, r := range old {
		if err := s.pruneRun(ctx, r, map[string]any{"instance_id": r.InstanceID, "database": r.Database, "status": r.Status,
			"keep_failed": KeepFailed}, res); err != nil {
			return err
		}
	}
	return nil
}

// pruneRun queues the deletion of a run and audits it; a run that is
// being verified or deleted is left for a later round.
func (s *Service) pruneRun(ctx context.Context, r Run, details map[string]any, res *TickResult) error {
	if _, err := s.deleteRun(ctx, audit.System, r); err != nil {
		if fault.Is(err, fault.Conflict) {
			return nil // being verified or deleted: a later round
		}
		return err
	}
	if err := s.audit.Append(ctx, audit.Entry{Actor: audit.System.Actor, Action: ActionPruned,
		Target: audit.Target{Type: "backup", ID: r.ID}, Details: details}); err != nil {
		return err
	}
	res.Pruned = append(res.Pruned, r.ID)
	return nil
}

// pruneSucceeded deletes, for every database of an enabled policy, the
// successful backups beyond the policy's keep, except the newest verified
// one.
func (s *Service) pruneSucceeded(ctx context.Context, res *TickResult) error {
	ages, err := s.store.BackupAges(ctx)
	if err != nil {
		return err
	}
	keepOf := map[string]int{}
	policies, err := s.store.BackupPolicies(ctx)
	if err != nil {
		return err
	}
	for _, p := range policies {
		keepOf[p.InstanceID] = p.Keep
	}
	for _, a := range ages {
		keep := keepOf[a.InstanceID]
		if keep < MinKeep {
			continue
		}
		runs, err := s.store.DatabaseBackups(ctx, a.InstanceID, a.Database)
		if err != nil {
			return err
		}
		if len(runs) <= keep {
			continue
		}
		newestVerified := ""
		for _, r := range runs {
			if r.Verified != nil && r.Verified.OK {
				newestVerified = r.ID
				break
			}
		}
		for _, r := range runs[keep:] {
			if r.ID == newestVerified {
				continue
			}
			if err := s.pruneRun(ctx, r, map[string]any{"instance_id": r.InstanceID, "database": r.Database, "keep": keep},
				res); err != nil {
				return err
			}
		}
	}
	return nil
}
