package httpapi

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultAgentInFlight is how many agent requests a control plane handles
// at once unless told otherwise. A healthy control plane answers an agent
// call in a few milliseconds, so even 10,000 agents keep a few dozen in
// flight; the bound only bites when the store falls behind (a burst after
// a restart, a slow disk), and then what would pile up is requests each
// holding a goroutine, buffers and a decoded body while they wait.
const DefaultAgentInFlight = 1024

// DefaultAgentInFlightPerServer is how many of those slots one server's
// agent may hold at once. An agent makes one request at a time from each
// of its loops (heartbeat, claim, metrics, inventory, traffic, database
// metrics, health probes: 7) and, for each job it runs (at most 4 at
// once), one from the job's event sender and one from the job itself
// (secrets, an artifact upload or download, its result): 15 at the most.
// One server, however it misbehaves (a stuck disk, a compromised host
// trickling its request bodies), cannot take more than that from the
// others.
const DefaultAgentInFlightPerServer = 16

// Tokens this process has not confirmed before (an agent's first request
// after a restart, or a token that is not one) are checked against the
// store outside the slots, among at most agentLookups at once; up to
// agentLookupWaiters more wait up to agentLookupWait for their turn (a
// fleet arriving after a restart), the rest are refused at once. An
// address whose tokens keep failing is refused for a while without a
// lookup.
const (
	agentLookups       = 32
	agentLookupWaiters = 1024
	agentLookupWait    = 2 * time.Second
	// agentFailureBurst failed tokens from one address at once, then one
	// every agentFailureEvery.
	agentFailureBurst = 20
	agentFailureEvery = 2 * time.Second
	// maxFailureAddresses bounds the addresses whose failures are
	// counted; beyond it, lookups are still bounded by agentLookups.
	maxFailureAddresses = 100_000
)

// agentSlots bounds the agent requests being handled: in all, and per
// server. A request that finds no slot is answered 503 with a Retry-After
// at once, which the agent honours; it costs next to nothing, and the
// requests already admitted finish sooner. A slot is taken only once the
// request's token is known to be a server's (see Server.authenticate), so
// requests with bogus tokens never hold one. A waiting claim holds no
// slot: it is taken out of the handler (see Detach) and its wake-ups are
// bounded on their own.
type agentSlots struct {
	total, perServer int

	mu      sync.Mutex // guards inUse and servers
	inUse   int
	servers map[string]int // slots held by each server; absent: none

	lookups  chan struct{}
	waiters  atomic.Int64 // requests waiting for a place in lookups
	failures *failureBuckets

	refused atomic.Int64 // refusals not yet reported in the log
	logged  atomic.Int64 // when they were last reported, in Unix nanoseconds
}

func newAgentSlots(total, perServer int) *agentSlots {
	if total <= 0 {
		total = DefaultAgentInFlight
	}
	if perServer <= 0 {
		perServer = DefaultAgentInFlightPerServer
	}
	return &agentSlots{total: total, perServer: min(perServer, total), servers: map[string]int{},
		lookups: make(chan struct{}, agentLookups), failures: newFailureBuckets(time.Now)}
}

// acquire takes a slot for serverID if one is free in all and the server
// holds fewer than its share.
func (a *agentSlots) acquire(serverID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inUse >= a.total || a.servers[serverID] >= a.perServer {
		return false
	}
	a.inUse++
	a.servers[serverID]++
	return true
}

func (a *agentSlots) release(serverID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inUse--
	if n := a.servers[serverID] - 1; n > 0 {
		a.servers[serverID] = n
	} else {
		delete(a.servers, serverID)
	}
}

// startLookup takes one of the places of store lookups of unknown
// tokens, waiting up to agentLookupWait for one unless too many wait
// already; endLookup gives it back.
func (a *agentSlots) startLookup(ctx context.Context) bool {
	select {
	case a.lookups <- struct{}{}:
		return true
	default:
	}
	if a.waiters.Add(1) > agentLookupWaiters {
		a.waiters.Add(-1)
		return false
	}
	defer a.waiters.Add(-1)
	t := time.NewTimer(agentLookupWait)
	defer t.Stop()
	select {
	case a.lookups <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (a *agentSlots) endLookup() { <-a.lookups }

// refusedLogEvery is how often refusals are reported: one line for
// however many there were, since logging each would add to the load they
// come from.
const refusedLogEvery = 10 * time.Second

// refused counts a refusal and reports the refusals in the log at most
// every refusedLogEvery.
func (a *agentSlots) refuse(log *slog.Logger) {
	a.refused.Add(1)
	now := time.Now().UnixNano()
	last := a.logged.Load()
	if now-last < int64(refusedLogEvery) || !a.logged.CompareAndSwap(last, now) {
		return
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "agent requests refused: as many as the control plane takes at once are in progress",
		slog.Int64("refused", a.refused.Swap(0)), slog.Int("max_in_flight", a.total), slog.Int("max_in_flight_per_server", a.perServer))
}

// busyRetryMin and busyRetrySpread make the Retry-After of a refused
// agent request: spread, so that the agents refused in one burst do not
// all come back in the same second.
const (
	busyRetryMin    = 1
	busyRetrySpread = 5
)

// busyProblem is the answer to an agent request refused for want of a
// slot.
func busyProblem() *Problem {
	p := newProblem(http.StatusServiceUnavailable, "control-plane-busy",
		"The control plane is handling as many agent requests as it takes at once; retry after the time in Retry-After.")
	p.GetHeaders().Set("Retry-After", strconv.Itoa(busyRetryMin+rand.IntN(busyRetrySpread)))
	return p
}

// failuresProblem is the answer to an agent request from an address whose
// tokens failed too often lately: 429, not 401, since its token was not
// checked and an agent stops for good on a 401.
func failuresProblem(wait time.Duration) *Problem {
	p := newProblem(http.StatusTooManyRequests, "agent-auth-throttled",
		"Too many requests with invalid agent tokens came from this address; retry after the time in Retry-After.")
	p.GetHeaders().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	return p
}

// failureBuckets counts the failed agent tokens of each address in a
// token bucket: agentFailureBurst at once, then one every
// agentFailureEvery. An IPv6 address counts as its /64, which one host
// usually has whole.
type failureBuckets struct {
	now func() time.Time

	mu        sync.Mutex // guards buckets and lastSweep
	buckets   map[string]failureBucket
	lastSweep time.Time
}

type failureBucket struct {
	tokens float64
	at     time.Time
}

func newFailureBuckets(now func() time.Time) *failureBuckets {
	return &failureBuckets{now: now, buckets: map[string]failureBucket{}}
}

// addressKey is the key of ip's bucket.
func addressKey(ip string) string {
	a := net.ParseIP(ip)
	if a == nil || a.To4() != nil {
		return ip
	}
	return a.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// level returns how many failures ip may still have now.
func (f *failureBuckets) level(b failureBucket, now time.Time) float64 {
	if b.at.IsZero() {
		return agentFailureBurst
	}
	return min(agentFailureBurst, b.tokens+now.Sub(b.at).Seconds()/agentFailureEvery.Seconds())
}

// wait returns how long ip must wait before its tokens are checked again;
// zero when they are checked now.
func (f *failureBuckets) wait(ip string) time.Duration {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	tokens := f.level(f.buckets[addressKey(ip)], now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) * float64(agentFailureEvery))
}

// fail counts a failed token of ip.
func (f *failureBuckets) fail(ip string) {
	now := f.now()
	key := addressKey(ip)
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.lastSweep) >= sweepFailuresEvery || len(f.buckets) >= maxFailureAddresses {
		f.sweep(now)
	}
	b, ok := f.buckets[key]
	if !ok && len(f.buckets) >= maxFailureAddresses {
		return
	}
	f.buckets[key] = failureBucket{tokens: max(0, f.level(b, now)-1), at: now}
}

// sweepFailuresEvery is how often buckets that have filled up are dropped.
const sweepFailuresEvery = time.Minute

func (f *failureBuckets) sweep(now time.Time) {
	f.lastSweep = now
	for k, b := range f.buckets {
		if f.level(b, now) >= agentFailureBurst {
			delete(f.buckets, k)
		}
	}
}
