package agentapi

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
)

// Report is a kind of agent report that is rate limited per server.
type Report int

// The rate-limited reports. Each has a token bucket per server; a report
// costs one token per item it carries (sample, event, minute; one for an
// inventory or an empty report).
const (
	ReportMetrics         Report = iota // POST /agent/v1/metrics, per sample
	ReportInventory                     // POST /agent/v1/inventory, per report
	ReportEvents                        // POST /agent/v1/jobs/{id}/events, per event
	ReportRequests                      // POST /agent/v1/requests, per minute
	ReportProxyReads                    // GET /agent/v1/proxy, per read
	ReportDatabaseReads                 // GET /agent/v1/databases, per read
	ReportDatabaseMetrics               // POST /agent/v1/databases/metrics, per sample
	ReportHealth                        // POST /agent/v1/health, per report
	numReports
)

// Limit is the token bucket of one report kind: Burst items at once, then
// PerSecond items a second.
type Limit struct {
	Burst     float64
	PerSecond float64
}

// DefaultLimits are the per-server limits of the reports. They are far
// above what an agent sends at its normal cadence (a metrics sample every
// 15 s, an inventory when it changes, checked every 30 s, a traffic
// report every 10 s), and the bursts take a whole hour of metrics
// buffered during an outage (720 samples at the shortest interval, 5 s)
// twice over.
var DefaultLimits = [numReports]Limit{
	ReportMetrics:   {Burst: 1440, PerSecond: 1},
	ReportInventory: {Burst: 10, PerSecond: 0.1},
	ReportEvents:    {Burst: 2000, PerSecond: 50},
	ReportRequests:  {Burst: 20000, PerSecond: 100},
	// An agent reads its proxy state when a release switches, after a
	// failed switch and when an application is removed, and again when
	// a newer state was applied meanwhile.
	ReportProxyReads: {Burst: 60, PerSecond: 1},
	// An agent reads the database instances to sample when the heartbeat
	// says the list changed, and every few minutes regardless.
	ReportDatabaseReads: {Burst: 30, PerSecond: 0.2},
	// One sample per instance a minute: the rate takes 120 instances; the
	// burst a report of a backlog.
	ReportDatabaseMetrics: {Burst: 2000, PerSecond: 2},
	// Health reports come every 30 s.
	ReportHealth: {Burst: 20, PerSecond: 0.5},
}

var reportNames = [numReports]string{"metrics samples", "inventory reports", "job events", "traffic minutes", "proxy state reads",
	"database list reads", "database metric samples", "health reports"}

// limiter holds the token buckets of every server that reported lately.
// A bucket that has filled up again is forgotten.
type limiter struct {
	limits [numReports]Limit
	now    func() time.Time

	mu        sync.Mutex // guards buckets and lastSweep
	buckets   map[string]*[numReports]bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was computed; zero: a full bucket
}

func newLimiter(limits [numReports]Limit, now func() time.Time) *limiter {
	if now == nil {
		now = time.Now
	}
	return &limiter{limits: limits, now: now, buckets: map[string]*[numReports]bucket{}}
}

// sweepEvery is how often buckets that have filled up are dropped.
const sweepEvery = time.Minute

// take takes n items of kind r from serverID's bucket. If there are not
// enough, it takes nothing and returns a TooManyRequests fault whose
// RetryAfter is when there will be. A report larger than the bucket costs
// the whole bucket, so that it can pass once the bucket is full.
func (l *limiter) take(serverID string, r Report, n int) error {
	lim := l.limits[r]
	cost := min(max(float64(n), 1), lim.Burst)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.sweep(now)
	}
	bs := l.buckets[serverID]
	if bs == nil {
		bs = &[numReports]bucket{}
		l.buckets[serverID] = bs
	}
	b := &bs[r]
	tokens := lim.Burst
	if !b.at.IsZero() {
		tokens = min(lim.Burst, b.tokens+now.Sub(b.at).Seconds()*lim.PerSecond)
	}
	if tokens < cost {
		wait := time.Duration(math.Ceil((cost - tokens) / lim.PerSecond * float64(time.Second)))
		b.tokens, b.at = tokens, now
		return &fault.Error{Kind: fault.TooManyRequests, Code: "agent-rate-limited", RetryAfter: max(wait, time.Second),
			Message: fmt.Sprintf("This server sends %s faster than the control plane takes them (%g at once, then %g a second); retry after the time in Retry-After.",
				reportNames[r], lim.Burst, lim.PerSecond)}
	}
	b.tokens, b.at = tokens-cost, now
	return nil
}

// sweep drops the buckets of servers whose buckets are all full again.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for id, bs := range l.buckets {
		full := true
		for r := range bs {
			b := &bs[r]
			if !b.at.IsZero() && b.tokens+now.Sub(b.at).Seconds()*l.limits[r].PerSecond < l.limits[r].Burst {
				full = false
				break
			}
		}
		if full {
			delete(l.buckets, id)
		}
	}
}
