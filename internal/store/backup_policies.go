package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/monitoring"
)

type backupPolicyRow struct {
	InstanceID string        `db:"instance_id"`
	Enabled    bool          `db:"enabled"`
	EveryHours int           `db:"every_hours"`
	Keep       int           `db:"keep_count"`
	Databases  string        `db:"databases"`
	Verify     bool          `db:"verify"`
	NextDueAt  sql.NullInt64 `db:"next_due_at"`
	EnabledAt  sql.NullInt64 `db:"enabled_at"`
	Revision   int64         `db:"revision"`
	UpdatedBy  string        `db:"updated_by"`
	UpdatedAt  int64         `db:"updated_at"`
}

const backupPolicyColumns = `p.instance_id, p.enabled, p.every_hours, p.keep_count, p.databases, p.verify, p.next_due_at, p.enabled_at,
	p.revision, p.updated_by, p.updated_at`

func (r backupPolicyRow) policy() (backups.Policy, error) {
	p := backups.Policy{InstanceID: r.InstanceID, Enabled: r.Enabled, EveryHours: r.EveryHours, Keep: r.Keep, Verify: r.Verify,
		NextDueAt: nullTime(r.NextDueAt), EnabledAt: nullTime(r.EnabledAt), Revision: r.Revision, UpdatedBy: r.UpdatedBy,
		UpdatedAt: fromMS(r.UpdatedAt)}
	if err := json.Unmarshal([]byte(r.Databases), &p.Databases); err != nil {
		return p, fmt.Errorf("backup policy %s: databases: %w", r.InstanceID, err)
	}
	if p.Databases == nil {
		p.Databases = []string{}
	}
	return p, nil
}

func (s *Store) backupPoliciesWhere(ctx context.Context, where string, args ...any) ([]backups.Policy, error) {
	return selectAll(ctx, s.r, backupPolicyRow.policy, s.rebind(`SELECT `+backupPolicyColumns+` FROM backup_policies p
		JOIN database_instances i ON i.id = p.instance_id WHERE `+where+` ORDER BY p.instance_id`), args...)
}

// BackupPolicies returns the stored policies of existing instances.
func (s *Store) BackupPolicies(ctx context.Context) ([]backups.Policy, error) {
	return s.backupPoliciesWhere(ctx, "1 = 1")
}

// BackupPolicy returns an instance's stored policy.
func (s *Store) BackupPolicy(ctx context.Context, instanceID string) (backups.Policy, error) {
	list, err := s.backupPoliciesWhere(ctx, "p.instance_id = ?", instanceID)
	if err != nil {
		return backups.Policy{}, err
	}
	if len(list) == 0 {
		return backups.Policy{}, fault.NotFoundf("No backup policy is stored for the instance.")
	}
	return list[0], nil
}

// PutBackupPolicy stores a policy, raising its revision.
func (s *Store) PutBackupPolicy(ctx context.Context, p backups.Policy, now time.Time) (backups.Policy, error) {
	dbs, err := json.Marshal(p.Databases)
	if err != nil {
		return backups.Policy{}, err
	}
	enabledAt := sql.NullInt64{}
	if p.Enabled {
		enabledAt = sql.NullInt64{Int64: ms(now), Valid: true}
	}
	// enabled_at stays while the policy stays enabled.
	_, err = s.w.ExecContext(ctx, s.rebind(`INSERT INTO backup_policies (instance_id, enabled, every_hours, keep_count, databases,
		verify, next_due_at, enabled_at, revision, updated_by, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)
		ON CONFLICT (instance_id) DO UPDATE SET enabled = excluded.enabled, every_hours = excluded.every_hours,
		keep_count = excluded.keep_count, databases = excluded.databases, verify = excluded.verify,
		next_due_at = excluded.next_due_at,
		enabled_at = CASE WHEN NOT excluded.enabled THEN NULL WHEN backup_policies.enabled THEN backup_policies.enabled_at
			ELSE excluded.enabled_at END,
		revision = backup_policies.revision + 1, updated_by = excluded.updated_by, updated_at = excluded.updated_at`),
		p.InstanceID, p.Enabled, p.EveryHours, p.Keep, string(dbs), p.Verify, msOrNull(p.NextDueAt), enabledAt, p.UpdatedBy,
		ms(p.UpdatedAt))
	if err != nil {
		return backups.Policy{}, err
	}
	return s.BackupPolicy(ctx, p.InstanceID)
}

// DueBackupPolicies returns the enabled policies due at now.
func (s *Store) DueBackupPolicies(ctx context.Context, now time.Time) ([]backups.Policy, error) {
	return s.backupPoliciesWhere(ctx, "p.enabled = TRUE AND p.next_due_at IS NOT NULL AND p.next_due_at <= ?", ms(now))
}

// ClaimBackupPolicy moves a due policy on if it is still enabled at
// revision.
func (s *Store) ClaimBackupPolicy(ctx context.Context, instanceID string, revision int64, next time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_policies SET next_due_at = ?, revision = revision + 1
		WHERE instance_id = ? AND revision = ? AND enabled = TRUE`), ms(next), instanceID, revision))
}

// ScheduledRunActive says whether a scheduled run of the database is
// queued or running.
func (s *Store) ScheduledRunActive(ctx context.Context, instanceID, database string) (bool, error) {
	var n int
	err := s.r.GetContext(ctx, &n, s.rebind(`SELECT count(*) FROM backup_runs WHERE instance_id = ? AND database_name = ?
		AND trigger_kind = ? AND status = ?`), instanceID, database, backups.TriggerSchedule, backups.StatusQueued)
	return n > 0, err
}

// ReportedDatabases returns the databases of the instance's newest
// metric sample that lists any.
func (s *Store) ReportedDatabases(ctx context.Context, instanceID string) ([]string, *time.Time, error) {
	var row struct {
		At        int64  `db:"at"`
		Databases string `db:"databases"`
	}
	err := s.r.GetContext(ctx, &row, s.rebind(`SELECT at, databases FROM database_metric_samples
		WHERE instance_id = ? AND error = '' AND databases <> '[]' ORDER BY at DESC LIMIT 1`), instanceID)
	if notFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var sizes []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(row.Databases), &sizes); err != nil {
		return nil, nil, fmt.Errorf("database metric sample %s at %d: databases: %w", instanceID, row.At, err)
	}
	names := make([]string, 0, len(sizes))
	for _, d := range sizes {
		names = append(names, d.Name)
	}
	at := fromMS(row.At)
	return names, &at, nil
}

// backupAges lists every database of an enabled policy of an existing
// instance with its newest verified backup.
func (s *Store) backupAges(ctx context.Context, q sqlx.QueryerContext) ([]backups.DatabaseAge, error) {
	var rows []struct {
		backupPolicyRow
		Name    string `db:"name"`
		Initial string `db:"database_name"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT `+backupPolicyColumns+`, i.name, i.database_name FROM backup_policies p
		JOIN database_instances i ON i.id = p.instance_id WHERE p.enabled = TRUE ORDER BY p.instance_id`); err != nil {
		return nil, err
	}
	var verified []struct {
		InstanceID string `db:"instance_id"`
		Database   string `db:"database_name"`
		At         int64  `db:"at"`
	}
	if err := sqlx.SelectContext(ctx, q, &verified, s.rebind(`SELECT instance_id, database_name, max(finished_at) AS at FROM backup_runs
		WHERE status = ? AND verified_ok = TRUE AND delete_state = '' AND finished_at IS NOT NULL
		GROUP BY instance_id, database_name`), backups.StatusSucceeded); err != nil {
		return nil, err
	}
	last := make(map[[2]string]time.Time, len(verified))
	for _, v := range verified {
		last[[2]string{v.InstanceID, v.Database}] = fromMS(v.At)
	}
	var out []backups.DatabaseAge
	for _, r := range rows {
		p, err := r.policy()
		if err != nil {
			return nil, err
		}
		list := p.Databases
		if len(list) == 0 {
			list = []string{r.Initial}
		}
		for _, db := range list {
			a := backups.DatabaseAge{InstanceID: p.InstanceID, InstanceName: r.Name, Database: db, EveryHours: p.EveryHours}
			if p.EnabledAt != nil {
				a.Since = *p.EnabledAt
			} else {
				a.Since = p.UpdatedAt
			}
			if at, ok := last[[2]string{p.InstanceID, db}]; ok {
				a.LastVerified = &at
				if at.After(a.Since) {
					a.Since = at
				}
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// BackupAges returns every database of an enabled policy with the age of
// its newest verified backup.
func (s *Store) BackupAges(ctx context.Context) ([]backups.DatabaseAge, error) {
	return s.backupAges(ctx, s.r)
}

// DatabaseBackupAges is BackupAges as alert evaluation reads it.
func (s *Store) DatabaseBackupAges(ctx context.Context) ([]monitoring.BackupAge, error) {
	return s.monitoringBackupAges(ctx, s.r)
}

func (s *Store) monitoringBackupAges(ctx context.Context, q sqlx.QueryerContext) ([]monitoring.BackupAge, error) {
	ages, err := s.backupAges(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]monitoring.BackupAge, len(ages))
	for i, a := range ages {
		out[i] = monitoring.BackupAge{InstanceID: a.InstanceID, InstanceName: a.InstanceName, Database: a.Database,
			EveryHours: a.EveryHours, Since: a.Since}
	}
	return out, nil
}

// MarkBackupStale records a database stale and stores ev with it, once.
func (s *Store) MarkBackupStale(ctx context.Context, instanceID, database string, at time.Time, ev events.Event) (bool, error) {
	marked := false
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO backup_stale (instance_id, database_name, since) VALUES (?, ?, ?)
			ON CONFLICT (instance_id, database_name) DO NOTHING`), instanceID, database, ms(at))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return err
		}
		marked = true
		return publishTx(ctx, tx, ev)
	})
	if err != nil {
		return false, err
	}
	if marked {
		s.published()
	}
	return marked, nil
}

// ClearBackupStale forgets that a database was stale.
func (s *Store) ClearBackupStale(ctx context.Context, instanceID, database string) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM backup_stale WHERE instance_id = ? AND database_name = ?`), instanceID, database)
	return err
}

// StaleBackups lists the databases recorded stale.
func (s *Store) StaleBackups(ctx context.Context) ([]backups.StaleDatabase, error) {
	var rows []struct {
		InstanceID string `db:"instance_id"`
		Database   string `db:"database_name"`
		Since      int64  `db:"since"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT instance_id, database_name, since FROM backup_stale
		ORDER BY instance_id, database_name`); err != nil {
		return nil, err
	}
	out := make([]backups.StaleDatabase, len(rows))
	for i, r := range rows {
		out[i] = backups.StaleDatabase{InstanceID: r.InstanceID, Database: r.Database, Since: fromMS(r.Since)}
	}
	return out, nil
}

// MarkBackupDeleting marks a run as being deleted by deleteJobID if it is
// not queued, not being deleted, and no verification started since
// verifyJobID.
func (s *Store) MarkBackupDeleting(ctx context.Context, runID, verifyJobID, deleteJobID string, retryAt time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET delete_state = 'pending', delete_job_id = ?, delete_attempts = 1,
		delete_retry_at = ?, delete_error = '' WHERE id = ? AND delete_state = '' AND status <> ? AND verify_job_id = ?`),
		deleteJobID, ms(retryAt), runID, backups.StatusQueued, verifyJobID))
}

// DeleteBackupRun removes a run whose deletion job deleteJobID succeeded.
func (s *Store) DeleteBackupRun(ctx context.Context, runID, deleteJobID string) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`DELETE FROM backup_runs WHERE id = ? AND delete_state = 'pending' AND delete_job_id = ?`),
		runID, deleteJobID))
}

// FailBackupDelete records a failed deletion job and when to retry.
func (s *Store) FailBackupDelete(ctx context.Context, runID, deleteJobID, reason string, retryAt time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET delete_error = ?, delete_retry_at = ?
		WHERE id = ? AND delete_state = 'pending' AND delete_job_id = ?`), reason, ms(retryAt), runID, deleteJobID))
}

// DueBackupDeletes returns the runs being deleted whose retry is due.
func (s *Store) DueBackupDeletes(ctx context.Context, now time.Time) ([]backups.Run, error) {
	return selectAll(ctx, s.r, always(backupRunRow.run), s.rebind(`SELECT `+backupRunColumns+` FROM backup_runs
		WHERE delete_state = 'pending' AND delete_retry_at <= ? ORDER BY delete_retry_at LIMIT 100`), ms(now))
}

// RequeueBackupDelete replaces a run's deletion job, counting an attempt.
func (s *Store) RequeueBackupDelete(ctx context.Context, runID, oldJobID, newJobID string, retryAt time.Time) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET delete_job_id = ?, delete_attempts = delete_attempts + 1,
		delete_retry_at = ? WHERE id = ? AND delete_state = 'pending' AND delete_job_id = ?`), newJobID, ms(retryAt), runID, oldJobID))
}

// DatabaseBackups returns a database's succeeded runs not being deleted,
// newest first.
func (s *Store) DatabaseBackups(ctx context.Context, instanceID, database string) ([]backups.Run, error) {
	return selectAll(ctx, s.r, always(backupRunRow.run), s.rebind(`SELECT `+backupRunColumns+` FROM backup_runs
		WHERE instance_id = ? AND database_name = ? AND status = ? AND delete_state = '' ORDER BY id DESC`),
		instanceID, database, backups.StatusSucceeded)
}

// OldFailedBackups returns the failed runs not being deleted beyond the
// newest keep of each database (by instance), oldest first, at most 100.
func (s *Store) OldFailedBackups(ctx context.Context, keep int) ([]backups.Run, error) {
	return selectAll(ctx, s.r, always(backupRunRow.run), s.rebind(`SELECT `+backupRunColumns+` FROM (SELECT *, ROW_NUMBER() OVER
		(PARTITION BY instance_id, database_name ORDER BY id DESC) AS newer FROM backup_runs WHERE status = ? AND delete_state = '') r
		WHERE newer > ? ORDER BY id LIMIT 100`), backups.StatusFailed, keep)
}

// ResetBackupVerifyJob names prev as the run's verification job again if
// jobID still is.
func (s *Store) ResetBackupVerifyJob(ctx context.Context, runID, jobID, prev string) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE backup_runs SET verify_job_id = ? WHERE id = ? AND verify_job_id = ?`),
		prev, runID, jobID)
	return err
}
