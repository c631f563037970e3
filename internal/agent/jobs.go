package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/metrics"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// dispatch starts a claimed job, unless this process already started the
// same id: a finished one is completed again with its remembered result
// (also while the first delivery of that result is still on its way), a
// job running now is ignored, and so is a finished one whose result is no
// longer kept.
func (a *Agent) dispatch(job agentproto.Job) {
	log := a.log.With("job_id", job.ID, "job_type", job.Type)
	a.mu.Lock()
	seen, res := a.recent.begin(job.ID)
	_, active := a.active[job.ID]
	switch {
	case seen && res != nil:
		if !active {
			// Its result is delivered again: the job stays in the
			// heartbeat's running ids until then.
			a.active[job.ID] = struct{}{}
		}
		a.mu.Unlock()
		log.Info("job delivered again; reporting its remembered result")
		a.jobs.Go(func() {
			if !active {
				defer a.deactivate(job.ID)
			}
			if a.complete(log, job.ID, *res) {
				a.pending.done(job.ID)
			}
		})
		return
	case seen && active:
		a.mu.Unlock()
		log.Warn("job delivered again while it runs; ignored")
		return
	case seen:
		a.mu.Unlock()
		log.Warn("job delivered again; it already ran and its result is no longer kept; ignored")
		return
	}
	a.active[job.ID] = struct{}{}
	a.executing++
	a.mu.Unlock()
	a.jobs.Go(func() { a.runJob(log, job) })
}

func (a *Agent) deactivate(id string) {
	a.mu.Lock()
	delete(a.active, id)
	a.mu.Unlock()
}

// runJob executes a job and reports its outcome. The job stays in the
// heartbeat's running_job_ids (its lease extended) until its result is
// delivered.
func (a *Agent) runJob(log *slog.Logger, job agentproto.Job) {
	defer a.deactivate(job.ID)
	start := time.Now()
	log.Info("job started", "timeout_seconds", job.TimeoutSeconds)
	// Recorded in the state directory until its result is delivered: a
	// crash in between reports it after the restart.
	a.pending.started(job.ID, start)
	res, red, after := a.execute(log, job)
	if len(after) > 0 {
		// Next to the delivery of the result, which does not wait for it.
		a.jobs.Go(func() { a.runAfter(log, job.ID, red, after) })
	}
	a.recent.finish(job.ID, res)
	if res == nil {
		a.pending.done(job.ID)
		return
	}
	attrs := []any{"status", res.Status, "duration", time.Since(start).Round(time.Millisecond).String()}
	if res.Error != "" {
		attrs = append(attrs, "error", res.Error)
	}
	log.Info("job finished", attrs...)
	a.pending.finished(job.ID, start, *res)
	if a.complete(log, job.ID, *res) {
		a.pending.done(job.ID)
	}
}

// resumePending loads what the last run kept in the state directory: its
// metric samples go into buf ahead of new ones, and the results of its
// jobs are delivered again (the control plane takes a result it already
// has as a success) — each job id counting as started, so that it is not
// run again if the control plane hands it out again. Called by Run before
// its loops start.
func (a *Agent) resumePending(buf *metrics.Buffer) {
	if a.pending == nil {
		return
	}
	if samples := a.pending.loadMetrics(time.Now()); len(samples) > 0 {
		buf.SetCapacity(max(buf.Cap(), len(samples)))
		for _, s := range samples {
			buf.Push(s)
		}
		a.log.Info("metric samples kept by the last run are sent again", "samples", len(samples),
			"from", samples[0].At, "to", samples[len(samples)-1].At)
	}
	for _, j := range a.pending.loadJobs() {
		res := *j.Result
		log := a.log.With("job_id", j.JobID)
		a.mu.Lock()
		a.recent.begin(j.JobID)
		a.recent.finish(j.JobID, &res)
		a.active[j.JobID] = struct{}{}
		a.mu.Unlock()
		log.Info("delivering the result of a job of the last run", "status", res.Status, "started_at", j.StartedAt, "error", res.Error)
		a.jobs.Go(func() {
			defer a.deactivate(j.JobID)
			if a.complete(log, j.JobID, res) {
				a.pending.done(j.JobID)
			}
		})
	}
}

// outcome is what an executor returned.
type outcome struct {
	data, output any
	err          error
}

// execute runs the job's executor and returns the result to report, or nil
// if the job is not this agent's to complete anymore, with the job's
// redactor and the work it left for after its result (After). The job's
// slot is released as soon as the executor has returned.
func (a *Agent) execute(log *slog.Logger, job agentproto.Job) (res *agentproto.CompleteRequest, red *redactor, after []AfterFunc) {
	released := false
	release := func() {
		if !released {
			released = true
			a.mu.Lock()
			a.executing--
			a.mu.Unlock()
			a.signalSlot()
		}
	}
	defer release()

	red = newRedactor(nil)
	ex, ok := a.opts.Executors[job.Type]
	if !ok {
		return &agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: "unsupported job type: " + job.Type}, red, nil
	}
	timeout := DefaultJobTimeout
	if job.TimeoutSeconds > 0 {
		timeout = time.Duration(job.TimeoutSeconds) * time.Second
	}
	later := &afterWork{}
	ctx, cancel := context.WithTimeout(context.WithValue(a.execCtx, afterKey{}, later), timeout)
	defer cancel()

	// Every job is confirmed before it runs, by fetching its secrets (none,
	// for most): a claim's answer read late — the agent was frozen while
	// its lease lapsed and the job was requeued or failed meanwhile — is
	// refused then, so the job never runs behind the control plane's back.
	// A job with secrets waits for them; one without asks once, and runs
	// if the control plane cannot be reached (it then cannot have taken
	// the job back either: that needs it up to expire the lease).
	secrets, err := a.confirm(ctx, log, job)
	if err != nil {
		if errors.Is(err, ErrRevoked) || gone(err) {
			log.Warn("job abandoned: the control plane no longer hands it to this agent", "err", err)
			return nil, red, nil
		}
		return &agentproto.CompleteRequest{Status: agentproto.StatusFailed,
			Error: jobError(ctx, timeout, fmt.Errorf("confirming the job and fetching its secrets: %w", err))}, red, nil
	}
	red = newRedactor(secrets)
	events := newJobEvents(a.sendCtx, a.client, job.ID, log, red, a.opts.Backoff)

	ch := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				msg := red.string(fmt.Sprint(p))
				log.Error("executor panicked", "panic", msg, "stack", string(debug.Stack()))
				ch <- outcome{err: fmt.Errorf("executor panicked: %s", msg)}
			}
		}()
		data, output, err := ex.Run(ctx, job, secrets, events)
		ch <- outcome{data: data, output: output, err: err}
	}()
	var out outcome
	select {
	case out = <-ch:
	case <-ctx.Done():
		t := time.NewTimer(stopGrace)
		select {
		case out = <-ch:
		case <-t.C:
			log.Error("executor did not return after its context ended; abandoning it")
			out = outcome{err: ctx.Err()}
		}
		t.Stop()
	}
	release()
	events.Close()
	return result(ctx, timeout, red, out), red, later.take()
}

// gone reports whether err says the job is not this agent's anymore.
func gone(err error) bool {
	switch StatusOf(err) {
	case http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
		return true
	}
	return false
}

// jobError is the error message of a failed job, saying whether it timed
// out or was interrupted by shutdown.
func jobError(ctx context.Context, timeout time.Duration, err error) string {
	msg := err.Error()
	if msg == "" {
		msg = "job failed"
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("job timed out after %s: %s", timeout, msg)
	case ctx.Err() != nil:
		return "job interrupted: the agent is shutting down: " + msg
	}
	return msg
}

// result encodes an executor's outcome as the job's result.
func result(ctx context.Context, timeout time.Duration, red *redactor, out outcome) *agentproto.CompleteRequest {
	res := &agentproto.CompleteRequest{Status: agentproto.StatusSucceeded}
	var errs []string
	if out.err != nil {
		errs = append(errs, jobError(ctx, timeout, out.err))
	}
	var err error
	if res.Data, err = encodeResult(out.data, red); err != nil {
		errs = append(errs, "encoding result data: "+err.Error())
	}
	if res.Output, err = encodeResult(out.output, red); err != nil {
		errs = append(errs, "encoding result output: "+err.Error())
	}
	if len(errs) > 0 {
		res.Status = agentproto.StatusFailed
		res.Error = red.string(errors.Join(stringErrs(errs)...).Error())
	}
	return res
}

func stringErrs(ss []string) []error {
	errs := make([]error, len(ss))
	for i, s := range ss {
		errs[i] = errors.New(s)
	}
	return errs
}

func encodeResult(v any, red *redactor) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil, err
	}
	return red.jsonBytes(b), nil
}

// confirm fetches a job's secrets, which confirms that the job is still
// this agent's: with retries for a job that has secrets, once for one
// without (whose run does not wait on a control plane that is down).
func (a *Agent) confirm(ctx context.Context, log *slog.Logger, job agentproto.Job) (map[string]string, error) {
	if job.HasSecrets {
		return a.fetchSecrets(ctx, log, job.ID)
	}
	cctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	_, err := a.client.Secrets(cctx, job.ID)
	if err != nil && (errors.Is(err, ErrRevoked) || gone(err)) {
		return nil, err
	}
	if err != nil {
		log.Warn("could not confirm the job with the control plane; running it", "err", err)
	}
	return map[string]string{}, nil
}

// confirmTimeout bounds the confirmation of a job without secrets.
const confirmTimeout = 10 * time.Second

// fetchSecrets gets a job's secrets, retrying temporary failures until ctx
// (the job's deadline) ends.
func (a *Agent) fetchSecrets(ctx context.Context, log *slog.Logger, id string) (map[string]string, error) {
	b := a.opts.Backoff
	for {
		s, err := a.client.Secrets(ctx, id)
		if err == nil {
			if s == nil {
				s = map[string]string{}
			}
			return s, nil
		}
		var ae *APIError
		if ctx.Err() != nil || errors.Is(err, ErrRevoked) || (errors.As(err, &ae) && !ae.Temporary()) {
			return nil, err
		}
		d := RetryDelay(&b, err)
		log.Warn("fetching job secrets failed; retrying", "err", err, "retry_in", d.Round(time.Millisecond).String())
		if !Sleep(ctx, d) {
			return nil, err
		}
	}
}

// complete delivers a job's result, retrying with backoff until the control
// plane accepts it, answers 403/404/409 (not this agent's job, unknown, or
// already finished), or the agent stops. A result the control plane
// rejects as invalid (400, 413, 422) is replaced once by a plain failure so
// the job does not stay open; if that is rejected too, it gives up. It
// returns false when the agent stopped (or was revoked) before the result
// was delivered: the result is still owed.
func (a *Agent) complete(log *slog.Logger, id string, req agentproto.CompleteRequest) bool {
	ctx := a.sendCtx
	b := a.opts.Backoff
	replaced := false
	for {
		err := a.client.Complete(ctx, id, req)
		if err == nil {
			log.Info("job result delivered", "status", req.Status)
			return true
		}
		if errors.Is(err, ErrRevoked) {
			return false
		}
		if ctx.Err() != nil {
			log.Error("job result not delivered: the agent stopped", "status", req.Status, "err", err)
			return false
		}
		if gone(err) {
			log.Warn("control plane refused the job result; giving up", "err", err)
			return true
		}
		switch StatusOf(err) {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			if !replaced {
				log.Error("control plane rejected the job result; reporting a plain failure instead", "err", err)
				req = agentproto.CompleteRequest{
					Status: agentproto.StatusFailed,
					Error:  "the control plane rejected the agent's result: " + err.Error(),
				}
				replaced = true
				continue
			}
			log.Error("control plane rejected the job result; giving up", "err", err)
			return true
		}
		d := RetryDelay(&b, err)
		log.Warn("delivering job result failed; retrying", "err", err, "retry_in", d.Round(time.Millisecond).String())
		if !Sleep(ctx, d) {
			log.Error("job result not delivered: the agent stopped", "status", req.Status)
			return false
		}
	}
}
