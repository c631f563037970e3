// Package metrics owns host monitoring: the samples agents report, their
// hourly rollups and retention, the series and fleet views built from them,
// and the latest inventory (services, containers, listening ports) of each
// server.
//
// Samples carry their own times and are stored at those times, so a batch
// an agent buffered while it could not reach the control plane lands where
// it belongs. Raw samples are kept RawRetention; hourly rollups (sums,
// counts and maxima per metric) are kept RollupRetention. A background loop
// (Run) recomputes the hours that inserts touched and prunes what aged out.
package metrics

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Limits and retention.
const (
	// MaxSampleAge is how old a sample may be when it arrives.
	MaxSampleAge = 7 * 24 * time.Hour
	// MaxSampleAhead is how far ahead of the control plane's clock a
	// sample may be (clock skew).
	MaxSampleAhead = 5 * time.Minute
	// RawRetention is how long raw samples are kept. They are pruned by
	// whole hours, so a sample stays up to one hour longer.
	RawRetention = 48 * time.Hour
	// RollupRetention is how long hourly rollups are kept.
	RollupRetention = 100 * 24 * time.Hour
	// MaxSeriesPoints bounds the points of one server's series.
	MaxSeriesPoints = 1500
	// MaxFleetPoints bounds the points per server of the fleet view for
	// the raw ranges (1h, 24h).
	MaxFleetPoints = 300

	// Inventory bounds.
	MaxServices       = 5000
	MaxContainers     = 2000
	MaxPorts          = 10000
	MaxContainerPorts = 200
	MaxLabels         = 500
	MaxImages         = 5000
	MaxVolumes        = 5000
	MaxNetworks       = 1000
	MaxImageTags      = 100
)

// Sample is a validated sample with the values derived from it.
type Sample struct {
	agentproto.MetricSample
	// MemoryUsedPercent is memory_used / memory_total; nil without memory.
	MemoryUsedPercent *float64
	// SwapUsedPercent is swap_used / swap_total; nil without swap.
	SwapUsedPercent *float64
	// DiskUsedPercent is the largest used% (bytes) of the sample's
	// filesystems; nil without filesystems.
	DiskUsedPercent *float64
}

// SeriesPoint is one point of a series: a raw sample, the average of the raw
// samples in a time bucket, or the average of an hour.
type SeriesPoint struct {
	T                    time.Time `json:"t" doc:"The sample's time, or the start of the bucket or hour the point averages"`
	Samples              int       `json:"samples" doc:"Number of raw samples the point averages (1 for a raw sample)"`
	CPUPercent           float64   `json:"cpu_percent" doc:"CPU use, 0 to 100 (average)"`
	CPUPercentMax        float64   `json:"cpu_percent_max" doc:"Largest CPU use of the samples in the point"`
	Load1                float64   `json:"load1" doc:"1-minute load average (average)"`
	Load5                float64   `json:"load5" doc:"5-minute load average (average)"`
	Load15               float64   `json:"load15" doc:"15-minute load average (average)"`
	MemoryUsedPercent    *float64  `json:"memory_used_percent" doc:"Used memory (without cache) of total, 0 to 100; null when unknown"`
	MemoryUsedPercentMax *float64  `json:"memory_used_percent_max" doc:"Largest memory use of the samples in the point"`
	MemoryUsed           int64     `json:"memory_used" doc:"Bytes (average)"`
	MemoryTotal          int64     `json:"memory_total" doc:"Bytes (average)"`
	SwapUsedPercent      *float64  `json:"swap_used_percent" doc:"Null without swap"`
	DiskUsedPercent      *float64  `json:"disk_used_percent" doc:"Used% of the fullest filesystem; null when the agent reported none"`
	DiskUsedPercentMax   *float64  `json:"disk_used_percent_max" doc:"Largest disk use of the samples in the point"`
	NetRxBytesPerS       float64   `json:"net_rx_bytes_per_s" doc:"Bytes received per second on all interfaces but loopback (average)"`
	NetTxBytesPerS       float64   `json:"net_tx_bytes_per_s" doc:"Bytes sent per second (average)"`
}

// LatestMetrics is the newest sample of a server, in brief.
type LatestMetrics struct {
	At                time.Time `json:"at" doc:"The sample's time"`
	CPUPercent        float64   `json:"cpu_percent" doc:"0 to 100"`
	MemoryUsedPercent *float64  `json:"memory_used_percent" doc:"Used memory (without cache) of total; null when unknown"`
	DiskUsedPercent   *float64  `json:"disk_used_percent" doc:"Used% of the fullest filesystem; null when none was reported"`
	Load1             float64   `json:"load1" doc:"1-minute load average"`
	UptimeSeconds     int64     `json:"uptime_seconds" doc:"Seconds since the host booted"`
}

// ContainerMetrics are the running containers' figures of a server's
// newest sample.
type ContainerMetrics struct {
	At         time.Time                    `json:"at" doc:"The sample's time"`
	Containers []agentproto.ContainerSample `json:"containers" doc:"One entry per running container: CPU as a share of the whole host (0 to 100), memory without reclaimable page cache and its limit (the host's memory without one), network rates since the agent's previous sample (0 on a container's first)"`
}

// Inventory is the latest inventory report of a server. A null list means
// the agent could not read that part (e.g. no Docker); an empty list means
// there is none.
type Inventory struct {
	CollectedAt time.Time                  `json:"collected_at" doc:"When the agent collected it"`
	ReceivedAt  time.Time                  `json:"received_at" doc:"When the control plane received it"`
	Services    []agentproto.ServiceInfo   `json:"services" doc:"systemd service units; null if unreadable"`
	Containers  []agentproto.ContainerInfo `json:"containers" doc:"Docker containers; null if unreadable (e.g. no Docker)"`
	Ports       []agentproto.ListeningPort `json:"ports" doc:"Listening sockets; null if unreadable"`
	Images      []agentproto.ImageInfo     `json:"images" doc:"Docker images (id, tags, size, created); null if unreadable or the agent does not report them"`
	Volumes     []agentproto.VolumeInfo    `json:"volumes" doc:"Docker volumes with their disk use (measured every 5 minutes; -1 when unknown) and how many containers mount them; null if unreadable or the agent does not report them"`
	Networks    []agentproto.NetworkInfo   `json:"networks" doc:"Docker networks and how many containers are attached; null if unreadable or the agent does not report them"`
}

// Store persists samples, rollups and inventories.
type Store interface {
	// InsertMetricSamples stores samples; a sample whose (server, time) is
	// stored already is ignored. Each new sample is merged into its hour's
	// rollup in the same transaction. It returns how many samples were
	// new.
	InsertMetricSamples(ctx context.Context, serverID string, samples []Sample, now time.Time) (int, error)
	// CountMetricSamples counts a server's raw samples in [from, to).
	CountMetricSamples(ctx context.Context, serverID string, from, to time.Time) (int, error)
	// MetricPoints returns raw samples in [from, to) as points (bucket 0)
	// or their averages per bucket (aligned to multiples of bucket since
	// the epoch), by server, oldest first. serverID "" means every server.
	MetricPoints(ctx context.Context, serverID string, from, to time.Time, bucket time.Duration) (map[string][]SeriesPoint, error)
	// HourlyPoints returns the hourly rollups of hours starting in
	// [from, to), by server, oldest first. serverID "" means every server.
	HourlyPoints(ctx context.Context, serverID string, from, to time.Time) (map[string][]SeriesPoint, error)
	// RollupMetrics recomputes up to limit marked hours from the raw
	// samples and unmarks them; it returns how many it did.
	RollupMetrics(ctx context.Context, limit int, now time.Time) (int, error)
	// PruneMetrics deletes up to limit raw samples before rawBefore (but
	// none of a marked hour), then, within the same limit, rollups of hours
	// before rollupBefore, and, when the limit is not reached, the latest
	// samples and inventories of deleted servers. It returns how many rows
	// it deleted; fewer than limit means nothing is left.
	PruneMetrics(ctx context.Context, rawBefore, rollupBefore time.Time, limit int) (int, error)
	// LatestMetrics returns the newest sample of every server that has one.
	LatestMetrics(ctx context.Context) (map[string]LatestMetrics, error)
	// LatestMetric returns a server's newest sample; nil if none.
	LatestMetric(ctx context.Context, serverID string) (*LatestMetrics, error)
	// LatestContainerMetrics returns the containers' figures of a
	// server's newest sample; nil if it has none.
	LatestContainerMetrics(ctx context.Context, serverID string) (*ContainerMetrics, error)
	// PutInventory replaces a server's inventory.
	PutInventory(ctx context.Context, serverID string, inv Inventory) error
	// ServerInventory returns a server's inventory; nil if none.
	ServerInventory(ctx context.Context, serverID string) (*Inventory, error)
}

// Servers is what metrics needs of the fleet: names and statuses.
type Servers interface {
	Get(ctx context.Context, id string) (servers.Server, error)
	List(ctx context.Context) ([]servers.Server, error)
}
