package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Executor runs jobs of one type. A declared job type gets its executor
// from Handle, which decodes the payload as the declaration says; an
// Executor written by hand is for tests.
//
// Run gets a context that ends at the job's deadline (timeout_seconds) or
// when the agent shuts down; it must return promptly once ctx is done. The
// secrets are those of GET /jobs/{id}/secrets when job.HasSecrets, else
// nil; never log them (the agent also masks their values in events and
// results). data and output are encoded to JSON as the result's data and
// output (nil: omitted); a json.RawMessage is sent as is. A non-nil err
// fails the job with err.Error() as its error, data and output are still
// sent. A panic fails the job; it does not crash the agent.
type Executor interface {
	Run(ctx context.Context, job agentproto.Job, secrets map[string]string, events EventSink) (data, output any, err error)
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, job agentproto.Job, secrets map[string]string, events EventSink) (data, output any, err error)

// Run calls f.
func (f ExecutorFunc) Run(ctx context.Context, job agentproto.Job, secrets map[string]string, events EventSink) (data, output any, err error) {
	return f(ctx, job, secrets, events)
}

// EventSink receives a job's progress events. Emit never blocks on the
// network: events are batched and posted to /jobs/{id}/events within about
// 100 ms, and all of them are flushed before the job is completed. level is
// one of agentproto.Level*; data (may be nil) is encoded to JSON.
type EventSink interface {
	Emit(level, message string, data any)
}

// Registry maps job types to their executors.
type Registry map[string]Executor

// Register adds the executor of jobType. It panics if jobType already has
// one or e is nil (both are programming errors). Handle registers the
// handler of a declared job type through it.
func (r Registry) Register(jobType string, e Executor) {
	if e == nil {
		panic("agent: nil executor for " + jobType)
	}
	if _, dup := r[jobType]; dup {
		panic(fmt.Sprintf("agent: executor for %q registered twice", jobType))
	}
	r[jobType] = e
}

// Types returns the registered job types, sorted.
func (r Registry) Types() []string {
	ts := make([]string, 0, len(r))
	for t := range r {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}
