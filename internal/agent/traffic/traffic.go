// Package traffic reports the requests the server's proxy handled: it
// follows Caddy's JSON access log, sums the requests per host and minute
// (count, status classes, bytes out, p50 and p95 duration) and posts the
// minutes that changed to the control plane (POST /agent/v1/requests)
// every FlushInterval.
//
// A minute is always reported with its cumulative totals, and the control
// plane keeps the latest values of each (host, minute): sending a minute
// again is harmless. That is what makes restarts exact. The reporter saves,
// in one file written atomically, how far it has read the log (file
// identity, byte offset) together with the aggregates of exactly the lines
// before that point that it still holds (the open minutes and those the
// control plane has not accepted). After a restart, or a crash, it reloads
// both and reads on from that offset: lines after it were not counted in
// what was saved, lines before it are not read again, so nothing is lost or
// counted twice; minutes already reported are reported again with the same
// or larger totals, which simply replace the earlier ones.
//
// Memory is bounded: a minute is forgotten once closed (the log has moved
// lateMinutes past it) and accepted; at most defaultMaxMinutes minutes are
// held while the control plane is away (the oldest closed ones give way);
// durations go into a histogram of at most maxBuckets buckets per minute.
package traffic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Defaults of Options.
const (
	DefaultStateDir      = "/var/lib/capstan-agent"
	DefaultPollInterval  = time.Second
	DefaultFlushInterval = 10 * time.Second
	// DefaultBackfill is how far back a first start (no saved state)
	// counts the lines already in the log.
	DefaultBackfill = time.Hour

	// maxBatch is the most minutes one report carries.
	maxBatch = 500
)

// Options configure a Reporter.
type Options struct {
	// LogPath is Caddy's access log (proxy.Settings.AccessLog).
	LogPath string
	// StateDir holds the reporter's state file; created 0700 if missing.
	StateDir string
	Logger   *slog.Logger
	// PollInterval is how often the log is read; FlushInterval how often
	// changed minutes are reported. Zero: the defaults.
	PollInterval, FlushInterval time.Duration
	// Backfill: see DefaultBackfill.
	Backfill time.Duration
	// Backoff paces retries of failed reports.
	Backoff agent.Backoff
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Poster delivers reports; *agent.Client is one.
type Poster interface {
	PostRequests(ctx context.Context, rep agentproto.RequestsReport) error
}

// Reporter follows the access log and reports its requests. Run it once
// at a time; it may be run again after it returned (its state is kept).
type Reporter struct {
	opts Options
	log  *slog.Logger
	agg  *aggregator
	tail *follower

	started bool
	waiting bool // the log's absence was logged
	backoff agent.Backoff
	failing bool
}

// New returns a Reporter.
func New(opts Options) *Reporter {
	opts.StateDir = cmp.Or(opts.StateDir, DefaultStateDir)
	opts.PollInterval = cmp.Or(opts.PollInterval, DefaultPollInterval)
	opts.FlushInterval = cmp.Or(opts.FlushInterval, DefaultFlushInterval)
	opts.Backfill = cmp.Or(opts.Backfill, DefaultBackfill)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger.With("loop", "traffic")
	return &Reporter{opts: opts, log: log, agg: newAggregator(), tail: newFollower(opts.LogPath, log), backoff: opts.Backoff}
}

// Run reads the log every PollInterval and reports the changed minutes
// every FlushInterval (after a failure, after the backoff), until ctx
// ends; then it saves its state and returns nil. Until the log exists it
// only waits for it. It returns an error when
// it cannot keep its state, and one matching agent.ErrRevoked when the
// control plane revoked the agent.
func (r *Reporter) Run(ctx context.Context, p Poster) error {
	tick := time.NewTicker(r.opts.PollInterval)
	defer tick.Stop()
	// Nothing is touched (state directory included) until the proxy
	// writes its log: an agent without a proxy leaves no trace.
	for !r.started {
		_, err := os.Stat(r.opts.LogPath)
		if err == nil {
			break
		}
		if !r.waiting {
			r.log.Info("proxy access log not found; waiting for it", "path", r.opts.LogPath, "err", err)
			r.waiting = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	if err := r.start(); err != nil {
		return err
	}
	defer r.tail.stop()
	nextFlush := r.opts.Now().Add(r.opts.FlushInterval)
	for {
		r.poll()
		if !r.opts.Now().Before(nextFlush) {
			err := r.flush(ctx, p)
			if serr := r.save(); serr != nil {
				return serr
			}
			if errors.Is(err, agent.ErrRevoked) {
				return err
			}
			nextFlush = r.opts.Now().Add(r.after(err))
		}
		select {
		case <-ctx.Done():
			r.poll()
			return r.save()
		case <-tick.C:
		}
	}
}

// start creates the state directory and, the first time, loads the saved
// state.
func (r *Reporter) start() error {
	if err := os.MkdirAll(r.opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("traffic state directory: %w", err)
	}
	if r.started {
		return nil
	}
	if !r.restore() {
		// First start: count what the log already holds, back to Backfill.
		r.agg.notBefore = r.opts.Now().Add(-r.opts.Backfill)
	}
	r.started = true
	// Checks that the state can be written before anything else.
	return r.save()
}

// poll reads what was appended to the log.
func (r *Reporter) poll() {
	if err := r.tail.poll(r.agg.addLine); err != nil {
		r.log.Warn("reading the proxy access log failed", "path", r.opts.LogPath, "err", err)
	}
	a := r.agg
	if a.malformed+a.late+a.overflow+a.evicted > 0 {
		r.log.Warn("some access log lines were not counted",
			"malformed", a.malformed, "late", a.late, "over_limit", a.overflow, "unsent_minutes_dropped", a.evicted)
		a.malformed, a.late, a.overflow, a.evicted = 0, 0, 0, 0
	}
}

// after logs the outcome of a flush and returns the time to the next one.
func (r *Reporter) after(err error) time.Duration {
	if err == nil {
		if r.failing {
			r.log.Info("traffic report recovered", "failures", r.backoff.Attempts())
			r.failing = false
		}
		r.backoff.Reset()
		return r.opts.FlushInterval
	}
	d := agent.RetryDelay(&r.backoff, err)
	r.failing = true
	r.log.Warn("traffic report failed", "err", err, "failures", r.backoff.Attempts(), "retry_in", d.Round(time.Millisecond).String())
	return d
}

// flush reports the changed minutes in batches, oldest first, marks those
// accepted, and forgets the closed ones.
func (r *Reporter) flush(ctx context.Context, p Poster) error {
	defer r.agg.forget()
	dirty := r.agg.dirty()
	for len(dirty) > 0 {
		batch := dirty[:min(maxBatch, len(dirty))]
		dirty = dirty[len(batch):]
		rep := agentproto.RequestsReport{Minutes: make([]agentproto.RequestMinute, len(batch))}
		for i, m := range batch {
			rep.Minutes[i] = m.report()
		}
		err := p.PostRequests(ctx, rep)
		switch agent.StatusOf(err) {
		case 0:
			if err != nil {
				return err
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			// The same minutes would be refused again; they are sent
			// again if they change.
			r.log.Error("control plane refused a traffic report; its minutes are dropped", "minutes", len(batch), "err", err)
		default:
			return err
		}
		for _, m := range batch {
			m.dirty = false
		}
	}
	return nil
}
