package databases

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Audit actions of this package. Details never hold passwords, SQL text
// or keys.
const (
	ActionRegistered     = "database.registered"
	ActionTLSUpdated     = "database.tls.updated"
	ActionDeleted        = "database.deleted"
	ActionConnectionRead = "database.connection.read"
	ActionQueryQueued    = "database.query.queued"
	ActionKVQueued       = "database.kv.queued"
)

// Servers is what databases need of the fleet.
type Servers interface {
	Get(ctx context.Context, id string) (servers.Server, error)
}

// Service manages database instances.
type Service struct {
	store   Store
	jobs    *jobs.Service
	servers Servers
	audit   *audit.Log
	key     *secrets.Key
	catalog Catalog
	now     func() time.Time
	log     *slog.Logger
	apps    Apps
	// artifacts configures exports and imports; its Dir is nil when
	// they are off.
	artifacts ArtifactOptions
}

// Deps is what a database service is made of.
type Deps struct {
	Store   Store
	Jobs    *jobs.Service
	Servers Servers
	Audit   *audit.Log
	// Key seals passwords.
	Key *secrets.Key
	// Catalog is the engines managed instances run; the zero Catalog is
	// DefaultCatalog.
	Catalog Catalog
	Now     func() time.Time
	Log     *slog.Logger
	// Apps lets the service attach applications (it drops their attached
	// logins when they are deleted); nil: attaching is refused.
	Apps Apps
	// Artifacts enables exports and imports, with their files in its Dir;
	// with no Dir they are refused.
	Artifacts ArtifactOptions
}

// NewService returns a database service and registers its job types.
func NewService(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Catalog.engines == nil {
		d.Catalog = DefaultCatalog()
	}
	s := &Service{store: d.Store, jobs: d.Jobs, servers: d.Servers, audit: d.Audit, key: d.Key, catalog: d.Catalog, now: d.Now,
		log: d.Log, artifacts: d.Artifacts.withDefaults()}
	if d.Apps != nil {
		s.apps = d.Apps
		d.Apps.OnDelete(s.appDeleting)
	}
	j := d.Jobs
	j.Register(agentproto.DBConnect, jobs.Spec{Timeout: time.Minute, OnComplete: s.connectFinished})
	// A statement may run for up to 5 minutes; the job gets one more.
	j.Register(agentproto.DBQuery, jobs.Spec{Timeout: 6 * time.Minute})
	j.Register(agentproto.DBExplore, jobs.Spec{Timeout: 2 * time.Minute})
	j.Register(agentproto.DBKV, jobs.Spec{Timeout: time.Minute})
	s.registerLogins(j)
	s.registerManaged(j)
	s.registerArtifacts(j)
	return s
}

// Engines returns the engines with their versions and images.
func (s *Service) Engines() []Engine { return s.catalog.Engines() }

// Login is a login of an instance, without its password.
type Login struct {
	CredentialID string `json:"credential_id"`
	Username     string `json:"username"`
	Database     string `json:"database" doc:"The database the login is for; empty for key-value engines"`
	Access       string `json:"access" enum:"admin,readonly,readwrite" doc:"admin: the login the instance was registered with, or a login with every privilege on its database; readonly and readwrite: logins made with POST …/users"`
	KeyPattern   string `json:"key_pattern,omitempty" doc:"Key-value logins: the glob of keys they reach"`
	State        string `json:"state" enum:"creating,ready,dropping" doc:"creating: its db.user.create job runs (the login is forgotten if it fails); dropping: its db.user.drop job runs"`
	Rotating     bool   `json:"rotating" doc:"A rotation's job runs; the stored password is replaced only if it succeeds"`
}

// Detail is an instance as the API shows it.
type Detail struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	ServerID string `json:"server_id" doc:"The server whose agent connects to the instance"`
	Engine   string `json:"engine" enum:"postgres,mysql,mariadb,redis,valkey"`
	Kind     string `json:"kind" enum:"sql,kv"`
	Version  string `json:"version" doc:"The engine's major version; for an external instance from the version it reported, empty until a check succeeded"`
	Managed  bool   `json:"managed" doc:"false: an external instance, registered by address"`
	Host     string `json:"host" doc:"As the server reaches it"`
	Port     int    `json:"port"`
	Database string `json:"database" doc:"The initial database; empty for key-value engines"`
	TLSMode  string `json:"tls_mode" enum:"disable,require,verify-ca,verify-full"`
	CA       string `json:"ca" doc:"The PEM CA bundle verify-ca and verify-full check against; empty for the system's roots"`
	State    string `json:"state" enum:"checking,ready,unreachable,creating,starting,stopping,restarting,stopped,removing,failed" doc:"External: checking (a db.connect job tests the connection), ready (it connected and the instance takes queries) or unreachable (it failed; last_error says why). Managed: creating, starting, stopping, restarting or removing while its job runs, then ready, stopped or failed (last_error says why)"`
	// LastError is nil for members: it is a job's output.
	LastError     *string      `json:"last_error" doc:"The engine's error of the last failed check; null otherwise, and for members"`
	ServerVersion string       `json:"server_version" doc:"What the engine reported of itself at the last successful check"`
	CheckJobID    string       `json:"check_job_id" doc:"The latest db.connect job"`
	Logins        []Login      `json:"logins" doc:"Without passwords; administrators read those with GET …/connection"`
	LastMetrics   *LastMetrics `json:"last_metrics" doc:"The newest metric sample the server's agent took of the instance (with each database's size); null if none in the last 48 hours. In the instance's own reply and the list"`
	CreatedBy     string       `json:"created_by,omitempty"`
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`
	Redacted      bool         `json:"redacted" doc:"True when last_error was withheld (the caller is not an administrator)"`
}

func (s *Service) detail(inst Instance, creds []Credential, r jobs.Reader) Detail {
	d := Detail{ID: inst.ID, Name: inst.Name, ServerID: inst.ServerID, Engine: inst.Engine, Kind: agentproto.EngineKind(inst.Engine),
		Version: inst.Version, Managed: inst.Managed, Host: inst.Host, Port: inst.Port, Database: inst.Database, TLSMode: inst.TLSMode,
		CA: inst.CA, State: inst.State, ServerVersion: inst.ServerVersion, CheckJobID: inst.CheckJobID, Logins: []Login{},
		CreatedBy: inst.CreatedBy, CreatedAt: inst.CreatedAt, UpdatedAt: inst.UpdatedAt}
	if inst.LastError != "" {
		e := inst.LastError
		d.LastError = &e
	}
	if r != jobs.AdminReader {
		d.LastError, d.Redacted = nil, true
	}
	for _, c := range creds {
		if c.InstanceID == inst.ID {
			d.Logins = append(d.Logins, Login{CredentialID: c.ID, Username: c.Username, Database: c.Database, Access: c.Access,
				KeyPattern: c.KeyPattern, State: c.State, Rotating: c.RotateJobID != ""})
		}
	}
	return d
}

// enrolled returns the server if it has an agent to run jobs: an unknown
// server is a field error on server_id, a pending or revoked one a
// conflict.
func (s *Service) enrolled(ctx context.Context, serverID string) error {
	_, err := servers.RequireAgent(ctx, s.servers, "server_id", serverID, "reach the database")
	return err
}

var errManaged = fault.Conflictf("managed-instance", "The instance is managed: its TLS settings are Capstan's, not set here.")

// Instance returns an instance as stored, without its logins or state.
func (s *Service) Instance(ctx context.Context, id string) (Instance, error) {
	return s.store.DatabaseInstance(ctx, id)
}

// Get returns an instance as r may read it.
func (s *Service) Get(ctx context.Context, id string, r jobs.Reader) (Detail, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Detail{}, err
	}
	if inst, err = s.current(ctx, inst); err != nil {
		return Detail{}, err
	}
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Detail{}, err
	}
	latest, err := s.lastMetrics(ctx, id, r)
	if err != nil {
		return Detail{}, err
	}
	return withLast(s.detail(inst, creds, r), latest), nil
}

// List returns every instance by name, as r may read them.
func (s *Service) List(ctx context.Context, r jobs.Reader) ([]Detail, error) {
	list, err := s.store.ListDatabaseInstances(ctx)
	if err != nil {
		return nil, err
	}
	creds, err := s.store.DatabaseCredentials(ctx, "")
	if err != nil {
		return nil, err
	}
	latest, err := s.lastMetrics(ctx, "", r)
	if err != nil {
		return nil, err
	}
	out := make([]Detail, 0, len(list))
	for _, inst := range list {
		if inst, err = s.current(ctx, inst); err != nil {
			return nil, err
		}
		out = append(out, withLast(s.detail(inst, creds, r), latest))
	}
	return out, nil
}

// Deletion says what deleting an instance did.
type Deletion struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Managed bool   `json:"managed"`
	// Forgotten lists what the control plane deleted.
	Forgotten []string `json:"forgotten" doc:"What the control plane deleted: registration, and logins (how many)"`
	Detail    string   `json:"detail" doc:"What happened, and what was left alone"`
}

// Delete deletes an external instance's registration and its stored
// logins. The database server is not touched.
func (s *Service) Delete(ctx context.Context, c audit.Caller, id string) (Deletion, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Deletion{}, err
	}
	if inst.Managed {
		return Deletion{}, fault.Conflictf("managed-instance", "Managed instances are not deleted here.")
	}
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Deletion{}, err
	}
	if err := s.store.DeleteDatabaseInstance(ctx, id); err != nil {
		return Deletion{}, err
	}
	d := Deletion{ID: id, Name: inst.Name, Forgotten: []string{"registration", fmt.Sprintf("logins (%d)", len(creds))},
		Detail: fmt.Sprintf("Forgot the external instance %s and its %d stored login(s); the database server at %s and its data were not touched.",
			inst.Name, len(creds), net.JoinHostPort(inst.Host, strconv.Itoa(inst.Port)))}
	return d, s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "database", ID: id}, map[string]any{"name": inst.Name, "managed": false, "logins": len(creds)})
}

// Connection is how to connect to an instance, with passwords.
type Connection struct {
	InstanceID string            `json:"instance_id"`
	Engine     string            `json:"engine"`
	Host       string            `json:"host"`
	Port       int               `json:"port"`
	TLSMode    string            `json:"tls_mode"`
	Logins     []ConnectionLogin `json:"logins"`
}

// ConnectionLogin is a login with its password and connection URL.
type ConnectionLogin struct {
	CredentialID string `json:"credential_id"`
	Username     string `json:"username"`
	Password     string `json:"password"`
	Database     string `json:"database"`
	Access       string `json:"access"`
	URL          string `json:"url" doc:"The login as a URL, as the instance's server reaches it: postgres://, mysql:// or redis:// (rediss:// with TLS); user, password and database percent-encoded"`
	AppURL       string `json:"app_url,omitempty" doc:"Managed instances: the URL as an application container on the server's capstan network reaches it (the instance's container name and the engine's port)"`
}

// Connection returns every login of an instance with its password, and
// records who read them, from where.
func (s *Service) Connection(ctx context.Context, c audit.Caller, id string) (Connection, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Connection{}, err
	}
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Connection{}, err
	}
	out := Connection{InstanceID: inst.ID, Engine: inst.Engine, Host: inst.Host, Port: inst.Port, TLSMode: inst.TLSMode,
		Logins: make([]ConnectionLogin, 0, len(creds))}
	for _, cr := range creds {
		if cr.State == LoginCreating {
			continue // not a login until its job succeeded
		}
		pw, err := s.key.Open(passwordContext(cr.ID), cr.SealedPassword)
		if err != nil {
			return Connection{}, err
		}
		out.Logins = append(out.Logins, ConnectionLogin{CredentialID: cr.ID, Username: cr.Username, Password: string(pw),
			Database: cr.Database, Access: cr.Access, URL: ConnectionURL(inst, cr.Username, string(pw), cr.Database)})
		if inst.Managed {
			out.Logins[len(out.Logins)-1].AppURL = s.AppURL(inst, cr.Username, string(pw), cr.Database)
		}
	}
	// Recorded before the passwords are returned: a read that cannot be
	// audited does not happen.
	if err := s.audit.Record(ctx, c, ActionConnectionRead, audit.Target{Type: "database", ID: id}, map[string]any{"name": inst.Name, "logins": len(creds)}); err != nil {
		return Connection{}, err
	}
	return out, nil
}

// ConnectionURL returns the URL of a login: user, password and database
// are percent-encoded, an IPv6 host is bracketed, and the TLS mode is
// stated as the engine's clients name it.
func ConnectionURL(inst Instance, username, password, database string) string {
	u := url.URL{User: url.UserPassword(username, password), Host: net.JoinHostPort(inst.Host, strconv.Itoa(inst.Port))}
	q := url.Values{}
	switch inst.Engine {
	case agentproto.EnginePostgres:
		u.Scheme = "postgres"
		u.Path = "/" + database
		if inst.TLSMode != "" {
			q.Set("sslmode", inst.TLSMode)
		}
	case agentproto.EngineMySQL, agentproto.EngineMariaDB:
		u.Scheme = "mysql"
		u.Path = "/" + database
		mode := map[string]string{agentproto.DBTLSDisable: "DISABLED", agentproto.DBTLSRequire: "REQUIRED",
			agentproto.DBTLSVerifyCA: "VERIFY_CA", agentproto.DBTLSVerifyFull: "VERIFY_IDENTITY"}[inst.TLSMode]
		if mode != "" {
			q.Set("ssl-mode", mode)
		}
	default:
		u.Scheme = "redis"
		if inst.TLSMode != "" && inst.TLSMode != agentproto.DBTLSDisable {
			u.Scheme = "rediss"
		}
		u.Path = "/0"
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// ready returns a ready instance of the given kind with its admin login.
func (s *Service) ready(ctx context.Context, id string, errs fault.Fields, kind, call string) (Instance, Credential, string, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Instance{}, Credential{}, "", err
	}
	if k := agentproto.EngineKind(inst.Engine); k != kind {
		what := "a SQL engine: it has no key-value browser; use query and explore"
		if k == agentproto.EngineKindKV {
			what = "a key-value engine: it takes no " + call + "; use kv"
		}
		return Instance{}, Credential{}, "", &fault.Error{Kind: fault.Invalid, Code: "wrong-engine-kind",
			Message: fmt.Sprintf("%s is %s.", inst.Engine, what), Fields: []fault.FieldError{{Field: "id", Message: inst.Engine + " is " + what}}}
	}
	if err := errs.Err(); err != nil {
		return Instance{}, Credential{}, "", err
	}
	if inst, err = s.current(ctx, inst); err != nil {
		return Instance{}, Credential{}, "", err
	}
	if inst.State != StateReady {
		return Instance{}, Credential{}, "", fault.Conflictf("instance-not-ready",
			"The instance is %s; it takes calls once its connection test succeeded.", inst.State)
	}
	cred, password, err := s.adminLogin(ctx, id)
	return inst, cred, password, err
}

func (s *Service) enqueue(ctx context.Context, inst Instance, w jobs.Work, password, actorID string) (jobs.Job, error) {
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: inst.ServerID, Work: w,
		Secrets: map[string]string{agentproto.SecretDBPassword: password}, CreatedBy: actorID})
	return j, err
}
