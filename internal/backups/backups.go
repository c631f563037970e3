// Package backups owns backups of database instances: where they are
// stored (settings), the jobs that put them there and prove them, and
// the records of those jobs. A backup counts only when it was uploaded,
// read back with a matching checksum, and restored successfully.
//
// The control plane never holds a backup's content: the agent of the
// instance's server dumps, encrypts and uploads it, and fetches it back
// to verify or restore it. Storage credentials reach an agent only in a
// job's secrets.
package backups

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/clouddrive"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Store persists what backups need.
type Store interface {
	// BackupSettings returns the stored settings; fault.NotFound when
	// none were saved.
	BackupSettings(ctx context.Context) (Settings, error)
	// PutBackupSettings saves s if the stored settings' revision is
	// prevRevision (0: none are stored) and returns false if it is not.
	PutBackupSettings(ctx context.Context, s Settings, prevRevision int64) (bool, error)
	RunStore
	PolicyStore
	ScheduleStore
	DeleteStore
}

// Service is the backups capability.
type Service struct {
	store   Store
	jobs    *jobs.Service
	servers *servers.Service
	dbs     *databases.Service
	events  EventPublisher
	audit   *audit.Log
	key     *secrets.Key
	now     func() time.Time
	log     *slog.Logger
	runOpts RunOptions
	sched   ScheduleOptions
	// drive is the cloud drive service; nil when there is none.
	drive *clouddrive.Service
}

// Deps is what the backups service is made of.
type Deps struct {
	Store     Store
	Jobs      *jobs.Service
	Servers   *servers.Service
	Databases *databases.Service
	// Events, when not nil, receives backup.failed and restore events.
	Events EventPublisher
	Audit  *audit.Log
	// Key seals the storage credentials.
	Key *secrets.Key
	Now func() time.Time
	Log *slog.Logger
	// CloudDrive lets backups go to the connected cloud drive; nil when
	// there is none.
	CloudDrive *clouddrive.Service
	// Run says where servers keep local copies and how many.
	Run RunOptions
	// Schedule configures the scheduler.
	Schedule ScheduleOptions
}

// NewService returns the service and registers its job types.
func NewService(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Service{store: d.Store, jobs: d.Jobs, servers: d.Servers, dbs: d.Databases, events: d.Events, audit: d.Audit, key: d.Key,
		now: d.Now, log: d.Log, drive: d.CloudDrive, runOpts: d.Run, sched: d.Schedule}
	js := d.Jobs
	js.Register(agentproto.BackupStorageTest, jobs.Spec{Timeout: 5 * time.Minute})
	js.Register(agentproto.BackupRun, jobs.Spec{Timeout: 6 * time.Hour, OnComplete: s.runFinished})
	js.Register(agentproto.BackupVerify, jobs.Spec{Timeout: 6 * time.Hour, OnComplete: s.verifyFinished})
	js.Register(agentproto.BackupRestore, jobs.Spec{Timeout: 6 * time.Hour})
	js.Register(agentproto.BackupDelete, jobs.Spec{Timeout: 5 * time.Minute, OnComplete: s.deleteFinished})
	return s
}

// Audit actions.
const (
	ActionSettingsUpdated = "backup.settings.updated"
	ActionStorageTested   = "backup.settings.tested"
)

// enrolled checks that a server has an agent to run jobs: an unknown
// server is a field error on field, a pending or revoked one a conflict.
func (s *Service) enrolled(ctx context.Context, field, serverID string) error {
	_, err := servers.RequireAgent(ctx, s.servers, field, serverID, "run the job")
	return err
}

// Job returns a backup job ("backup." types), waiting up to wait for it
// to finish, as r may read it; any other job is fault.NotFound.
func (s *Service) Job(ctx context.Context, jobID string, wait time.Duration, r jobs.Reader) (jobs.Job, []jobs.Event, error) {
	j, _, err := s.jobs.Get(ctx, jobID)
	if fault.Is(err, fault.NotFound) || err == nil && !IsBackupJob(j.Type) {
		return jobs.Job{}, nil, fault.NotFoundf("No such backup job.")
	}
	if err != nil {
		return jobs.Job{}, nil, err
	}
	return s.jobs.Wait(ctx, jobID, wait, r)
}

// IsBackupJob says whether a job type is one of backups'.
func IsBackupJob(jobType string) bool {
	return strings.HasPrefix(jobType, "backup.") || jobType == agentproto.JobBackupStorageTest
}
