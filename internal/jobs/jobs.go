// Package jobs owns the job queue: every piece of work that happens on a
// server. The API enqueues a job; the server's agent claims it by long poll,
// fetches its secrets, posts events and completes it. A running job holds a
// lease that the agent's heartbeats and events extend; a lapsed lease fails
// the job with agent_lost and a job past its timeout fails with timed_out, so
// no job stays running forever.
//
// A claim that the agent never acknowledged (no heartbeat naming the job,
// no event, no fetch of its secrets, no result) when its lease lapses was
// most likely lost on the way: the control plane died after committing it
// and before the agent read the answer. Such a job is queued again rather
// than failed, at most MaxRequeues times. It cannot run twice: it goes
// back to the same server, whose agent starts a job id at most once (and
// reports the remembered result when it is handed a job again).
//
// A queued job does not wait forever: one that was queued again for a
// server whose agent has been silent for longer than the job's lease past
// the point where the server counts as offline fails with server_offline
// (the agent that never acknowledged its claim is gone, and nothing else
// will take the job), and one that no agent claimed within its type's
// queue timeout fails with queue_timed_out. Both run the job's completion
// hook, like any other end.
//
// States: queued → running → succeeded | failed; queued → cancelled;
// running → queued (a claim never acknowledged); queued → failed (the
// server went offline after a claim never acknowledged, or the queue
// timeout passed).
package jobs

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/ids"
)

// Status is a job's state.
type Status string

// Job states.
const (
	Queued    Status = "queued"
	Running   Status = "running"
	Succeeded Status = "succeeded"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
)

// Finished reports whether the status is final.
func (s Status) Finished() bool { return s == Succeeded || s == Failed || s == Cancelled }

// Errors the control plane itself sets on jobs.
const (
	ErrAgentLost     = "agent_lost"
	ErrTimedOut      = "timed_out"
	ErrServerRevoked = "server_revoked"
	// ErrServerOffline fails a job queued again after a claim never
	// acknowledged, when its server has stayed offline past its lease.
	ErrServerOffline = "server_offline"
	// ErrQueueTimedOut fails a job that no agent claimed within its
	// type's queue timeout.
	ErrQueueTimedOut = "queue_timed_out"
)

// Job is one unit of work on one server.
type Job struct {
	ID       string `json:"id"`
	ServerID string `json:"server_id"`
	// ServerName, AppName and Actor's e-mail name what the ids point at;
	// the job list and a single job's read fill them in, other views
	// (the event stream) leave them empty.
	ServerName string `json:"server_name,omitempty" doc:"The server's name; absent when unknown (the server was deleted, or in the event stream)"`
	// AppID is the application the job works for; "" for none.
	AppID          string          `json:"app_id,omitempty" doc:"The application the job works for (a deploy, a removal, an app's logs, a domain check); absent for other jobs"`
	AppName        string          `json:"app_name,omitempty" doc:"The application's name; absent when there is none or it is unknown"`
	Type           string          `json:"type"`
	Status         Status          `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
	Payload        json.RawMessage `json:"payload" doc:"What the job was asked to do; administrators only"`
	HasSecrets     bool            `json:"has_secrets" doc:"The job holds secrets for its agent; false once it ended (they are erased then)"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	CreatedBy      string          `json:"created_by,omitempty"`
	// Actor is who queued the job, set by For from CreatedBy and
	// ActorEmail.
	Actor *JobActor `json:"actor" doc:"Who queued the job: a user (with their e-mail when known) or the control plane itself (system)"`
	// ActorEmail is the creating user's e-mail, when the read looked it up.
	ActorEmail     string     `json:"-"`
	TimeoutSeconds int        `json:"timeout_seconds"`
	LeaseSeconds   int        `json:"-"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	StartedAt      *time.Time `json:"started_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	LeaseExpiresAt *time.Time `json:"-"`
	DeadlineAt     *time.Time `json:"-"`
	// QueueDeadlineAt is when the job fails with queue_timed_out if it is
	// still queued then (see TypeSpec.QueueTimeout); nil: never.
	QueueDeadlineAt *time.Time `json:"-"`
	// Error is nil unless the job failed or was cancelled. For a member
	// (see Reader) it is the error class, not the text.
	Error *string `json:"error" doc:"Why it failed or was cancelled; null otherwise. Members get the error class (as error_class) instead of the text, which can carry output"`
	// ErrorClass is set by For: nil when Error is.
	ErrorClass *string `json:"error_class" doc:"agent_lost, timed_out, server_revoked, server_offline, queue_timed_out, cancelled, or failed (the agent reported an error); null when there is no error"`
	// Data is the result; nil until the job finished, and for members.
	Data   json.RawMessage `json:"data" doc:"The result; null until the job finished. Administrators only"`
	Output json.RawMessage `json:"output" doc:"Administrators only"`
	// Redacted is set by For for members.
	Redacted bool `json:"redacted" doc:"True when payload, data, output, events and the error text were withheld (the caller is not an administrator)"`
	// RequestHash fingerprints type and payload for idempotency checks.
	RequestHash string `json:"-"`
	// HookPendingAt is when the job ended, while its completion hook has
	// not run yet; nil otherwise. Readers see such a job still running.
	HookPendingAt *time.Time `json:"-"`
	// AckedAt is when the agent first showed that it holds the job since
	// its last claim (a heartbeat naming it, an event, a fetch of its
	// secrets); nil while it has not.
	AckedAt *time.Time `json:"-"`
	// Requeues counts the claims that were never acknowledged and whose
	// job was queued again when their lease lapsed (see MaxRequeues).
	Requeues int `json:"-"`
	// LateResult is nil unless the agent reported a result after the job
	// had been failed with agent_lost.
	LateResult *LateResult `json:"late_result" doc:"A result the agent reported after the job was failed because its lease lapsed (agent_lost), e.g. across a control-plane restart or a network partition; null when none came. The job's status stays failed; the job type's records (a deployment, a backup run) are corrected from it"`
}

// JobActor is who queued a job.
type JobActor struct {
	Type  string `json:"type" enum:"user,agent,system" doc:"user: a signed-in user; agent: a server's agent; system: the control plane on its own (a schedule, a webhook, a retry)"`
	ID    string `json:"id,omitempty" doc:"The user's or server's id; absent for system"`
	Email string `json:"email,omitempty" doc:"The user's e-mail address, when known"`
}

// Actor types.
const (
	ActorUser   = "user"
	ActorAgent  = "agent"
	ActorSystem = "system"
)

// ActorOf names who created a job from its created_by: a user id, a
// server id (its agent), or nothing (the control plane).
func ActorOf(createdBy, email string) JobActor {
	switch {
	case strings.HasPrefix(createdBy, ids.User+"_"):
		return JobActor{Type: ActorUser, ID: createdBy, Email: email}
	case strings.HasPrefix(createdBy, ids.Server+"_"):
		return JobActor{Type: ActorAgent, ID: createdBy}
	case createdBy == "":
		return JobActor{Type: ActorSystem}
	}
	return JobActor{Type: ActorSystem, ID: createdBy}
}

// ListFilter selects jobs for List; every field set must match.
type ListFilter struct {
	ServerID string
	AppID    string
	Type     string
	Status   Status
	// Actor is "system" (jobs the control plane queued on its own), a
	// user id, or a user's e-mail address.
	Actor string
}

// LateResult is the result an agent reported for a job that the control
// plane had already failed for a lost lease.
type LateResult struct {
	Status Status `json:"status" enum:"succeeded,failed" doc:"What the agent reported"`
	// Error is the agent's error text; nil when it succeeded, and the
	// error class for members.
	Error *string `json:"error" doc:"The agent's error; null when it succeeded. Members get the error class"`
	// Data is nil for members.
	Data json.RawMessage `json:"data" doc:"The agent's result data. Administrators only"`
	At   time.Time       `json:"at" doc:"When the late result came"`
}

// Event is one progress event of a job.
type Event struct {
	Seq     int             `json:"seq"`
	At      time.Time       `json:"at"`
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Store persists jobs and their events.
type Store interface {
	// ServerAgent returns a server's name, its agent's version and the job
	// types the agent reported it runs (nil: it reported none, as agents
	// older than the report do); fault.NotFound for no such server.
	ServerAgent(ctx context.Context, serverID string) (name, version string, jobTypes []string, err error)
	// InsertJob stores a queued job; a duplicate (server, idempotency key)
	// is a fault.Conflict with code "idempotency-key".
	InsertJob(ctx context.Context, j Job, sealedSecrets string) error
	JobByIdempotencyKey(ctx context.Context, serverID, key string) (Job, error)
	Job(ctx context.Context, id string) (Job, error)
	JobEvents(ctx context.Context, id string) ([]Event, error)
	// ListJobs returns the jobs that f selects, newest first, with the
	// names of their server, application and creating user.
	ListJobs(ctx context.Context, f ListFilter, limit int) ([]Job, error)
	// JobNames returns the names of a job's server and application and
	// the e-mail of the user who created it; "" for each unknown.
	JobNames(ctx context.Context, serverID, appID, createdBy string) (serverName, appName, email string, err error)
	// Every method that ends a job (CancelJob, FinishJob, ExpireJobs,
	// ExpireQueuedJobs, EndServerJobs) erases its sealed secrets in the
	// same conditional update: nothing reads them after the job ended.
	// CancelJob, FinishJob, ExpireJobs and ExpireQueuedJobs also mark the
	// job's completion hook pending (HookPendingAt = now) in that update,
	// and change only the jobs they report: a job that another caller
	// changed first is not theirs.
	//
	// CancelJob cancels a queued job; fault.Conflict if it is not queued.
	CancelJob(ctx context.Context, id string, now time.Time) (Job, error)
	// ClaimJob moves the oldest queued job of the server to running, not
	// acknowledged yet.
	ClaimJob(ctx context.Context, serverID string, now time.Time) (Job, bool, error)
	// AckJob records that the server's agent holds its running job (it
	// fetched the job's secrets): from then on a lapsed lease fails the job
	// instead of queueing it again.
	AckJob(ctx context.Context, serverID, id string, now time.Time) error
	// JobSecrets returns the sealed secrets of a job; "" once the job ended.
	JobSecrets(ctx context.Context, id string) (string, error)
	// AppendJobEvents stores events of a running job and extends its
	// lease; the events acknowledge the claim.
	AppendJobEvents(ctx context.Context, jobID string, events []Event, now time.Time) error
	// FinishJob moves a running job to a final status, or a job queued
	// again after a claim never acknowledged (its agent did have it);
	// false if it was neither.
	FinishJob(ctx context.Context, id string, status Status, errText *string, data, output json.RawMessage, now time.Time) (bool, error)
	// ExtendLeases extends the leases of the server's running jobs named,
	// acknowledging their claims.
	ExtendLeases(ctx context.Context, serverID string, ids []string, now time.Time) error
	// ExpireJobs ends the claims of running jobs whose lease lapsed or whose
	// deadline passed. A claim never acknowledged is queued again while the
	// job has fewer than maxRequeues requeues (returned in requeued, with
	// an event saying so); any other is failed, agent_lost or timed_out
	// (returned in expired).
	ExpireJobs(ctx context.Context, now time.Time, maxRequeues int) (expired, requeued []Job, err error)
	// ExpireQueuedJobs fails queued jobs that wait in vain: one queued again
	// after a claim never acknowledged (Requeues > 0) whose server's last
	// heartbeat is older than offlineSince minus the job's lease fails
	// with server_offline, and any one whose queue deadline passed with
	// queue_timed_out. Each change is conditional on the job still being
	// queued (a claim that took it first wins), marks its hook pending and
	// erases its secrets, and only the jobs changed are returned.
	ExpireQueuedJobs(ctx context.Context, now, offlineSince time.Time) ([]Job, error)
	// EndServerJobs cancels the server's queued jobs and fails its running
	// ones with reason.
	EndServerJobs(ctx context.Context, serverID, reason string, now time.Time) error
	// ClearHookPending records that the job's completion hook ran.
	ClearHookPending(ctx context.Context, id string) error
	// TakeStaleHooks returns jobs whose hook has been pending since before
	// before, each taken (its HookPendingAt set to now) by a conditional
	// update, so that one caller of several gets each.
	TakeStaleHooks(ctx context.Context, before, now time.Time, limit int) ([]Job, error)
	// RecordLateResult stores the late result of a job failed with
	// agent_lost; false if the job is not such a job or has one already.
	RecordLateResult(ctx context.Context, id string, r LateResult) (bool, error)
	// GraceLeases moves every running job's lease and deadline that end
	// before until to until, and returns how many jobs it moved.
	GraceLeases(ctx context.Context, until time.Time) (int, error)
	// PurgeJobResults removes the results, output and events of at most
	// limit jobs that finished before cutoff, oldest first, keeping the
	// jobs themselves; it returns how many it purged.
	PurgeJobResults(ctx context.Context, cutoff, now time.Time, limit int) (int, error)
}
