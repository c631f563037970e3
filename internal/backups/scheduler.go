package backups

import (
	"context"
	"errors"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// ScheduleOptions configure the scheduler.
type ScheduleOptions struct {
	// Jitter is the window over which newly enabled policies first fire
	// (never more than their interval); 0 fires them at once.
	Jitter time.Duration
	// DeleteRetry is the first wait before a failed deletion is tried
	// again (doubling after each failure, up to 6 hours); 0 is
	// DefaultDeleteRetry.
	DeleteRetry time.Duration
}

// DatabaseAge is how long a database of an enabled policy has been
// without a newer verified backup.
type DatabaseAge struct {
	InstanceID   string
	InstanceName string
	Database     string
	EveryHours   int
	// LastVerified is when its newest verified backup finished; nil if
	// none.
	LastVerified *time.Time
	// Since is LastVerified, or when the policy was enabled if that is
	// later (or there is no verified backup).
	Since time.Time
}

// Stale says whether the database has gone without a verified backup
// for as long as its policy allows: twice its interval.
func (a DatabaseAge) Stale(now time.Time) bool {
	return now.Sub(a.Since) >= 2*time.Duration(a.EveryHours)*time.Hour
}

// ScheduleStore is what the scheduler needs of the store.
type ScheduleStore interface {
	// DueBackupPolicies returns the enabled policies of existing
	// instances whose next_due_at is not after now.
	DueBackupPolicies(ctx context.Context, now time.Time) ([]Policy, error)
	// ClaimBackupPolicy moves a due policy's next_due_at to next if it is
	// still enabled at revision; false if another claim or a change came
	// first.
	ClaimBackupPolicy(ctx context.Context, instanceID string, revision int64, next time.Time) (bool, error)
	// ScheduledRunActive says whether a scheduled run of the database is
	// queued (or running).
	ScheduledRunActive(ctx context.Context, instanceID, database string) (bool, error)
	// BackupAges returns every database of an enabled policy with the
	// age of its newest verified backup.
	BackupAges(ctx context.Context) ([]DatabaseAge, error)
	// MarkBackupStale records the database stale since at and stores ev
	// in the same transaction; false (and no event) if it was already.
	MarkBackupStale(ctx context.Context, instanceID, database string, at time.Time, ev events.Event) (bool, error)
	// ClearBackupStale forgets that the database was stale.
	ClearBackupStale(ctx context.Context, instanceID, database string) error
}

// TickResult is what one round of the scheduler did.
type TickResult struct {
	// Queued are the runs queued.
	Queued []Run
	// Skipped are the databases due whose scheduled run was still queued
	// or running.
	Skipped []string
	// Stale are the databases found stale this round (each published
	// backup.stale).
	Stale []StaleDatabase
	// Pruned are the runs whose deletion was queued beyond their
	// policy's keep.
	Pruned []string
}

// Tick is one round of the scheduler: it queues a backup of every
// database of each due policy (unless a scheduled backup of it is still
// queued or running), publishes backup.stale for the databases newly
// found stale, deletes the backups beyond each policy's keep and tries
// failed deletions again. Several ticks at once, in one control plane or several
// sharing the store, queue each due backup once: a policy is claimed by
// moving its next_due_at at the revision read.
func (s *Service) Tick(ctx context.Context) (TickResult, error) {
	var res TickResult
	now := s.now().UTC()
	due, err := s.store.DueBackupPolicies(ctx, now)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, p := range due {
		every := time.Duration(p.EveryHours) * time.Hour
		next := p.NextDueAt.Add(every)
		if !next.After(now) {
			// Missed rounds (the control plane was down) are not made up.
			next = now.Add(every)
		}
		claimed, err := s.store.ClaimBackupPolicy(ctx, p.InstanceID, p.Revision, next)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !claimed {
			continue
		}
		if err := s.queueScheduled(ctx, p, &res); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.checkStale(ctx, now, &res); err != nil {
		errs = append(errs, err)
	}
	if err := s.prune(ctx, &res); err != nil {
		errs = append(errs, err)
	}
	if err := s.retryDeletes(ctx, now); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// queueScheduled queues the backups of a claimed policy.
func (s *Service) queueScheduled(ctx context.Context, p Policy, res *TickResult) error {
	inst, err := s.dbs.Get(ctx, p.InstanceID, jobs.AdminReader)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	list := p.Databases
	if len(list) == 0 {
		list = []string{inst.Database}
	}
	for _, db := range list {
		busy, err := s.store.ScheduledRunActive(ctx, p.InstanceID, db)
		if err != nil {
			return err
		}
		if busy {
			res.Skipped = append(res.Skipped, p.InstanceID+"/"+db)
			continue
		}
		run, _, err := s.Backup(ctx, audit.System, p.InstanceID, db, TriggerSchedule)
		if err != nil {
			// Not queued (no storage, the instance not ready, …): the
			// database goes stale and backup.stale says so.
			s.log.Warn("scheduled backup not queued", "instance_id", p.InstanceID, "database", db, "err", err.Error())
			continue
		}
		res.Queued = append(res.Queued, Run{ID: run.ID, InstanceID: run.InstanceID, Database: run.Database, JobID: run.JobID,
			Trigger: run.Trigger})
	}
	return nil
}

// checkStale publishes backup.stale once for each database newly stale
// and forgets those fresh again (or no longer in an enabled policy).
func (s *Service) checkStale(ctx context.Context, now time.Time, res *TickResult) error {
	ages, err := s.store.BackupAges(ctx)
	if err != nil {
		return err
	}
	stale := map[[2]string]bool{}
	for _, a := range ages {
		if !a.Stale(now) {
			continue
		}
		stale[[2]string{a.InstanceID, a.Database}] = true
		ev, err := events.New(events.BackupStale, events.Subject{Type: "database", ID: a.InstanceID}, events.BackupStalePayload{
			InstanceID: a.InstanceID, InstanceName: a.InstanceName, Database: a.Database, EveryHours: a.EveryHours,
			LastVerifiedAt: a.LastVerified}, now)
		if err != nil {
			return err
		}
		marked, err := s.store.MarkBackupStale(ctx, a.InstanceID, a.Database, now, ev)
		if err != nil {
			return err
		}
		if marked {
			res.Stale = append(res.Stale, StaleDatabase{InstanceID: a.InstanceID, Database: a.Database, Since: now})
		}
	}
	recorded, err := s.store.StaleBackups(ctx)
	if err != nil {
		return err
	}
	for _, r := range recorded {
		if !stale[[2]string{r.InstanceID, r.Database}] {
			if err := s.store.ClearBackupStale(ctx, r.InstanceID, r.Database); err != nil {
				return err
			}
		}
	}
	return nil
}

// backedUp runs when a backup ended: a successful backup of a database
// of an enabled policy with verify on is verified at once.
func (s *Service) backedUp(ctx context.Context, run Run, f RunFinish) error {
	if f.Status != StatusSucceeded {
		return nil
	}
	p, err := s.store.BackupPolicy(ctx, run.InstanceID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !p.Enabled || !p.Verify {
		return nil
	}
	inst, err := s.dbs.Get(ctx, run.InstanceID, jobs.AdminReader)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !p.covers(run.Database, inst.Database) {
		return nil
	}
	if _, err := s.Verify(ctx, audit.System, run.ID); err != nil {
		s.log.Warn("verification after the backup not queued", "run_id", run.ID, "err", err.Error())
	}
	return nil
}

// covers says whether the policy backs up database of an instance whose
// initial database is initial.
func (p Policy) covers(database, initial string) bool {
	if len(p.Databases) == 0 {
		return database == initial
	}
	for _, d := range p.Databases {
		if d == database {
			return true
		}
	}
	return false
}
