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

// OtherHost is the host under which a server's "other" bucket is stored:
// the requests to hosts that are not configured sites, summed without
// their names. No hostname is empty, so it never meets a domain's.
const OtherHost = ""

// MaxSkippedNamed bounds the skipped entries a reply names.
const MaxSkippedNamed = 100

// IngestRequests stores the valid entries of an agent's request report
// and skips the invalid ones, naming them in the result: one bad entry
// (a scanner's IP literal, a clock gone wrong) must not cost the others.
// A minute already stored for a host is replaced: counts are cumulative
// for a minute, so a repeated report changes nothing. Only a report with
// more than MaxReportMinutes entries is refused whole (fault.Invalid).
func (s *Service) IngestRequests(ctx context.Context, serverID string, r agentproto.RequestsReport) (agentproto.RequestsResult, error) {
	now := s.now().UTC()
	valid, skipped, err := ValidateRequests(r, now)
	if err != nil {
		return agentproto.RequestsResult{}, err
	}
	res := agentproto.RequestsResult{Stored: len(valid), SkippedCount: len(skipped), Skipped: skipped[:min(len(skipped), MaxSkippedNamed)]}
	if len(skipped) > 0 {
		s.log.WarnContext(ctx, "request report: invalid entries skipped", "server_id", serverID, "skipped", len(skipped),
			"stored", len(valid), "first", skipped[0].Field+" "+skipped[0].Reason)
	}
	if len(valid) == 0 {
		return res, nil
	}
	if err := s.store.PutRequestMinutes(ctx, serverID, valid, now); err != nil {
		return agentproto.RequestsResult{}, err
	}
	return res, nil
}

// ValidateRequests checks a request report against now. It returns the
// entries to store (those of Other under OtherHost) and the invalid ones;
// err is a fault.Invalid only when the report is too large to look at.
func ValidateRequests(r agentproto.RequestsReport, now time.Time) (valid []agentproto.RequestMinute, skipped []agentproto.SkippedMinute, err error) {
	if len(r.Minutes)+len(r.Other) > MaxReportMinutes {
		return nil, nil, fault.Invalidf("minutes", "at most %d minutes per report (minutes and other together)", MaxReportMinutes)
	}
	type key struct {
		host   string
		minute int64
	}
	seen := make(map[key]bool, len(r.Minutes)+len(r.Other))
	check := func(list string, i int, m agentproto.RequestMinute, other bool) {
		if other {
			m.Host = OtherHost
		}
		skip := func(field, reason string, args ...any) {
			host := m.Host
			if len(host) > MaxHostnameLen {
				host = host[:MaxHostnameLen]
			}
			skipped = append(skipped, agentproto.SkippedMinute{Field: fmt.Sprintf("%s[%d].%s", list, i, field),
				Reason: fmt.Sprintf(reason, args...), Host: host, Minute: m.Minute})
		}
		if p := HostnameProblem(m.Host); !other && p != "" {
			skip("host", "%s", p)
			return
		}
		if p := minuteProblem(m.Minute, now); p != "" {
			skip("minute", "%s", p)
			return
		}
		k := key{m.Host, m.Minute.UnixMilli()}
		if seen[k] {
			skip("minute", "the report has this host and minute twice")
			return
		}
		for _, c := range []struct {
			name string
			v    int64
		}{{"count", m.Count}, {"status_2xx", m.Status2xx}, {"status_3xx", m.Status3xx}, {"status_4xx", m.Status4xx},
			{"status_5xx", m.Status5xx}, {"bytes_out", m.BytesOut}} {
			if c.v < 0 {
				skip(c.name, "must not be negative")
				return
			}
		}
		if m.Status2xx+m.Status3xx+m.Status4xx+m.Status5xx > m.Count {
			skip("count", "must be at least the sum of the status classes")
			return
		}
		for _, c := range []struct {
			name string
			v    float64
		}{{"p50_ms", m.P50Ms}, {"p95_ms", m.P95Ms}} {
			if c.v < 0 || math.IsNaN(c.v) || math.IsInf(c.v, 0) {
				skip(c.name, "must be a non-negative number")
				return
			}
		}
		seen[k] = true
		valid = append(valid, m)
	}
	for i, m := range r.Minutes {
		check("minutes", i, m, false)
	}
	for i, m := range r.Other {
		check("other", i, m, true)
	}
	return valid, skipped, nil
}

// minuteProblem says what is wrong with a reported minute, "" if nothing.
func minuteProblem(m, now time.Time) string {
	switch {
	case m.IsZero():
		return "is required"
	case !m.Equal(m.Truncate(time.Minute)):
		return "must be the start of a minute"
	case m.Before(now.Add(-MaxMinuteAge)):
		return "is more than 7 days old"
	case m.After(now.Add(MaxMinuteAhead)):
		return "is in the future"
	}
	return ""
}

// Traffic returns an application's request series over range 1h (per
// minute), 24h (5-minute buckets) or 7d (hourly); any other range is a
// fault.Invalid on "range".
func (s *Service) Traffic(ctx context.Context, appID, rangeName string) (Traffic, error) {
	rg, err := findRange(rangeName)
	if err != nil {
		return Traffic{}, err
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
	out := Traffic{ApplicationID: appID, Range: rg.name, BucketSeconds: int(rg.bucket / time.Second), Hosts: hosts}
	out.Points, out.Totals, err = s.series(ctx, app.ServerID, hosts, rg)
	return out, err
}

// OtherTraffic is a server's "other" bucket: the requests its proxy
// answered for hosts that are not configured sites.
type OtherTraffic struct {
	ServerID      string         `json:"server_id"`
	Range         string         `json:"range" enum:"1h,24h,7d"`
	BucketSeconds int            `json:"bucket_seconds" doc:"60 for 1h, 300 for 24h, 3600 for 7d"`
	Points        []TrafficPoint `json:"points" doc:"Oldest first, one per bucket (zero when there were no requests); the last is the current, partial bucket"`
	Totals        TrafficTotals  `json:"totals"`
}

// ServerOtherTraffic returns a server's "other" bucket over range 1h, 24h
// or 7d, bucketed as Traffic is; any other range is a fault.Invalid on
// "range".
func (s *Service) ServerOtherTraffic(ctx context.Context, serverID, rangeName string) (OtherTraffic, error) {
	rg, err := findRange(rangeName)
	if err != nil {
		return OtherTraffic{}, err
	}
	if _, err := s.servers.Get(ctx, serverID); err != nil {
		return OtherTraffic{}, err
	}
	out := OtherTraffic{ServerID: serverID, Range: rg.name, BucketSeconds: int(rg.bucket / time.Second)}
	out.Points, out.Totals, err = s.series(ctx, serverID, []string{OtherHost}, rg)
	return out, err
}

func findRange(name string) (trafficRange, error) {
	for _, r := range trafficRanges {
		if r.name == name {
			return r, nil
		}
	}
	return trafficRange{}, fault.Invalidf("range", "must be one of 1h, 24h, 7d")
}

// series sums the requests to hosts on a server per bucket of rg, up to
// now, with a point for every bucket.
func (s *Service) series(ctx context.Context, serverID string, hosts []string, rg trafficRange) ([]TrafficPoint, TrafficTotals, error) {
	now := s.now().UTC()
	to := now.Truncate(rg.bucket).Add(rg.bucket)
	from := to.Add(-rg.span)
	var rows []TrafficPoint
	if len(hosts) > 0 {
		var err error
		if rows, err = s.store.RequestBuckets(ctx, serverID, hosts, from, to, rg.bucket); err != nil {
			return nil, TrafficTotals{}, err
		}
	}
	byT := make(map[int64]TrafficPoint, len(rows))
	for _, r := range rows {
		byT[r.T.UnixMilli()] = r
	}
	points := make([]TrafficPoint, 0, int(rg.span/rg.bucket))
	var tt TrafficTotals
	for t := from; t.Before(to); t = t.Add(rg.bucket) {
		p, ok := byT[t.UnixMilli()]
		if !ok {
			p = TrafficPoint{}
		}
		p.T = t
		if p.Count == 0 {
			p.P95Ms = nil
		}
		points = append(points, p)
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
	return points, tt, nil
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
