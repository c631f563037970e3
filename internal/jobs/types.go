package jobs

import (
	"maps"
	"slices"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Spec says how the control plane runs one job type: how long a job may
// run, and what the capability that owns the type does when one ends.
type Spec struct {
	// Timeout bounds how long a job of this type may run. Required.
	Timeout time.Duration
	// OnComplete, when set, runs after a job of the type finished
	// (succeeded, failed or cancelled), for the owning capability to
	// update its own records.
	OnComplete CompletionHook
	// OnLateResult, when set, runs once when an agent reports the result
	// of a job that had been failed with agent_lost (the job's LateResult
	// is set), so that the records the type owns say what really
	// happened (a deployment that succeeded becomes current). The job
	// itself stays failed.
	OnLateResult CompletionHook
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
func (s Spec) QueueTimeout() time.Duration {
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

// Work is what a job does: its type and payload. Of makes one, so that
// the payload is always the one its type declares.
type Work struct {
	jobType string
	payload any
}

// Of is the work of a job of type t with payload p.
func Of[P, R any](t agentproto.JobType[P, R], p P) Work {
	return Work{jobType: t.Name, payload: p}
}

// Type is the work's job type.
func (w Work) Type() string { return w.jobType }

// Payload is the work's payload, of the type its job type declares.
func (w Work) Payload() any { return w.payload }

// Register declares a job type that this control plane queues, with its
// spec. It panics when the type is registered twice or has no timeout:
// both are programming errors, found when the control plane is built.
func (s *Service) Register(t agentproto.Declared, spec Spec) {
	name := t.JobName()
	if spec.Timeout <= 0 {
		panic("jobs: job type " + name + " registered without a timeout")
	}
	s.specMu.Lock()
	defer s.specMu.Unlock()
	if _, dup := s.specs[name]; dup {
		panic("jobs: job type " + name + " registered twice")
	}
	s.specs[name] = spec
}

// Spec returns the spec of a registered job type.
func (s *Service) Spec(jobType string) (Spec, bool) {
	s.specMu.RLock()
	defer s.specMu.RUnlock()
	spec, ok := s.specs[jobType]
	return spec, ok
}

// Types lists the registered job types.
func (s *Service) Types() []string {
	s.specMu.RLock()
	defer s.specMu.RUnlock()
	return slices.Sorted(maps.Keys(s.specs))
}
