package jobs

import (
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TypeSpec describes a job type.
type TypeSpec struct {
	// Timeout bounds how long a job of this type may run.
	Timeout time.Duration
}

// Queue timeouts: a job still queued this long after it was queued fails
// with queue_timed_out. A job may wait behind others while its agent runs
// as many as it takes at once, so the wait allowed grows with how long the
// type's jobs may run.
const (
	// MinQueueTimeout is the least time a job may wait to be claimed.
	MinQueueTimeout = time.Hour
	// QueueTimeoutRuns is how many of its type's timeouts a job may wait,
	// when that is longer than MinQueueTimeout.
	QueueTimeoutRuns = 4
)

// QueueTimeout is how long a job of this type may stay queued:
// QueueTimeoutRuns times its timeout, and at least MinQueueTimeout.
func (s TypeSpec) QueueTimeout() time.Duration {
	return max(MinQueueTimeout, QueueTimeoutRuns*s.Timeout)
}

// DefaultLease is how long a claim lasts without a heartbeat or event from
// the agent: three heartbeat intervals.
const DefaultLease = 3 * HeartbeatInterval

// HeartbeatInterval is the agents' heartbeat period.
const HeartbeatInterval = 10 * time.Second

// OfflineAfter is how long a server's agent may be silent before the
// server counts as offline: three heartbeat intervals.
const OfflineAfter = 3 * HeartbeatInterval

// types lists every job type the control plane queues.
var types = map[string]TypeSpec{
	agentproto.JobAgentPing:        {Timeout: 30 * time.Second},
	agentproto.JobServiceStart:     {Timeout: 2 * time.Minute},
	agentproto.JobServiceStop:      {Timeout: 2 * time.Minute},
	agentproto.JobServiceRestart:   {Timeout: 2 * time.Minute},
	agentproto.JobServiceLogs:      {Timeout: time.Minute},
	agentproto.JobContainerStart:   {Timeout: 2 * time.Minute},
	agentproto.JobContainerStop:    {Timeout: 2 * time.Minute},
	agentproto.JobContainerRestart: {Timeout: 2 * time.Minute},
	agentproto.JobContainerLogs:    {Timeout: time.Minute},
	agentproto.JobContainerInspect: {Timeout: time.Minute},
	// A prune's removal waits for the container deploys running (up to
	// their own timeout) before it removes anything.
	agentproto.JobDockerPrune: {Timeout: 20 * time.Minute},
	agentproto.JobLogsRead:    {Timeout: time.Minute},
	agentproto.JobAppDeploy:   {Timeout: 15 * time.Minute},
	agentproto.JobAppRemove:   {Timeout: 5 * time.Minute},
	agentproto.JobAppLogs:     {Timeout: time.Minute},
	agentproto.JobProxyApply:  {Timeout: 2 * time.Minute},
	agentproto.JobDomainCheck: {Timeout: time.Minute},
	agentproto.JobDBConnect:   {Timeout: time.Minute},
	// A statement may run for up to 5 minutes; the job gets one more.
	agentproto.JobDBQuery:   {Timeout: 6 * time.Minute},
	agentproto.JobDBExplore: {Timeout: 2 * time.Minute},
	agentproto.JobDBKV:      {Timeout: time.Minute},
	// Databases and logins.
	agentproto.JobDBDatabaseCreate: {Timeout: 2 * time.Minute},
	agentproto.JobDBDatabaseDrop:   {Timeout: 2 * time.Minute},
	agentproto.JobDBUserCreate:     {Timeout: 2 * time.Minute},
	agentproto.JobDBUserRotate:     {Timeout: time.Minute},
	agentproto.JobDBUserDrop:       {Timeout: 2 * time.Minute},
	// Managed instances. Creating may pull the image and waits for the
	// engine's first start (its data directory is made then).
	agentproto.JobDBCreate:  {Timeout: 10 * time.Minute},
	agentproto.JobDBControl: {Timeout: 5 * time.Minute},
	agentproto.JobDBRemove:  {Timeout: 5 * time.Minute},
	// Exports and imports stream the whole database.
	agentproto.JobDBExport: {Timeout: 6 * time.Hour},
	agentproto.JobDBImport: {Timeout: 6 * time.Hour},
	// Backups.
	agentproto.JobBackupStorageTest: {Timeout: 5 * time.Minute},
	agentproto.JobBackupRun:         {Timeout: 6 * time.Hour},
	agentproto.JobBackupVerify:      {Timeout: 6 * time.Hour},
	agentproto.JobBackupRestore:     {Timeout: 6 * time.Hour},
	agentproto.JobBackupDelete:      {Timeout: 5 * time.Minute},
}

// Spec returns the type's spec and whether the type exists.
func Spec(jobType string) (TypeSpec, bool) {
	s, ok := types[jobType]
	return s, ok
}
