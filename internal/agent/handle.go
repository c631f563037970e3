package agent

import (
	"context"
	"errors"
	"reflect"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Call is one job as its handler sees it: the job, its payload decoded
// by the job type's declaration, its secrets and where its progress
// events go.
type Call[P any] struct {
	Job agentproto.Job
	// Payload is the job's payload, already decoded; a job without one
	// never reaches the handler.
	Payload P
	// Secrets are those of the job when Job.HasSecrets, else nil; never
	// log them.
	Secrets map[string]string
	Events  EventSink
}

// Failure is the error of a job that failed with data of its own: the
// job's data is Data, not the handler's result, and its error is Err's.
type Failure struct {
	Err  error
	Data any
}

func (f *Failure) Error() string { return f.Err.Error() }

func (f *Failure) Unwrap() error { return f.Err }

// HandleOption changes how Handle reports a job type's jobs.
type HandleOption func(*handleOptions)

type handleOptions struct {
	fail        func(error) *Failure
	optional    bool
	payloadData any
}

// PayloadFailure makes a job of the type whose payload is invalid report
// data as its data.
func PayloadFailure(data any) HandleOption {
	return func(o *handleOptions) { o.payloadData = data }
}

// OptionalPayload lets a job of the type come without a payload: its
// handler gets the payload's zero value.
func OptionalPayload() HandleOption {
	return func(o *handleOptions) { o.optional = true }
}

// FailWith makes every failure of the job type, an invalid payload's
// too, report the data and error fail makes of its error.
func FailWith(fail func(err error) *Failure) HandleOption {
	return func(o *handleOptions) { o.fail = fail }
}

// Handle registers h as the handler of the jobs of type t: it decodes
// each job's payload as t declares it (an invalid payload fails the job
// with t's error, and h is not called) and reports h's result as the
// job's data. When h fails, the job's data is that of a Failure in the
// error's chain, else h's result unless it is the zero value (a handler
// that failed part way reports what it has). It panics if t already has
// a handler, as Register does.
func Handle[P, R any](r Registry, t agentproto.JobType[P, R], h func(ctx context.Context, c Call[P]) (R, error), opts ...HandleOption) {
	var o handleOptions
	for _, opt := range opts {
		opt(&o)
	}
	r.Register(t.Name, ExecutorFunc(func(ctx context.Context, job agentproto.Job, secrets map[string]string, events EventSink) (any, any, error) {
		var p P
		if !o.optional || len(job.Payload) > 0 && string(job.Payload) != "null" {
			var err error
			if p, err = t.DecodePayload(job.Payload); err != nil {
				return failure(o, o.payloadData, err)
			}
		}
		res, err := h(ctx, Call[P]{Job: job, Payload: p, Secrets: secrets, Events: events})
		if err != nil {
			var data any
			if !reflect.ValueOf(&res).Elem().IsZero() {
				data = res
			}
			return failure(o, data, err)
		}
		return res, nil, nil
	}))
}

// failure is what a job that failed with err reports.
func failure(o handleOptions, data any, err error) (any, any, error) {
	if o.fail != nil {
		if f := o.fail(err); f != nil {
			err = f
		}
	}
	if f, ok := errors.AsType[*Failure](err); ok {
		return f.Data, nil, f
	}
	return data, nil, err
}
