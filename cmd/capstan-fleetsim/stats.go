package main

import (
	"math/bits"
	"sync"
	"time"
)

// Call types the simulator measures, in report order.
const (
	callEnrollment = "enrollment" // admin: POST /api/v1/servers/enrollments
	callEnroll     = "enroll"     // agent: POST /agent/v1/enroll
	callHeartbeat  = "heartbeat"
	callMetrics    = "metrics"
	callInventory  = "inventory"
	callClaimEmpty = "claim-empty" // 204: the long poll ended without a job
	callClaimJob   = "claim-job"   // 200: the long poll returned a job
	callClaimError = "claim-error" // the claim failed (transport error or unexpected status)
	callEvents     = "events"
	callComplete   = "complete"
	callActions    = "actions"  // admin: POST /api/v1/servers/{id}/actions
	callAuth       = "auth"     // admin: login, 2fa/verify, refresh
	callEvaluate   = "evaluate" // admin: POST /api/v1/monitoring/evaluate (one alert evaluation cycle)
)

var callOrder = []string{callEnrollment, callEnroll, callHeartbeat, callMetrics, callInventory,
	callClaimEmpty, callClaimJob, callClaimError, callEvents, callComplete, callActions, callAuth, callEvaluate}

// histogram records durations in microseconds in log-linear buckets: 64
// buckets per power of two, so a quantile is within about 1.6 % of the
// true value. It is not safe for concurrent use.
type histogram struct {
	counts [64 * 44]uint64
	n      uint64
	sum    uint64
	max    uint64
}

const subBits = 6

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift<<subBits + int(v>>shift)
}

// bucketValue is the middle of a bucket.
func bucketValue(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	shift := i>>subBits - 1
	lo := uint64(i-shift<<subBits) << shift
	return lo + (uint64(1)<<shift)/2
}

func (h *histogram) add(d time.Duration) {
	v := uint64(max(d, 0) / time.Microsecond)
	i := min(bucketOf(v), len(h.counts)-1)
	h.counts[i]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

// quantile returns the q-quantile (0 < q ≤ 1) in milliseconds.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(float64(bucketValue(i)), float64(h.max)) / 1000
		}
	}
	return float64(h.max) / 1000
}

// Summary is the report of one call type over a window.
type Summary struct {
	Count  uint64  `json:"count"`
	Errors uint64  `json:"errors"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	MeanMS float64 `json:"mean_ms"`
}

func (h *histogram) summary(errs uint64) Summary {
	s := Summary{Count: h.n, Errors: errs, P50ms: h.quantile(0.50), P99ms: h.quantile(0.99), MaxMS: float64(h.max) / 1000}
	if h.n > 0 {
		s.MeanMS = float64(h.sum) / float64(h.n) / 1000
	}
	return s
}

// window accumulates the calls of one reporting window.
type window struct {
	hist map[string]*histogram
	errs map[string]uint64
}

func newWindow() *window {
	return &window{hist: map[string]*histogram{}, errs: map[string]uint64{}}
}

func (w *window) add(call string, d time.Duration, failed bool) {
	if failed {
		w.errs[call]++
		return
	}
	h := w.hist[call]
	if h == nil {
		h = &histogram{}
		w.hist[call] = h
	}
	h.add(d)
}

func (w *window) summaries() map[string]Summary {
	out := map[string]Summary{}
	for _, c := range callOrder {
		h, errs := w.hist[c], w.errs[c]
		if h == nil && errs == 0 {
			continue
		}
		if h == nil {
			h = &histogram{}
		}
		out[c] = h.summary(errs)
	}
	return out
}

func (w *window) totalErrors() uint64 {
	var n uint64
	for _, e := range w.errs {
		n += e
	}
	return n
}

// recorder collects every measurement: the current reporting window, the
// whole run, and the steady state (after the ramp), in total and per
// control plane. Recording takes one mutex; at a few thousand calls per
// second that is not contended enough to matter.
type recorder struct {
	mu         sync.Mutex // guards everything below
	cur        *window
	total      *window
	steady     *window
	isSteady   bool
	dispatch   [3]histogram // current window, total, steady
	early      [3]uint64    // claims that arrived before the action's response
	firstError map[string]string
	closed     bool // the run is over: calls cut short by its end are not counted

	// Per control plane (index in --url): whole run and steady state.
	cpTotal, cpSteady []*window
	cpDispatch        [][2]histogram
	cpEarly           [][2]uint64
}

// newRecorder returns a recorder for n control planes.
func newRecorder(n int) *recorder {
	r := &recorder{cur: newWindow(), total: newWindow(), steady: newWindow(), firstError: map[string]string{},
		cpDispatch: make([][2]histogram, n), cpEarly: make([][2]uint64, n)}
	for range n {
		r.cpTotal = append(r.cpTotal, newWindow())
		r.cpSteady = append(r.cpSteady, newWindow())
	}
	return r
}

// record counts one call that control plane cp answered (or failed).
func (r *recorder) record(cp int, call string, d time.Duration, err error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	failed := err != nil
	r.cur.add(call, d, failed)
	r.total.add(call, d, failed)
	r.cpTotal[cp].add(call, d, failed)
	if r.isSteady {
		r.steady.add(call, d, failed)
		r.cpSteady[cp].add(call, d, failed)
	}
	if failed {
		if _, ok := r.firstError[call]; !ok {
			r.firstError[call] = err.Error()
		}
	}
	r.mu.Unlock()
}

// recordDispatch counts the dispatch of a job to an agent waiting on
// control plane cp.
func (r *recorder) recordDispatch(cp int, d time.Duration) {
	r.mu.Lock()
	n := 2
	if r.isSteady {
		n = 3
	}
	for i := range n {
		if d < 0 {
			r.early[i]++
		}
		r.dispatch[i].add(max(d, 0))
		if i > 0 {
			if d < 0 {
				r.cpEarly[cp][i-1]++
			}
			r.cpDispatch[cp][i-1].add(max(d, 0))
		}
	}
	r.mu.Unlock()
}

// close ends the measurements.
func (r *recorder) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

func (r *recorder) setSteady() {
	r.mu.Lock()
	r.isSteady = true
	r.mu.Unlock()
}

// rotate ends the current window and returns its summaries and dispatch
// summary.
func (r *recorder) rotate() (map[string]Summary, DispatchSummary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.cur
	r.cur = newWindow()
	d := dispatchSummary(&r.dispatch[0], r.early[0])
	r.dispatch[0], r.early[0] = histogram{}, 0
	return w.summaries(), d
}

// DispatchSummary is the latency from the action's POST response to the
// simulated agent holding the job.
type DispatchSummary struct {
	Count uint64  `json:"count"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// Early counts jobs claimed before the POST response arrived; they
	// count as 0 ms.
	Early uint64 `json:"early"`
}

func dispatchSummary(h *histogram, early uint64) DispatchSummary {
	return DispatchSummary{Count: h.n, P50ms: h.quantile(0.5), P99ms: h.quantile(0.99), MaxMS: float64(h.max) / 1000, Early: early}
}
