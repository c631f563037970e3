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
// Only the proxy's configured sites (Options.Sites) are counted per host;
// requests to any other host (a scanner's IP literal, a random name, a
// name whose DNS still points here) are summed into the server's one
// "other" bucket, reported without names. The site list is read again at
// every flush and whenever a poll meets a host not on it, so a site just
// added is counted under its name from its first request.
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
	"strings"
	"sync/atomic"
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
	// Sites tells which hosts are configured sites (CaddySites); nil:
	// every host counts under its own name. Until it has answered once,
	// the log is not read (its lines wait there, nothing is lost).
	Sites SiteSource
}

// Poster delivers reports; *agent.Client is one.
type Poster interface {
	PostRequests(ctx context.Context, rep agentproto.RequestsReport) (agentproto.RequestsResult, error)
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

	// The configured sites, when Options.Sites is set.
	sites      map[string]bool
	sitesKnown bool      // sites was read at least once
	sitesAt    time.Time // when sites was last read
	sitesFresh bool      // sites was read during the current poll
	sitesErr   bool      // the last read failed (and was logged)
	// sitesStale is set by SitesChanged, from any goroutine: the next
	// poll reads the sites again.
	sitesStale atomic.Bool
	ctx        context.Context
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
	r := &Reporter{opts: opts, log: log, agg: newAggregator(), tail: newFollower(opts.LogPath, log), backoff: opts.Backoff}
	if opts.Sites != nil {
		r.agg.site = r.isSite
	}
	return r
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
		r.poll(ctx)
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
			r.poll(context.WithoutCancel(ctx))
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
func (r *Reporter) poll(ctx context.Context) {
	if r.opts.Sites != nil {
		r.ctx, r.sitesFresh = ctx, false
		defer func() { r.ctx = nil }()
		if r.sitesStale.Swap(false) || !r.sitesKnown || r.opts.Now().Sub(r.sitesAt) >= r.opts.FlushInterval {
			r.readSites()
		}
		if !r.sitesKnown {
			return
		}
	}
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

// sitesTimeout bounds one read of the configured sites.
const sitesTimeout = 10 * time.Second

// readSites reads the configured sites; on failure the previous ones stay.
func (r *Reporter) readSites() {
	r.sitesFresh = true
	parent := r.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, sitesTimeout)
	defer cancel()
	hosts, err := r.opts.Sites.SiteHosts(ctx)
	if err != nil {
		if !r.sitesErr {
			msg := "reading the proxy's configured sites failed; the previous ones are used"
			if !r.sitesKnown {
				msg = "reading the proxy's configured sites failed; the access log is read once they are known"
			}
			r.log.Warn(msg, "err", err)
			r.sitesErr = true
		}
		return
	}
	if r.sitesErr {
		r.log.Info("the proxy's configured sites can be read again")
		r.sitesErr = false
	}
	r.sites = make(map[string]bool, len(hosts))
	for _, h := range hosts {
		r.sites[normalizeHost(h)] = true
	}
	r.sitesKnown, r.sitesAt = true, r.opts.Now()
}

// SitesChanged tells the reporter that the proxy loaded a new
// configuration: the next poll reads the configured sites again, before
// it counts a line. Safe to call from any goroutine.
func (r *Reporter) SitesChanged() { r.sitesStale.Store(true) }

// unknownHostReread is how often at most a host that is not among the
// sites read last makes them be read again, for a configuration loaded
// without SitesChanged (by hand, or by an older agent before a restart).
// Bounded so that a scanner's stream of random names does not turn into
// a stream of reads of the proxy's whole configuration.
const unknownHostReread = 30 * time.Second

// isSite reports whether host is a configured site.
func (r *Reporter) isSite(host string) bool {
	if r.sites[host] {
		return true
	}
	if !r.sitesFresh && r.opts.Now().Sub(r.sitesAt) >= unknownHostReread {
		r.readSites()
	}
	return r.sites[host]
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
		if err := r.send(ctx, p, batch); err != nil {
			return err
		}
		for _, m := range batch {
			m.dirty = false
		}
	}
	return nil
}

// batchReport is a report of minutes, with the minute behind each entry
// by its field path (minutes[i], other[j]).
func batchReport(batch []*minute) (agentproto.RequestsReport, map[string]*minute) {
	var rep agentproto.RequestsReport
	byField := make(map[string]*minute, len(batch))
	for _, m := range batch {
		if m.host == otherHost {
			byField[fmt.Sprintf("other[%d]", len(rep.Other))] = m
			rep.Other = append(rep.Other, m.report())
		} else {
			byField[fmt.Sprintf("minutes[%d]", len(rep.Minutes))] = m
			rep.Minutes = append(rep.Minutes, m.report())
		}
	}
	if rep.Minutes == nil {
		rep.Minutes = []agentproto.RequestMinute{}
	}
	return rep, byField
}

// entryOf returns the minute a field path (minutes[3].host) names.
func entryOf(byField map[string]*minute, field string) *minute {
	entry, _, _ := strings.Cut(field, ".")
	return byField[entry]
}

// refused reports whether a status means the control plane will refuse
// the same report again.
func refused(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity
}

// maxLoggedEntries bounds the entries named in one log line.
const maxLoggedEntries = 50

// send reports one batch. The entries the control plane skipped are
// logged, each with what was wrong. A control plane that refuses a whole
// report for some bad entries (422) names them: they are logged and left
// out, and the rest is sent again. Only a report refused with no entry
// named is dropped, and then every entry of it is logged.
func (r *Reporter) send(ctx context.Context, p Poster, batch []*minute) error {
	rep, byField := batchReport(batch)
	res, err := p.PostRequests(ctx, rep)
	if err == nil {
		r.logSkipped(res, byField)
		return nil
	}
	var ae *agent.APIError
	if !errors.As(err, &ae) || !refused(ae.Status) {
		return err
	}
	bad := map[*minute]bool{}
	for _, f := range ae.Problem.Errors {
		if m := entryOf(byField, f.Field); m != nil {
			bad[m] = true
			r.log.Error("control plane refused a traffic entry; it is left out", "field", f.Field, "reason", f.Message,
				"host", m.host, "minute", m.start)
		}
	}
	var rest []*minute
	for _, m := range batch {
		if !bad[m] {
			rest = append(rest, m)
		}
	}
	if len(bad) > 0 && len(rest) > 0 {
		rep, byField = batchReport(rest)
		res, err = p.PostRequests(ctx, rep)
		if err == nil {
			r.logSkipped(res, byField)
			return nil
		}
		if !errors.As(err, &ae) || !refused(ae.Status) {
			return err
		}
	}
	if len(rest) > 0 {
		// The same minutes would be refused again; they are sent again
		// if they change.
		r.log.Error("control plane refused a traffic report without naming a bad entry; its minutes are dropped",
			"minutes", len(rest), "entries", entryNames(rest), "err", err)
	}
	return nil
}

// logSkipped logs the entries the control plane skipped.
func (r *Reporter) logSkipped(res agentproto.RequestsResult, byField map[string]*minute) {
	for _, s := range res.Skipped {
		host, at := s.Host, s.Minute
		if m := entryOf(byField, s.Field); m != nil {
			host, at = m.host, m.start
		}
		r.log.Warn("control plane skipped a traffic entry", "field", s.Field, "reason", s.Reason, "host", host, "minute", at)
	}
	if n := res.SkippedCount - len(res.Skipped); n > 0 {
		r.log.Warn("control plane skipped more traffic entries than it named", "unnamed", n)
	}
}

// entryNames names up to maxLoggedEntries minutes as host@minute.
func entryNames(ms []*minute) []string {
	out := make([]string, 0, min(len(ms), maxLoggedEntries))
	for _, m := range ms[:min(len(ms), maxLoggedEntries)] {
		out = append(out, m.host+"@"+m.start.Format(time.RFC3339))
	}
	return out
}
