// Package dbmetrics samples the database instances on the agent's server
// for database metrics, and reports the samples to the control plane.
package dbmetrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Database metrics on the agent. A Monitor samples every instance the
// control plane lists for the agent's server (GET /agent/v1/databases)
// every Interval and reports the samples in batches (POST
// /agent/v1/databases/metrics). The list, with the logins' passwords, is
// held in memory only and never logged; it is fetched again when a
// heartbeat reply names another revision, and every ListRefresh
// regardless. An instance that cannot be sampled yields a sample with its
// error. Samples the control plane could not take yet are kept, up to
// MaxBuffered (the oldest are dropped first).

// Defaults of a Monitor.
const (
	DefaultMetricsInterval = time.Minute
	// ListRefresh is how often the list is fetched even when no heartbeat
	// said it changed.
	ListRefresh = 10 * time.Minute
	// MaxBuffered bounds the samples kept while the control plane cannot
	// take them.
	MaxBuffered = 5000
	// sampleTimeout bounds one instance's sample, connection included.
	sampleTimeout = 20 * time.Second
	// sampleParallel bounds the instances sampled at once.
	sampleParallel = 4
)

// Monitor samples the database instances on the agent's server. Make one
// with NewMonitor; give it every heartbeat reply (Heartbeat) and run its
// Loop with the agent.
type Monitor struct {
	interval time.Duration
	log      *slog.Logger
	memory   func(ctx context.Context, container string) (int64, error)

	mu      sync.Mutex // guards wanted
	wanted  string     // the list's revision the last heartbeat named
	changed chan struct{}
}

// NewMonitor returns a monitor that samples every interval (0:
// DefaultMetricsInterval). memory, if not nil, reads the memory use of a
// managed instance's container (see DockerMemory).
func NewMonitor(interval time.Duration, memory func(ctx context.Context, container string) (int64, error), log *slog.Logger) *Monitor {
	if interval <= 0 {
		interval = DefaultMetricsInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Monitor{interval: interval, log: log, memory: memory, changed: make(chan struct{}, 1)}
}

// Heartbeat takes a heartbeat reply: a new list revision wakes the loop.
func (m *Monitor) Heartbeat(r agentproto.HeartbeatResponse) {
	if r.DatabasesRevision == "" {
		return
	}
	m.mu.Lock()
	changed := r.DatabasesRevision != m.wanted
	m.wanted = r.DatabasesRevision
	m.mu.Unlock()
	if changed {
		select {
		case m.changed <- struct{}{}:
		default:
		}
	}
}

func (m *Monitor) wantedRevision() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wanted
}

// Loop is the monitor's loop, to run with the agent's.
func (m *Monitor) Loop() agent.Loop {
	return agent.Loop{Name: "database metrics", Run: m.run}
}

// counter is an instance's operation counter at a sample.
type counter struct {
	value uint64
	at    time.Time
}

// monitorState is what the loop holds between rounds.
type monitorState struct {
	list      []agentproto.DBMonitorInstance
	revision  string
	fetchedAt time.Time
	fetched   bool
	counters  map[string]counter
	buffer    []agentproto.DBMetricSample
	retryAt   time.Time // a 429's Retry-After
}

func (m *Monitor) run(ctx context.Context, c *agent.Client) error {
	st := &monitorState{counters: map[string]counter{}}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-m.changed:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		start := time.Now()
		if err := m.round(ctx, c, st); err != nil {
			return err
		}
		timer.Reset(max(m.interval-time.Since(start), 0))
	}
}

// round fetches the list if needed, samples every instance on it and
// sends what is buffered. Only a revocation is returned as an error.
func (m *Monitor) round(ctx context.Context, c *agent.Client, st *monitorState) error {
	wanted := m.wantedRevision()
	if wanted == "" {
		return nil // no heartbeat reply yet, or the control plane lists no databases
	}
	if !st.fetched || wanted != st.revision || time.Since(st.fetchedAt) >= ListRefresh {
		list, err := c.DatabaseMonitors(ctx)
		switch {
		case errors.Is(err, agent.ErrRevoked):
			return err
		case err != nil:
			if ctx.Err() == nil {
				m.log.Warn("cannot fetch the database instances to sample; sampling the ones known", "err", err.Error())
			}
		default:
			if !st.fetched || len(list.Instances) != len(st.list) {
				m.log.Info("database instances to sample", "instances", len(list.Instances), "revision", list.Revision)
			}
			st.list, st.revision, st.fetchedAt, st.fetched = list.Instances, list.Revision, time.Now(), true
			known := map[string]bool{}
			for _, in := range st.list {
				known[in.Target.InstanceID] = true
			}
			for id := range st.counters {
				if !known[id] {
					delete(st.counters, id)
				}
			}
		}
	}
	if samples := m.sampleAll(ctx, st); len(samples) > 0 {
		st.buffer = append(st.buffer, samples...)
		if over := len(st.buffer) - MaxBuffered; over > 0 {
			m.log.Warn("database metrics buffer is full; dropping the oldest samples", "dropped", over)
			st.buffer = append(st.buffer[:0:0], st.buffer[over:]...)
		}
	}
	return m.send(ctx, c, st)
}

// sampleAll samples every listed instance, a few at a time.
func (m *Monitor) sampleAll(ctx context.Context, st *monitorState) []agentproto.DBMetricSample {
	out := make([]agentproto.DBMetricSample, len(st.list))
	counters := make([]*counter, len(st.list))
	sem := make(chan struct{}, sampleParallel)
	var wg sync.WaitGroup
	for i, in := range st.list {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			out[i], counters[i] = m.sample(ctx, in, st.counters[in.Target.InstanceID])
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	for i, in := range st.list {
		if counters[i] == nil {
			delete(st.counters, in.Target.InstanceID)
		} else {
			st.counters[in.Target.InstanceID] = *counters[i]
		}
	}
	return out
}

// sample takes one sample of an instance; prev is its counter at the
// sample before (zero if none). It returns the sample and the counter now
// (nil after an error).
func (m *Monitor) sample(ctx context.Context, in agentproto.DBMonitorInstance, prev counter) (agentproto.DBMetricSample, *counter) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	at := time.Now()
	f, err := engine.ReadFigures(ctx, in.Target, in.Password)
	if err != nil {
		return agentproto.DBMetricSample{InstanceID: in.Target.InstanceID, At: at.UTC(), Error: sampleError(err)}, nil
	}
	s := f.Sample
	s.InstanceID, s.At = in.Target.InstanceID, at.UTC()
	if !prev.at.IsZero() && f.Ops >= prev.value {
		if dt := at.Sub(prev.at).Seconds(); dt > 0 {
			s.OpsPerSecond = new(math.Round(float64(f.Ops-prev.value)/dt*1000) / 1000)
		}
	}
	if s.MemoryBytes == nil && in.ContainerName != "" && m.memory != nil {
		if mem, err := m.memory(ctx, in.ContainerName); err == nil {
			s.MemoryBytes = &mem
		}
	}
	return s, &counter{value: f.Ops, at: at}
}

// sampleError is the error text of a sample: the engine's message, cut to
// the length the control plane takes.
func sampleError(err error) string {
	msg := engine.Failure(err).Error.Message
	if msg == "" {
		msg = "the instance could not be sampled"
	}
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	return msg
}

// send delivers the buffered samples, oldest first, in reports of at most
// agentproto.MaxDBMetricSamples. A refused report (400, 413, 422) is
// dropped; anything else keeps the samples for the next round.
func (m *Monitor) send(ctx context.Context, c *agent.Client, st *monitorState) error {
	if time.Now().Before(st.retryAt) {
		return nil
	}
	for len(st.buffer) > 0 {
		n := min(len(st.buffer), agentproto.MaxDBMetricSamples)
		res, err := c.PostDatabaseMetrics(ctx, st.buffer[:n])
		var ae *agent.APIError
		switch {
		case err == nil:
			if res.Skipped > 0 {
				m.log.Debug("the control plane skipped samples of instances no longer on this server", "skipped", res.Skipped)
			}
		case errors.Is(err, agent.ErrRevoked):
			return err
		case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
			st.retryAt = time.Now().Add(max(ae.RetryAfter, time.Second))
			return nil
		case errors.As(err, &ae) && (ae.Status == http.StatusBadRequest || ae.Status == http.StatusRequestEntityTooLarge ||
			ae.Status == http.StatusUnprocessableEntity || ae.Status == http.StatusNotFound):
			m.log.Error("control plane refused database metric samples; they are dropped", "samples", n, "err", err.Error())
		default:
			if ctx.Err() == nil {
				m.log.Warn("cannot send database metric samples; they are kept for the next round", "buffered", len(st.buffer), "err", err.Error())
			}
			return nil
		}
		st.buffer = append(st.buffer[:0:0], st.buffer[n:]...)
	}
	return nil
}

// DockerMemory returns a function that reads the memory a container uses
// (its cgroup's usage without inactive page cache, as docker stats shows
// it) through the Docker engine at host ("": the environment's).
func DockerMemory(host string) func(ctx context.Context, name string) (int64, error) {
	var docker dockerc.Lazy
	return func(ctx context.Context, name string) (int64, error) {
		cli, err := docker.Client(host)
		if err != nil {
			return 0, err
		}
		res, err := cli.ContainerStats(ctx, name, client.ContainerStatsOptions{})
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		var st container.StatsResponse
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return 0, fmt.Errorf("container stats of %s: %w", name, err)
		}
		mem := st.MemoryStats
		if mem.Usage == 0 {
			return 0, fmt.Errorf("container %s reports no memory use (not running?)", name)
		}
		used := mem.Usage
		for _, k := range []string{"inactive_file", "total_inactive_file"} { // cgroup v2, v1
			if v, ok := mem.Stats[k]; ok && v < used {
				used -= v
				break
			}
		}
		return int64(used), nil
	}
}
