package agent

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// AfterTimeout bounds the work a job leaves for after its result.
const AfterTimeout = 5 * time.Minute

// AfterFunc is work a job leaves for after its result, such as a release
// removing the container it replaced: the job's result does not wait for
// it. It reports through events, on the same job (the control plane takes
// a finished job's events for a while).
type AfterFunc func(ctx context.Context, events EventSink)

type afterKey struct{}

// afterWork collects the AfterFuncs of one job.
type afterWork struct {
	mu     sync.Mutex
	fns    []AfterFunc
	closed bool // taken: later ones run at once
}

// take returns the work left so far; work left later (by an executor the
// agent gave up waiting for) runs at once in After.
func (w *afterWork) take() []AfterFunc {
	w.mu.Lock()
	defer w.mu.Unlock()
	fns := w.fns
	w.fns, w.closed = nil, true
	return fns
}

// After leaves fn for after the result of the job whose executor was
// given ctx: the agent runs it once the executor returned, next to the
// delivery of the result, with an event sink of the job. fn's context ends
// after AfterTimeout, or when the agent stops (after its shutdown grace);
// fn always runs, if only to see its context ended. Outside a job the
// agent runs (an executor called directly), or from an executor the agent
// gave up waiting for, fn runs at once with ctx and events, before After
// returns.
func After(ctx context.Context, events EventSink, fn AfterFunc) {
	if w, ok := ctx.Value(afterKey{}).(*afterWork); ok {
		w.mu.Lock()
		if !w.closed {
			w.fns = append(w.fns, fn)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
	fn(ctx, events)
}

// runAfter runs a job's AfterFuncs in order with a new event sink of the
// job (red hides its secrets).
func (a *Agent) runAfter(log *slog.Logger, jobID string, red *redactor, fns []AfterFunc) {
	if len(fns) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(a.execCtx, AfterTimeout)
	defer cancel()
	events := newJobEvents(a.sendCtx, a.client, jobID, log, red, a.opts.Backoff)
	defer events.Close()
	for _, fn := range fns {
		func() {
			defer func() {
				if p := recover(); p != nil {
					msg := red.string(fmt.Sprint(p))
					log.Error("work left for after the job's result panicked", "panic", msg, "stack", string(debug.Stack()))
				}
			}()
			fn(ctx, events)
		}()
	}
}
