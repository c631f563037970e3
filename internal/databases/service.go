package databases

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
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

// NewExternal is a request to register an external instance.
type NewExternal struct {
	Name     string
	ServerID string
	Engine   string
	Host     string
	// Port nil means the engine's default port.
	Port     *int
	Username string
	Password string
	Database string
	TLSMode  string
	CA       string
}

// Registration is a registered instance with the db.connect job that
// tests it.
type Registration struct {
	Instance Detail   `json:"instance"`
	JobID    string   `json:"job_id" doc:"The db.connect job; the instance is ready or unreachable when it ends"`
	Job      jobs.Job `json:"job"`
}

// RegisterExternal stores an external instance in state checking with its
// login, and queues db.connect on its server.
func (s *Service) RegisterExternal(ctx context.Context, c audit.Caller, n NewExternal) (Registration, error) {
	var errs fault.Fields
	if p := nameProblem(n.Name); p != "" {
		errs.Add("name", "%s", p)
	}
	if n.ServerID == "" {
		errs.Add("server_id", "is required")
	}
	engine, known := s.catalog.Engine(n.Engine)
	if !known {
		errs.Add("engine", "must be one of %s", strings.Join(s.catalog.names(), ", "))
	}
	if p := hostProblem(n.Host); p != "" {
		errs.Add("host", "%s", p)
	}
	port := engine.DefaultPort
	if n.Port != nil {
		port = *n.Port
		if port < 1 || port > 65535 {
			errs.Add("port", "must be an integer between 1 and 65535")
		}
	}
	kind := agentproto.EngineKind(n.Engine)
	if n.Username == "" && kind == agentproto.EngineKindKV {
		n.Username = "default"
	}
	if n.Username == "" {
		errs.Add("username", "is required")
	} else if p := textProblem(n.Username, MaxUsernameLen); p != "" {
		errs.Add("username", "%s", p)
	}
	if len(n.Password) > MaxPasswordLen {
		errs.Add("password", "must be at most %d bytes", MaxPasswordLen)
	}
	switch {
	case kind == agentproto.EngineKindKV && n.Database != "":
		errs.Add("database", "%s has no database names; leave it out (kv calls take a logical database number, db)", n.Engine)
	case kind == agentproto.EngineKindSQL && n.Database == "":
		errs.Add("database", "is required: the database to connect to")
	default:
		if p := textProblem(n.Database, MaxDatabaseLen); p != "" {
			errs.Add("database", "%s", p)
		}
	}
	tlsProblem(errs.Add, n.TLSMode, n.CA)
	if err := errs.Err(); err != nil {
		return Registration{}, err
	}
	if err := s.enrolled(ctx, n.ServerID); err != nil {
		return Registration{}, err
	}
	now := s.now().UTC()
	inst := Instance{ID: ids.NewAt(IDPrefix, now), Name: n.Name, ServerID: n.ServerID, Engine: n.Engine, Host: n.Host, Port: port,
		Database: n.Database, TLSMode: n.TLSMode, CA: n.CA, State: StateChecking, CheckJobID: jobs.NewID(now),
		CreatedBy: c.Actor.ID, CreatedAt: now, UpdatedAt: now}
	cred := Credential{ID: ids.NewAt(CredentialIDPrefix, now), InstanceID: inst.ID, Username: n.Username, Database: n.Database,
		Access: AccessAdmin, CreatedAt: now, UpdatedAt: now}
	cred.SealedPassword = s.key.Seal(passwordContext(cred.ID), []byte(n.Password))
	if err := s.store.InsertDatabaseInstance(ctx, inst, cred); err != nil {
		if fault.Is(err, fault.NotFound) {
			return Registration{}, fault.Invalidf("server_id", "no such server")
		}
		return Registration{}, err
	}
	j, err := s.queueCheck(ctx, inst, cred, n.Password, c.Actor.ID)
	if err != nil {
		// Nothing usable was stored without its test: forget it.
		if derr := s.store.DeleteDatabaseInstance(context.WithoutCancel(ctx), inst.ID); derr != nil {
			s.log.ErrorContext(ctx, "forgetting a registration whose test could not be queued", "instance_id", inst.ID, "err", derr.Error())
		}
		return Registration{}, err
	}
	if err := s.audit.Record(ctx, c, ActionRegistered, audit.Target{Type: "database", ID: inst.ID}, map[string]any{"name": inst.Name, "engine": inst.Engine,
		"server_id": inst.ServerID, "host": inst.Host, "port": inst.Port, "username": cred.Username, "tls_mode": inst.TLSMode,
		"job_id": j.ID}); err != nil {
		return Registration{}, err
	}
	return Registration{Instance: s.detail(inst, []Credential{cred}, jobs.AdminReader), JobID: j.ID, Job: j}, nil
}

// target says how the agent reaches inst as cred.
func target(inst Instance, cred Credential) agentproto.DBTarget {
	return agentproto.DBTarget{InstanceID: inst.ID, Engine: inst.Engine, Host: inst.Host, Port: inst.Port, Username: cred.Username,
		Database: inst.Database, TLSMode: inst.TLSMode, CA: inst.CA}
}

// queueCheck enqueues the db.connect job whose id inst.CheckJobID holds.
func (s *Service) queueCheck(ctx context.Context, inst Instance, cred Credential, password, actorID string) (jobs.Job, error) {
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: inst.CheckJobID, ServerID: inst.ServerID,
		Work: jobs.Of(agentproto.DBConnect, agentproto.DBConnectPayload{Target: target(inst, cred)}), Secrets: map[string]string{agentproto.SecretDBPassword: password},
		CreatedBy: actorID})
	return j, err
}

// adminLogin returns the instance's admin login with its password.
func (s *Service) adminLogin(ctx context.Context, id string) (Credential, string, error) {
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Credential{}, "", err
	}
	for _, c := range creds {
		if c.Access == AccessAdmin {
			pw, err := s.key.Open(passwordContext(c.ID), c.SealedPassword)
			return c, string(pw), err
		}
	}
	return Credential{}, "", fault.Conflictf("no-login", "The instance has no administrator login.")
}

// UpdateTLS sets an external instance's TLS mode and CA and tests the
// connection again (also when they are unchanged).
func (s *Service) UpdateTLS(ctx context.Context, c audit.Caller, id, mode, ca string) (Registration, error) {
	var errs fault.Fields
	tlsProblem(errs.Add, mode, ca)
	if err := errs.Err(); err != nil {
		return Registration{}, err
	}
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Registration{}, err
	}
	if inst.Managed {
		return Registration{}, errManaged
	}
	if err := s.enrolled(ctx, inst.ServerID); err != nil {
		if fe := fault.As(err); fe != nil && fe.Kind == fault.Invalid {
			return Registration{}, fault.Conflictf("server-not-enrolled", "The instance's server no longer exists.")
		}
		return Registration{}, err
	}
	cred, password, err := s.adminLogin(ctx, id)
	if err != nil {
		return Registration{}, err
	}
	now := s.now().UTC()
	jobID := jobs.NewID(now)
	if err := s.store.RecheckDatabaseInstance(ctx, id, mode, ca, jobID, now); err != nil {
		return Registration{}, err
	}
	if inst, err = s.store.DatabaseInstance(ctx, id); err != nil {
		return Registration{}, err
	}
	if inst.CheckJobID != jobID {
		return Registration{}, fault.Conflictf("check-superseded", "Another change of the instance's TLS settings came in at the same time; read the instance.")
	}
	j, err := s.queueCheck(ctx, inst, cred, password, c.Actor.ID)
	if err != nil {
		msg := "the connection test could not be queued"
		if _, ferr := s.store.FinishDatabaseCheck(context.WithoutCancel(ctx), id, jobID, CheckResult{State: StateUnreachable, LastError: msg}, s.now().UTC()); ferr != nil {
			s.log.ErrorContext(ctx, "recording an unqueued connection test", "instance_id", id, "err", ferr.Error())
		}
		return Registration{}, err
	}
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Registration{}, err
	}
	if err := s.audit.Record(ctx, c, ActionTLSUpdated, audit.Target{Type: "database", ID: id}, map[string]any{"tls_mode": mode, "ca_set": ca != "", "job_id": j.ID}); err != nil {
		return Registration{}, err
	}
	return Registration{Instance: s.detail(inst, creds, jobs.AdminReader), JobID: j.ID, Job: j}, nil
}

var errManaged = fault.Conflictf("managed-instance", "The instance is managed: its TLS settings are Capstan's, not set here.")

// current returns an instance, first recording the outcome of a check
// whose job ended without its hook having run (its server was revoked).
func (s *Service) current(ctx context.Context, inst Instance) (Instance, error) {
	if inst.State != StateChecking || inst.CheckJobID == "" {
		return inst, nil
	}
	j, _, err := s.jobs.Get(ctx, inst.CheckJobID)
	if fault.Is(err, fault.NotFound) || err == nil && !j.Status.Finished() {
		return inst, nil
	}
	if err != nil {
		return Instance{}, err
	}
	if _, err := s.store.FinishDatabaseCheck(ctx, inst.ID, j.ID, s.outcome(inst.Engine, j), s.now().UTC()); err != nil {
		return Instance{}, err
	}
	return s.store.DatabaseInstance(ctx, inst.ID)
}

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

// ConsoleReader is the read-only login the query console's read-only
// statements run as: the agent makes it on the instance (PostgreSQL 14+:
// pg_read_all_data; MySQL/MariaDB: SELECT and SHOW VIEW on every
// database), with a password derived from the control plane's key for
// the instance.
const ConsoleReader = "capstan_console_ro"

// QueryRequest is a query console call. Nil pointers take the defaults.
type QueryRequest struct {
	SQL            string
	Database       string
	ReadOnly       *bool
	MaxRows        *int
	TimeoutSeconds *int
}

// Query queues db.query on a ready SQL instance.
func (s *Service) Query(ctx context.Context, c audit.Caller, id string, q QueryRequest) (jobs.Job, error) {
	var errs fault.Fields
	switch {
	case strings.TrimSpace(q.SQL) == "":
		errs.Add("sql", "is required")
	case len(q.SQL) > MaxSQLLen:
		errs.Add("sql", "must be at most %d bytes", MaxSQLLen)
	case strings.ContainsRune(q.SQL, 0):
		errs.Add("sql", "must not contain NUL")
	}
	if p := textProblem(q.Database, MaxDatabaseLen); p != "" {
		errs.Add("database", "%s", p)
	}
	readOnly, maxRows, timeout := true, DefaultMaxRows, DefaultTimeoutSeconds
	if q.ReadOnly != nil {
		readOnly = *q.ReadOnly
	}
	if q.MaxRows != nil {
		if maxRows = *q.MaxRows; maxRows < MinMaxRows || maxRows > MaxMaxRows {
			errs.Add("max_rows", "must be an integer between %d and %d", MinMaxRows, MaxMaxRows)
		}
	}
	if q.TimeoutSeconds != nil {
		if timeout = *q.TimeoutSeconds; timeout < MinTimeoutSeconds || timeout > MaxTimeoutSeconds {
			errs.Add("timeout_seconds", "must be an integer between %d and %d", MinTimeoutSeconds, MaxTimeoutSeconds)
		}
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindSQL, "query")
	if err != nil {
		return jobs.Job{}, err
	}
	pl := agentproto.DBQueryPayload{Target: target(inst, cred), Database: q.Database,
		SQL: q.SQL, ReadOnly: readOnly, MaxRows: maxRows, TimeoutMS: timeout * 1000}
	sec := map[string]string{agentproto.SecretDBPassword: password}
	if readOnly {
		pl.Reader = ConsoleReader
		sec[agentproto.SecretDBReaderPassword] = s.key.DerivedPassword("db-console-reader:" + inst.ID)
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: inst.ServerID, Work: jobs.Of(agentproto.DBQuery, pl),
		Secrets: sec, CreatedBy: c.Actor.ID})
	if err != nil {
		return jobs.Job{}, err
	}
	// The statement is not recorded: it may carry secrets of its own.
	return j, s.audit.Record(ctx, c, ActionQueryQueued, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "readonly": readOnly,
		"database": q.Database})
}

// ExploreRequest is an explore call.
type ExploreRequest struct {
	What     string
	Database string
	Schema   string
	Table    string
}

// Explore queues db.explore on a ready SQL instance.
func (s *Service) Explore(ctx context.Context, actorID, id string, q ExploreRequest) (jobs.Job, error) {
	var errs fault.Fields
	perTable := q.What == agentproto.ExploreTables || q.What == agentproto.ExploreColumns
	switch q.What {
	case agentproto.ExploreDatabases, agentproto.ExploreUsers, agentproto.ExploreStats, agentproto.ExploreTables, agentproto.ExploreColumns:
	case "":
		errs.Add("what", "is required: databases, users, stats, tables or columns")
	default:
		errs.Add("what", "must be databases, users, stats, tables or columns")
	}
	for _, f := range []struct{ name, v string }{{"database", q.Database}, {"schema", q.Schema}, {"table", q.Table}} {
		if f.v == "" {
			continue
		}
		if p := textProblem(f.v, MaxDatabaseLen); p != "" {
			errs.Add(f.name, "%s", p)
		} else if q.What != "" && !perTable {
			errs.Add(f.name, "applies only to tables and columns")
		}
	}
	if q.What == agentproto.ExploreColumns && q.Table == "" {
		errs.Add("table", "is required for columns")
	} else if q.What == agentproto.ExploreTables && q.Table != "" {
		errs.Add("table", "applies only to columns")
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindSQL, "explore")
	if err != nil {
		return jobs.Job{}, err
	}
	if q.Schema != "" && inst.Engine != agentproto.EnginePostgres {
		return jobs.Job{}, fault.Invalidf("schema", "applies only to PostgreSQL; on %s a schema is a database", inst.Engine)
	}
	return s.enqueue(ctx, inst, jobs.Of(agentproto.DBExplore, agentproto.DBExplorePayload{Target: target(inst, cred), What: q.What,
		Database: q.Database, Schema: q.Schema, Table: q.Table}), password, actorID)
}

// KVRequest is a key-value browser call. Nil pointers take the defaults.
type KVRequest struct {
	Action   string
	DB       *int
	Cursor   string
	Match    string
	Count    *int
	Key      string
	MaxItems *int
	MaxBytes *int
	Keys     []string
}

// KV queues db.kv on a ready key-value instance.
func (s *Service) KV(ctx context.Context, c audit.Caller, id string, q KVRequest) (jobs.Job, error) {
	var errs fault.Fields
	p := agentproto.DBKVPayload{Action: q.Action}
	bounded := func(field string, v *int, def, lo, hi int) int {
		if v == nil {
			return def
		}
		if *v < lo || *v > hi {
			errs.Add(field, "must be an integer between %d and %d", lo, hi)
		}
		return *v
	}
	p.DB = bounded("db", q.DB, 0, 0, MaxKVDB)
	switch q.Action {
	case agentproto.KVInfo, agentproto.KVACLList:
	case agentproto.KVScan:
		if strings.Trim(q.Cursor, "0123456789") != "" || len(q.Cursor) > 20 {
			errs.Add("cursor", "must be the cursor a previous scan returned (digits), or empty to start")
		}
		if len(q.Match) > MaxKVKeyLen {
			errs.Add("match", "must be at most %d bytes", MaxKVKeyLen)
		}
		p.Cursor, p.Match = q.Cursor, q.Match
		p.Count = bounded("count", q.Count, DefaultKVCount, 1, MaxKVCount)
	case agentproto.KVGet:
		if q.Key == "" {
			errs.Add("key", "is required")
		} else if len(q.Key) > MaxKVKeyLen {
			errs.Add("key", "must be at most %d bytes", MaxKVKeyLen)
		}
		p.Key = q.Key
		p.MaxItems = bounded("max_items", q.MaxItems, DefaultKVMaxItems, 1, MaxKVMaxItems)
		p.MaxBytes = bounded("max_bytes", q.MaxBytes, DefaultKVMaxBytes, 1, MaxKVMaxBytes)
	case agentproto.KVDelete:
		if len(q.Keys) == 0 {
			errs.Add("keys", "is required: the keys to delete, explicitly")
		} else if len(q.Keys) > MaxKVDeleteKeys {
			errs.Add("keys", "at most %d keys per call", MaxKVDeleteKeys)
		}
		for i, k := range q.Keys {
			if k == "" || len(k) > MaxKVKeyLen {
				errs.Add(fmt.Sprintf("keys[%d]", i), "must be 1 to %d bytes", MaxKVKeyLen)
			}
		}
		p.Keys = q.Keys
	case "":
		errs.Add("action", "is required: info, scan, get, delete or acl_list")
	default:
		errs.Add("action", "must be info, scan, get, delete or acl_list")
	}
	if q.Action != agentproto.KVDelete && len(q.Keys) > 0 {
		errs.Add("keys", "applies only to delete")
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindKV, "kv")
	if err != nil {
		return jobs.Job{}, err
	}
	p.Target = target(inst, cred)
	j, err := s.enqueue(ctx, inst, jobs.Of(agentproto.DBKV, p), password, c.Actor.ID)
	if err != nil {
		return jobs.Job{}, err
	}
	// Keys are not recorded: they may be data.
	return j, s.audit.Record(ctx, c, ActionKVQueued, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "action": q.Action, "keys": len(q.Keys)})
}

// JobResult is a database job as its instance's job path shows it.
type JobResult struct {
	JobID  string      `json:"job_id"`
	Type   string      `json:"type" enum:"db.connect,db.query,db.explore,db.kv,db.database.create,db.database.drop,db.user.create,db.user.rotate,db.user.drop,db.create,db.control,db.remove,db.export,db.import"`
	Status jobs.Status `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
	// Error and Data follow the job view rule (jobs.Job.For).
	Error      *string         `json:"error" doc:"Why it failed (the engine's message for an engine error); null otherwise. Members get the error class"`
	ErrorClass *string         `json:"error_class" doc:"agent_lost, timed_out, server_revoked, server_offline, queue_timed_out, cancelled or failed; null when there is no error"`
	Data       json.RawMessage `json:"data" doc:"The result once finished: DBQueryResult, DBExploreResult, DBKVResult, DBConnectResult, DBExportResult or DBImportResult; for a failed job {error: {code, message, position}}. Null until finished, and for members"`
	Redacted   bool            `json:"redacted" doc:"True when error text and data were withheld (the caller is not an administrator)"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

// instanceOf returns the instance a database job is for; "" for any other
// job.
func instanceOf(j jobs.Job) string {
	switch j.Type {
	case agentproto.JobDBConnect, agentproto.JobDBQuery, agentproto.JobDBExplore, agentproto.JobDBKV, agentproto.JobDBControl:
	case agentproto.JobDBDatabaseCreate, agentproto.JobDBDatabaseDrop, agentproto.JobDBUserCreate, agentproto.JobDBUserRotate,
		agentproto.JobDBUserDrop, agentproto.JobDBExport, agentproto.JobDBImport:
	case agentproto.JobDBCreate, agentproto.JobDBRemove:
		var p struct {
			InstanceID string `json:"instance_id"`
		}
		if json.Unmarshal(j.Payload, &p) != nil {
			return ""
		}
		return p.InstanceID
	default:
		return ""
	}
	var p struct {
		Target struct {
			InstanceID string `json:"instance_id"`
		} `json:"target"`
	}
	if json.Unmarshal(j.Payload, &p) != nil {
		return ""
	}
	return p.Target.InstanceID
}

// Job returns a job of the instance as r may read it, once it finished or
// after wait, whichever comes first. A job of another instance (or not a
// database job) is not found.
func (s *Service) Job(ctx context.Context, id, jobID string, wait time.Duration, r jobs.Reader) (JobResult, error) {
	if _, err := s.store.DatabaseInstance(ctx, id); err != nil {
		return JobResult{}, err
	}
	j, _, err := s.jobs.Read(ctx, jobID, jobs.AdminReader)
	if fault.Is(err, fault.NotFound) || err == nil && instanceOf(j) != id {
		return JobResult{}, fault.NotFoundf("No such job of this database instance.")
	}
	if err != nil {
		return JobResult{}, err
	}
	if wait > 0 && !j.Status.Finished() {
		if j, _, err = s.jobs.Wait(ctx, jobID, wait, jobs.AdminReader); err != nil {
			return JobResult{}, err
		}
	}
	j = j.For(r)
	return JobResult{JobID: j.ID, Type: j.Type, Status: j.Status, Error: j.Error, ErrorClass: j.ErrorClass, Data: j.Data,
		Redacted: j.Redacted, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}, nil
}

// connectFinished is the completion hook of db.connect: the instance
// becomes ready or unreachable, if the job is still its latest check.
func (s *Service) connectFinished(ctx context.Context, j jobs.Job) error {
	// The hook runs on the agent's request; finish even if it hangs up.
	ctx = context.WithoutCancel(ctx)
	var p agentproto.DBConnectPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.Target.InstanceID == "" {
		return fmt.Errorf("db.connect job %s: payload names no instance", j.ID)
	}
	_, err := s.store.FinishDatabaseCheck(ctx, p.Target.InstanceID, j.ID, s.outcome(p.Target.Engine, j), s.now().UTC())
	return err
}

// outcome turns a finished db.connect job into the instance's state.
func (s *Service) outcome(engine string, j jobs.Job) CheckResult {
	if j.Status == jobs.Succeeded {
		var r agentproto.DBConnectResult
		if err := json.Unmarshal(j.Data, &r); err != nil || r.ServerVersion == "" {
			return CheckResult{State: StateUnreachable, LastError: "the agent's result is not a connection test result"}
		}
		return CheckResult{State: StateReady, ServerVersion: r.ServerVersion, Version: s.catalog.versionOf(engine, r.ServerVersion)}
	}
	var f agentproto.DBFailure
	if len(j.Data) > 0 && json.Unmarshal(j.Data, &f) == nil && f.Error.Message != "" {
		return CheckResult{State: StateUnreachable, LastError: f.Error.Message}
	}
	msg := "the connection test " + string(j.Status)
	if j.Error != nil {
		if jobs.ByControlPlane(*j.Error) {
			msg += ": " + *j.Error
		} else {
			msg = *j.Error
		}
	}
	return CheckResult{State: StateUnreachable, LastError: msg}
}
