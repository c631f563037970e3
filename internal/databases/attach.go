package databases

import (
	"context"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Attaching an application to an instance gives the application a
// dedicated readwrite login (on a key-value instance an ACL user reaching
// the keys <application name>:*), created like any other login (its password
// made here and stored sealed), and records the attachment. When the
// login's db.user.create job succeeds the application's env key is set to
// the login's URL as the application's container reaches the instance; a
// rotation that succeeds sets it again. Neither redeploys the
// application: the value is applied on its next deployment. When the
// application is deleted its attached logins are dropped; when the
// instance is deleted its attachments are forgotten and the env values
// stay in the applications.

// AttachmentIDPrefix prefixes attachment ids.
const AttachmentIDPrefix = "dba"

// ActionAttach is the audit action of an attachment. Its details name the
// application, the env key and the login, never the URL.
const ActionAttach = "database.attach"

// Attachment is an application attached to an instance by a login.
type Attachment struct {
	ID            string
	InstanceID    string
	CredentialID  string
	ApplicationID string
	EnvKey        string
	CreatedBy     string
	CreatedAt     time.Time
}

// AttachmentStore persists attachments.
type AttachmentStore interface {
	// InsertAttachedLogin stores a login and its attachment together:
	// fault.Conflict "already-attached" if the application is attached to
	// the instance or has an attachment with that env key,
	// "login-exists" if the instance has a login of that name.
	InsertAttachedLogin(ctx context.Context, c Credential, a Attachment) error
	// AttachmentByLoginJob returns the attachment whose login is created
	// or rotated by jobID; fault.NotFound if there is none.
	AttachmentByLoginJob(ctx context.Context, jobID string) (Attachment, error)
	// ApplicationAttachments returns an application's attachments.
	ApplicationAttachments(ctx context.Context, appID string) ([]Attachment, error)
	// InstanceAttachments returns an instance's attachments.
	InstanceAttachments(ctx context.Context, instanceID string) ([]Attachment, error)
}

// Apps is what attaching needs of applications.
type Apps interface {
	App(ctx context.Context, id string) (apps.App, error)
	SetEnvValue(ctx context.Context, appID, key, value string) error
	OnDelete(f func(ctx context.Context, appID string))
}

// AttachRequest is a request to attach an application.
type AttachRequest struct {
	ApplicationID string
	EnvKey        string
	// Database is the SQL database of the login; the instance's initial
	// database when empty.
	Database string
}

// AttachResult is an accepted attachment.
type AttachResult struct {
	AttachmentID  string   `json:"attachment_id"`
	ApplicationID string   `json:"application_id"`
	EnvKey        string   `json:"env_key"`
	CredentialID  string   `json:"credential_id" doc:"The application's login, listed with the instance's logins"`
	Username      string   `json:"username"`
	Database      string   `json:"database" doc:"SQL engines: the login's database; empty for key-value engines"`
	KeyPattern    string   `json:"key_pattern,omitempty" doc:"Key-value engines: the keys the application's ACL user reaches, <application name>:*"`
	JobID         string   `json:"job_id" doc:"The db.user.create job; env_key is set when it succeeds"`
	Job           jobs.Job `json:"job"`
}

// AttachUsername is the login made for an application: app_ and the
// application id's unique part, at most 30 characters of lowercase
// letters and digits, valid on every SQL engine.
func AttachUsername(appID string) string {
	return "app_" + strings.ToLower(appID[strings.LastIndexByte(appID, '_')+1:])
}

// AttachKeyPattern is the key pattern of an application's ACL user on a
// key-value instance: the application's name and a colon, then anything.
func AttachKeyPattern(appName string) string { return appName + ":*" }

// Attach creates a readwrite login for an application and records the
// attachment; the application's env key is set when the login exists. On
// a SQL instance the login is for one database; on a key-value instance
// it is an ACL user whose keys are AttachKeyPattern of the application's
// name, with the read-write command set.
func (s *Service) Attach(ctx context.Context, c audit.Caller, id string, r AttachRequest) (AttachResult, error) {
	if s.apps == nil {
		return AttachResult{}, fault.Conflictf("applications-unavailable", "Applications are not available on this control plane.")
	}
	var errs fault.Fields
	apps.ValidateEnvKey(r.EnvKey, "env_key", &errs)
	if r.ApplicationID == "" {
		errs.Add("application_id", "is required")
	}
	if err := errs.Err(); err != nil {
		return AttachResult{}, err
	}
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return AttachResult{}, err
	}
	app, err := s.apps.App(ctx, r.ApplicationID)
	if fault.Is(err, fault.NotFound) {
		return AttachResult{}, fault.NotFoundf("No such application.")
	}
	if err != nil {
		return AttachResult{}, err
	}
	if inst.Managed && app.ServerID != inst.ServerID {
		msg := "the application runs on another server than this managed instance: its container could not reach it"
		return AttachResult{}, &fault.Error{Kind: fault.Invalid, Code: "other-server", Message: "The application runs on another server.",
			Fields: []fault.FieldError{{Field: "application_id", Message: msg}}}
	}
	kv := agentproto.EngineKind(inst.Engine) == agentproto.EngineKindKV
	database, keyPattern := r.Database, ""
	switch {
	case kv && database != "":
		errs.Add("database", "%s has no database names: the application's ACL user reaches the keys %s", inst.Engine, AttachKeyPattern(app.Name))
	case kv:
		keyPattern = AttachKeyPattern(app.Name)
		if p := agentproto.DBKeyPatternProblem(keyPattern); p != "" {
			errs.Add("application_id", "the key pattern %s of the application's name %s", keyPattern, p)
		}
	case database == "":
		database = inst.Database // taken when the instance was registered
	default:
		identProblem(&errs, inst.Engine, agentproto.DBIdentDatabase, "database", database)
	}
	username := AttachUsername(app.ID)
	identProblem(&errs, inst.Engine, agentproto.DBIdentUser, "application_id", username)
	if err := errs.Err(); err != nil {
		return AttachResult{}, err
	}
	for _, k := range app.EnvKeys {
		if k == r.EnvKey {
			return AttachResult{}, fault.Conflictf("env-key-set", "The application's env has %s already.", r.EnvKey)
		}
	}
	attached, err := s.store.ApplicationAttachments(ctx, app.ID)
	if err != nil {
		return AttachResult{}, err
	}
	for _, a := range attached {
		if a.InstanceID == id {
			return AttachResult{}, fault.Conflictf("already-attached", "The application is attached to this instance already.")
		}
		if a.EnvKey == r.EnvKey {
			return AttachResult{}, fault.Conflictf("env-key-set", "The application's %s is set by another attachment.", r.EnvKey)
		}
	}
	inst, admin, adminPW, err := s.adminReady(ctx, inst, nil)
	if err != nil {
		return AttachResult{}, err
	}
	now := s.now().UTC()
	password := newPassword()
	cred := Credential{ID: ids.NewAt(CredentialIDPrefix, now), InstanceID: id, Username: username, Database: database,
		Access: agentproto.DBAccessReadWrite, KeyPattern: keyPattern, State: LoginCreating, JobID: jobs.NewID(now), CreatedAt: now,
		UpdatedAt: now}
	cred.SealedPassword = s.key.Seal(passwordContext(cred.ID), []byte(password))
	att := Attachment{ID: ids.NewAt(AttachmentIDPrefix, now), InstanceID: id, CredentialID: cred.ID, ApplicationID: app.ID,
		EnvKey: r.EnvKey, CreatedBy: c.Actor.ID, CreatedAt: now}
	if err := s.store.InsertAttachedLogin(ctx, cred, att); err != nil {
		return AttachResult{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: cred.JobID, ServerID: inst.ServerID,
		Work: jobs.Of(agentproto.DBUserCreate, agentproto.DBUserPayload{Target: target(inst, admin), Username: username, Database: database,
			Access: agentproto.DBAccessReadWrite, KeyPattern: keyPattern}),
		Secrets:   map[string]string{agentproto.SecretDBPassword: adminPW, agentproto.SecretDBNewPassword: password},
		CreatedBy: c.Actor.ID})
	if err != nil {
		if _, ferr := s.store.FinishDatabaseLogin(context.WithoutCancel(ctx), cred.JobID, false, now); ferr != nil {
			s.log.ErrorContext(ctx, "forgetting a login whose job could not be queued", "credential_id", cred.ID, "err", ferr.Error())
		}
		return AttachResult{}, err
	}
	if err := s.audit.Record(ctx, c, ActionAttach, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "application_id": app.ID,
		"env_key": r.EnvKey, "credential_id": cred.ID, "username": username, "database": database, "key_pattern": keyPattern}); err != nil {
		return AttachResult{}, err
	}
	return AttachResult{AttachmentID: att.ID, ApplicationID: app.ID, EnvKey: r.EnvKey, CredentialID: cred.ID, Username: username,
		Database: database, KeyPattern: keyPattern, JobID: j.ID, Job: j}, nil
}

// appURL is a login's URL as an application's container reaches the
// instance.
func (s *Service) appURL(inst Instance, username, password, database string) string {
	if inst.Managed {
		return s.AppURL(inst, username, password, database)
	}
	return ConnectionURL(inst, username, password, database)
}

// loginHook wraps the completion of a login's create or rotate job: when
// it succeeded for an attached login, the application's env key is set to
// the login's URL with its stored password.
func (s *Service) loginHook(finish func(context.Context, string, bool, time.Time) (bool, error)) jobs.CompletionHook {
	return func(ctx context.Context, jb jobs.Job) error {
		ctx = context.WithoutCancel(ctx)
		att, aerr := s.store.AttachmentByLoginJob(ctx, jb.ID)
		if aerr != nil && !fault.Is(aerr, fault.NotFound) {
			return aerr
		}
		changed, err := finish(ctx, jb.ID, jb.Status == jobs.Succeeded, s.now().UTC())
		if err != nil || !changed || aerr != nil || jb.Status != jobs.Succeeded || s.apps == nil {
			return err
		}
		return s.setAttachedEnv(ctx, att)
	}
}

// setAttachedEnv sets an attachment's env key to its login's URL.
func (s *Service) setAttachedEnv(ctx context.Context, att Attachment) error {
	inst, err := s.store.DatabaseInstance(ctx, att.InstanceID)
	if err != nil {
		return err
	}
	creds, err := s.store.DatabaseCredentials(ctx, att.InstanceID)
	if err != nil {
		return err
	}
	for _, cr := range creds {
		if cr.ID != att.CredentialID {
			continue
		}
		pw, err := s.key.Open(passwordContext(cr.ID), cr.SealedPassword)
		if err != nil {
			return err
		}
		err = s.apps.SetEnvValue(ctx, att.ApplicationID, att.EnvKey, s.appURL(inst, cr.Username, string(pw), cr.Database))
		if fault.Is(err, fault.NotFound) {
			return nil // the application was deleted meanwhile
		}
		return err
	}
	return nil
}

// appDeleting queues db.user.drop for each login attached to an
// application that is being deleted; the attachments go with it.
func (s *Service) appDeleting(ctx context.Context, appID string) {
	ctx = context.WithoutCancel(ctx)
	atts, err := s.store.ApplicationAttachments(ctx, appID)
	if err != nil {
		s.log.ErrorContext(ctx, "listing an application's attachments", "app_id", appID, "err", err.Error())
		return
	}
	for _, a := range atts {
		cred, found, _, err := s.stored(ctx, a.InstanceID, func(c Credential) bool { return c.ID == a.CredentialID })
		if err == nil && found {
			_, err = s.DropLogin(ctx, audit.System, a.InstanceID, cred.Username)
		}
		if err != nil {
			s.log.ErrorContext(ctx, "dropping a deleted application's login", "app_id", appID, "credential_id", a.CredentialID,
				"err", err.Error())
		}
	}
}
