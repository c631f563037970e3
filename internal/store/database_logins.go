package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
)

// InsertDatabaseLogin stores a login of an instance.
func (s *Store) InsertDatabaseLogin(ctx context.Context, c databases.Credential) error {
	return s.insertLogin(ctx, s.w, c)
}

// insertLogin stores a login through e: the store, or the transaction
// that stores more with it.
func (s *Store) insertLogin(ctx context.Context, e sqlx.ExecerContext, c databases.Credential) error {
	_, err := e.ExecContext(ctx, s.rebind(`INSERT INTO database_credentials (id, instance_id, username, database_name, password,
		access, state, job_id, key_pattern, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		c.ID, c.InstanceID, c.Username, c.Database, c.SealedPassword, c.Access, c.State, c.JobID, c.KeyPattern, ms(c.CreatedAt), ms(c.UpdatedAt))
	if isUniqueViolation(err) {
		return fault.Conflictf("login-exists", "The instance has a login named %s already.", c.Username)
	}
	if isForeignKeyViolation(err) {
		return fault.NotFoundf("No such database instance.")
	}
	return err
}

// FinishDatabaseLogin ends the creation jobID: the login is ready if ok,
// forgotten otherwise.
func (s *Store) FinishDatabaseLogin(ctx context.Context, jobID string, ok bool, now time.Time) (bool, error) {
	var res sql.Result
	var err error
	if ok {
		res, err = s.w.ExecContext(ctx, s.rebind(`UPDATE database_credentials SET state = ?, updated_at = ? WHERE job_id = ? AND state = ?`),
			databases.LoginReady, ms(now), jobID, databases.LoginCreating)
	} else {
		res, err = s.w.ExecContext(ctx, s.rebind(`DELETE FROM database_credentials WHERE job_id = ? AND state = ?`), jobID, databases.LoginCreating)
	}
	return changedOne(res, err)
}

// StartDatabaseRotation keeps the new sealed password of a ready login
// while the rotation jobID runs.
func (s *Store) StartDatabaseRotation(ctx context.Context, id, sealed, jobID string, now time.Time) error {
	return s.startOnReadyLogin(ctx, id, `UPDATE database_credentials SET pending_password = ?, rotate_job_id = ?, updated_at = ?
		WHERE id = ? AND state = ? AND rotate_job_id = ''`, sealed, jobID, ms(now), id, databases.LoginReady)
}

// FinishDatabaseRotation ends the rotation jobID: the pending password
// replaces the stored one if ok, and is discarded otherwise.
func (s *Store) FinishDatabaseRotation(ctx context.Context, jobID string, ok bool, now time.Time) (bool, error) {
	q := `UPDATE database_credentials SET pending_password = '', rotate_job_id = '', updated_at = ? WHERE rotate_job_id = ?`
	if ok {
		q = `UPDATE database_credentials SET password = pending_password, pending_password = '', rotate_job_id = '', updated_at = ?
			WHERE rotate_job_id = ?`
	}
	res, err := s.w.ExecContext(ctx, s.rebind(q), ms(now), jobID)
	return changedOne(res, err)
}

// StartDatabaseLoginDrop marks a ready login as dropping by jobID.
func (s *Store) StartDatabaseLoginDrop(ctx context.Context, id, jobID string, now time.Time) error {
	return s.startOnReadyLogin(ctx, id, `UPDATE database_credentials SET state = ?, job_id = ?, updated_at = ?
		WHERE id = ? AND state = ? AND rotate_job_id = ''`, databases.LoginDropping, jobID, ms(now), id, databases.LoginReady)
}

// FinishDatabaseLoginDrop ends the drop jobID: the login is forgotten if
// ok, ready again otherwise.
func (s *Store) FinishDatabaseLoginDrop(ctx context.Context, jobID string, ok bool, now time.Time) (bool, error) {
	var res sql.Result
	var err error
	if ok {
		res, err = s.w.ExecContext(ctx, s.rebind(`DELETE FROM database_credentials WHERE job_id = ? AND state = ?`), jobID, databases.LoginDropping)
	} else {
		res, err = s.w.ExecContext(ctx, s.rebind(`UPDATE database_credentials SET state = ?, updated_at = ? WHERE job_id = ? AND state = ?`),
			databases.LoginReady, ms(now), jobID, databases.LoginDropping)
	}
	return changedOne(res, err)
}

// startOnReadyLogin runs a conditional update of a login: no row changed
// is fault.NotFound without the login, else fault.Conflict "login-busy".
func (s *Store) startOnReadyLogin(ctx context.Context, id, q string, args ...any) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(q), args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var state string
		if err := tx.GetContext(ctx, &state, tx.Rebind(`SELECT state FROM database_credentials WHERE id = ?`), id); notFound(err) {
			return fault.NotFoundf("No such login of this instance.")
		} else if err != nil {
			return err
		}
		return fault.Conflictf("login-busy", "The login is %s or a rotation of it is under way; try again when its job ended.", state)
	})
}
