package databases

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Metrics of database instances. The agent on an instance's server
// samples every ready instance on it (every minute by default) as the
// instance's admin login, and reports the samples in batches. The agent
// learns the instances from GET /agent/v1/databases, which carries the
// admin passwords: they stay in the agent's memory. The heartbeat reply's
// revision tells the agent when the list changed.
//
// Samples are stored at their own times. Raw samples are kept
// MetricsRawRetention and served for spans up to that long; longer spans
// are served as hourly averages from rollups, kept MetricsRollupRetention.
// The metrics maintenance loop (MaintainMetrics) rolls up the hours that
// inserts touched and prunes what aged out; the samples and rollups of a
// deleted instance age out the same way.

// Limits and retention of database metrics.
const (
	// MetricsMaxSampleAge is how old a sample may be when it arrives: less
	// than the raw retention, so every stored sample's hour is rolled up
	// from its raw samples.
	MetricsMaxSampleAge = 24 * time.Hour
	// MetricsMaxSampleAhead is how far ahead of the control plane's clock
	// a sample may be (clock skew).
	MetricsMaxSampleAhead = 5 * time.Minute
	// MetricsRawRetention is how long raw samples are kept (pruned by whole
	// hours) and the longest span served from them.
	MetricsRawRetention = 48 * time.Hour
	// MetricsRollupRetention is how long hourly rollups are kept.
	MetricsRollupRetention = 100 * 24 * time.Hour
	// MaxMetricsPoints bounds the points of a raw series: more samples
	// are averaged into time buckets.
	MaxMetricsPoints = 1500
	// MinMetricsHours and MaxMetricsHours bound ?hours=;
	// DefaultMetricsHours is its default.
	MinMetricsHours     = 1
	MaxMetricsHours     = 2160
	DefaultMetricsHours = 24
	// MaxMetricErrorLen bounds a sample's error text; longer ones are cut.
	MaxMetricErrorLen = 1024
)

// Resolutions of a metric series.
const (
	ResolutionRaw    = "raw"
	ResolutionHourly = "1h"
)

// MetricPoint is one point of an instance's metric series: a raw sample,
// the average of the samples in a time bucket, or the average of an hour.
// A figure is null when no sample of the point has it.
type MetricPoint struct {
	T               time.Time `json:"t" doc:"The sample's time, or the start of the bucket or hour the point averages"`
	Samples         int       `json:"samples" doc:"Samples the point covers (1 for a raw sample)"`
	Errors          int       `json:"errors" doc:"Samples of the point that could not be taken (the instance did not answer)"`
	Error           *string   `json:"error,omitempty" doc:"A raw sample that could not be taken: why (administrators only)"`
	Connections     *float64  `json:"connections" doc:"Open client connections (average)"`
	ConnectionsMax  *int64    `json:"connections_max" doc:"The most connections of the samples in the point"`
	MaxConnections  *int64    `json:"max_connections" doc:"The engine's connection limit (largest of the point)"`
	SizeBytes       *int64    `json:"size_bytes" doc:"SQL engines: the databases' total size in bytes (average)"`
	MemoryBytes     *int64    `json:"memory_bytes" doc:"Memory in use in bytes (average): Redis/Valkey used_memory; for SQL engines the managed instance's container, null for an external one"`
	Keys            *int64    `json:"keys" doc:"Key-value engines: keys in every logical database (average)"`
	OpsPerSecond    *float64  `json:"ops_per_second" doc:"Operations a second (average): transactions for PostgreSQL, statements (Questions) for MySQL/MariaDB, commands for Redis/Valkey"`
	OpsPerSecondMax *float64  `json:"ops_per_second_max" doc:"The highest rate of the samples in the point"`
}

// LastMetrics is an instance's newest sample.
type LastMetrics struct {
	At             time.Time           `json:"at" doc:"The sample's time"`
	Error          *string             `json:"error" doc:"Why the instance could not be sampled; null when it was, and for members"`
	Failed         bool                `json:"failed" doc:"The sample could not be taken; its figures are null"`
	Connections    *int64              `json:"connections" doc:"Open client connections, the agent's own included"`
	MaxConnections *int64              `json:"max_connections" doc:"The engine's connection limit"`
	SizeBytes      *int64              `json:"size_bytes" doc:"SQL engines: the databases' total size in bytes"`
	MemoryBytes    *int64              `json:"memory_bytes" doc:"Memory in use in bytes: Redis/Valkey used_memory; for SQL engines the managed instance's container, null for an external one"`
	Keys           *int64              `json:"keys" doc:"Key-value engines: keys in every logical database"`
	OpsPerSecond   *float64            `json:"ops_per_second" doc:"Operations a second since the sample before; null for the first sample after the agent started"`
	Databases      []agentproto.DBSize `json:"databases" doc:"SQL engines: each database with its size in bytes, largest first; null for key-value engines"`
}

// MetricSeries is an instance's metric history.
type MetricSeries struct {
	InstanceID    string        `json:"instance_id"`
	Hours         int           `json:"hours" doc:"The span asked for, in hours up to now"`
	Resolution    string        `json:"resolution" enum:"raw,1h" doc:"raw (hours up to 48): samples, or averages of time buckets of bucket_seconds when there would be more than 1500 points; 1h (hours over 48): hourly averages"`
	BucketSeconds int           `json:"bucket_seconds" doc:"Width of the buckets the points average; 0 when the points are single samples"`
	From          time.Time     `json:"from" doc:"Start of the span covered"`
	To            time.Time     `json:"to" doc:"End of the span covered (exclusive)"`
	Points        []MetricPoint `json:"series" doc:"Oldest first"`
	Redacted      bool          `json:"redacted" doc:"True when the samples' error texts were withheld (the caller is not an administrator)"`
}

// MetricsStore persists database metric samples and their rollups.
type MetricsStore interface {
	// InsertDatabaseMetricSamples stores samples, ignoring any whose
	// (instance, time) is stored already, and marks their hours for a
	// rollup. It returns how many were new.
	InsertDatabaseMetricSamples(ctx context.Context, samples []agentproto.DBMetricSample, now time.Time) (int, error)
	// CountDatabaseMetricSamples counts an instance's samples in [from, to).
	CountDatabaseMetricSamples(ctx context.Context, instanceID string, from, to time.Time) (int, error)
	// DatabaseMetricPoints returns an instance's samples in [from, to) as
	// points (bucket 0), or their averages per bucket, oldest first.
	DatabaseMetricPoints(ctx context.Context, instanceID string, from, to time.Time, bucket time.Duration) ([]MetricPoint, error)
	// DatabaseMetricHours returns the hourly rollups of an instance's
	// hours starting in [from, to), oldest first.
	DatabaseMetricHours(ctx context.Context, instanceID string, from, to time.Time) ([]MetricPoint, error)
	// LatestDatabaseMetrics returns the newest sample of each instance
	// (of instanceID only, unless it is "") that has one, with its error.
	LatestDatabaseMetrics(ctx context.Context, instanceID string) (map[string]LastMetrics, error)
	// RollupDatabaseMetrics recomputes up to limit marked hours from the
	// raw samples and unmarks those not marked again meanwhile; it returns
	// how many it recomputed.
	RollupDatabaseMetrics(ctx context.Context, limit int, now time.Time) (int, error)
	// PruneDatabaseMetrics deletes up to limit raw samples before
	// rawBefore (none of a marked hour), then, within the same limit,
	// rollups of hours before rollupBefore. It returns how many rows it
	// deleted; fewer than limit means nothing is left.
	PruneDatabaseMetrics(ctx context.Context, rawBefore, rollupBefore time.Time, limit int) (int, error)
	// ServerDatabaseInstances returns the instances on a server.
	ServerDatabaseInstances(ctx context.Context, serverID string) ([]Instance, error)
	// DatabasesRevision names the state of a server's instances: it
	// changes whenever one is added, changed or deleted.
	DatabasesRevision(ctx context.Context, serverID string) (string, error)
}

// monitored says whether the agent samples an instance: a ready one, so
// that an instance whose login fails is not logged in to every minute.
func monitored(inst Instance) bool { return inst.State == StateReady && inst.Port > 0 }

// MonitorRevision names the list the agent on serverID samples.
func (s *Service) MonitorRevision(ctx context.Context, serverID string) (string, error) {
	return s.store.DatabasesRevision(ctx, serverID)
}

// MonitorList returns the instances the agent on serverID samples, each
// with its admin login and password, and the revision of the list. The
// revision is read first: a change made meanwhile changes the revision
// the next heartbeat carries, so the agent fetches the list again.
func (s *Service) MonitorList(ctx context.Context, serverID string) (agentproto.DBMonitorResponse, error) {
	rev, err := s.store.DatabasesRevision(ctx, serverID)
	if err != nil {
		return agentproto.DBMonitorResponse{}, err
	}
	list, err := s.store.ServerDatabaseInstances(ctx, serverID)
	if err != nil {
		return agentproto.DBMonitorResponse{}, err
	}
	out := agentproto.DBMonitorResponse{Revision: rev, Instances: []agentproto.DBMonitorInstance{}}
	for _, inst := range list {
		if !monitored(inst) {
			continue
		}
		cred, password, err := s.adminLogin(ctx, inst.ID)
		if fault.Is(err, fault.Conflict) || fault.Is(err, fault.NotFound) {
			continue // no admin login (deleted meanwhile)
		}
		if err != nil {
			return agentproto.DBMonitorResponse{}, err
		}
		mi := agentproto.DBMonitorInstance{Target: target(inst, cred), Password: password}
		if inst.Managed {
			mi.ContainerName = ContainerName(inst.Name)
		}
		out.Instances = append(out.Instances, mi)
	}
	return out, nil
}

// IngestMetrics validates and stores an agent's samples. Samples of
// instances that are not on the agent's server (deleted meanwhile, or
// another server's) are skipped; a bad sample refuses the whole report
// (fault.Invalid naming samples[i].field). It returns how many samples
// were stored and how many skipped.
func (s *Service) IngestMetrics(ctx context.Context, serverID string, req agentproto.DBMetricsRequest) (agentproto.DBMetricsResult, error) {
	now := s.now().UTC()
	if err := validateMetricSamples(req.Samples, now); err != nil {
		return agentproto.DBMetricsResult{}, err
	}
	list, err := s.store.ServerDatabaseInstances(ctx, serverID)
	if err != nil {
		return agentproto.DBMetricsResult{}, err
	}
	own := make(map[string]bool, len(list))
	for _, inst := range list {
		own[inst.ID] = true
	}
	keep := make([]agentproto.DBMetricSample, 0, len(req.Samples))
	for _, m := range req.Samples {
		if own[m.InstanceID] {
			m.At = m.At.UTC()
			keep = append(keep, m)
		}
	}
	n, err := s.store.InsertDatabaseMetricSamples(ctx, keep, now)
	if err != nil {
		return agentproto.DBMetricsResult{}, err
	}
	return agentproto.DBMetricsResult{Stored: n, Skipped: len(req.Samples) - len(keep)}, nil
}

// validateMetricSamples checks a report: times within the accepted span,
// no negative or non-finite figures, bounded texts and lists.
func validateMetricSamples(samples []agentproto.DBMetricSample, now time.Time) error {
	var errs fault.Fields
	if len(samples) > agentproto.MaxDBMetricSamples {
		errs.Add("samples", "at most %d samples per report", agentproto.MaxDBMetricSamples)
		return errs.Err()
	}
	for i, m := range samples {
		f := func(name string) string { return fmt.Sprintf("samples[%d].%s", i, name) }
		if m.InstanceID == "" || len(m.InstanceID) > 64 {
			errs.Add(f("instance_id"), "must be 1 to 64 characters")
		}
		switch {
		case m.At.IsZero():
			errs.Add(f("at"), "is required")
		case m.At.Before(now.Add(-MetricsMaxSampleAge)):
			errs.Add(f("at"), "is more than %s old", MetricsMaxSampleAge)
		case m.At.After(now.Add(MetricsMaxSampleAhead)):
			errs.Add(f("at"), "is more than %s ahead of the control plane's clock", MetricsMaxSampleAhead)
		}
		if len(m.Error) > MaxMetricErrorLen {
			errs.Add(f("error"), "must be at most %d bytes", MaxMetricErrorLen)
		}
		for _, c := range []struct {
			name string
			v    *int64
		}{{"connections", m.Connections}, {"max_connections", m.MaxConnections}, {"size_bytes", m.SizeBytes},
			{"memory_bytes", m.MemoryBytes}, {"keys", m.Keys}} {
			if c.v != nil && *c.v < 0 {
				errs.Add(f(c.name), "must not be negative")
			}
		}
		if o := m.OpsPerSecond; o != nil && (*o < 0 || math.IsNaN(*o) || math.IsInf(*o, 0)) {
			errs.Add(f("ops_per_second"), "must be a finite number, not negative")
		}
		if len(m.Databases) > agentproto.MaxDBMetricDatabases {
			errs.Add(f("databases"), "at most %d databases", agentproto.MaxDBMetricDatabases)
		}
		for j, d := range m.Databases {
			if d.Name == "" || len(d.Name) > 128 {
				errs.Add(f(fmt.Sprintf("databases[%d].name", j)), "must be 1 to 128 bytes")
			}
			if d.SizeBytes < 0 {
				errs.Add(f(fmt.Sprintf("databases[%d].size_bytes", j)), "must not be negative")
			}
		}
		if m.Error != "" && (m.Connections != nil || m.SizeBytes != nil || m.Keys != nil || len(m.Databases) > 0) {
			errs.Add(f("error"), "a sample that could not be taken has no figures")
		}
	}
	return errs.Err()
}

// ParseMetricsHours checks ?hours=: fault.Invalid on field hours unless it
// is MinMetricsHours to MaxMetricsHours.
func ParseMetricsHours(hours int) error {
	if hours < MinMetricsHours || hours > MaxMetricsHours {
		return fault.Invalidf("hours", "must be an integer between %d and %d", MinMetricsHours, MaxMetricsHours)
	}
	return nil
}

// bucketFor is the narrowest whole-second bucket width that cuts span into
// at most points buckets aligned to multiples of the width.
func bucketFor(span time.Duration, points int) time.Duration {
	w := (span + time.Duration(points-2)) / time.Duration(points-1) // ceil(span / (points-1))
	return (w + time.Second - 1).Truncate(time.Second)
}

// Metrics returns an instance's metric history over the last hours: raw
// samples up to MetricsRawRetention (averaged into at most
// MaxMetricsPoints time buckets when there are more), hourly averages
// beyond. Sample errors are withheld from members.
func (s *Service) Metrics(ctx context.Context, id string, hours int, r jobs.Reader) (MetricSeries, error) {
	if err := ParseMetricsHours(hours); err != nil {
		return MetricSeries{}, err
	}
	if _, err := s.store.DatabaseInstance(ctx, id); err != nil {
		return MetricSeries{}, err
	}
	now := s.now().UTC()
	span := time.Duration(hours) * time.Hour
	out := MetricSeries{InstanceID: id, Hours: hours, Resolution: ResolutionRaw, Redacted: r != jobs.AdminReader}
	var (
		points []MetricPoint
		err    error
	)
	if span > MetricsRawRetention {
		out.Resolution, out.BucketSeconds = ResolutionHourly, int(time.Hour/time.Second)
		out.From = now.Add(-span).Truncate(time.Hour)
		out.To = now.Add(MetricsMaxSampleAhead).Truncate(time.Hour).Add(time.Hour)
		points, err = s.store.DatabaseMetricHours(ctx, id, out.From, out.To)
	} else {
		out.From, out.To = now.Add(-span), now.Add(MetricsMaxSampleAhead)
		var n int
		if n, err = s.store.CountDatabaseMetricSamples(ctx, id, out.From, out.To); err != nil {
			return MetricSeries{}, err
		}
		var bucket time.Duration
		if n > MaxMetricsPoints {
			bucket = bucketFor(out.To.Sub(out.From), MaxMetricsPoints)
			out.BucketSeconds = int(bucket / time.Second)
		}
		points, err = s.store.DatabaseMetricPoints(ctx, id, out.From, out.To, bucket)
	}
	if err != nil {
		return MetricSeries{}, err
	}
	if points == nil {
		points = []MetricPoint{}
	}
	if out.Redacted {
		for i := range points {
			points[i].Error = nil
		}
	}
	out.Points = points
	return out, nil
}

// lastMetrics is the newest sample of each instance as r may read it.
func (s *Service) lastMetrics(ctx context.Context, instanceID string, r jobs.Reader) (map[string]LastMetrics, error) {
	latest, err := s.store.LatestDatabaseMetrics(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	if r != jobs.AdminReader {
		for id, l := range latest {
			l.Error = nil
			latest[id] = l
		}
	}
	return latest, nil
}

func withLast(d Detail, latest map[string]LastMetrics) Detail {
	if l, ok := latest[d.ID]; ok {
		d.LastMetrics = &l
	}
	return d
}

// Batch sizes of the metrics maintenance: each batch is one short write
// transaction.
const (
	metricsRollupBatch = 50
	metricsPruneBatch  = 2000
	metricsMaxBatches  = 1000
)

// MaintainMetrics rolls up the hours that inserts touched and prunes raw
// samples older than MetricsRawRetention and rollups older than
// MetricsRollupRetention, in small transactions. It returns how many rows
// it pruned. It is a task of the metrics maintenance loop.
func (s *Service) MaintainMetrics(ctx context.Context, now time.Time) (int, error) {
	for range metricsMaxBatches {
		n, err := s.store.RollupDatabaseMetrics(ctx, metricsRollupBatch, now)
		if err != nil {
			return 0, err
		}
		if n < metricsRollupBatch {
			break
		}
	}
	rawBefore := now.Add(-MetricsRawRetention).Truncate(time.Hour)
	rollupBefore := now.Add(-MetricsRollupRetention).Truncate(time.Hour)
	pruned := 0
	for range metricsMaxBatches {
		n, err := s.store.PruneDatabaseMetrics(ctx, rawBefore, rollupBefore, metricsPruneBatch)
		pruned += n
		if err != nil {
			return pruned, err
		}
		if n < metricsPruneBatch {
			break
		}
	}
	return pruned, nil
}
