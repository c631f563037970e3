package backups

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// RunIDPrefix starts every backup run's id.
const RunIDPrefix = "run"

// Run statuses.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Triggers of a run.
const (
	TriggerManual   = "manual"
	TriggerSchedule = "schedule"
)

// ActionRunQueued is the audit action of a manual backup.
const ActionRunQueued = "backup.run.queued"

// Run is one backup of one database.
type Run struct {
	ID         string
	InstanceID string
	ServerID   string
	Engine     string
	Database   string
	Trigger    string
	JobID      string
	// Status is queued, succeeded or failed as stored; a queued run whose
	// job runs reads as running.
	Status    string
	RemoteKey string
	// KeyID names the identity the backup is encrypted to
	// (secrets.InstanceKeyID of its instance, or secrets.KeyIDFleet for
	// a backup made before per-instance keys).
	KeyID string
	// LocalPath is the local copy on the server; "" when none was kept.
	LocalPath string
	Size      int64
	SHA256    string
	Manifest  *agentproto.BackupManifest
	Error     string
	// Verified is nil until a verification ended.
	Verified      *Verification
	VerifyJobID   string
	DeletePending bool
	// DeleteJobID is the current backup.delete job of a run being
	// deleted; DeleteAttempts counts its jobs, DeleteError is the last
	// one's failure.
	DeleteJobID    string
	DeleteAttempts int
	DeleteError    string
	CreatedBy      string
	CreatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
}

// Verification is the outcome of a test-restore.
type Verification struct {
	At      time.Time       `json:"at"`
	OK      bool            `json:"ok"`
	Details json.RawMessage `json:"details" doc:"What was compared: size, sha256 and each table's rows and checksum against the manifest, or the error; engine_version, loader (host, image or container), loader_version and loader_ref: what the backup was loaded into, its own version or a newer one"`
}

// RunFinish is the end of a run as its job reported it.
type RunFinish struct {
	Status     string
	Size       int64
	SHA256     string
	Manifest   *agentproto.BackupManifest
	LocalPath  string
	Error      string
	StartedAt  *time.Time
	FinishedAt time.Time
}

// RunQuery selects runs, newest first.
type RunQuery struct {
	InstanceID string
	Status     string // "" for any
	// Verified: nil any; true only runs verified ok; false runs not
	// verified ok (never verified, or failed verification).
	Verified *bool
	Limit    int
	// Before, when set, returns runs older than this run id.
	Before string
	// Kept leaves out the runs being deleted.
	Kept bool
}

// Summary is the state of the backups at a glance.
type Summary struct {
	Count           int64 `json:"count" doc:"Backups kept: they succeeded (uploaded and read back) and are not being deleted"`
	TotalSize       int64 `json:"total_size" doc:"Bytes of the backups kept, as stored (encrypted)"`
	VerifiedCount   int64 `json:"verified_count" doc:"Backups kept whose last verification restored them and matched their manifest"`
	UnverifiedCount int64 `json:"unverified_count" doc:"Backups kept that were not verified, or failed verification"`
	// Runs being deleted are counted apart: their objects may still be
	// in the storage, but they are never verified or restored again.
	DeletePendingCount int64             `json:"delete_pending_count" doc:"Backups that succeeded and are being deleted (delete_pending): not counted above; their objects stay in the storage until the deletion succeeds"`
	DeletePendingSize  int64             `json:"delete_pending_size" doc:"Bytes of the backups being deleted, as stored"`
	RecentFailures     []RunView         `json:"recent_failures" doc:"The 10 newest failed backups not being deleted"`
	Instances          []InstanceSummary `json:"instances" doc:"Per instance that has backups or failures not being deleted"`
}

// InstanceSummary is one instance's line of the summary.
type InstanceSummary struct {
	InstanceID     string     `json:"instance_id"`
	LastSuccessAt  *time.Time `json:"last_success_at" doc:"When its newest successful backup kept (not being deleted) finished; null if none"`
	LastVerifiedAt *time.Time `json:"last_verified_at" doc:"When a backup of it that is kept was last verified ok; null if none"`
	Failures       int64      `json:"failures" doc:"Failed backups of it not being deleted"`
}

// RunStore persists runs.
type RunStore interface {
	InsertBackupRun(ctx context.Context, r Run) error
	// BackupRun returns a run; fault.NotFound if none.
	BackupRun(ctx context.Context, id string) (Run, error)
	// BackupRunByJob returns the run whose backup job is jobID.
	BackupRunByJob(ctx context.Context, jobID string) (Run, error)
	// FinishBackupRun records the end of a queued run; false if it was
	// not queued any more.
	FinishBackupRun(ctx context.Context, id string, f RunFinish) (bool, error)
	BackupRuns(ctx context.Context, q RunQuery) ([]Run, error)
	BackupSummary(ctx context.Context, recentFailures int) (Summary, []Run, error)
	// ForgetBackupLocalCopies records that the runs of a database on a
	// server have no local copy any more.
	ForgetBackupLocalCopies(ctx context.Context, serverID, instanceID, database string, runIDs []string) error
	// SetBackupVerifyJob names the run's current verification job;
	// false if there is no such run or it is being deleted.
	SetBackupVerifyJob(ctx context.Context, runID, jobID string) (bool, error)
	// FinishBackupVerify records a verification if jobID is still the
	// run's current one.
	FinishBackupVerify(ctx context.Context, runID, jobID string, v Verification) (bool, error)
}

// EventPublisher stores events in the outbox.
type EventPublisher interface {
	Publish(ctx context.Context, evs ...events.Event) error
}

// RunOptions configure backup runs.
type RunOptions struct {
	// LocalDir is where servers keep local copies; "" is the agent's
	// default (its state directory).
	LocalDir string
	// LocalKeep is how many local copies of a database a server keeps
	// (besides the newest verified backup's); 0 keeps none.
	LocalKeep int
}

// Locations says where a backup is.
type Locations struct {
	Local  string `json:"local" doc:"Path of the local copy on the server; empty when none is kept"`
	Remote string `json:"remote" doc:"The object's key in the storage (under the settings' prefix)"`
}

// RunView is a run as the API returns it.
type RunView struct {
	ID            string                     `json:"id"`
	InstanceID    string                     `json:"instance_id"`
	ServerID      string                     `json:"server_id"`
	Engine        string                     `json:"engine"`
	Database      string                     `json:"database"`
	Trigger       string                     `json:"trigger" enum:"schedule,manual"`
	JobID         string                     `json:"job_id"`
	Status        string                     `json:"status" enum:"queued,running,succeeded,failed" doc:"succeeded only once the object read back from the storage matched the size and SHA-256 streamed"`
	StartedAt     *time.Time                 `json:"started_at"`
	FinishedAt    *time.Time                 `json:"finished_at"`
	CreatedAt     time.Time                  `json:"created_at"`
	Size          int64                      `json:"size" doc:"Bytes stored (compressed and encrypted)"`
	SHA256        string                     `json:"sha256" doc:"Hex SHA-256 of the stored object"`
	KeyID         string                     `json:"key_id" doc:"The identity the backup is encrypted to: inst-v1:<instance id> (the instance's own, derived from the control plane's secret key), or fleet-v1 (the fleet-wide identity of backups made before per-instance keys: never sent to a server, so such a backup is not verified or restored by the API)"`
	Manifest      *agentproto.BackupManifest `json:"manifest" doc:"Per-table row counts and checksums, taken in the dump's snapshot"`
	Locations     Locations                  `json:"locations"`
	Verified      *Verification              `json:"verified" doc:"null until a verification ended"`
	Error         string                     `json:"error" doc:"Why the backup failed; for members only its class"`
	DeletePending bool                       `json:"delete_pending" doc:"The backup is being deleted (DELETE, or pruned beyond its policy's keep): never verified or restored again; a deletion the storage refused is retried"`
	DeleteError   string                     `json:"delete_error,omitempty" doc:"Why the last attempt to delete it failed (administrators only)"`
}

func (s *Service) view(ctx context.Context, r Run, reader jobs.Reader) RunView {
	v := RunView{ID: r.ID, InstanceID: r.InstanceID, ServerID: r.ServerID, Engine: r.Engine, Database: r.Database, Trigger: r.Trigger,
		JobID: r.JobID, Status: r.Status, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, CreatedAt: r.CreatedAt, Size: r.Size,
		SHA256: r.SHA256, KeyID: r.KeyID, Manifest: r.Manifest, Locations: Locations{Local: r.LocalPath, Remote: r.RemoteKey}, Verified: r.Verified,
		Error: r.Error, DeletePending: r.DeletePending, DeleteError: r.DeleteError}
	if r.Status == StatusQueued {
		if j, _, err := s.jobs.Get(ctx, r.JobID); err == nil && j.Status == jobs.Running {
			v.Status, v.StartedAt = StatusRunning, j.StartedAt
		}
	}
	if reader != jobs.AdminReader && v.Error != "" {
		v.Error = jobs.ClassFailed
	}
	if reader != jobs.AdminReader && v.DeleteError != "" {
		v.DeleteError = jobs.ClassFailed
	}
	return v
}

// Backup queues a backup of database ("": the initial one) of a ready
// instance.
func (s *Service) Backup(ctx context.Context, c audit.Caller, instanceID, database, trigger string) (RunView, jobs.Job, error) {
	if instanceID == "" {
		return RunView{}, jobs.Job{}, fault.Invalidf("instance_id", "is required")
	}
	if s.dbs == nil {
		return RunView{}, jobs.Job{}, fault.Conflictf("backups-unavailable", "Database instances are not available on this control plane.")
	}
	src, err := s.dbs.BackupSource(ctx, instanceID, database)
	if fault.Is(err, fault.NotFound) {
		return RunView{}, jobs.Job{}, fault.Invalidf("instance_id", "no such database instance")
	}
	if err != nil {
		return RunView{}, jobs.Job{}, err
	}
	ext := "sql"
	switch agentproto.EngineKind(src.Instance.Engine) {
	case agentproto.EngineKindSQL:
	case agentproto.EngineKindKV:
		// A snapshot holds every database of the instance.
		if database != "" {
			return RunView{}, jobs.Job{}, fault.Invalidf("database", "must be left out: a %s backup is a snapshot of the whole instance",
				src.Instance.Engine)
		}
		src.Database, ext = "", "rdb"
	default:
		return RunView{}, jobs.Job{}, fault.Invalidf("instance_id", "backups of %s are not supported", src.Instance.Engine)
	}
	now := s.now().UTC()
	run := Run{ID: ids.NewAt(RunIDPrefix, now), InstanceID: instanceID, ServerID: src.Instance.ServerID, Engine: src.Instance.Engine,
		Database: src.Database, Trigger: trigger, JobID: jobs.NewID(now), Status: StatusQueued, KeyID: secrets.InstanceKeyID(instanceID),
		CreatedBy: c.Actor.ID, CreatedAt: now}
	storage, err := s.storage(ctx, run.ServerID, run.JobID)
	if err != nil {
		return RunView{}, jobs.Job{}, err
	}
	run.RemoteKey = fmt.Sprintf("%s/%s/%s.%s.gz.age", instanceID, src.Database, run.ID, ext)
	if src.Database == "" {
		run.RemoteKey = fmt.Sprintf("%s/%s.%s.gz.age", instanceID, run.ID, ext)
	}
	if err := s.store.InsertBackupRun(ctx, run); err != nil {
		return RunView{}, jobs.Job{}, err
	}
	secrets := map[string]string{agentproto.SecretDBPassword: src.Password}
	protect, err := s.newestVerified(ctx, instanceID, src.Database)
	if err != nil {
		return RunView{}, jobs.Job{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: run.JobID, ServerID: run.ServerID,
		Work: jobs.Of(agentproto.BackupRun, agentproto.BackupRunPayload{RunID: run.ID, Target: src.Target, Source: src.Tools, Database: src.Database,
			Storage: storage, Key: run.RemoteKey, Recipient: s.key.InstanceIdentity(instanceID).Recipient().String(),
			LocalDir: s.runOpts.LocalDir, LocalKeep: s.runOpts.LocalKeep, LocalProtect: protect}),
		Secrets: secrets, CreatedBy: c.Actor.ID})
	if err != nil {
		s.finish(context.WithoutCancel(ctx), run, RunFinish{Status: StatusFailed, Error: "the backup could not be queued",
			FinishedAt: s.now().UTC()})
		return RunView{}, jobs.Job{}, err
	}
	if trigger == TriggerManual {
		if err := s.audit.Record(ctx, c, ActionRunQueued, audit.Target{Type: "database", ID: instanceID}, map[string]any{"run_id": run.ID, "job_id": j.ID,
			"database": run.Database}); err != nil {
			return RunView{}, jobs.Job{}, err
		}
	}
	return s.view(ctx, run, jobs.AdminReader), j, nil
}

// newestVerified returns the id of the database's newest verified
// backup that is kept, as a list (empty when there is none): the agent
// never removes its local copy to make room.
func (s *Service) newestVerified(ctx context.Context, instanceID, database string) ([]string, error) {
	runs, err := s.store.DatabaseBackups(ctx, instanceID, database)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.Verified != nil && r.Verified.OK {
			return []string{r.ID}, nil
		}
	}
	return nil, nil
}

// runFinished is the completion hook of backup.run.
func (s *Service) runFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	run, err := s.store.BackupRunByJob(ctx, j.ID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var res agentproto.BackupRunResult
	if len(j.Data) > 0 {
		_ = json.Unmarshal(j.Data, &res)
	}
	f := RunFinish{Status: StatusFailed, Size: res.Bytes, SHA256: res.SHA256, Manifest: res.Manifest, LocalPath: res.Local,
		StartedAt: j.StartedAt, FinishedAt: s.now().UTC()}
	switch {
	case j.Status != jobs.Succeeded:
		f.Error = "the backup failed"
		if j.Error != nil {
			f.Error = *j.Error
		}
	case res.Remote == nil || res.Remote.Size != res.Bytes || res.Remote.SHA256 != res.SHA256 || res.SHA256 == "" || res.Manifest == nil:
		// Counted only once the read-back matched, whatever the agent's
		// status says.
		f.Error = "the storage's read-back does not match what was uploaded"
	default:
		f.Status = StatusSucceeded
	}
	if len(res.LocalRemoved) > 0 {
		// The agent made room: those runs have no local copy any more.
		if err := s.store.ForgetBackupLocalCopies(ctx, run.ServerID, run.InstanceID, run.Database, res.LocalRemoved); err != nil {
			return err
		}
	}
	if err := s.finish(ctx, run, f); err != nil {
		return err
	}
	return s.backedUp(ctx, run, f)
}

// finish records the end of a run and publishes backup.failed for a
// failure.
func (s *Service) finish(ctx context.Context, run Run, f RunFinish) error {
	ok, err := s.store.FinishBackupRun(ctx, run.ID, f)
	if err != nil || !ok {
		return err
	}
	if f.Status != StatusFailed || s.events == nil {
		return nil
	}
	ev, err := events.New(events.BackupFailed, events.Subject{Type: "backup", ID: run.ID}, events.BackupPayload{RunID: run.ID,
		InstanceID: run.InstanceID, ServerID: run.ServerID, Database: run.Database, Trigger: run.Trigger, Error: f.Error}, f.FinishedAt)
	if err != nil {
		return err
	}
	return s.events.Publish(ctx, ev)
}

// Runs lists runs, newest first, as reader may read them.
func (s *Service) Runs(ctx context.Context, q RunQuery, reader jobs.Reader) ([]RunView, error) {
	switch q.Status {
	case "", StatusQueued, StatusSucceeded, StatusFailed:
	case StatusRunning:
		// Stored as queued; filtered on the job below.
	default:
		return nil, fault.Invalidf("status", "must be queued, running, succeeded or failed")
	}
	want := q.Status
	if want == StatusRunning {
		q.Status = StatusQueued
	}
	list, err := s.store.BackupRuns(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]RunView, 0, len(list))
	for _, r := range list {
		v := s.view(ctx, r, reader)
		if want != "" && v.Status != want {
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// Run returns one run as reader may read it.
func (s *Service) Run(ctx context.Context, id string, reader jobs.Reader) (RunView, error) {
	r, err := s.store.BackupRun(ctx, id)
	if err != nil {
		return RunView{}, err
	}
	return s.view(ctx, r, reader), nil
}

// Summary returns the counts, the recent failures and each instance's
// last success and verification.
func (s *Service) Summary(ctx context.Context, reader jobs.Reader) (Summary, error) {
	sum, failures, err := s.store.BackupSummary(ctx, 10)
	if err != nil {
		return Summary{}, err
	}
	sum.RecentFailures = make([]RunView, 0, len(failures))
	for _, r := range failures {
		sum.RecentFailures = append(sum.RecentFailures, s.view(ctx, r, reader))
	}
	if sum.Instances == nil {
		sum.Instances = []InstanceSummary{}
	}
	return sum, nil
}
