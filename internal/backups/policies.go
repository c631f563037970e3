package backups

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Bounds and defaults of a policy.
const (
	MinEveryHours     = 1
	MaxEveryHours     = 168
	MinKeep           = 1
	MaxKeep           = 365
	DefaultEveryHours = 24
	DefaultKeep       = 7
	// MaxPolicyDatabases bounds a policy's database list.
	MaxPolicyDatabases = 64
)

// ActionPolicyUpdated is the audit action of a policy change.
const ActionPolicyUpdated = "backup.policy.updated"

// Policy is an instance's backup policy as stored. An instance without a
// stored policy has DefaultPolicy.
type Policy struct {
	InstanceID string
	Enabled    bool
	EveryHours int
	Keep       int
	// Databases are the databases backed up; empty: the instance's
	// initial database (a key-value instance is backed up whole).
	Databases []string
	Verify    bool
	// NextDueAt is when the scheduler queues the next backups; nil while
	// disabled.
	NextDueAt *time.Time
	// EnabledAt is when the policy was last enabled; nil while disabled.
	EnabledAt *time.Time
	// Revision rises with every change and every claim of the policy.
	Revision  int64
	UpdatedBy string
	UpdatedAt time.Time
}

// DefaultPolicy is the policy of an instance that has none stored.
func DefaultPolicy(instanceID string) Policy {
	return Policy{InstanceID: instanceID, EveryHours: DefaultEveryHours, Keep: DefaultKeep, Databases: []string{}, Verify: true}
}

// StaleDatabase is a database found stale.
type StaleDatabase struct {
	InstanceID string    `json:"-"`
	Database   string    `json:"database"`
	Since      time.Time `json:"since" doc:"When it was found without a verified backup within twice every_hours"`
}

// PolicyStore persists policies.
type PolicyStore interface {
	// BackupPolicies returns the stored policies.
	BackupPolicies(ctx context.Context) ([]Policy, error)
	// BackupPolicy returns a stored policy; fault.NotFound if none.
	BackupPolicy(ctx context.Context, instanceID string) (Policy, error)
	// PutBackupPolicy stores p (its revision raised by one); enabled_at
	// becomes now when p enables a disabled policy, and nil when it
	// disables it.
	PutBackupPolicy(ctx context.Context, p Policy, now time.Time) (Policy, error)
	// ReportedDatabases returns the databases an instance's agent listed
	// in its newest metric sample that has them, and when; nil if none.
	ReportedDatabases(ctx context.Context, instanceID string) ([]string, *time.Time, error)
	// StaleBackups lists the databases recorded stale.
	StaleBackups(ctx context.Context) ([]StaleDatabase, error)
}

// PolicyView is a policy as the API returns it.
type PolicyView struct {
	InstanceID   string          `json:"instance_id"`
	InstanceName string          `json:"instance_name"`
	Engine       string          `json:"engine"`
	Enabled      bool            `json:"enabled" doc:"Whether the scheduler backs the databases up; false until a policy is saved enabled"`
	EveryHours   int             `json:"every_hours" doc:"Hours between scheduled backups, 1 to 168"`
	Keep         int             `json:"keep" doc:"Successful backups kept per database, 1 to 365; older ones are deleted locally and in storage, except the newest verified one"`
	Databases    []string        `json:"databases" doc:"The databases backed up; empty: the instance's initial database (a key-value instance is backed up whole)"`
	Verify       bool            `json:"verify" doc:"Verify (test-restore) every backup of these databases once it succeeded"`
	NextDueAt    *time.Time      `json:"next_due_at" doc:"When the scheduler queues the next backups; null while disabled"`
	Stale        []StaleDatabase `json:"stale" doc:"Databases without a verified backup within twice every_hours (each published backup.stale once)"`
	UpdatedBy    string          `json:"updated_by,omitempty" doc:"Who saved the policy; absent for the default"`
	UpdatedAt    *time.Time      `json:"updated_at" doc:"When the policy was saved; null for the default"`
}

// PolicyInput is a PUT of a policy.
type PolicyInput struct {
	Enabled    bool
	EveryHours int
	Keep       int
	// Databases nil or empty: the instance's initial database.
	Databases []string
	Verify    bool
}

func policyView(inst databases.Detail, p Policy, stale []StaleDatabase) PolicyView {
	v := PolicyView{InstanceID: inst.ID, InstanceName: inst.Name, Engine: inst.Engine, Enabled: p.Enabled, EveryHours: p.EveryHours,
		Keep: p.Keep, Databases: p.Databases, Verify: p.Verify, NextDueAt: p.NextDueAt, Stale: []StaleDatabase{},
		UpdatedBy: p.UpdatedBy}
	if v.Databases == nil {
		v.Databases = []string{}
	}
	if !p.UpdatedAt.IsZero() {
		at := p.UpdatedAt
		v.UpdatedAt = &at
	}
	for _, st := range stale {
		if st.InstanceID == inst.ID {
			v.Stale = append(v.Stale, st)
		}
	}
	return v
}

// Policies returns every instance's policy, in the order of the
// instances' list.
func (s *Service) Policies(ctx context.Context) ([]PolicyView, error) {
	if s.dbs == nil {
		return nil, fault.Conflictf("backups-unavailable", "Database instances are not available on this control plane.")
	}
	list, err := s.dbs.List(ctx, jobs.AdminReader)
	if err != nil {
		return nil, err
	}
	stored, err := s.store.BackupPolicies(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]Policy, len(stored))
	for _, p := range stored {
		byID[p.InstanceID] = p
	}
	stale, err := s.store.StaleBackups(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PolicyView, 0, len(list))
	for _, inst := range list {
		p, ok := byID[inst.ID]
		if !ok {
			p = DefaultPolicy(inst.ID)
		}
		out = append(out, policyView(inst, p, stale))
	}
	return out, nil
}

// PutPolicy replaces an instance's policy. Every database must be one
// the control plane knows the instance has: its initial database, or one
// its agent listed in the newest metric sample that lists them.
func (s *Service) PutPolicy(ctx context.Context, c audit.Caller, instanceID string, in PolicyInput) (PolicyView, error) {
	if s.dbs == nil {
		return PolicyView{}, fault.Conflictf("backups-unavailable", "Database instances are not available on this control plane.")
	}
	inst, err := s.dbs.Get(ctx, instanceID, jobs.AdminReader)
	if fault.Is(err, fault.NotFound) {
		return PolicyView{}, fault.NotFoundf("No such database instance.")
	}
	if err != nil {
		return PolicyView{}, err
	}
	var errs fault.Fields
	if in.EveryHours < MinEveryHours || in.EveryHours > MaxEveryHours {
		errs.Add("every_hours", "must be %d to %d", MinEveryHours, MaxEveryHours)
	}
	if in.Keep < MinKeep || in.Keep > MaxKeep {
		errs.Add("keep", "must be %d to %d", MinKeep, MaxKeep)
	}
	dbs, err := s.policyDatabases(ctx, inst, in.Databases, &errs)
	if err != nil {
		return PolicyView{}, err
	}
	if err := errs.Err(); err != nil {
		return PolicyView{}, err
	}
	cur, err := s.store.BackupPolicy(ctx, instanceID)
	if fault.Is(err, fault.NotFound) {
		cur, err = DefaultPolicy(instanceID), nil
	}
	if err != nil {
		return PolicyView{}, err
	}
	now := s.now().UTC()
	p := Policy{InstanceID: instanceID, Enabled: in.Enabled, EveryHours: in.EveryHours, Keep: in.Keep, Databases: dbs,
		Verify: in.Verify, UpdatedBy: c.Actor.ID, UpdatedAt: now}
	if in.Enabled {
		// The first backups of a newly enabled (or re-timed) policy come
		// within the jitter; a running schedule keeps its times.
		if cur.Enabled && cur.EveryHours == in.EveryHours && cur.NextDueAt != nil {
			p.NextDueAt = cur.NextDueAt
		} else {
			next := now.Add(s.jitter(instanceID, in.EveryHours))
			p.NextDueAt = &next
		}
	}
	saved, err := s.store.PutBackupPolicy(ctx, p, now)
	if err != nil {
		return PolicyView{}, err
	}
	if err := s.audit.Record(ctx, c, ActionPolicyUpdated, audit.Target{Type: "database", ID: instanceID}, map[string]any{"enabled": p.Enabled,
		"every_hours": p.EveryHours, "keep": p.Keep, "databases": p.Databases, "verify": p.Verify}); err != nil {
		return PolicyView{}, err
	}
	stale, err := s.store.StaleBackups(ctx)
	if err != nil {
		return PolicyView{}, err
	}
	return policyView(inst, saved, stale), nil
}

// policyDatabases checks a policy's database list against what the
// control plane knows of the instance and returns it sorted.
func (s *Service) policyDatabases(ctx context.Context, inst databases.Detail, list []string, errs *fault.Fields) ([]string, error) {
	out := []string{}
	if len(list) == 0 {
		return out, nil
	}
	if agentproto.EngineKind(inst.Engine) == agentproto.EngineKindKV {
		errs.Add("databases", "must be empty: a key-value instance is backed up whole")
		return nil, nil
	}
	if len(list) > MaxPolicyDatabases {
		errs.Add("databases", "at most %d databases", MaxPolicyDatabases)
		return nil, nil
	}
	reported, at, err := s.store.ReportedDatabases(ctx, inst.ID)
	if err != nil {
		return nil, err
	}
	known := append([]string{inst.Database}, reported...)
	for _, name := range list {
		switch {
		case name == "":
			errs.Add("databases", "must not hold an empty name")
		case artifactNameProblem(name) != "":
			errs.Add("databases", "%q %s", name, artifactNameProblem(name))
		case slices.Contains(out, name):
			errs.Add("databases", "%q is listed twice", name)
		case !slices.Contains(known, name):
			seen := "its agent has not listed the instance's databases yet"
			if at != nil {
				seen = "its agent listed " + strings.Join(reported, ", ") + " at " + at.UTC().Format(time.RFC3339)
			}
			errs.Add("databases", "%q is not a database of the instance as the control plane knows it: the initial database is %s; %s",
				name, inst.Database, seen)
		default:
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// newDatabaseFree refuses a restore into a new database named into when
// the control plane knows the instance has one: its initial database, or
// one its agent listed in its newest metric sample. A database created
// since that sample is found by the restore job, which then fails
// without touching it.
func (s *Service) newDatabaseFree(ctx context.Context, instanceID, into string) error {
	inst, err := s.dbs.Get(ctx, instanceID, jobs.AdminReader)
	if err != nil {
		return err
	}
	reported, at, err := s.store.ReportedDatabases(ctx, instanceID)
	if err != nil {
		return err
	}
	switch {
	case into == inst.Database:
		return fault.Invalidf("into", "%q is the instance's initial database: restore into a new name, or use mode replace", into)
	case slices.Contains(reported, into):
		return fault.Invalidf("into", "a database %q exists on the instance (its agent listed it at %s): restore into a new name, "+
			"or use mode replace", into, at.UTC().Format(time.RFC3339))
	}
	return nil
}

// jitter is how long after now a newly enabled policy first fires: a
// fraction of the scheduler's jitter window (never more than the
// interval) fixed by the instance's id, so that a fleet's policies
// enabled together spread over the window instead of firing at once.
func (s *Service) jitter(instanceID string, everyHours int) time.Duration {
	window := min(s.sched.Jitter, time.Duration(everyHours)*time.Hour)
	if window <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(instanceID))
	return time.Duration(h.Sum64() % uint64(window))
}
