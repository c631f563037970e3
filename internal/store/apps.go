package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

var _ apps.Store = (*Store)(nil)

// appColumns are the columns of applications as read, with the status of
// the newest deployment and whether one is in progress.
const appColumns = `a.id, a.server_id, a.name, a.source, a.container_port, a.health_path, a.env_keys, a.auto_deploy, a.memory_limit,
	a.state, a.current_deployment_id, a.remove_job_id, a.remove_error, a.created_by, a.created_at, a.updated_at,
	a.build, a.build_args, a.build_secrets, a.kind, a.compose, a.service, a.publish_bind, a.publish_port,
	COALESCE((SELECT d.status FROM deployments d WHERE d.app_id = a.id ORDER BY d.id DESC LIMIT 1), '') AS latest_status,
	EXISTS (SELECT 1 FROM deployments d WHERE d.app_id = a.id AND d.status IN ('queued', 'running')) AS in_progress`

type appRow struct {
	ID                  string         `db:"id"`
	ServerID            string         `db:"server_id"`
	Name                string         `db:"name"`
	Source              string         `db:"source"`
	ContainerPort       int            `db:"container_port"`
	HealthPath          string         `db:"health_path"`
	EnvKeys             string         `db:"env_keys"`
	AutoDeploy          bool           `db:"auto_deploy"`
	MemoryLimit         string         `db:"memory_limit"`
	State               string         `db:"state"`
	CurrentDeploymentID sql.NullString `db:"current_deployment_id"`
	RemoveJobID         sql.NullString `db:"remove_job_id"`
	RemoveError         sql.NullString `db:"remove_error"`
	CreatedBy           string         `db:"created_by"`
	CreatedAt           int64          `db:"created_at"`
	UpdatedAt           int64          `db:"updated_at"`
	Build               string         `db:"build"`
	BuildArgs           string         `db:"build_args"`
	BuildSecrets        string         `db:"build_secrets"`
	Kind                string         `db:"kind"`
	Compose             string         `db:"compose"`
	Service             string         `db:"service"`
	PublishBind         string         `db:"publish_bind"`
	PublishPort         sql.NullInt64  `db:"publish_port"`
	LatestStatus        string         `db:"latest_status"`
	InProgress          bool           `db:"in_progress"`
}

func (r appRow) app() (apps.App, error) {
	a := apps.App{ID: r.ID, ServerID: r.ServerID, Name: r.Name, ContainerPort: r.ContainerPort, HealthPath: r.HealthPath,
		AutoDeploy: r.AutoDeploy, MemoryLimit: r.MemoryLimit, State: r.State, CurrentDeploymentID: r.CurrentDeploymentID.String,
		RemoveJobID: r.RemoveJobID.String, RemoveError: r.RemoveError.String, CreatedBy: r.CreatedBy,
		CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt), LatestStatus: r.LatestStatus, InProgress: r.InProgress,
		Kind: r.Kind}
	if r.PublishPort.Valid {
		a.Publish = &apps.Publish{HostPort: int(r.PublishPort.Int64), Bind: r.PublishBind}
	}
	if err := json.Unmarshal([]byte(r.Source), &a.Source); err != nil {
		return a, err
	}
	if err := json.Unmarshal([]byte(r.EnvKeys), &a.EnvKeys); err != nil {
		return a, err
	}
	a.SealedBuildArgs, a.SealedBuildSecrets = r.BuildArgs, r.BuildSecrets
	if r.Build != "" {
		if err := json.Unmarshal([]byte(r.Build), &a.Build); err != nil {
			return a, err
		}
	}
	if r.Compose != "" {
		if err := json.Unmarshal([]byte(r.Compose), &a.Compose); err != nil {
			return a, err
		}
	}
	if r.Service != "" {
		if err := json.Unmarshal([]byte(r.Service), &a.Service); err != nil {
			return a, err
		}
	}
	return a, nil
}

// composeColumn is the stored form of a.Compose: ” when it is zero (the
// applications of other kinds).
func composeColumn(a apps.App) (string, error) {
	if a.Compose == (apps.ComposeSettings{}) {
		return "", nil
	}
	b, err := json.Marshal(a.Compose)
	return string(b), err
}

// serviceColumn is the stored form of a.Service: ” when it is zero (the
// applications of other kinds).
func serviceColumn(a apps.App) (string, error) {
	if a.Service == (apps.ServiceSettings{}) {
		return "", nil
	}
	b, err := json.Marshal(a.Service)
	return string(b), err
}

// appKind is the stored kind: container unless said otherwise.
func appKind(a apps.App) string {
	if a.Kind == "" {
		return apps.KindContainer
	}
	return a.Kind
}

// buildColumn is the stored form of a.Build: ” for image applications.
func buildColumn(a apps.App) (string, error) {
	if a.Source.Type != apps.SourceGit {
		return "", nil
	}
	b, err := json.Marshal(a.Build)
	return string(b), err
}

func appNameTaken(name string) error {
	return fault.Conflictf("application-name-taken", "An application named %q exists on this server.", name)
}

// publishColumns are the stored forms of a.Publish: bind and port, ""
// and NULL for none.
func publishColumns(a apps.App) (string, sql.NullInt64) {
	if a.Publish == nil {
		return "", sql.NullInt64{}
	}
	return a.Publish.Bind, sql.NullInt64{Int64: int64(a.Publish.HostPort), Valid: true}
}

// appSettings are the stored forms of an application's settings that
// are not plain values, as InsertApp and UpdateApp write them.
type appSettings struct {
	source, envKeys, build, compose, service string
	publishBind                              string
	publishPort                              sql.NullInt64
}

func settingsColumns(a apps.App) (appSettings, error) {
	var c appSettings
	src, err := json.Marshal(a.Source)
	if err != nil {
		return c, err
	}
	keys, err := json.Marshal(nonNil(a.EnvKeys))
	if err != nil {
		return c, err
	}
	c.source, c.envKeys = string(src), string(keys)
	if c.build, err = buildColumn(a); err != nil {
		return c, err
	}
	if c.compose, err = composeColumn(a); err != nil {
		return c, err
	}
	if c.service, err = serviceColumn(a); err != nil {
		return c, err
	}
	c.publishBind, c.publishPort = publishColumns(a)
	return c, nil
}

// appUniqueViolation is the conflict a unique violation of applications
// stands for: the published port's index, or the name's.
func appUniqueViolation(err error, a apps.App) error {
	if isUniqueViolationOf(err, "applications_publish_port", "applications.publish_port") && a.Publish != nil {
		return fault.Conflictf("port-published", "Another application on this server publishes port %d.", a.Publish.HostPort)
	}
	return appNameTaken(a.Name)
}

// InsertApp stores a new application.
func (s *Store) InsertApp(ctx context.Context, a apps.App, sealedEnv string) error {
	c, err := settingsColumns(a)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO applications (id, server_id, name, source, container_port, health_path, env, env_keys,
		auto_deploy, memory_limit, state, created_by, created_at, updated_at, build, build_args, build_secrets, kind, compose, service,
		publish_bind, publish_port)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			a.ID, a.ServerID, a.Name, c.source, a.ContainerPort, a.HealthPath, sealedEnv, c.envKeys, a.AutoDeploy, a.MemoryLimit,
			a.State, a.CreatedBy, ms(a.CreatedAt), ms(a.UpdatedAt), c.build, a.SealedBuildArgs, a.SealedBuildSecrets, appKind(a), c.compose, c.service,
			c.publishBind, c.publishPort); err != nil {
			return err
		}
		if a.Publish == nil {
			return nil
		}
		// The published port is in the server's proxy state.
		return bumpProxyRevision(ctx, tx, a.ServerID)
	})
	if isUniqueViolation(err) {
		return appUniqueViolation(err, a)
	}
	return err
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func (s *Store) appWhere(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) (apps.App, error) {
	return getOne(ctx, q, appRow.app, "application", s.rebind(`SELECT `+appColumns+` FROM applications a WHERE `+where), args...)
}

// App returns an application.
func (s *Store) App(ctx context.Context, id string) (apps.App, error) {
	return s.appWhere(ctx, s.r, "a.id = ?", id)
}

// AppByRemoveJob returns the application being removed by a job.
func (s *Store) AppByRemoveJob(ctx context.Context, jobID string) (apps.App, error) {
	return s.appWhere(ctx, s.r, "a.remove_job_id = ?", jobID)
}

// AppEnv returns an application's sealed environment.
func (s *Store) AppEnv(ctx context.Context, id string) (string, error) {
	return getOne(ctx, s.r, asIs[string], "application", s.rebind(`SELECT env FROM applications WHERE id = ?`), id)
}

// ListApps returns applications, oldest first.
func (s *Store) ListApps(ctx context.Context, serverID string) ([]apps.App, error) {
	if serverID == "" {
		return selectAll(ctx, s.r, appRow.app, `SELECT `+appColumns+` FROM applications a ORDER BY a.id`)
	}
	return selectAll(ctx, s.r, appRow.app, s.rebind(`SELECT `+appColumns+` FROM applications a WHERE a.server_id = ? ORDER BY a.id`), serverID)
}

// UpdateApp replaces an application's settings.
func (s *Store) UpdateApp(ctx context.Context, a apps.App, sealedEnv *string) error {
	c, err := settingsColumns(a)
	if err != nil {
		return err
	}
	// The kind is fixed at creation: it is not written here.
	q := `UPDATE applications SET name = ?, source = ?, container_port = ?, health_path = ?, env_keys = ?, auto_deploy = ?,
		memory_limit = ?, updated_at = ?, build = ?, build_args = ?, build_secrets = ?, compose = ?, service = ?,
		publish_bind = ?, publish_port = ?`
	args := []any{a.Name, c.source, a.ContainerPort, a.HealthPath, c.envKeys, a.AutoDeploy, a.MemoryLimit, ms(a.UpdatedAt),
		c.build, a.SealedBuildArgs, a.SealedBuildSecrets, c.compose, c.service, c.publishBind, c.publishPort}
	if sealedEnv != nil {
		q += `, env = ?`
		args = append(args, *sealedEnv)
	}
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		var old struct {
			Bind string        `db:"publish_bind"`
			Port sql.NullInt64 `db:"publish_port"`
		}
		err := tx.GetContext(ctx, &old, tx.Rebind(`SELECT publish_bind, publish_port FROM applications WHERE id = ?`), a.ID)
		if notFound(err) {
			return fault.NotFoundf("No such application.")
		}
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(q+` WHERE id = ?`), append(args, a.ID)...)
		if err := mustAffect(res, err, "application"); err != nil {
			return err
		}
		if old.Bind == c.publishBind && old.Port == c.publishPort {
			return nil
		}
		// The published port is in the server's proxy state.
		return bumpAppServer(ctx, tx, a.ID)
	})
	if isUniqueViolation(err) {
		return appUniqueViolation(err, a)
	}
	return err
}

// SetAppState moves an application between states. Whether it is being
// removed decides whether its sites are in its server's proxy state, so
// the server's proxy revision is raised with it.
func (s *Store) SetAppState(ctx context.Context, id string, from []string, state, removeJobID, removeError string, now time.Time) error {
	q, args, err := sqlx.In(`UPDATE applications SET state = ?, remove_job_id = ?, remove_error = ?, updated_at = ? WHERE id = ? AND state IN (?)`,
		state, nullString(removeJobID), nullString(removeError), ms(now), id, from)
	if err != nil {
		return err
	}
	changed := false
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(q), args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		changed = true
		return bumpAppServer(ctx, tx, id)
	})
	if err != nil || changed {
		return err
	}
	if _, err := s.App(ctx, id); err != nil {
		return err
	}
	return fault.Conflictf("application-removing", "The application is being removed.")
}

// bumpAppServer raises the proxy revision of an application's server.
func bumpAppServer(ctx context.Context, tx *sqlx.Tx, appID string) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE servers SET proxy_revision = proxy_revision + 1
		WHERE id = (SELECT server_id FROM applications WHERE id = ?)`), appID)
	return err
}

// bumpDeploymentServer raises the proxy revision of a deployment's server.
func bumpDeploymentServer(ctx context.Context, tx *sqlx.Tx, deploymentID string) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE servers SET proxy_revision = proxy_revision + 1
		WHERE id = (SELECT server_id FROM deployments WHERE id = ?)`), deploymentID)
	return err
}

// DeleteApp deletes an application with its deployments and domains, and
// raises its server's proxy revision.
func (s *Store) DeleteApp(ctx context.Context, id string) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if err := bumpAppServer(ctx, tx, id); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM domain_names WHERE domain_id IN (SELECT id FROM domains WHERE app_id = ?)`,
			`DELETE FROM domains WHERE app_id = ?`,
			`DELETE FROM deployments WHERE app_id = ?`,
			`DELETE FROM applications WHERE id = ?`,
		} {
			if _, err := tx.ExecContext(ctx, tx.Rebind(q), id); err != nil {
				return err
			}
		}
		return nil
	})
}

// deploymentColumns are the columns of deployments as read, with the
// status and start of their job. A job whose completion hook has not run
// yet reads as running, as it does through the job service: the hook is
// what records the deployment's outcome.
const deploymentColumns = `d.id, d.app_id, d.server_id, d.status, d.spec, d.ref, d.rollback_of, d.job_id, d.image_id, d.result, d.error,
	d.kept_release, d.created_by, d.created_at, d.updated_at, d.dispatched_at, d.finished_at,
	CASE WHEN j.hook_pending_at IS NOT NULL THEN 'running' ELSE COALESCE(j.status, '') END AS job_status, j.started_at AS job_started_at`

const deploymentFrom = ` FROM deployments d LEFT JOIN jobs j ON j.id = d.job_id`

type deploymentRow struct {
	ID           string         `db:"id"`
	AppID        string         `db:"app_id"`
	ServerID     string         `db:"server_id"`
	Status       string         `db:"status"`
	Spec         string         `db:"spec"`
	Ref          string         `db:"ref"`
	RollbackOf   sql.NullString `db:"rollback_of"`
	JobID        sql.NullString `db:"job_id"`
	ImageID      string         `db:"image_id"`
	KeptRelease  string         `db:"kept_release"`
	Result       sql.NullString `db:"result"`
	Error        sql.NullString `db:"error"`
	CreatedBy    string         `db:"created_by"`
	CreatedAt    int64          `db:"created_at"`
	UpdatedAt    int64          `db:"updated_at"`
	DispatchedAt sql.NullInt64  `db:"dispatched_at"`
	FinishedAt   sql.NullInt64  `db:"finished_at"`
	JobStatus    string         `db:"job_status"`
	JobStartedAt sql.NullInt64  `db:"job_started_at"`
}

func (r deploymentRow) deployment() (apps.DeploymentRecord, error) {
	d := apps.DeploymentRecord{ID: r.ID, AppID: r.AppID, ServerID: r.ServerID, Status: r.Status, Ref: r.Ref,
		RollbackOf: r.RollbackOf.String, JobID: r.JobID.String, ImageID: r.ImageID, Result: rawOrNil(r.Result),
		Error: r.Error.String, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt),
		DispatchedAt: nullMS(r.DispatchedAt), FinishedAt: nullMS(r.FinishedAt), JobStatus: r.JobStatus, JobStartedAt: nullMS(r.JobStartedAt)}
	if r.KeptRelease != "" {
		d.Release = &apps.Release{}
		if err := json.Unmarshal([]byte(r.KeptRelease), d.Release); err != nil {
			return d, err
		}
	}
	return d, json.Unmarshal([]byte(r.Spec), &d.Spec)
}

// releaseColumn is the stored form of a kept release: ” for none.
func releaseColumn(r *apps.Release) (string, error) {
	if r == nil {
		return "", nil
	}
	b, err := json.Marshal(r)
	return string(b), err
}

func (s *Store) deployments(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) ([]apps.DeploymentRecord, error) {
	return selectAll(ctx, q, deploymentRow.deployment, s.rebind(`SELECT `+deploymentColumns+deploymentFrom+` WHERE `+where), args...)
}

func (s *Store) deploymentWhere(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) (apps.DeploymentRecord, error) {
	list, err := s.deployments(ctx, q, where, args...)
	if err != nil {
		return apps.DeploymentRecord{}, err
	}
	if len(list) == 0 {
		return apps.DeploymentRecord{}, fault.NotFoundf("No such deployment.")
	}
	return list[0], nil
}

// InsertDeployment stores a queued deployment.
func (s *Store) InsertDeployment(ctx context.Context, d apps.DeploymentRecord, sealedEnv string) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if err := s.lockApp(ctx, tx, d.AppID); err != nil {
			return err
		}
		return insertDeploymentTx(ctx, tx, d, sealedEnv)
	})
}

// InsertDeploymentAfter stores a queued deployment only if the newest
// deployment of its application is still afterID ("": it has none). The
// check and the insert are one transaction, serialized with every other
// insert of the application's deployments (on PostgreSQL, by a lock of
// the application's row), so that of two callers that saw the same
// newest deployment only one stores its own; false, and nothing stored,
// for the other.
func (s *Store) InsertDeploymentAfter(ctx context.Context, d apps.DeploymentRecord, sealedEnv, afterID string) (bool, error) {
	var ok bool
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		ok = false
		if err := s.lockApp(ctx, tx, d.AppID); err != nil {
			return err
		}
		var newest sql.NullString
		if err := tx.GetContext(ctx, &newest, tx.Rebind(`SELECT MAX(id) FROM deployments WHERE app_id = ?`), d.AppID); err != nil {
			return err
		}
		if newest.String != afterID {
			return nil
		}
		ok = true
		return insertDeploymentTx(ctx, tx, d, sealedEnv)
	})
	return ok && err == nil, err
}

// lockApp takes, on PostgreSQL, the lock of an application's row until
// the transaction ends; SQLite has one writer at a time anyway.
func (s *Store) lockApp(ctx context.Context, tx *sqlx.Tx, appID string) error {
	if s.dialect != Postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT id FROM applications WHERE id = $1 FOR UPDATE`, appID)
	return err
}

func insertDeploymentTx(ctx context.Context, tx *sqlx.Tx, d apps.DeploymentRecord, sealedEnv string) error {
	spec, err := json.Marshal(d.Spec)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, tx.Rebind(`INSERT INTO deployments (id, app_id, server_id, status, spec, env, ref, rollback_of,
		created_by, created_at, updated_at, build_args, build_secrets) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		d.ID, d.AppID, d.ServerID, d.Status, string(spec), sealedEnv, d.Ref, nullString(d.RollbackOf), d.CreatedBy,
		ms(d.CreatedAt), ms(d.UpdatedAt), d.SealedBuildArgs, d.SealedBuildSecrets)
	return err
}

// DeploymentBuildSecrets returns a deployment's sealed build secrets.
func (s *Store) DeploymentBuildSecrets(ctx context.Context, id string) (string, error) {
	return getOne(ctx, s.r, asIs[string], "deployment", s.rebind(`SELECT build_secrets FROM deployments WHERE id = ?`), id)
}

// DeploymentBuildArgs returns a deployment's sealed build arguments.
func (s *Store) DeploymentBuildArgs(ctx context.Context, id string) (string, error) {
	return getOne(ctx, s.r, asIs[string], "deployment", s.rebind(`SELECT build_args FROM deployments WHERE id = ?`), id)
}

// Deployment returns a deployment.
func (s *Store) Deployment(ctx context.Context, id string) (apps.DeploymentRecord, error) {
	return s.deploymentWhere(ctx, s.r, "d.id = ?", id)
}

// DeploymentEnv returns a deployment's sealed environment.
func (s *Store) DeploymentEnv(ctx context.Context, id string) (string, error) {
	return getOne(ctx, s.r, asIs[string], "deployment", s.rebind(`SELECT env FROM deployments WHERE id = ?`), id)
}

// ListDeployments returns deployments newest first.
func (s *Store) ListDeployments(ctx context.Context, appID string, limit int) ([]apps.DeploymentRecord, error) {
	if appID == "" {
		return s.deployments(ctx, s.r, "1 = 1 ORDER BY d.id DESC LIMIT ?", limit)
	}
	return s.deployments(ctx, s.r, "d.app_id = ? ORDER BY d.id DESC LIMIT ?", appID, limit)
}

// RunningDeployments returns the deployments holding their application's
// slot.
func (s *Store) RunningDeployments(ctx context.Context, appID string) ([]apps.DeploymentRecord, error) {
	if appID == "" {
		return s.deployments(ctx, s.r, "d.status = 'running' ORDER BY d.id")
	}
	return s.deployments(ctx, s.r, "d.app_id = ? AND d.status = 'running' ORDER BY d.id", appID)
}

// ClaimDeployment gives an application's free slot to its newest queued
// deployment and supersedes the older queued ones. Most calls find
// nothing to do: that is found out with a read before a write transaction
// is opened. The partial unique index deployments_one_running makes a
// concurrent claim of another replica fail rather than run two.
func (s *Store) ClaimDeployment(ctx context.Context, appID string, now time.Time) (apps.DeploymentRecord, []string, bool, error) {
	var n int
	err := s.r.GetContext(ctx, &n, s.rebind(`SELECT COUNT(*) FROM applications a WHERE a.id = ? AND a.state != 'removing'
		AND EXISTS (SELECT 1 FROM deployments d WHERE d.app_id = a.id AND d.status = 'queued')
		AND NOT EXISTS (SELECT 1 FROM deployments d WHERE d.app_id = a.id AND d.status = 'running')`), appID)
	if err != nil || n == 0 {
		return apps.DeploymentRecord{}, nil, false, err
	}
	var (
		claimed    apps.DeploymentRecord
		superseded []string
		ok         bool
	)
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		superseded, ok = nil, false
		// Serialize with every other claim and removal of the app.
		if err := s.lockApp(ctx, tx, appID); err != nil {
			return err
		}
		var state string
		if err := tx.GetContext(ctx, &state, tx.Rebind(`SELECT state FROM applications WHERE id = ?`), appID); err != nil {
			if notFound(err) {
				return nil
			}
			return err
		}
		var running int
		if err := tx.GetContext(ctx, &running, tx.Rebind(`SELECT COUNT(*) FROM deployments WHERE app_id = ? AND status = 'running'`), appID); err != nil {
			return err
		}
		if state == apps.StateRemoving || running > 0 {
			return nil
		}
		var queued []string
		if err := tx.SelectContext(ctx, &queued, tx.Rebind(`SELECT id FROM deployments WHERE app_id = ? AND status = 'queued' ORDER BY id DESC`), appID); err != nil {
			return err
		}
		if len(queued) == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE deployments SET status = 'running', dispatched_at = ?, updated_at = ? WHERE id = ? AND status = 'queued'`),
			ms(now), ms(now), queued[0]); err != nil {
			return err
		}
		for _, id := range queued[1:] {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE deployments SET status = 'superseded', error = ?, finished_at = ?, updated_at = ?
				WHERE id = ? AND status = 'queued'`), "superseded by "+queued[0], ms(now), ms(now), id); err != nil {
				return err
			}
		}
		var err error
		claimed, err = s.deploymentWhere(ctx, tx, "d.id = ?", queued[0])
		superseded, ok = queued[1:], err == nil
		return err
	})
	if isUniqueViolation(err) {
		return apps.DeploymentRecord{}, nil, false, nil // another replica claimed the slot
	}
	return claimed, superseded, ok, err
}

// SetDeploymentJob records the job of a deployment that has none yet.
func (s *Store) SetDeploymentJob(ctx context.Context, id, jobID string, now time.Time) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE deployments SET job_id = ?, updated_at = ? WHERE id = ? AND job_id IS NULL`),
		jobID, ms(now), id)
	if isUniqueViolation(err) {
		return fault.Conflictf("job-taken", "The job belongs to another deployment.")
	}
	return err
}

// FinishDeployment ends a running deployment.
func (s *Store) FinishDeployment(ctx context.Context, id string, f apps.Finish) (bool, error) {
	release, err := releaseColumn(f.Release)
	if err != nil {
		return false, err
	}
	var done bool
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		done, err = changedOne(tx.ExecContext(ctx, tx.Rebind(`UPDATE deployments SET status = ?, error = ?, result = ?, image_id = ?, kept_release = ?,
			finished_at = ?, updated_at = ? WHERE id = ? AND status = 'running'`),
			f.Status, nullString(f.Error), nullRaw(f.Result), f.ImageID, release, ms(f.At), ms(f.At), id))
		if err != nil || !done {
			return err
		}
		if err := publishDeploymentTx(ctx, tx, id, f); err != nil {
			return err
		}
		if f.Status != apps.Succeeded {
			return nil
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE applications SET current_deployment_id = ?, updated_at = ?
			WHERE id = (SELECT app_id FROM deployments WHERE id = ?)`), id, ms(f.At), id); err != nil {
			return err
		}
		// The application's sites now proxy to another container.
		return bumpDeploymentServer(ctx, tx, id)
	})
	if done && err == nil {
		s.published()
	}
	return done, err
}

// ReconcileDeployment records a deployment failed with agent_lost as the
// success its late result says it was, and makes it current unless the
// application's current deployment is a later one (deployment ids are
// time-ordered).
func (s *Store) ReconcileDeployment(ctx context.Context, id string, f apps.Finish) (bool, error) {
	release, err := releaseColumn(f.Release)
	if err != nil {
		return false, err
	}
	var done bool
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		done, err = changedOne(tx.ExecContext(ctx, tx.Rebind(`UPDATE deployments SET status = ?, error = NULL, result = ?, image_id = ?, kept_release = ?,
			finished_at = ?, updated_at = ? WHERE id = ? AND status = 'failed' AND error = ?`),
			apps.Succeeded, nullRaw(f.Result), f.ImageID, release, ms(f.At), ms(f.At), id, jobs.ErrAgentLost))
		if err != nil || !done {
			return err
		}
		if err := publishDeploymentTx(ctx, tx, id, f); err != nil {
			return err
		}
		current, err := changedOne(tx.ExecContext(ctx, tx.Rebind(`UPDATE applications SET current_deployment_id = ?, updated_at = ?
			WHERE id = (SELECT app_id FROM deployments WHERE id = ?) AND (current_deployment_id IS NULL OR current_deployment_id < ?)`),
			id, ms(f.At), id, id))
		if err != nil || !current {
			return err
		}
		return bumpDeploymentServer(ctx, tx, id)
	})
	if done && err == nil {
		s.published()
	}
	return done, err
}

// publishDeploymentTx publishes deploy.succeeded or deploy.failed for a
// deployment that just ended, in the transaction that ended it.
func publishDeploymentTx(ctx context.Context, tx *sqlx.Tx, id string, f apps.Finish) error {
	var typ events.Type
	switch f.Status {
	case apps.Succeeded:
		typ = events.DeploySucceeded
	case apps.Failed:
		typ = events.DeployFailed
	default:
		return nil
	}
	var r struct {
		AppID    string `db:"app_id"`
		AppName  string `db:"name"`
		ServerID string `db:"server_id"`
		Ref      string `db:"ref"`
	}
	if err := tx.GetContext(ctx, &r, tx.Rebind(`SELECT d.app_id, a.name, d.server_id, d.ref FROM deployments d
		JOIN applications a ON a.id = d.app_id WHERE d.id = ?`), id); err != nil {
		return err
	}
	ev, err := events.New(typ, events.Subject{Type: "deployment", ID: id}, events.DeployPayload{DeploymentID: id, ApplicationID: r.AppID,
		ApplicationName: r.AppName, ServerID: r.ServerID, Ref: r.Ref, Error: f.Error}, f.At)
	if err != nil {
		return err
	}
	return publishTx(ctx, tx, ev)
}

// CancelQueuedDeployments cancels queued deployments of an application.
func (s *Store) CancelQueuedDeployments(ctx context.Context, appID, id string, now time.Time) ([]string, error) {
	var out []string
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		out = nil
		q, args := `SELECT id FROM deployments WHERE app_id = ? AND status = 'queued'`, []any{appID}
		if id != "" {
			q, args = q+` AND id = ?`, append(args, id)
		}
		if err := tx.SelectContext(ctx, &out, tx.Rebind(q+` ORDER BY id`), args...); err != nil {
			return err
		}
		for _, d := range out {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE deployments SET status = 'cancelled', error = 'cancelled', finished_at = ?, updated_at = ?
				WHERE id = ? AND status = 'queued'`), ms(now), ms(now), d); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// SucceededImageIDs returns the image ids of the newest succeeded
// deployments, distinct, newest first.
func (s *Store) SucceededImageIDs(ctx context.Context, appID string, limit int) ([]string, error) {
	var rows []string
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT image_id FROM deployments WHERE app_id = ? AND status = 'succeeded' AND image_id != ''
		ORDER BY id DESC LIMIT ?`), appID, limit); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rows))
	seen := map[string]bool{}
	for _, id := range rows {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// ProxySites returns the sites of a server's applications that are not
// being removed.
func (s *Store) ProxySites(ctx context.Context, serverID string) ([]agentproto.ProxySite, error) {
	var rows []struct {
		Hostname    string `db:"hostname"`
		AppID       string `db:"app_id"`
		TLSMode     string `db:"tls_mode"`
		RedirectWWW bool   `db:"redirect_www"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT d.hostname, d.app_id, d.tls_mode, d.redirect_www FROM domains d
		JOIN applications a ON a.id = d.app_id WHERE d.server_id = ? AND a.state != 'removing' ORDER BY d.hostname`), serverID); err != nil {
		return nil, err
	}
	out := make([]agentproto.ProxySite, len(rows))
	for i, r := range rows {
		out[i] = agentproto.ProxySite{Hostname: r.Hostname, AppID: r.AppID, TLSMode: r.TLSMode, RedirectWWW: r.RedirectWWW}
	}
	return out, nil
}

// ProxyPorts returns the published ports of a server's applications that
// are not being removed, by port.
func (s *Store) ProxyPorts(ctx context.Context, serverID string) ([]agentproto.ProxyPort, error) {
	var rows []struct {
		AppID string `db:"id"`
		Bind  string `db:"publish_bind"`
		Port  int    `db:"publish_port"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT id, publish_bind, publish_port FROM applications
		WHERE server_id = ? AND publish_port IS NOT NULL AND state != 'removing' ORDER BY publish_port`), serverID); err != nil {
		return nil, err
	}
	var out []agentproto.ProxyPort
	for _, r := range rows {
		out = append(out, agentproto.ProxyPort{AppID: r.AppID, Bind: r.Bind, Port: r.Port})
	}
	return out, nil
}

// ReplaceAppEnv replaces an application's sealed env and its keys if it
// is still oldSealed.
func (s *Store) ReplaceAppEnv(ctx context.Context, id, oldSealed, newSealed string, keys []string, now time.Time) error {
	k, err := json.Marshal(nonNil(keys))
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE applications SET env = ?, env_keys = ?, updated_at = ? WHERE id = ? AND env = ?`),
		newSealed, string(k), ms(now), id, oldSealed)
	return mustChange(res, err, func() error { _, err := s.AppEnv(ctx, id); return err },
		fault.Conflictf("env-changed", "The application's env changed while it was being set."))
}
