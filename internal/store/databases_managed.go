package store

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
)

// BeginDatabaseOperation moves a managed instance from one of the states
// from to state, with jobID as its latest operation.
func (s *Store) BeginDatabaseOperation(ctx context.Context, id string, from []string, state, jobID string, now time.Time) error {
	defer s.databasesChanged()
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		args := []any{state, jobID, ms(now), id, true}
		for _, f := range from {
			args = append(args, f)
		}
		q := `UPDATE database_instances SET state = ?, check_job_id = ?, last_error = '', updated_at = ?
			WHERE id = ? AND managed = ? AND state IN (?` + strings.Repeat(", ?", len(from)-1) + `)`
		res, err := tx.ExecContext(ctx, tx.Rebind(q), args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		inst, err := s.databaseInstance(ctx, tx, id)
		if err != nil {
			return err
		}
		if !inst.Managed {
			return fault.Conflictf("external-instance", "The instance is external: Capstan does not run it.")
		}
		return fault.Conflictf("instance-busy", "The instance is %s; that cannot be done now.", inst.State)
	})
}

// FinishDatabaseOperation records the outcome of the managed instance's
// operation jobID if it is still its latest; false otherwise.
func (s *Store) FinishDatabaseOperation(ctx context.Context, id, jobID string, r databases.OperationResult, now time.Time) (bool, error) {
	defer s.databasesChanged()
	q := `UPDATE database_instances SET state = ?, last_error = ?, updated_at = ?`
	args := []any{r.State, r.LastError, ms(now)}
	if r.Port != 0 {
		q += `, port = ?`
		args = append(args, r.Port)
	}
	if r.ServerVersion != "" {
		q += `, server_version = ?`
		args = append(args, r.ServerVersion)
	}
	q += ` WHERE id = ? AND check_job_id = ? AND managed = ?`
	args = append(args, id, jobID, true)
	return changedOne(s.w.ExecContext(ctx, s.rebind(q), args...))
}

// DeleteRemovedDatabaseInstance deletes a managed instance and its logins
// if jobID is still its latest operation; false otherwise.
func (s *Store) DeleteRemovedDatabaseInstance(ctx context.Context, id, jobID string) (bool, error) {
	defer s.databasesChanged()
	done := false
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var n int
		if err := tx.GetContext(ctx, &n, tx.Rebind(`SELECT COUNT(*) FROM database_instances WHERE id = ? AND check_job_id = ? AND managed = ?`),
			id, jobID, true); err != nil || n == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM database_credentials WHERE instance_id = ?`), id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM database_instances WHERE id = ? AND check_job_id = ?`), id, jobID)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		done = m == 1
		return err
	})
	return done, err
}
