// Package metrics samples a Linux host for capstan-agent's metrics reports
// (CPU, load, memory, swap, filesystems, network, uptime) and buffers the
// samples until the control plane has stored them.
//
// It reads /proc and statfs(2) with the standard library rather than
// through gopsutil: a sample is six small reads and one statfs per
// filesystem, every parser takes an io.Reader so tests feed fixtures, the
// filters (which filesystems and interfaces count) are ours either way, and
// the agent stays free of gopsutil's dependencies and per-call overhead. It
// imports agentproto and the standard library only.
package metrics

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Sampler takes samples of the host whose root filesystem is at root ("/"
// on a real host). CPU and network figures are rates over the time since
// the previous sample (or since NewSampler for the first). Not safe for
// concurrent use; the metrics loop owns it.
type Sampler struct {
	root   string
	statfs func(path string) (fsUsage, error)

	prevAt  time.Time
	prevCPU cpuTimes
	haveCPU bool
	prevNet map[string]netCounters // nil: no baseline

	read  bytes.Buffer      // reused for every /proc read
	names map[string]string // interned mount, device and type names
}

// NewSampler returns a sampler of the host at root, with now as the start
// of the first sample's CPU and network interval.
func NewSampler(root string, now time.Time) *Sampler {
	s := &Sampler{root: root, statfs: statfs, names: map[string]string{}}
	s.prevAt = now
	if t, err := s.cpuTimes(); err == nil {
		s.prevCPU, s.haveCPU = t, true
	}
	s.prevNet, _ = s.netCounters()
	return s
}

// Sample measures the host at now. Figures that cannot be read are left
// zero and their errors joined in err; the sample is usable either way.
func (s *Sampler) Sample(now time.Time) (agentproto.MetricSample, error) {
	var errs []error
	m := agentproto.MetricSample{At: now.UTC(), Filesystems: []agentproto.FilesystemSample{}}

	if t, err := s.cpuTimes(); err != nil {
		errs = append(errs, err)
		s.haveCPU = false
	} else {
		if s.haveCPU {
			m.CPUPercent = cpuPercent(s.prevCPU, t)
		}
		s.prevCPU, s.haveCPU = t, true
	}

	if r, err := s.open("proc/loadavg"); err != nil {
		errs = append(errs, err)
	} else if m.Load1, m.Load5, m.Load15, err = parseLoadavg(r); err != nil {
		errs = append(errs, err)
	}

	if r, err := s.open("proc/meminfo"); err != nil {
		errs = append(errs, err)
	} else if mem, err := parseMeminfo(r); err != nil {
		errs = append(errs, err)
	} else {
		m.MemoryTotal, m.MemoryUsed, m.MemoryAvailable = mem.total, mem.used, mem.available
		m.SwapTotal, m.SwapUsed = mem.swapTotal, mem.swapUsed
	}

	fss, err := s.filesystems()
	if err != nil {
		errs = append(errs, err)
	}
	m.Filesystems = fss

	if cur, err := s.netCounters(); err != nil {
		errs = append(errs, err)
		s.prevNet = nil
	} else {
		m.NetRxBytesPerS, m.NetTxBytesPerS = netRates(s.prevNet, cur, now.Sub(s.prevAt))
		s.prevNet = cur
	}

	if r, err := s.open("proc/uptime"); err != nil {
		errs = append(errs, err)
	} else if m.UptimeSeconds, err = parseUptime(r); err != nil {
		errs = append(errs, err)
	}

	s.prevAt = now
	m.CPUPercent = round2(m.CPUPercent)
	m.Load1, m.Load5, m.Load15 = round2(m.Load1), round2(m.Load5), round2(m.Load15)
	m.NetRxBytesPerS, m.NetTxBytesPerS = round2(m.NetRxBytesPerS), round2(m.NetTxBytesPerS)
	return m, errors.Join(errs...)
}

func (s *Sampler) cpuTimes() (cpuTimes, error) {
	r, err := s.open("proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(r)
}

func (s *Sampler) netCounters() (map[string]netCounters, error) {
	r, err := s.open("proc/net/dev")
	if err != nil {
		return nil, err
	}
	return parseNetDev(r)
}

// filesystems measures the real filesystems mounted in the agent's mount
// namespace. One that cannot be measured is left out (its error returned).
func (s *Sampler) filesystems() ([]agentproto.FilesystemSample, error) {
	r, err := s.open("proc/self/mounts")
	if err != nil {
		return []agentproto.FilesystemSample{}, err
	}
	ms, err := parseMounts(r)
	if err != nil {
		return []agentproto.FilesystemSample{}, err
	}
	if len(s.names) > 1024 {
		clear(s.names)
	}
	var errs []error
	out := []agentproto.FilesystemSample{}
	for _, m := range realMounts(ms) {
		u, err := s.statfs(filepath.Join(s.root, m.dir))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, agentproto.FilesystemSample{
			Mount:       s.intern(m.dir),
			Device:      s.intern(m.device),
			FSType:      s.intern(m.fstype),
			BytesTotal:  u.bytesTotal,
			BytesUsed:   u.bytesUsed,
			InodesTotal: u.inodesTotal,
			InodesUsed:  u.inodesUsed,
		})
	}
	return out, errors.Join(errs...)
}

// intern returns a stored copy of v, so that the buffered samples of an
// hour share one copy of each mount, device and type name.
func (s *Sampler) intern(v string) string {
	if w, ok := s.names[v]; ok {
		return w
	}
	s.names[v] = v
	return v
}

// open reads the file at rel under root into the sampler's buffer. /proc
// files are small and report no size, so one growing buffer is reused
// rather than allocating for every read.
func (s *Sampler) open(rel string) (io.Reader, error) {
	f, err := os.Open(filepath.Join(s.root, rel))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s.read.Reset()
	if _, err := s.read.ReadFrom(f); err != nil {
		return nil, err
	}
	return bytes.NewReader(s.read.Bytes()), nil
}

// round2 rounds to two decimals (smaller reports) and turns a non-finite
// value, which JSON cannot carry, into 0.
func round2(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*100) / 100
}

func clampPercent(v float64) float64 {
	switch {
	case math.IsNaN(v) || v < 0:
		return 0
	case v > 100:
		return 100
	}
	return v
}
