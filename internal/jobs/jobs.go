// Package jobs owns the job queue: every piece of work that happens on a
// server. The API enqueues a job; the server's agent claims it by long poll,
// fetches its secrets, posts events and completes it. A running job holds a
// lease that the agent's heartbeats and events extend; a lapsed lease fails
// the job with agent_lost and a job past its timeout fails with timed_out, so
// no job stays running forever.
//
// States: queued → running → succeeded | failed; queued → cancelled.
package jobs

import (
	"context"
	"encoding/json"
	"time"
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
)

// Job is one unit of work on one server.
type Job struct {
	ID             string          `json:"id"`
	ServerID       string          `json:"server_id"`
	Type           string          `json:"type"`
	Status         Status          `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
	Payload        json.RawMessage `json:"payload"`
	HasSecrets     bool            `json:"has_secrets"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	CreatedBy      string          `json:"created_by,omitempty"`
	TimeoutSeconds int             `json:"timeout_seconds"`
	LeaseSeconds   int             `json:"-"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	LeaseExpiresAt *time.Time      `json:"-"`
	DeadlineAt     *time.Time      `json:"-"`
	// Error is nil unless the job failed or was cancelled.
	Error *string `json:"error"`
	// Data is the result; nil until the job finished.
	Data   json.RawMessage `json:"data"`
	Output json.RawMessage `json:"output"`
	// RequestHash fingerprints type and payload for idempotency checks.
	RequestHash string `json:"-"`
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
	// InsertJob stores a queued job; a duplicate (server, idempotency key)
	// is a fault.Conflict with code "idempotency-key".
	InsertJob(ctx context.Context, j Job, sealedSecrets string) error
	JobByIdempotencyKey(ctx context.Context, serverID, key string) (Job, error)
	Job(ctx context.Context, id string) (Job, error)
	JobEvents(ctx context.Context, id string) ([]Event, error)
	// ListJobs returns jobs newest first; serverID "" means all servers.
	ListJobs(ctx context.Context, serverID string, limit int) ([]Job, error)
	// CancelJob cancels a queued job; fault.Conflict if it is not queued.
	CancelJob(ctx context.Context, id string, now time.Time) (Job, error)
	// ClaimJob moves the oldest queued job of the server to running.
	ClaimJob(ctx context.Context, serverID string, now time.Time) (Job, bool, error)
	JobSecrets(ctx context.Context, id string) (string, error)
	// AppendJobEvents stores events of a running job and extends its lease.
	AppendJobEvents(ctx context.Context, jobID string, events []Event, now time.Time) error
	// FinishJob moves a running job to a final status; false if it was not running.
	FinishJob(ctx context.Context, id string, status Status, errText *string, data, output json.RawMessage, now time.Time) (bool, error)
	// ExtendLeases extends the leases of the server's running jobs named.
	ExtendLeases(ctx context.Context, serverID string, ids []string, now time.Time) error
	// ExpireJobs fails running jobs whose lease lapsed (agent_lost) or whose
	// deadline passed (timed_out) and returns them.
	ExpireJobs(ctx context.Context, now time.Time) ([]Job, error)
	// EndServerJobs cancels the server's queued jobs and fails its running
	// ones with reason.
	EndServerJobs(ctx context.Context, serverID, reason string, now time.Time) error
}
