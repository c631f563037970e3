package databases

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

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
