package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Batch sizes of the maintenance loop: each batch is one short write
// transaction, so SQLite writers are never held up for long.
const (
	rollupBatch = 50   // hours recomputed per transaction
	pruneBatch  = 2000 // rows deleted per transaction
	maxBatches  = 1000 // per run, of each kind
)

// Service ingests and serves metrics and inventories.
type Service struct {
	store   Store
	servers Servers
	now     func() time.Time
	log     *slog.Logger

	tasksMu sync.Mutex // guards tasks
	tasks   []maintenanceTask
}

// MaintenanceTask is further work of the maintenance loop, such as the
// retention of another package's time series. It returns how many rows it
// deleted.
type MaintenanceTask func(ctx context.Context, now time.Time) (int, error)

type maintenanceTask struct {
	name string
	fn   MaintenanceTask
}

// AddMaintenance adds a task that every maintenance run does after its
// own work.
func (s *Service) AddMaintenance(name string, fn MaintenanceTask) {
	s.tasksMu.Lock()
	s.tasks = append(s.tasks, maintenanceTask{name: name, fn: fn})
	s.tasksMu.Unlock()
}

// NewService returns a metrics service.
func NewService(st Store, srv Servers, now func() time.Time, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: st, servers: srv, now: now, log: log}
}

// rawHorizon is the start of the oldest hour whose raw samples are kept.
func rawHorizon(now time.Time) time.Time { return now.Add(-RawRetention).Truncate(time.Hour) }

// rollupHorizon is the start of the oldest hour whose rollup is kept.
func rollupHorizon(now time.Time) time.Time { return now.Add(-RollupRetention).Truncate(time.Hour) }

// Ingest validates and stores an agent's samples, each at its own time. A
// sample stored already (same server and time, to the millisecond) is
// ignored, so a retried report counts once. It returns how many were new.
func (s *Service) Ingest(ctx context.Context, serverID string, req agentproto.MetricsRequest) (int, error) {
	now := s.now().UTC()
	samples, err := ValidateSamples(req, now)
	if err != nil {
		return 0, err
	}
	return s.store.InsertMetricSamples(ctx, serverID, samples, now)
}

// PutInventory validates and stores an agent's inventory, replacing the
// previous one.
func (s *Service) PutInventory(ctx context.Context, serverID string, req agentproto.InventoryRequest) error {
	now := s.now().UTC()
	if err := ValidateInventory(req, now); err != nil {
		return err
	}
	return s.store.PutInventory(ctx, serverID, Inventory{CollectedAt: req.CollectedAt.UTC(), ReceivedAt: now,
		Services: req.Services, Containers: req.Containers, Ports: req.Ports, Images: req.Images,
		Volumes: req.Volumes, Networks: req.Networks})
}

// LatestAll returns the newest sample of every server that has one, in one
// query.
func (s *Service) LatestAll(ctx context.Context) (map[string]LatestMetrics, error) {
	return s.store.LatestMetrics(ctx)
}

// Latest returns a server's newest sample; nil if none.
func (s *Service) Latest(ctx context.Context, serverID string) (*LatestMetrics, error) {
	return s.store.LatestMetric(ctx, serverID)
}

// Containers returns the containers' figures of a server's newest
// sample; nil if it has none.
func (s *Service) Containers(ctx context.Context, serverID string) (*ContainerMetrics, error) {
	return s.store.LatestContainerMetrics(ctx, serverID)
}

// Inventory returns a server's latest inventory; nil if none.
func (s *Service) Inventory(ctx context.Context, serverID string) (*Inventory, error) {
	return s.store.ServerInventory(ctx, serverID)
}

// Range is a time range the API serves.
type Range struct {
	Name string
	Span time.Duration
	// Hourly ranges are served from the hourly rollups.
	Hourly bool
}

// Resolutions of a series.
const (
	ResolutionRaw    = "raw"
	ResolutionHourly = "1h"
)

var ranges = []Range{
	{"1h", time.Hour, false},
	{"24h", 24 * time.Hour, false},
	{"7d", 7 * 24 * time.Hour, true},
	{"30d", 30 * 24 * time.Hour, true},
	{"90d", 90 * 24 * time.Hour, true},
}

// ParseRange returns the named range; fault.Invalid on field "range" for
// any other name.
func ParseRange(name string) (Range, error) {
	for _, r := range ranges {
		if r.Name == name {
			return r, nil
		}
	}
	return Range{}, fault.Invalidf("range", "must be one of 1h, 24h, 7d, 30d, 90d")
}

// Resolution is "raw" or "1h".
func (r Range) Resolution() string {
	if r.Hourly {
		return ResolutionHourly
	}
	return ResolutionRaw
}

// window is the span of stored times a range covers at now: for raw
// ranges, the span up to now (and the clock skew allowed ahead); for
// hourly ones, the hours that overlap it.
func (r Range) window(now time.Time) (from, to time.Time) {
	if r.Hourly {
		return now.Add(-r.Span).Truncate(time.Hour), now.Add(MaxSampleAhead).Truncate(time.Hour).Add(time.Hour)
	}
	return now.Add(-r.Span), now.Add(MaxSampleAhead)
}

// bucketFor is the narrowest whole-second bucket width that cuts span into
// at most points buckets aligned to multiples of the width.
func bucketFor(span time.Duration, points int) time.Duration {
	w := (span + time.Duration(points-2)) / time.Duration(points-1) // ceil(span / (points-1))
	return (w + time.Second - 1).Truncate(time.Second)
}

// ServerSeries is the metric history of one server.
type ServerSeries struct {
	ServerID      string        `json:"server_id"`
	Range         string        `json:"range" enum:"1h,24h,7d,30d,90d"`
	Resolution    string        `json:"resolution" enum:"raw,1h" doc:"raw: samples, or averages of time buckets of bucket_seconds when there would be more than 1500 points; 1h: hourly averages"`
	BucketSeconds int           `json:"bucket_seconds" doc:"Width of the buckets the points average; 0 when the points are single samples"`
	From          time.Time     `json:"from" doc:"Start of the span covered"`
	To            time.Time     `json:"to" doc:"End of the span covered (exclusive)"`
	Points        []SeriesPoint `json:"series" doc:"Oldest first"`
}

// Series returns a server's metric history over a range: raw samples
// for 1h and 24h (averaged into at most MaxSeriesPoints time buckets when
// there are more), hourly averages for 7d, 30d and 90d.
func (s *Service) Series(ctx context.Context, serverID, rangeName string) (ServerSeries, error) {
	r, err := ParseRange(rangeName)
	if err != nil {
		return ServerSeries{}, err
	}
	if _, err := s.servers.Get(ctx, serverID); err != nil {
		return ServerSeries{}, err
	}
	now := s.now().UTC()
	from, to := r.window(now)
	out := ServerSeries{ServerID: serverID, Range: r.Name, Resolution: r.Resolution(), From: from, To: to}
	var points map[string][]SeriesPoint
	if r.Hourly {
		out.BucketSeconds = int(time.Hour / time.Second)
		points, err = s.store.HourlyPoints(ctx, serverID, from, to)
	} else {
		var n int
		n, err = s.store.CountMetricSamples(ctx, serverID, from, to)
		if err != nil {
			return ServerSeries{}, err
		}
		var bucket time.Duration
		if n > MaxSeriesPoints {
			bucket = bucketFor(to.Sub(from), MaxSeriesPoints)
			out.BucketSeconds = int(bucket / time.Second)
		}
		points, err = s.store.MetricPoints(ctx, serverID, from, to, bucket)
	}
	if err != nil {
		return ServerSeries{}, err
	}
	out.Points = points[serverID]
	if out.Points == nil {
		out.Points = []SeriesPoint{}
	}
	return out, nil
}

// FleetPoint is one point of a server's series in the fleet view.
type FleetPoint struct {
	T                 time.Time `json:"t" doc:"Start of the bucket or hour"`
	Samples           int       `json:"samples" doc:"Number of raw samples the point averages"`
	CPUPercent        float64   `json:"cpu_percent" doc:"Average CPU use, 0 to 100"`
	Load1             float64   `json:"load1" doc:"Average 1-minute load"`
	MemoryUsedPercent *float64  `json:"memory_used_percent" doc:"Average memory use; null when unknown"`
	DiskUsedPercent   *float64  `json:"disk_used_percent" doc:"Average use of the fullest filesystem; null when none was reported"`
	NetRxBytesPerS    float64   `json:"net_rx_bytes_per_s" doc:"Average bytes received per second"`
	NetTxBytesPerS    float64   `json:"net_tx_bytes_per_s" doc:"Average bytes sent per second"`
}

// FleetSummary counts servers by status and summarizes the newest sample
// of each server that has one. Averages and maxima are null when no server
// has a sample (or, for memory and disk, none reports them).
type FleetSummary struct {
	ServersTotal         int      `json:"servers_total" doc:"Every server, whatever its status"`
	Online               int      `json:"online" doc:"Agent heard from within 3 heartbeat intervals"`
	Offline              int      `json:"offline" doc:"Enrolled, agent silent for longer"`
	Pending              int      `json:"pending" doc:"Enrollment created, agent not yet enrolled"`
	Revoked              int      `json:"revoked"`
	WithMetrics          int      `json:"with_metrics" doc:"Servers that have reported a sample"`
	CPUPercentAvg        *float64 `json:"cpu_percent_avg" doc:"Average over the newest sample of each server that has one"`
	CPUPercentMax        *float64 `json:"cpu_percent_max"`
	MemoryUsedPercentAvg *float64 `json:"memory_used_percent_avg"`
	MemoryUsedPercentMax *float64 `json:"memory_used_percent_max"`
	DiskUsedPercentAvg   *float64 `json:"disk_used_percent_avg"`
	DiskUsedPercentMax   *float64 `json:"disk_used_percent_max"`
}

// FleetServer is one server's series in the fleet view.
type FleetServer struct {
	ServerID string       `json:"server_id"`
	Name     string       `json:"name"`
	Status   string       `json:"status" enum:"pending,online,offline,revoked"`
	Series   []FleetPoint `json:"series" doc:"Oldest first"`
}

// Fleet is the monitoring view of every server.
type Fleet struct {
	Range         string        `json:"range" enum:"1h,24h,7d,30d,90d"`
	Resolution    string        `json:"resolution" enum:"raw,1h"`
	BucketSeconds int           `json:"bucket_seconds" doc:"Width of the buckets (aligned to multiples of it since the Unix epoch) the points average"`
	From          time.Time     `json:"from" doc:"Start of the span covered"`
	To            time.Time     `json:"to" doc:"End of the span covered (exclusive)"`
	Summary       FleetSummary  `json:"summary"`
	Servers       []FleetServer `json:"servers" doc:"Every server, in the order of GET /api/v1/servers"`
}

// Fleet returns the summary of the newest samples and the series of every
// server over a range: for 1h and 24h, averages of at most MaxFleetPoints
// time buckets per server; for 7d, 30d and 90d, hourly averages.
func (s *Service) Fleet(ctx context.Context, rangeName string) (Fleet, error) {
	r, err := ParseRange(rangeName)
	if err != nil {
		return Fleet{}, err
	}
	list, err := s.servers.List(ctx)
	if err != nil {
		return Fleet{}, err
	}
	latest, err := s.store.LatestMetrics(ctx)
	if err != nil {
		return Fleet{}, err
	}
	now := s.now().UTC()
	from, to := r.window(now)
	out := Fleet{Range: r.Name, Resolution: r.Resolution(), From: from, To: to, Summary: summarize(list, latest)}
	var points map[string][]SeriesPoint
	if r.Hourly {
		out.BucketSeconds = int(time.Hour / time.Second)
		points, err = s.store.HourlyPoints(ctx, "", from, to)
	} else {
		bucket := bucketFor(to.Sub(from), MaxFleetPoints)
		out.BucketSeconds = int(bucket / time.Second)
		points, err = s.store.MetricPoints(ctx, "", from, to, bucket)
	}
	if err != nil {
		return Fleet{}, err
	}
	out.Servers = make([]FleetServer, len(list))
	for i, srv := range list {
		ps := points[srv.ID]
		series := make([]FleetPoint, len(ps))
		for j, p := range ps {
			series[j] = FleetPoint{T: p.T, Samples: p.Samples, CPUPercent: p.CPUPercent, Load1: p.Load1,
				MemoryUsedPercent: p.MemoryUsedPercent, DiskUsedPercent: p.DiskUsedPercent,
				NetRxBytesPerS: p.NetRxBytesPerS, NetTxBytesPerS: p.NetTxBytesPerS}
		}
		out.Servers[i] = FleetServer{ServerID: srv.ID, Name: srv.Name, Status: srv.Status, Series: series}
	}
	return out, nil
}

// aggregate accumulates an average and a maximum.
type aggregate struct {
	sum, max float64
	n        int
}

func (a *aggregate) add(v *float64) {
	if v == nil {
		return
	}
	if a.n == 0 || *v > a.max {
		a.max = *v
	}
	a.sum += *v
	a.n++
}

func (a aggregate) avgMax() (avg, max *float64) {
	if a.n == 0 {
		return nil, nil
	}
	av, mx := a.sum/float64(a.n), a.max
	return &av, &mx
}

func summarize(list []servers.Server, latest map[string]LatestMetrics) FleetSummary {
	var sum FleetSummary
	var cpu, mem, disk aggregate
	for _, srv := range list {
		sum.ServersTotal++
		switch srv.Status {
		case servers.Online:
			sum.Online++
		case servers.Offline:
			sum.Offline++
		case servers.Pending:
			sum.Pending++
		case servers.Revoked:
			sum.Revoked++
		}
		l, ok := latest[srv.ID]
		if !ok {
			continue
		}
		sum.WithMetrics++
		c := l.CPUPercent
		cpu.add(&c)
		mem.add(l.MemoryUsedPercent)
		disk.add(l.DiskUsedPercent)
	}
	sum.CPUPercentAvg, sum.CPUPercentMax = cpu.avgMax()
	sum.MemoryUsedPercentAvg, sum.MemoryUsedPercentMax = mem.avgMax()
	sum.DiskUsedPercentAvg, sum.DiskUsedPercentMax = disk.avgMax()
	return sum
}

// MaintenanceStats says what one maintenance run did.
type MaintenanceStats struct {
	HoursRolledUp int
	RowsPruned    int
}

// Maintain recomputes the rollups of every hour that inserts touched, then
// prunes raw samples older than RawRetention and rollups older than
// RollupRetention, each in small transactions.
func (s *Service) Maintain(ctx context.Context) (MaintenanceStats, error) {
	var st MaintenanceStats
	for range maxBatches {
		n, err := s.store.RollupMetrics(ctx, rollupBatch, s.now().UTC())
		st.HoursRolledUp += n
		if err != nil {
			return st, err
		}
		if n < rollupBatch {
			break
		}
	}
	now := s.now().UTC()
	for range maxBatches {
		n, err := s.store.PruneMetrics(ctx, rawHorizon(now), rollupHorizon(now), pruneBatch)
		st.RowsPruned += n
		if err != nil {
			return st, err
		}
		if n < pruneBatch {
			break
		}
	}
	s.tasksMu.Lock()
	tasks := append([]maintenanceTask(nil), s.tasks...)
	s.tasksMu.Unlock()
	for _, t := range tasks {
		n, err := t.fn(ctx, now)
		st.RowsPruned += n
		if err != nil {
			return st, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return st, nil
}

// SparkPoints is the number of points of a sparkline: two-minute slots of
// the last hour.
const SparkPoints = 30

// SparkMaxServers is the most servers one sparkline request may ask for:
// the rows a screen shows, not the fleet.
const SparkMaxServers = 100

// Sparkline is a server's CPU and memory use over the last hour, in
// SparkPoints equal time slots, oldest first, as whole percentages: small
// enough to draw a row's trend without its full series.
type Sparkline struct {
	ServerID string `json:"server_id"`
	CPU      []*int `json:"cpu" doc:"Average CPU use of each slot, 0 to 100; null for a slot without samples"`
	Memory   []*int `json:"memory" doc:"Average memory use of each slot, 0 to 100; null for a slot without samples or when unknown"`
}

// Sparklines returns the sparklines of the servers given, in their order;
// ids that name no server are left out.
func (s *Service) Sparklines(ctx context.Context, ids []string) ([]Sparkline, error) {
	if len(ids) == 0 || len(ids) > SparkMaxServers {
		return nil, fault.Invalidf("ids", "must name 1 to %d servers", SparkMaxServers)
	}
	// The slots are those of the store's buckets (multiples of the slot
	// length since the epoch), the last one holding now: a window that
	// started at now minus an hour put each bucket astride two slots and
	// left the last slot empty for the first seconds of every bucket.
	slot := time.Hour / SparkPoints
	now := s.now().UTC()
	to := now.Truncate(slot).Add(slot)
	from := to.Add(-time.Hour)
	out := make([]Sparkline, 0, len(ids))
	for _, id := range ids {
		if _, err := s.servers.Get(ctx, id); err != nil {
			if fault.Is(err, fault.NotFound) {
				continue
			}
			return nil, err
		}
		points, err := s.store.MetricPoints(ctx, id, from, to, slot)
		if err != nil {
			return nil, err
		}
		out = append(out, sparkline(id, points[id], from, slot))
	}
	return out, nil
}

// sparkline puts points (bucket averages, oldest first) into the slots
// from from on, averaging the points that fall into one slot.
func sparkline(id string, points []SeriesPoint, from time.Time, slot time.Duration) Sparkline {
	var cpu, mem [SparkPoints]struct {
		sum float64
		n   int
	}
	for _, p := range points {
		i := int(p.T.Sub(from) / slot)
		i = min(max(i, 0), SparkPoints-1)
		cpu[i].sum += p.CPUPercent
		cpu[i].n++
		if p.MemoryUsedPercent != nil {
			mem[i].sum += *p.MemoryUsedPercent
			mem[i].n++
		}
	}
	out := Sparkline{ServerID: id, CPU: make([]*int, SparkPoints), Memory: make([]*int, SparkPoints)}
	for i := range SparkPoints {
		out.CPU[i] = wholePercent(cpu[i].sum, cpu[i].n)
		out.Memory[i] = wholePercent(mem[i].sum, mem[i].n)
	}
	return out
}

func wholePercent(sum float64, n int) *int {
	if n == 0 {
		return nil
	}
	v := int(math.Round(min(100, max(0, sum/float64(n)))))
	return &v
}
