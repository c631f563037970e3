package domains

import (
	"context"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

func parseIP(s string) net.IP { return net.ParseIP(s) }

// Limits and retention of request traffic.
const (
	// MaxReportMinutes bounds the minutes of one report.
	MaxReportMinutes = 10000
	// MaxMinuteAge is how old a reported minute may be.
	MaxMinuteAge = 7 * 24 * time.Hour
	// MaxMinuteAhead is the clock skew allowed: a minute may start at
	// most this far after the control plane's now.
	MaxMinuteAhead = 2 * time.Minute
	// TrafficRetention is how long minutes are kept.
	TrafficRetention = 8 * 24 * time.Hour

	pruneBatch = 5000
	maxBatches = 1000
)

// TrafficPoint is one bucket of an application's request series.
type TrafficPoint struct {
	T         time.Time `json:"t" doc:"Start of the bucket"`
	Count     int64     `json:"count"`
	Status2xx int64     `json:"status_2xx"`
	Status3xx int64     `json:"status_3xx"`
	Status4xx int64     `json:"status_4xx"`
	Status5xx int64     `json:"status_5xx"`
	BytesOut  int64     `json:"bytes_out"`
	P95Ms     *float64  `json:"p95_ms" doc:"The largest per-minute, per-host 95th percentile latency in the bucket (an upper bound of the bucket's p95); null without requests"`
}

// TrafficTotals sums a series.
type TrafficTotals struct {
	Count     int64    `json:"count"`
	Status2xx int64    `json:"status_2xx"`
	Status3xx int64    `json:"status_3xx"`
	Status4xx int64    `json:"status_4xx"`
	Status5xx int64    `json:"status_5xx"`
	BytesOut  int64    `json:"bytes_out"`
	P95Ms     *float64 `json:"p95_ms" doc:"The largest per-minute p95 of the range"`
}

// Traffic is an application's request series across its domains.
type Traffic struct {
	ApplicationID string         `json:"application_id"`
	Range         string         `json:"range" enum:"1h,24h,7d"`
	BucketSeconds int            `json:"bucket_seconds" doc:"60 for 1h, 300 for 24h, 3600 for 7d"`
	Hosts         []string       `json:"hosts" doc:"The hostnames counted: the application's domains and, with redirect_www, their www. names"`
	Points        []TrafficPoint `json:"points" doc:"Oldest first, one per bucket (zero when there were no requests); the last is the current, partial bucket"`
	Totals        TrafficTotals  `json:"totals"`
}

type trafficRange struct {
	name   string
	span   time.Duration
	bucket time.Duration
}

var trafficRanges = []trafficRange{
	{"1h", time.Hour, time.Minute},
	{"24h", 24 * time.Hour, 5 * time.Minute},
	{"7d", 7 * 24 * time.Hour, time.Hour},
}

// IngestRequests validates and stores an agent's request report. A
// minute already stored for a host is replaced: counts are cumulative for
// a minute, so a repeated report changes nothing.
func (s *Service) IngestRequests(ctx context.Context, serverID string, r agentproto.RequestsReport) error {
	if err := ValidateRequests(r, s.now().UTC()); err != nil {
		return err
	}
	if len(r.Minutes) == 0 {
		return nil
	}
	return s.store.PutRequestMinutes(ctx, serverID, r.Minutes, s.now().UTC())
}

// ValidateRequests checks a request report against now.
func ValidateRequests(r agentproto.RequestsReport, now time.Time) error {
	var errs fault.Fields
	if len(r.Minutes) > MaxReportMinutes {
		errs.Add("minutes", "at most %d minutes per report", MaxReportMinutes)
		return errs.Err()
	}
	type key struct {
		host   string
		minute int64
	}
	seen := make(map[key]bool, len(r.Minutes))
	for i, m := range r.Minutes {
		f := func(name string) string { return fmt.Sprintf("minutes[%d].%s", i, name) }
		if p := HostnameProblem(m.Host); p != "" {
			errs.Add(f("host"), "%s", p)
		}
		switch {
		case m.Minute.IsZero():
			errs.Add(f("minute"), "is required")
		case !m.Minute.Equal(m.Minute.Truncate(time.Minute)):
			errs.Add(f("minute"), "must be the start of a minute")
		case m.Minute.Before(now.Add(-MaxMinuteAge)):
			errs.Add(f("minute"), "is more than 7 days old")
		case m.Minute.After(now.Add(MaxMinuteAhead)):
			errs.Add(f("minute"), "is in the future")
		}
		k := key{m.Host, m.Minute.UnixMilli()}
		if seen[k] {
			errs.Add(f("minute"), "the report has this host and minute twice")
		}
		seen[k] = true
		for _, c := range []struct {
			name string
			v    int64
		}{{"count", m.Count}, {"status_2xx", m.Status2xx}, {"status_3xx", m.Status3xx}, {"status_4xx", m.Status4xx},
			{"status_5xx", m.Status5xx}, {"bytes_out", m.BytesOut}} {
			if c.v < 0 {
				errs.Add(f(c.name), "must not be negative")
			}
		}
		if m.Count >= 0 && m.Status2xx >= 0 && m.Status3xx >= 0 && m.Status4xx >= 0 && m.Status5xx >= 0 &&
			m.Status2xx+m.Status3xx+m.Status4xx+m.Status5xx > m.Count {
			errs.Add(f("count"), "must be at least the sum of the status classes")
		}
		for _, c := range []struct {
			name string
			v    float64
		}{{"p50_ms", m.P50Ms}, {"p95_ms", m.P95Ms}} {
			if c.v < 0 || math.IsNaN(c.v) || math.IsInf(c.v, 0) {
				errs.Add(f(c.name), "must be a non-negative number")
			}
		}
		if len(errs) > 100 {
			break
		}
	}
	return errs.Err()
}

// Traffic returns an application's request series over range 1h (per
// minute), 24h (5-minute buckets) or 7d (hourly); any other range is a
// fault.Invalid on "range".
func (s *Service) Traffic(ctx context.Context, appID, rangeName string) (Traffic, error) {
	var rg trafficRange
	for _, r := range trafficRanges {
		if r.name == rangeName {
			rg = r
		}
	}
	if rg.name == "" {
		return Traffic{}, fault.Invalidf("range", "must be one of 1h, 24h, 7d")
	}
	app, err := s.apps.App(ctx, appID)
	if err != nil {
		return Traffic{}, err
	}
	list, err := s.store.ListDomains(ctx, appID)
	if err != nil {
		return Traffic{}, err
	}
	hosts := []string{}
	for _, d := range list {
		hosts = append(hosts, names(d.Hostname, d.RedirectWWW)...)
	}
	now := s.now().UTC()
	to := now.Truncate(rg.bucket).Add(rg.bucket)
	from := to.Add(-rg.span)
	out := Traffic{ApplicationID: appID, Range: rg.name, BucketSeconds: int(rg.bucket / time.Second), Hosts: hosts}
	var rows []TrafficPoint
	if len(hosts) > 0 {
		if rows, err = s.store.RequestBuckets(ctx, app.ServerID, hosts, from, to, rg.bucket); err != nil {
			return Traffic{}, err
		}
	}
	byT := make(map[int64]TrafficPoint, len(rows))
	for _, r := range rows {
		byT[r.T.UnixMilli()] = r
	}
	n := int(rg.span / rg.bucket)
	out.Points = make([]TrafficPoint, 0, n)
	for t := from; t.Before(to); t = t.Add(rg.bucket) {
		p, ok := byT[t.UnixMilli()]
		if !ok {
			p = TrafficPoint{}
		}
		p.T = t
		if p.Count == 0 {
			p.P95Ms = nil
		}
		out.Points = append(out.Points, p)
		tt := &out.Totals
		tt.Count += p.Count
		tt.Status2xx += p.Status2xx
		tt.Status3xx += p.Status3xx
		tt.Status4xx += p.Status4xx
		tt.Status5xx += p.Status5xx
		tt.BytesOut += p.BytesOut
		if p.P95Ms != nil && (tt.P95Ms == nil || *p.P95Ms > *tt.P95Ms) {
			v := *p.P95Ms
			tt.P95Ms = &v
		}
	}
	return out, nil
}

// PruneTraffic deletes the minutes older than TrafficRetention, in small
// transactions; it returns how many it deleted.
func (s *Service) PruneTraffic(ctx context.Context, now time.Time) (int, error) {
	before := now.Add(-TrafficRetention)
	total := 0
	for range maxBatches {
		n, err := s.store.PruneRequestMinutes(ctx, before, pruneBatch)
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
	return total, nil
}
