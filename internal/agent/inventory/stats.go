package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// statsParallel is how many containers' stats are read at once.
const statsParallel = 4

// statsTimeout bounds one sampling of every container.
const statsTimeout = 10 * time.Second

// statsAPI is what the container stats sampler uses of the Engine API
// client.
type statsAPI interface {
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerStats(ctx context.Context, id string, options client.ContainerStatsOptions) (client.ContainerStatsResult, error)
	DaemonHost() string
	Close() error
}

// counters are what is kept of a container's previous stats, for rates.
type counters struct {
	read   time.Time
	cpu    uint64 // the container's CPU time, ns
	system uint64 // the host's CPU time (all CPUs), ns
	rx, tx uint64
}

// ContainerStats samples the running containers' CPU, memory and network
// through the engine's one-shot stats (no second sample is waited for:
// rates are taken against the previous sampling). It has its own
// connection to the engine; not safe for concurrent use (the metrics loop
// owns it).
type ContainerStats struct {
	newClient func() (statsAPI, error)
	cli       statsAPI
	prev      map[string]counters // by container id
}

// NewContainerStats returns a sampler of DOCKER_HOST's engine, or the
// default socket's.
func NewContainerStats() *ContainerStats {
	return &ContainerStats{
		newClient: func() (statsAPI, error) { return dockerc.New("") },
		prev:      map[string]counters{},
	}
}

// statsBody is the part of the engine's stats that is read.
type statsBody struct {
	Read     time.Time `json:"read"`
	CPUStats struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
		SystemUsage uint64 `json:"system_cpu_usage"`
	} `json:"cpu_stats"`
	MemoryStats struct {
		Usage uint64            `json:"usage"`
		Limit uint64            `json:"limit"`
		Stats map[string]uint64 `json:"stats"`
	} `json:"memory_stats"`
	Networks map[string]struct {
		RxBytes uint64 `json:"rx_bytes"`
		TxBytes uint64 `json:"tx_bytes"`
	} `json:"networks"`
}

// Sample returns the running containers' figures, or nil, nil when there
// is no Docker engine (its socket does not exist). A container whose stats
// could not be read is left out, its error joined in err.
func (s *ContainerStats) Sample(ctx context.Context) ([]agentproto.ContainerSample, error) {
	if s.cli == nil {
		cli, err := s.newClient()
		if err != nil {
			return nil, err
		}
		s.cli = cli
	}
	if sock, ok := strings.CutPrefix(s.cli.DaemonHost(), "unix://"); ok {
		if _, err := os.Stat(sock); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	list, err := s.cli.ContainerList(ctx, client.ContainerListOptions{})
	if err != nil {
		return nil, err
	}
	type result struct {
		body statsBody
		err  error
	}
	results := make([]result, len(list.Items))
	var wg sync.WaitGroup
	sem := make(chan struct{}, statsParallel)
	for i, c := range list.Items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i].body, results[i].err = s.read(ctx, c.ID)
		}()
	}
	wg.Wait()
	out := make([]agentproto.ContainerSample, 0, len(list.Items))
	next := make(map[string]counters, len(list.Items))
	var errs []error
	for i, c := range list.Items {
		r := results[i]
		if r.err != nil {
			if vanished(r.err) {
				continue // removed or stopped since the list: it is not sampled this time
			}
			errs = append(errs, fmt.Errorf("stats of %s: %w", containerName(c.Names), r.err))
			continue
		}
		cur := counters{read: r.body.Read, cpu: r.body.CPUStats.CPUUsage.TotalUsage, system: r.body.CPUStats.SystemUsage}
		for _, n := range r.body.Networks {
			cur.rx += n.RxBytes
			cur.tx += n.TxBytes
		}
		next[c.ID] = cur
		cs := agentproto.ContainerSample{ID: c.ID, Name: containerName(c.Names), MemoryLimit: r.body.MemoryStats.Limit,
			MemoryUsed: memoryUsed(r.body.MemoryStats.Usage, r.body.MemoryStats.Stats)}
		if p, ok := s.prev[c.ID]; ok {
			cs.CPUPercent, cs.NetRxBytesPerS, cs.NetTxBytesPerS = rates(p, cur)
		}
		out = append(out, cs)
	}
	s.prev = next
	if len(errs) > 0 && ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return out, errors.Join(errs...)
}

// vanished reports whether a stats read failed because its container went
// away after the list: the engine no longer knows it, or ended its stats
// before they were written.
func vanished(err error) bool {
	return cerrdefs.IsNotFound(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// read takes one container's one-shot stats.
func (s *ContainerStats) read(ctx context.Context, id string) (statsBody, error) {
	res, err := s.cli.ContainerStats(ctx, id, client.ContainerStatsOptions{})
	if err != nil {
		return statsBody{}, err
	}
	defer res.Body.Close()
	var b statsBody
	err = json.NewDecoder(res.Body).Decode(&b)
	return b, err
}

// memoryUsed is usage less the inactive page cache: total_inactive_file
// under cgroup v1, inactive_file under v2 (as docker stats computes it).
func memoryUsed(usage uint64, stats map[string]uint64) uint64 {
	inactive, ok := stats["total_inactive_file"]
	if !ok {
		inactive = stats["inactive_file"]
	}
	if inactive > usage {
		return 0
	}
	return usage - inactive
}

// rates are the CPU share and network rates between two stats of a
// container; zero where a counter went backwards (the container restarted).
func rates(p, c counters) (cpu, rx, tx float64) {
	if c.system > p.system && c.cpu >= p.cpu {
		cpu = min(100, 100*float64(c.cpu-p.cpu)/float64(c.system-p.system))
	}
	if secs := c.read.Sub(p.read).Seconds(); secs > 0 {
		if c.rx >= p.rx {
			rx = float64(c.rx-p.rx) / secs
		}
		if c.tx >= p.tx {
			tx = float64(c.tx-p.tx) / secs
		}
	}
	return cpu, rx, tx
}

// Close closes the connection to the engine.
func (s *ContainerStats) Close() error {
	if s.cli != nil {
		_ = s.cli.Close()
		s.cli = nil
	}
	return nil
}
