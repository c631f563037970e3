package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
)

var _ databases.Store = (*Store)(nil)

const databaseInstanceColumns = `id, name, server_id, engine, version, managed, host, port, database_name, tls_mode, ca, state,
	last_error, server_version, check_job_id, created_by, created_at, updated_at`

type databaseInstanceRow struct {
	ID            string `db:"id"`
	Name          string `db:"name"`
	ServerID      string `db:"server_id"`
	Engine        string `db:"engine"`
	Version       string `db:"version"`
	Managed       bool   `db:"managed"`
	Host          string `db:"host"`
	Port          int    `db:"port"`
	Database      string `db:"database_name"`
	TLSMode       string `db:"tls_mode"`
	CA            string `db:"ca"`
	State         string `db:"state"`
	LastError     string `db:"last_error"`
	ServerVersion string `db:"server_version"`
	CheckJobID    string `db:"check_job_id"`
	CreatedBy     string `db:"created_by"`
	CreatedAt     int64  `db:"created_at"`
	UpdatedAt     int64  `db:"updated_at"`
}

func (r databaseInstanceRow) instance() databases.Instance {
	return databases.Instance{ID: r.ID, Name: r.Name, ServerID: r.ServerID, Engine: r.Engine, Version: r.Version, Managed: r.Managed,
		Host: r.Host, Port: r.Port, Database: r.Database, TLSMode: r.TLSMode, CA: r.CA, State: r.State, LastError: r.LastError,
		ServerVersion: r.ServerVersion, CheckJobID: r.CheckJobID, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt),
		UpdatedAt: fromMS(r.UpdatedAt)}
}

type databaseCredentialRow struct {
	ID         string `db:"id"`
	InstanceID string `db:"instance_id"`
	Username   string `db:"username"`
	Database   string `db:"database_name"`
	Password   string `db:"password"`
	Access     string `db:"access"`
	State      string `db:"state"`
	JobID      string `db:"job_id"`
	KeyPattern string `db:"key_pattern"`
	RotateJob  string `db:"rotate_job_id"`
	CreatedAt  int64  `db:"created_at"`
	UpdatedAt  int64  `db:"updated_at"`
}

// InsertDatabaseInstance stores an instance with its first login.
func (s *Store) InsertDatabaseInstance(ctx context.Context, inst databases.Instance, login databases.Credential) error {
	defer s.databasesChanged()
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO database_instances (id, name, server_id, engine, version, managed, host,
			port, database_name, tls_mode, ca, state, last_error, server_version, check_job_id, created_by, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			inst.ID, inst.Name, inst.ServerID, inst.Engine, inst.Version, inst.Managed, inst.Host, inst.Port, inst.Database, inst.TLSMode,
			inst.CA, inst.State, inst.LastError, inst.ServerVersion, inst.CheckJobID, inst.CreatedBy, ms(inst.CreatedAt), ms(inst.UpdatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO database_credentials (id, instance_id, username, database_name, password,
			access, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), login.ID, inst.ID, login.Username, login.Database,
			login.SealedPassword, login.Access, ms(login.CreatedAt), ms(login.UpdatedAt))
		return err
	})
	if isUniqueViolation(err) {
		return fault.Conflictf("name-taken", "A database instance named %s exists already.", inst.Name)
	}
	if isForeignKeyViolation(err) {
		return fault.NotFoundf("No such server.")
	}
	return err
}

func (s *Store) databaseInstance(ctx context.Context, q sqlx.QueryerContext, id string) (databases.Instance, error) {
	return getOne(ctx, q, always(databaseInstanceRow.instance), "database instance", s.rebind(`SELECT `+databaseInstanceColumns+` FROM database_instances WHERE id = ?`), id)
}

// DatabaseInstance returns an instance.
func (s *Store) DatabaseInstance(ctx context.Context, id string) (databases.Instance, error) {
	return s.databaseInstance(ctx, s.r, id)
}

// ListDatabaseInstances returns every instance by name.
func (s *Store) ListDatabaseInstances(ctx context.Context) ([]databases.Instance, error) {
	return selectAll(ctx, s.r, always(databaseInstanceRow.instance), `SELECT `+databaseInstanceColumns+` FROM database_instances ORDER BY name`)
}

// DatabaseCredentials returns the logins of an instance (every instance's
// for ""), oldest first.
func (s *Store) DatabaseCredentials(ctx context.Context, instanceID string) ([]databases.Credential, error) {
	const cols = `SELECT id, instance_id, username, database_name, password, access, state, job_id, key_pattern, rotate_job_id,
		created_at, updated_at FROM database_credentials`
	var rows []databaseCredentialRow
	var err error
	if instanceID == "" {
		err = s.r.SelectContext(ctx, &rows, cols+` ORDER BY id`)
	} else {
		err = s.r.SelectContext(ctx, &rows, s.rebind(cols+` WHERE instance_id = ? ORDER BY id`), instanceID)
	}
	if err != nil {
		return nil, err
	}
	out := make([]databases.Credential, len(rows))
	for i, r := range rows {
		out[i] = databases.Credential{ID: r.ID, InstanceID: r.InstanceID, Username: r.Username, Database: r.Database, Access: r.Access,
			SealedPassword: r.Password, State: r.State, JobID: r.JobID, KeyPattern: r.KeyPattern, RotateJobID: r.RotateJob,
			CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt)}
	}
	return out, nil
}

// RecheckDatabaseInstance sets an external instance's TLS settings and
// starts a check.
func (s *Store) RecheckDatabaseInstance(ctx context.Context, id, tlsMode, ca, jobID string, now time.Time) error {
	defer s.databasesChanged()
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE database_instances SET tls_mode = ?, ca = ?, state = ?, check_job_id = ?,
			last_error = '', updated_at = ? WHERE id = ? AND managed = ?`), tlsMode, ca, databases.StateChecking, jobID, ms(now), id, false)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		if _, err := s.databaseInstance(ctx, tx, id); err != nil {
			return err
		}
		return fault.Conflictf("managed-instance", "The instance is managed: its TLS settings are Capstan's, not set here.")
	})
}

// FinishDatabaseCheck records the outcome of the check jobID if it is
// still the instance's latest and the instance is checking.
func (s *Store) FinishDatabaseCheck(ctx context.Context, id, jobID string, r databases.CheckResult, now time.Time) (bool, error) {
	defer s.databasesChanged()
	var q string
	var args []any
	if r.State == databases.StateReady {
		q = `UPDATE database_instances SET state = ?, version = ?, server_version = ?, last_error = '', updated_at = ?
			WHERE id = ? AND check_job_id = ? AND state = ?`
		args = []any{r.State, r.Version, r.ServerVersion, ms(now), id, jobID, databases.StateChecking}
	} else {
		q = `UPDATE database_instances SET state = ?, last_error = ?, updated_at = ?
			WHERE id = ? AND check_job_id = ? AND state = ?`
		args = []any{r.State, r.LastError, ms(now), id, jobID, databases.StateChecking}
	}
	return changedOne(s.w.ExecContext(ctx, s.rebind(q), args...))
}

// DeleteDatabaseInstance deletes an instance and its logins.
func (s *Store) DeleteDatabaseInstance(ctx context.Context, id string) error {
	defer s.databasesChanged()
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM database_credentials WHERE instance_id = ?`), id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM database_instances WHERE id = ?`), id)
		return mustAffect(res, err, "database instance")
	})
}
