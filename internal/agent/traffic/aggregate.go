package traffic

import (
	"cmp"
	"encoding/json"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Durations are kept per minute in a log-bucketed histogram (as DDSketch
// does): bucket i holds the durations in (γ^(i-1), γ^i] ms and stands for
// 2γ^i/(γ+1), within α = (γ-1)/(γ+1) ≈ 2.4 % of any of them. A minute holds
// at most maxBuckets buckets; past that the lowest two are merged, which
// only blurs the fastest requests, far below the p50.
const (
	gamma      = 1.05
	maxBuckets = 256
	minMs      = 1e-3 // durations are clamped to [minMs, maxMs]
	maxMs      = 1e7
)

var logGamma = math.Log(gamma)

// bucket is one histogram bucket: index and count.
type bucket struct {
	Idx int32
	N   int64
}

// sketch is a histogram of durations; its buckets are sorted by index.
type sketch []bucket

func (s *sketch) add(ms float64) {
	if math.IsNaN(ms) {
		return
	}
	ms = min(max(ms, minMs), maxMs)
	idx := int32(math.Ceil(math.Log(ms) / logGamma))
	b := *s
	i, found := slices.BinarySearchFunc(b, idx, func(x bucket, t int32) int { return cmp.Compare(x.Idx, t) })
	if found {
		b[i].N++
		return
	}
	b = slices.Insert(b, i, bucket{Idx: idx, N: 1})
	if len(b) > maxBuckets {
		b[1].N += b[0].N
		b = slices.Delete(b, 0, 1)
	}
	*s = b
}

// quantile returns the q-quantile (nearest rank) in ms, 0 when empty.
func (s sketch) quantile(q float64) float64 {
	var n int64
	for _, b := range s {
		n += b.N
	}
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var cum int64
	for _, b := range s {
		cum += b.N
		if cum >= rank {
			v := 2 * math.Pow(gamma, float64(b.Idx)) / (gamma + 1)
			return math.Round(v*1000) / 1000
		}
	}
	return 0
}

// minute aggregates one host's requests in one minute.
type minute struct {
	host   string
	start  time.Time // UTC, on the minute
	count  int64
	s2, s3 int64
	s4, s5 int64
	bytes  int64
	dur    sketch
	// dirty: changed since the control plane last accepted it.
	dirty bool
}

func (m *minute) report() agentproto.RequestMinute {
	return agentproto.RequestMinute{
		Host: m.host, Minute: m.start, Count: m.count,
		Status2xx: m.s2, Status3xx: m.s3, Status4xx: m.s4, Status5xx: m.s5,
		BytesOut: m.bytes, P50Ms: m.dur.quantile(0.50), P95Ms: m.dur.quantile(0.95),
	}
}

// otherHost is the host of the "other" bucket's minutes: the requests to
// hosts that are not configured sites. No hostname is empty.
const otherHost = ""

type key struct {
	host   string
	minute int64 // Unix seconds of the minute's start
}

// accessLine is what is read of one line of Caddy's JSON access log.
type accessLine struct {
	TS      float64 `json:"ts"`
	Logger  string  `json:"logger"`
	Request struct {
		Host string `json:"host"`
	} `json:"request"`
	Duration float64 `json:"duration"` // seconds
	Size     int64   `json:"size"`
	Status   int     `json:"status"`
}

// Limits of an aggregator.
const (
	// lateMinutes: a minute is closed once the log has reached a minute
	// this many later; lines are written when requests end, in order, so
	// nothing arrives for it after that. A closed minute the control plane
	// has accepted is forgotten.
	lateMinutes = 2
	// defaultMaxMinutes bounds the (host, minute) aggregates held: open
	// ones and those not accepted yet (the control plane may be away).
	defaultMaxMinutes = 10000
)

// aggregator sums access log lines per (host, minute). Not safe for
// concurrent use.
type aggregator struct {
	minutes map[key]*minute
	// latest is the newest minute seen (Unix seconds).
	latest int64
	// notBefore: lines older than it are skipped (the backfill limit of a
	// first start); zero: none.
	notBefore  time.Time
	maxMinutes int
	// site reports whether a (normalized, non-empty) host is a configured
	// site; the requests to any other host, and those without one, are
	// counted under otherHost. Nil: every host is a site.
	site func(host string) bool

	// Counters since the last log of them.
	malformed, late, overflow, evicted int64
}

func newAggregator() *aggregator {
	return &aggregator{minutes: map[key]*minute{}, maxMinutes: defaultMaxMinutes}
}

// normalizeHost lowercases host and strips its port and trailing dot.
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// addLine counts one log line; lines that are not access log entries are
// ignored.
func (a *aggregator) addLine(line []byte) {
	var l accessLine
	if err := json.Unmarshal(line, &l); err != nil {
		a.malformed++
		return
	}
	if !strings.HasPrefix(l.Logger, "http.log.access") || l.TS <= 0 {
		return
	}
	host := normalizeHost(l.Request.Host)
	if host != otherHost && a.site != nil && !a.site(host) {
		host = otherHost
	}
	sec, frac := math.Modf(l.TS)
	at := time.Unix(int64(sec), int64(frac*1e9)).UTC()
	if !a.notBefore.IsZero() && at.Before(a.notBefore) {
		return
	}
	start := at.Truncate(time.Minute)
	k := key{host, start.Unix()}
	m := a.minutes[k]
	if m == nil {
		if k.minute < a.latest-lateMinutes*60 {
			// Its minute was closed and may have been forgotten: a new
			// aggregate would replace the full one.
			a.late++
			return
		}
		a.latest = max(a.latest, k.minute)
		if len(a.minutes) >= a.maxMinutes && !a.makeRoom() {
			a.overflow++
			return
		}
		m = &minute{host: host, start: start}
		a.minutes[k] = m
	}
	a.latest = max(a.latest, k.minute)
	m.count++
	switch l.Status / 100 {
	case 2:
		m.s2++
	case 3:
		m.s3++
	case 4:
		m.s4++
	case 5:
		m.s5++
	}
	m.bytes += max(l.Size, 0)
	m.dur.add(l.Duration * 1000)
	m.dirty = true
}

func (a *aggregator) closed(m *minute) bool {
	return m.start.Unix() < a.latest-lateMinutes*60
}

// forget drops the closed minutes the control plane has accepted.
func (a *aggregator) forget() {
	for k, m := range a.minutes {
		if !m.dirty && a.closed(m) {
			delete(a.minutes, k)
		}
	}
}

// makeRoom frees one aggregate when the limit is reached: a forgettable
// one, else the oldest closed one not yet accepted (its counts are lost).
// Open minutes are kept; it reports false when all are open.
func (a *aggregator) makeRoom() bool {
	a.forget()
	if len(a.minutes) < a.maxMinutes {
		return true
	}
	var oldest *key
	for k, m := range a.minutes {
		if a.closed(m) && (oldest == nil || k.minute < oldest.minute || k.minute == oldest.minute && k.host < oldest.host) {
			kk := k
			oldest = &kk
		}
	}
	if oldest == nil {
		return false
	}
	delete(a.minutes, *oldest)
	a.evicted++
	return true
}

// dirty returns the minutes changed since they were last accepted, oldest
// first.
func (a *aggregator) dirty() []*minute {
	var out []*minute
	for _, m := range a.minutes {
		if m.dirty {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(x, y *minute) int {
		return cmp.Or(x.start.Compare(y.start), strings.Compare(x.host, y.host))
	})
	return out
}
