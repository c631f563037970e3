package databases

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Databases and logins of an instance. The agent creates and drops them
// as the instance's admin login; the control plane checks every name by
// the engine's rules first (agentproto.DBIdentifierProblem), so bad input
// is refused before anything is queued.
//
// A login's password is made here (crypto/rand), stored sealed before its
// job is queued, sent to the agent only in the job's secrets, returned
// once in the reply, and later only by the audited connection read. A
// login is creating until its db.user.create job succeeded (forgotten if
// it fails); a rotation keeps the new password pending and replaces the
// stored one only when db.user.rotate succeeded, so a failed rotation
// leaves the old password stored and working; a drop forgets the login
// only when db.user.drop succeeded.

// Login states.
const (
	LoginCreating = "creating"
	LoginReady    = "ready"
	LoginDropping = "dropping"
)

// Audit actions of databases and logins. Details never hold passwords.
const (
	ActionDatabaseCreate = "database.database.create"
	ActionDatabaseDrop   = "database.database.drop"
	ActionLoginCreate    = "database.login.create"
	ActionLoginRotate    = "database.login.rotate"
	ActionLoginDrop      = "database.login.drop"
)

// PasswordBytes is the randomness of a generated password: 32 bytes, 43
// characters of unpadded base64url.
const PasswordBytes = 32

// LoginStore persists the logins Capstan creates. Finish* return whether
// the job's outcome changed a login (false: recorded already).
type LoginStore interface {
	// InsertDatabaseLogin stores a login; fault.Conflict "login-exists"
	// if the instance has one of that name.
	InsertDatabaseLogin(ctx context.Context, c Credential) error
	FinishDatabaseLogin(ctx context.Context, jobID string, ok bool, now time.Time) (bool, error)
	// StartDatabaseRotation and StartDatabaseLoginDrop act on a ready
	// login without a rotation under way: fault.NotFound without the
	// login, fault.Conflict "login-busy" otherwise.
	StartDatabaseRotation(ctx context.Context, id, sealed, jobID string, now time.Time) error
	FinishDatabaseRotation(ctx context.Context, jobID string, ok bool, now time.Time) (bool, error)
	StartDatabaseLoginDrop(ctx context.Context, id, jobID string, now time.Time) error
	FinishDatabaseLoginDrop(ctx context.Context, jobID string, ok bool, now time.Time) (bool, error)
}

// registerLogins registers the job types of databases and logins.
func (s *Service) registerLogins(j *jobs.Service) {
	finish := func(f func(context.Context, string, bool, time.Time) (bool, error)) jobs.CompletionHook {
		return func(ctx context.Context, jb jobs.Job) error {
			_, err := f(context.WithoutCancel(ctx), jb.ID, jb.Status == jobs.Succeeded, s.now().UTC())
			return err
		}
	}
	j.Register(agentproto.DBDatabaseCreate, jobs.Spec{Timeout: 2 * time.Minute})
	j.Register(agentproto.DBDatabaseDrop, jobs.Spec{Timeout: 2 * time.Minute})
	j.Register(agentproto.DBUserCreate, jobs.Spec{Timeout: 2 * time.Minute, OnComplete: s.loginHook(s.store.FinishDatabaseLogin)})
	j.Register(agentproto.DBUserRotate, jobs.Spec{Timeout: time.Minute, OnComplete: s.loginHook(s.store.FinishDatabaseRotation)})
	j.Register(agentproto.DBUserDrop, jobs.Spec{Timeout: 2 * time.Minute, OnComplete: finish(s.store.FinishDatabaseLoginDrop)})
}

// newPassword returns a random password.
func newPassword() string {
	b := make([]byte, PasswordBytes)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// identProblem adds the field error of a name that the engine would not
// take.
func identProblem(errs *fault.Fields, engine, kind, field, name string) {
	if p := agentproto.DBIdentifierProblem(engine, kind, name); p != "" {
		errs.Add(field, "%s", p)
	}
}

// adminReady returns the ready instance and its admin login with its
// password, after errs: bad input is reported before the state is.
func (s *Service) adminReady(ctx context.Context, inst Instance, errs fault.Fields) (Instance, Credential, string, error) {
	if err := errs.Err(); err != nil {
		return Instance{}, Credential{}, "", err
	}
	inst, err := s.current(ctx, inst)
	if err != nil {
		return Instance{}, Credential{}, "", err
	}
	if inst.State != StateReady {
		return Instance{}, Credential{}, "", fault.Conflictf("instance-not-ready",
			"The instance is %s; it takes calls once its connection test succeeded.", inst.State)
	}
	cred, password, err := s.adminLogin(ctx, inst.ID)
	return inst, cred, password, err
}

// sqlOnly refuses a key-value instance for a call on SQL databases.
func sqlOnly(inst Instance) error {
	if agentproto.EngineKind(inst.Engine) == agentproto.EngineKindSQL {
		return nil
	}
	msg := inst.Engine + " has numbered databases only: there is nothing to create or drop"
	return &fault.Error{Kind: fault.Invalid, Code: "wrong-engine-kind", Message: msg + ".", Fields: []fault.FieldError{{Field: "id", Message: msg}}}
}

// CreateDatabase queues db.database.create on a ready SQL instance.
func (s *Service) CreateDatabase(ctx context.Context, c audit.Caller, id, name, owner string) (jobs.Job, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	if err := sqlOnly(inst); err != nil {
		return jobs.Job{}, err
	}
	var errs fault.Fields
	identProblem(&errs, inst.Engine, agentproto.DBIdentDatabase, "name", name)
	if owner != "" {
		identProblem(&errs, inst.Engine, agentproto.DBIdentUser, "owner", owner)
	}
	inst, admin, password, err := s.adminReady(ctx, inst, errs)
	if err != nil {
		return jobs.Job{}, err
	}
	j, err := s.enqueue(ctx, inst, jobs.Of(agentproto.DBDatabaseCreate, agentproto.DBDatabasePayload{Target: target(inst, admin), Name: name,
		Owner: owner}), password, c.Actor.ID)
	if err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionDatabaseCreate, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "database": name, "owner": owner})
}

// DropDatabase queues db.database.drop on a ready SQL instance. The
// instance's initial database and a database with stored logins are not
// dropped (409).
func (s *Service) DropDatabase(ctx context.Context, c audit.Caller, id, name string) (jobs.Job, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	if err := sqlOnly(inst); err != nil {
		return jobs.Job{}, err
	}
	var errs fault.Fields
	identProblem(&errs, inst.Engine, agentproto.DBIdentDatabase, "name", name)
	if err := errs.Err(); err != nil {
		return jobs.Job{}, err
	}
	if name == inst.Database {
		return jobs.Job{}, fault.Conflictf("initial-database", "%s is the instance's initial database: Capstan connects to it.", name)
	}
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	for _, cr := range creds {
		if cr.Database == name {
			return jobs.Job{}, fault.Conflictf("database-has-logins", "The login %s is for %s: drop its logins first.", cr.Username, name)
		}
	}
	inst, admin, password, err := s.adminReady(ctx, inst, nil)
	if err != nil {
		return jobs.Job{}, err
	}
	j, err := s.enqueue(ctx, inst, jobs.Of(agentproto.DBDatabaseDrop, agentproto.DBDatabasePayload{Target: target(inst, admin), Name: name}),
		password, c.Actor.ID)
	if err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionDatabaseDrop, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "database": name})
}

// NewLogin is a request to create a login.
type NewLogin struct {
	Username string
	// Database is the SQL database the login is for.
	Database string
	Access   string
	// KeyPattern is the key glob of a key-value login.
	KeyPattern string
}

// LoginSecret is a login with its password, returned once.
type LoginSecret struct {
	Login    Login    `json:"login"`
	Password string   `json:"password" doc:"Returned once, here; later only by the audited GET …/connection"`
	URL      string   `json:"url" doc:"The login as a URL, as the instance's server reaches it"`
	JobID    string   `json:"job_id" doc:"The job that applies it; read it at /api/v1/databases/{id}/jobs/{job_id}"`
	Job      jobs.Job `json:"job"`
}

// CreateLogin stores a login in state creating with a new password and
// queues db.user.create.
func (s *Service) CreateLogin(ctx context.Context, c audit.Caller, id string, n NewLogin) (LoginSecret, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return LoginSecret{}, err
	}
	var errs fault.Fields
	identProblem(&errs, inst.Engine, agentproto.DBIdentUser, "username", n.Username)
	if agentproto.EngineKind(inst.Engine) == agentproto.EngineKindKV {
		if n.Database != "" {
			errs.Add("database", "%s has no database names: a key-value login takes key_pattern", inst.Engine)
		}
		if p := agentproto.DBKeyPatternProblem(n.KeyPattern); p != "" {
			errs.Add("key_pattern", "%s", p)
		}
		if n.Access != agentproto.DBAccessReadOnly && n.Access != agentproto.DBAccessReadWrite {
			errs.Add("access", "must be readonly or readwrite on %s", inst.Engine)
		}
	} else {
		if n.KeyPattern != "" {
			errs.Add("key_pattern", "applies only to key-value engines; a SQL login takes database")
		}
		identProblem(&errs, inst.Engine, agentproto.DBIdentDatabase, "database", n.Database)
		switch n.Access {
		case agentproto.DBAccessReadOnly, agentproto.DBAccessReadWrite, agentproto.DBAccessAdmin:
		default:
			errs.Add("access", "must be readonly, readwrite or admin")
		}
	}
	inst, admin, adminPW, err := s.adminReady(ctx, inst, errs)
	if err != nil {
		return LoginSecret{}, err
	}
	now := s.now().UTC()
	password := newPassword()
	cred := Credential{ID: ids.NewAt(CredentialIDPrefix, now), InstanceID: id, Username: n.Username, Database: n.Database, Access: n.Access,
		KeyPattern: n.KeyPattern, State: LoginCreating, JobID: jobs.NewID(now), CreatedAt: now, UpdatedAt: now}
	cred.SealedPassword = s.key.Seal(passwordContext(cred.ID), []byte(password))
	if err := s.store.InsertDatabaseLogin(ctx, cred); err != nil {
		return LoginSecret{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: cred.JobID, ServerID: inst.ServerID,
		Work: jobs.Of(agentproto.DBUserCreate, agentproto.DBUserPayload{Target: target(inst, admin), Username: n.Username, Database: n.Database, Access: n.Access,
			KeyPattern: n.KeyPattern}),
		Secrets:   map[string]string{agentproto.SecretDBPassword: adminPW, agentproto.SecretDBNewPassword: password},
		CreatedBy: c.Actor.ID})
	if err != nil {
		if _, ferr := s.store.FinishDatabaseLogin(context.WithoutCancel(ctx), cred.JobID, false, now); ferr != nil {
			s.log.ErrorContext(ctx, "forgetting a login whose job could not be queued", "credential_id", cred.ID, "err", ferr.Error())
		}
		return LoginSecret{}, err
	}
	if err := s.audit.Record(ctx, c, ActionLoginCreate, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "credential_id": cred.ID,
		"username": n.Username, "database": n.Database, "access": n.Access, "key_pattern": n.KeyPattern}); err != nil {
		return LoginSecret{}, err
	}
	return LoginSecret{Login: Login{CredentialID: cred.ID, Username: cred.Username, Database: cred.Database, Access: cred.Access,
		KeyPattern: cred.KeyPattern, State: cred.State}, Password: password, URL: ConnectionURL(inst, n.Username, password, n.Database),
		JobID: j.ID, Job: j}, nil
}

// stored returns the stored login credID of the instance, and whether it
// is the instance's admin login.
func (s *Service) stored(ctx context.Context, id string, match func(Credential) bool) (Credential, bool, bool, error) {
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Credential{}, false, false, err
	}
	adminID := ""
	for _, c := range creds {
		if c.Access == AccessAdmin && adminID == "" {
			adminID = c.ID
		}
	}
	for _, c := range creds {
		if match(c) {
			return c, true, c.ID == adminID, nil
		}
	}
	return Credential{}, false, false, nil
}

// RotateLogin gives a login a new password by db.user.rotate; the stored
// password is replaced when the job succeeds.
func (s *Service) RotateLogin(ctx context.Context, c audit.Caller, id, credID string) (LoginSecret, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return LoginSecret{}, err
	}
	cred, found, isAdmin, err := s.stored(ctx, id, func(c Credential) bool { return c.ID == credID })
	if err != nil {
		return LoginSecret{}, err
	}
	if !found {
		return LoginSecret{}, fault.NotFoundf("No such login of this instance.")
	}
	if isAdmin {
		return LoginSecret{}, fault.Conflictf("admin-login", "%s is the login Capstan reaches the instance with: it is not rotated here.", cred.Username)
	}
	inst, admin, adminPW, err := s.adminReady(ctx, inst, nil)
	if err != nil {
		return LoginSecret{}, err
	}
	now := s.now().UTC()
	password, jobID := newPassword(), jobs.NewID(now)
	if err := s.store.StartDatabaseRotation(ctx, cred.ID, s.key.Seal(passwordContext(cred.ID), []byte(password)), jobID, now); err != nil {
		return LoginSecret{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: inst.ServerID,
		Work:      jobs.Of(agentproto.DBUserRotate, agentproto.DBUserPayload{Target: target(inst, admin), Username: cred.Username}),
		Secrets:   map[string]string{agentproto.SecretDBPassword: adminPW, agentproto.SecretDBNewPassword: password},
		CreatedBy: c.Actor.ID})
	if err != nil {
		if _, ferr := s.store.FinishDatabaseRotation(context.WithoutCancel(ctx), jobID, false, now); ferr != nil {
			s.log.ErrorContext(ctx, "ending a rotation whose job could not be queued", "credential_id", cred.ID, "err", ferr.Error())
		}
		return LoginSecret{}, err
	}
	if err := s.audit.Record(ctx, c, ActionLoginRotate, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "credential_id": cred.ID,
		"username": cred.Username}); err != nil {
		return LoginSecret{}, err
	}
	return LoginSecret{Login: Login{CredentialID: cred.ID, Username: cred.Username, Database: cred.Database, Access: cred.Access,
		KeyPattern: cred.KeyPattern, State: cred.State, Rotating: true}, Password: password,
		URL: ConnectionURL(inst, cred.Username, password, cred.Database), JobID: j.ID, Job: j}, nil
}

// DropLogin queues db.user.drop. A stored login is forgotten when the
// job succeeds; a login Capstan did not make is dropped on the engine
// only. The instance's admin login is not dropped (409).
func (s *Service) DropLogin(ctx context.Context, c audit.Caller, id, username string) (jobs.Job, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	cred, found, isAdmin, err := s.stored(ctx, id, func(c Credential) bool { return c.Username == username })
	if err != nil {
		return jobs.Job{}, err
	}
	if isAdmin {
		return jobs.Job{}, fault.Conflictf("admin-login", "%s is the login Capstan reaches the instance with: it cannot be dropped.", username)
	}
	var errs fault.Fields
	if p := agentproto.DBIdentifierProblem(inst.Engine, agentproto.DBIdentUser, username); p != "" {
		errs.Add("username", "%s", p)
	}
	if err := errs.Err(); err != nil {
		return jobs.Job{}, err
	}
	inst, admin, adminPW, err := s.adminReady(ctx, inst, nil)
	if err != nil {
		return jobs.Job{}, err
	}
	now := s.now().UTC()
	jobID := jobs.NewID(now)
	if found {
		if err := s.store.StartDatabaseLoginDrop(ctx, cred.ID, jobID, now); err != nil {
			return jobs.Job{}, err
		}
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: inst.ServerID,
		Work:      jobs.Of(agentproto.DBUserDrop, agentproto.DBUserPayload{Target: target(inst, admin), Username: username, Database: cred.Database}),
		Secrets:   map[string]string{agentproto.SecretDBPassword: adminPW},
		CreatedBy: c.Actor.ID})
	if err != nil {
		if found {
			if _, ferr := s.store.FinishDatabaseLoginDrop(context.WithoutCancel(ctx), jobID, false, now); ferr != nil {
				s.log.ErrorContext(ctx, "ending a drop whose job could not be queued", "credential_id", cred.ID, "err", ferr.Error())
			}
		}
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionLoginDrop, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "username": username, "stored": found})
}
