package databases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// States of a managed instance, besides StateReady. Each operation (the
// create, a start, stop or restart, the removal) is a job whose id the
// instance keeps as its latest (CheckJobID); its completion hook records
// the outcome only while it is still the latest.
const (
	// StateCreating: db.create runs (network, volume, container, first
	// start, until the engine accepts the admin login).
	StateCreating = "creating"
	// StateStarting, StateStopping, StateRestarting: db.control runs.
	StateStarting   = "starting"
	StateStopping   = "stopping"
	StateRestarting = "restarting"
	// StateStopped: the container is stopped; its data is in its volume.
	StateStopped = "stopped"
	// StateRemoving: db.remove runs; the record goes when it succeeded.
	StateRemoving = "removing"
	// StateFailed: the last operation failed; LastError says why.
	StateFailed = "failed"
)

// Actions audited for managed instances.
const (
	ActionCreated        = "database.created"
	ActionControlQueued  = "database.control.queued"
	ActionRemovalQueued  = "database.removal.queued"
	ActionRemoved        = "database.removed"
	managedPasswordBytes = 24
)

// Memory limits of a managed instance's container.
const (
	MinMemoryLimit = 64 << 20
	MaxMemoryLimit = 1 << 40
)

// OperationResult is the outcome of a managed instance's operation.
type OperationResult struct {
	State     string
	LastError string
	// Port and ServerVersion, when set, replace the instance's.
	Port          int
	ServerVersion string
}

// ManagedStore is what managed instances need of the store besides
// Store's instance methods.
type ManagedStore interface {
	// BeginDatabaseOperation moves a managed instance in one of the
	// states from to state, with jobID as its latest operation.
	// fault.Conflict "external-instance" for an external instance,
	// "instance-busy" for one in another state; fault.NotFound if none.
	BeginDatabaseOperation(ctx context.Context, id string, from []string, state, jobID string, now time.Time) error
	// FinishDatabaseOperation records the outcome of jobID if it is still
	// the instance's latest operation; false otherwise.
	FinishDatabaseOperation(ctx context.Context, id, jobID string, r OperationResult, now time.Time) (bool, error)
	// DeleteRemovedDatabaseInstance deletes the instance and its logins
	// if jobID is still its latest operation; false otherwise.
	DeleteRemovedDatabaseInstance(ctx context.Context, id, jobID string) (bool, error)
}

// ContainerName is the container of a managed instance, and its host
// name on the capstan network.
func ContainerName(name string) string { return "capstan-db-" + name }

// VolumeName is the volume of a managed instance's data: by id, so a
// volume kept from a deleted instance is never taken by a new one of the
// same name.
func VolumeName(id string) string { return "capstan-db-" + id }

// adminUsername is the admin login a managed instance is created with.
func adminUsername(engine string) string {
	switch engine {
	case agentproto.EnginePostgres:
		return "postgres"
	case agentproto.EngineMySQL, agentproto.EngineMariaDB:
		return "root"
	}
	return "default"
}

// initialDatabaseProblem says what is wrong with an initial database name: 1 to 63
// lowercase letters, digits and '_', starting with a letter or '_' (a
// name no engine needs to quote).
func initialDatabaseProblem(n string) string {
	if n == "" {
		return "is required"
	}
	if len(n) > 63 {
		return "must be at most 63 characters"
	}
	for i, r := range n {
		if !('a' <= r && r <= 'z' || r == '_' || i > 0 && '0' <= r && r <= '9') {
			return "only lowercase letters a-z, digits and '_', not starting with a digit"
		}
	}
	return ""
}

// NewManaged is a request to create a managed instance.
type NewManaged struct {
	Name     string
	ServerID string
	Engine   string
	// Version "" means the engine's default version.
	Version  string
	Database string
	// MemoryLimit is in bytes; nil for none.
	MemoryLimit *int64
}

// CreateManaged stores a managed instance in state creating with a
// generated admin password and queues db.create on its server.
func (s *Service) CreateManaged(ctx context.Context, c audit.Caller, n NewManaged) (Registration, error) {
	var errs fault.Fields
	if p := nameProblem(n.Name); p != "" {
		errs.Add("name", "%s", p)
	}
	if n.ServerID == "" {
		errs.Add("server_id", "is required")
	}
	engine, known := s.catalog.Engine(n.Engine)
	var version EngineVersion
	if !known {
		errs.Add("engine", "must be one of %s", strings.Join(s.catalog.names(), ", "))
	} else {
		versions := make([]string, len(engine.Versions))
		for i, v := range engine.Versions {
			versions[i] = v.Version
			if v.Version == n.Version || n.Version == "" && v.Default {
				version = v
			}
		}
		if version.Version == "" {
			errs.Add("version", "%s versions are %s", n.Engine, strings.Join(versions, ", "))
		}
	}
	kind := agentproto.EngineKind(n.Engine)
	switch {
	case kind == agentproto.EngineKindKV && n.Database != "":
		errs.Add("database", "%s has no database names; leave it out", n.Engine)
	case kind == agentproto.EngineKindSQL:
		if p := initialDatabaseProblem(n.Database); p != "" {
			errs.Add("database", "%s", p)
		}
	}
	var memory int64
	if n.MemoryLimit != nil {
		if memory = *n.MemoryLimit; memory < MinMemoryLimit || memory > MaxMemoryLimit {
			errs.Add("memory_limit", "must be between %d and %d bytes", int64(MinMemoryLimit), int64(MaxMemoryLimit))
		}
	}
	if err := errs.Err(); err != nil {
		return Registration{}, err
	}
	if err := s.enrolled(ctx, n.ServerID); err != nil {
		return Registration{}, err
	}
	var b [managedPasswordBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Registration{}, err
	}
	password := hex.EncodeToString(b[:])
	now := s.now().UTC()
	inst := Instance{ID: ids.NewAt(IDPrefix, now), Name: n.Name, ServerID: n.ServerID, Engine: n.Engine, Version: version.Version,
		Managed: true, Host: "127.0.0.1", Port: engine.DefaultPort, Database: n.Database, TLSMode: agentproto.DBTLSDisable,
		State: StateCreating, CheckJobID: jobs.NewID(now), CreatedBy: c.Actor.ID, CreatedAt: now, UpdatedAt: now}
	cred := Credential{ID: ids.NewAt(CredentialIDPrefix, now), InstanceID: inst.ID, Username: adminUsername(n.Engine),
		Database: n.Database, Access: AccessAdmin, CreatedAt: now, UpdatedAt: now}
	cred.SealedPassword = s.key.Seal(passwordContext(cred.ID), []byte(password))
	if err := s.store.InsertDatabaseInstance(ctx, inst, cred); err != nil {
		switch {
		case fault.Is(err, fault.NotFound):
			return Registration{}, fault.Invalidf("server_id", "no such server")
		case fault.Is(err, fault.Conflict):
			return Registration{}, fault.Invalidf("name", "an instance named %s exists already", n.Name)
		}
		return Registration{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: inst.CheckJobID, ServerID: inst.ServerID,
		Work: jobs.Of(agentproto.DBCreate, agentproto.DBCreatePayload{InstanceID: inst.ID, Engine: inst.Engine, Version: inst.Version, Image: version.Image,
			ContainerName: ContainerName(inst.Name), Network: agentproto.DBNetwork, Volume: VolumeName(inst.ID),
			MemoryLimitBytes: memory, Database: inst.Database, Username: cred.Username}),
		Secrets: map[string]string{agentproto.SecretDBPassword: password}, CreatedBy: c.Actor.ID})
	if err != nil {
		if derr := s.store.DeleteDatabaseInstance(context.WithoutCancel(ctx), inst.ID); derr != nil {
			s.log.ErrorContext(ctx, "forgetting an instance whose creation could not be queued", "instance_id", inst.ID, "err", derr.Error())
		}
		return Registration{}, err
	}
	if err := s.audit.Record(ctx, c, ActionCreated, audit.Target{Type: "database", ID: inst.ID}, map[string]any{"name": inst.Name, "engine": inst.Engine,
		"version": inst.Version, "image": version.Image, "server_id": inst.ServerID, "memory_limit": memory, "job_id": j.ID}); err != nil {
		return Registration{}, err
	}
	return Registration{Instance: s.detail(inst, []Credential{cred}, jobs.AdminReader), JobID: j.ID, Job: j}, nil
}

// Control queues db.control (start, stop or restart) on a managed
// instance.
func (s *Service) Control(ctx context.Context, c audit.Caller, id, action string) (Registration, error) {
	states := map[string]string{agentproto.DBControlStart: StateStarting, agentproto.DBControlStop: StateStopping,
		agentproto.DBControlRestart: StateRestarting}
	state, ok := states[action]
	if !ok {
		return Registration{}, fault.Invalidf("action", "must be start, stop or restart")
	}
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Registration{}, err
	}
	if !inst.Managed {
		return Registration{}, fault.Conflictf("external-instance", "The instance is external: Capstan does not run it.")
	}
	cred, password, err := s.adminLogin(ctx, id)
	if err != nil {
		return Registration{}, err
	}
	now := s.now().UTC()
	jobID := jobs.NewID(now)
	if err := s.store.BeginDatabaseOperation(ctx, id, []string{StateReady, StateStopped, StateFailed}, state, jobID, now); err != nil {
		return Registration{}, err
	}
	inst.State, inst.CheckJobID, inst.LastError = state, jobID, ""
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: inst.ServerID,
		Work:    jobs.Of(agentproto.DBControl, agentproto.DBControlPayload{Target: target(inst, cred), ContainerName: ContainerName(inst.Name), Action: action}),
		Secrets: map[string]string{agentproto.SecretDBPassword: password}, CreatedBy: c.Actor.ID})
	if err != nil {
		s.finishOperation(context.WithoutCancel(ctx), id, jobID, OperationResult{State: StateFailed, LastError: "the " + action + " could not be queued"})
		return Registration{}, err
	}
	if err := s.audit.Record(ctx, c, ActionControlQueued, audit.Target{Type: "database", ID: id}, map[string]any{"action": action, "job_id": j.ID}); err != nil {
		return Registration{}, err
	}
	creds, err := s.store.DatabaseCredentials(ctx, id)
	if err != nil {
		return Registration{}, err
	}
	return Registration{Instance: s.detail(inst, creds, jobs.AdminReader), JobID: j.ID, Job: j}, nil
}

// DatabaseRemoval says what deleting an instance does: for a managed one, the
// db.remove job queued and whether its volume is kept.
type DatabaseRemoval struct {
	Deletion
	// JobID is the db.remove job of a managed instance; "" for an
	// external one (forgotten at once).
	JobID string `json:"job_id,omitempty" doc:"Managed: the db.remove job; the record goes when it succeeded"`
	// VolumeKept is set for a managed instance.
	VolumeKept *bool  `json:"volume_kept,omitempty" doc:"Managed: true when the data volume is kept (no purge), false when it is removed"`
	Volume     string `json:"volume,omitempty" doc:"Managed: the data volume's name on the server"`
}

// Remove deletes an instance: an external one's registration at once
// (see Delete); for a managed one it queues db.remove, which removes the
// container and, with purge, the data volume. The record goes when the
// job succeeded.
func (s *Service) Remove(ctx context.Context, c audit.Caller, id string, purge bool) (DatabaseRemoval, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return DatabaseRemoval{}, err
	}
	if !inst.Managed {
		if purge {
			return DatabaseRemoval{}, fault.Invalidf("purge", "applies only to managed instances: an external instance's data is not Capstan's")
		}
		d, err := s.Delete(ctx, c, id)
		return DatabaseRemoval{Deletion: d}, err
	}
	now := s.now().UTC()
	jobID := jobs.NewID(now)
	if err := s.store.BeginDatabaseOperation(ctx, id, []string{StateReady, StateStopped, StateFailed}, StateRemoving, jobID, now); err != nil {
		return DatabaseRemoval{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: inst.ServerID,
		Work:      jobs.Of(agentproto.DBRemove, agentproto.DBRemovePayload{InstanceID: id, ContainerName: ContainerName(inst.Name), Volume: VolumeName(id), Purge: purge}),
		CreatedBy: c.Actor.ID})
	if err != nil {
		s.finishOperation(context.WithoutCancel(ctx), id, jobID, OperationResult{State: StateFailed, LastError: "the removal could not be queued"})
		return DatabaseRemoval{}, err
	}
	kept := !purge
	detail := fmt.Sprintf("Removing the container %s; the volume %s is kept (delete again with purge=true to remove it once the "+
		"instance is gone, or remove it on the server).", ContainerName(inst.Name), VolumeName(id))
	if purge {
		detail = fmt.Sprintf("Removing the container %s and the volume %s with its data.", ContainerName(inst.Name), VolumeName(id))
	}
	if err := s.audit.Record(ctx, c, ActionRemovalQueued, audit.Target{Type: "database", ID: id}, map[string]any{"name": inst.Name, "purge": purge, "job_id": j.ID}); err != nil {
		return DatabaseRemoval{}, err
	}
	return DatabaseRemoval{Deletion: Deletion{ID: id, Name: inst.Name, Managed: true, Forgotten: []string{}, Detail: detail},
		JobID: j.ID, VolumeKept: &kept, Volume: VolumeName(id)}, nil
}

func (s *Service) finishOperation(ctx context.Context, id, jobID string, r OperationResult) {
	if _, err := s.store.FinishDatabaseOperation(ctx, id, jobID, r, s.now().UTC()); err != nil {
		s.log.ErrorContext(ctx, "recording a database operation", "instance_id", id, "job_id", jobID, "err", err.Error())
	}
}

// registerManaged registers the job types of managed instances.
// Creating may pull the image and waits for the engine's first start
// (its data directory is made then).
func (s *Service) registerManaged(j *jobs.Service) {
	j.Register(agentproto.DBCreate, jobs.Spec{Timeout: 10 * time.Minute, OnComplete: s.createFinished})
	j.Register(agentproto.DBControl, jobs.Spec{Timeout: 5 * time.Minute, OnComplete: s.controlFinished})
	j.Register(agentproto.DBRemove, jobs.Spec{Timeout: 5 * time.Minute, OnComplete: s.removeFinished})
}

// failure is the error of a failed job as the instance's last_error.
func failure(what string, j jobs.Job) string {
	var f agentproto.DBFailure
	if len(j.Data) > 0 && json.Unmarshal(j.Data, &f) == nil && f.Error.Message != "" {
		return f.Error.Message
	}
	if j.Error != nil {
		return what + " " + string(j.Status) + ": " + *j.Error
	}
	return what + " " + string(j.Status)
}

func (s *Service) createFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	var p agentproto.DBCreatePayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.InstanceID == "" {
		return fmt.Errorf("db.create job %s: payload names no instance", j.ID)
	}
	r := OperationResult{State: StateFailed, LastError: failure("the creation", j)}
	if j.Status == jobs.Succeeded {
		var res agentproto.DBCreateResult
		if err := json.Unmarshal(j.Data, &res); err != nil || res.HostPort < 1 || res.HostPort > 65535 {
			r.LastError = "the agent's result is not a creation result"
		} else {
			r = OperationResult{State: StateReady, Port: res.HostPort, ServerVersion: res.ServerVersion}
		}
	}
	_, err := s.store.FinishDatabaseOperation(ctx, p.InstanceID, j.ID, r, s.now().UTC())
	return err
}

func (s *Service) controlFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	var p agentproto.DBControlPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.Target.InstanceID == "" {
		return fmt.Errorf("db.control job %s: payload names no instance", j.ID)
	}
	r := OperationResult{State: StateFailed, LastError: failure("the "+p.Action, j)}
	if j.Status == jobs.Succeeded {
		var res agentproto.DBControlResult
		_ = json.Unmarshal(j.Data, &res)
		r = OperationResult{State: StateReady, ServerVersion: res.ServerVersion}
		if p.Action == agentproto.DBControlStop {
			r.State = StateStopped
		}
	}
	_, err := s.store.FinishDatabaseOperation(ctx, p.Target.InstanceID, j.ID, r, s.now().UTC())
	return err
}

func (s *Service) removeFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	var p agentproto.DBRemovePayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.InstanceID == "" {
		return fmt.Errorf("db.remove job %s: payload names no instance", j.ID)
	}
	if j.Status != jobs.Succeeded {
		_, err := s.store.FinishDatabaseOperation(ctx, p.InstanceID, j.ID, OperationResult{State: StateFailed,
			LastError: failure("the removal", j)}, s.now().UTC())
		return err
	}
	gone, err := s.store.DeleteRemovedDatabaseInstance(ctx, p.InstanceID, j.ID)
	if err != nil || !gone {
		return err
	}
	var res agentproto.DBRemoveResult
	_ = json.Unmarshal(j.Data, &res)
	return s.audit.Append(ctx, audit.Entry{Actor: audit.Actor{Type: audit.ActorSystem}, Action: ActionRemoved,
		Target: audit.Target{Type: "database", ID: p.InstanceID}, Details: map[string]any{"job_id": j.ID, "requested_by": j.CreatedBy,
			"volume_removed": res.VolumeRemoved, "volume": p.Volume}})
}

// AppURL is a managed instance's login as an application container on
// the capstan network reaches it: the container name and the engine's
// default port.
func (s *Service) AppURL(inst Instance, username, password, database string) string {
	e, _ := s.catalog.Engine(inst.Engine)
	in := inst
	in.Host, in.Port = ContainerName(inst.Name), e.DefaultPort
	return ConnectionURL(in, username, password, database)
}
