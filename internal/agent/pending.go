package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/atomicfile"
	"github.com/capstan-dev/capstan/internal/agent/metrics"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Bounds of what the agent keeps in its state directory for delivery.
const (
	// PendingDir is the directory, under the state directory, of what
	// the agent has not delivered yet.
	PendingDir = "pending"
	// MaxPendingJobs bounds the job records kept at once: jobs running
	// and results not delivered yet. Beyond it a job runs and reports as
	// usual but is not recorded.
	MaxPendingJobs = 1024
	// MaxPendingResultBytes bounds one recorded result: the most the
	// control plane accepts for a result.
	MaxPendingResultBytes = 4 << 20
	// maxSampleAge is how old a sample may be for the control plane to
	// take it: older samples are not sent again after a restart.
	maxSampleAge = 7 * 24 * time.Hour
	// interruptedError is the error of a job that was running when the
	// agent stopped without finishing it (crash, kill, power loss).
	interruptedError = "the agent stopped while the job ran (crash, kill or reboot); its outcome is unknown"
)

// validName is what a job or server id must look like to name a file.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// pendingStore keeps, in <state dir>/pending/<server id>, what the agent
// must still deliver, so that neither a restart nor a reboot loses it
// (per enrollment: an agent enrolled again does not send what it kept for
// another server):
//
//   - metrics.json: the metric buffer (samples not delivered yet), written
//     atomically whenever its content changed and removed when it is empty;
//   - jobs/<id>.json: one file per job from its start until its result is
//     delivered: first without a result (running), then with it. A file
//     still without a result at start is a job the agent stopped in the
//     middle of: it is reported failed, its outcome unknown.
//
// Every write goes to a temporary file that is synced and renamed into
// place, so a crash leaves either the old or the new content. A nil
// *pendingStore keeps nothing.
type pendingStore struct {
	dir string
	log *slog.Logger

	metricsMu      sync.Mutex
	metricsVersion uint64 // of the buffer content on disk
	metricsOnDisk  bool

	jobsMu sync.Mutex
	jobs   map[string]struct{} // files in jobs/
}

// pendingJob is a job's file.
type pendingJob struct {
	JobID     string                      `json:"job_id"`
	StartedAt time.Time                   `json:"started_at"`
	Result    *agentproto.CompleteRequest `json:"result,omitempty"`
}

type pendingMetrics struct {
	Samples []agentproto.MetricSample `json:"samples"`
}

// openPending makes <stateDir>/pending/<serverID> (0700) and returns the
// store; "" keeps nothing (nil).
func openPending(stateDir, serverID string, log *slog.Logger) (*pendingStore, error) {
	if stateDir == "" {
		return nil, nil
	}
	if !validName.MatchString(serverID) {
		return nil, fmt.Errorf("server_id %q cannot name a directory", serverID)
	}
	p := &pendingStore{dir: filepath.Join(stateDir, PendingDir, serverID), log: log, jobs: map[string]struct{}{}}
	if err := os.MkdirAll(p.jobDir(), 0o700); err != nil {
		return nil, fmt.Errorf("agent state directory: %w", err)
	}
	return p, nil
}

func (p *pendingStore) jobDir() string           { return filepath.Join(p.dir, "jobs") }
func (p *pendingStore) metricsPath() string      { return filepath.Join(p.dir, "metrics.json") }
func (p *pendingStore) jobPath(id string) string { return filepath.Join(p.jobDir(), id+".json") }

// loadMetrics returns the samples kept by an earlier run, oldest first,
// without those too old for the control plane to take.
func (p *pendingStore) loadMetrics(now time.Time) []agentproto.MetricSample {
	if p == nil {
		return nil
	}
	b, err := os.ReadFile(p.metricsPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var m pendingMetrics
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		p.log.Error("the metric samples kept by the last run cannot be read; they are dropped", "path", p.metricsPath(), "err", err)
		p.remove(p.metricsPath())
		return nil
	}
	p.metricsOnDisk = true
	return slices.DeleteFunc(m.Samples, func(s agentproto.MetricSample) bool {
		return s.At.IsZero() || now.Sub(s.At) > maxSampleAge
	})
}

// saveMetrics writes buf's content if it changed since the last write, or
// removes the file once buf is empty. Safe for concurrent use: whoever
// writes last writes the newest content.
func (p *pendingStore) saveMetrics(buf *metrics.Buffer) {
	if p == nil {
		return
	}
	p.metricsMu.Lock()
	defer p.metricsMu.Unlock()
	samples, version := buf.Snapshot()
	if version == p.metricsVersion {
		return
	}
	if len(samples) == 0 {
		if p.metricsOnDisk {
			p.remove(p.metricsPath())
			p.metricsOnDisk = false
		}
		p.metricsVersion = version
		return
	}
	b, err := json.Marshal(pendingMetrics{Samples: samples})
	if err == nil {
		err = atomicfile.WriteFile(p.metricsPath(), b, 0o600)
	}
	if err != nil {
		p.log.Warn("could not keep the metric buffer in the state directory; a restart would lose it", "err", err)
		return
	}
	p.metricsVersion, p.metricsOnDisk = version, true
}

// loadJobs returns the jobs kept by an earlier run, by id. A job without
// a result gets a failed one (interruptedError), written back.
func (p *pendingStore) loadJobs() []pendingJob {
	if p == nil {
		return nil
	}
	entries, err := os.ReadDir(p.jobDir())
	if err != nil {
		p.log.Error("the job results kept by the last run cannot be listed", "path", p.jobDir(), "err", err)
		return nil
	}
	var out []pendingJob
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(p.jobDir(), name)
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || !validName.MatchString(id) || !e.Type().IsRegular() {
			if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
				p.remove(path) // a write a crash interrupted
			}
			continue
		}
		var j pendingJob
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &j)
		}
		if err == nil && j.JobID != id {
			err = fmt.Errorf("the file holds job %q", j.JobID)
		}
		if err != nil {
			p.log.Error("a job record kept by the last run cannot be read; it is dropped", "path", path, "err", err)
			p.remove(path)
			continue
		}
		if j.Result == nil {
			j.Result = &agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: interruptedError}
			p.write(j)
		}
		p.jobsMu.Lock()
		p.jobs[id] = struct{}{}
		p.jobsMu.Unlock()
		out = append(out, j)
	}
	return out
}

// started records a job as running; false if it is not recorded (the
// store is full or the id cannot name a file).
func (p *pendingStore) started(id string, at time.Time) bool {
	if p == nil || !validName.MatchString(id) {
		return false
	}
	p.jobsMu.Lock()
	_, have := p.jobs[id]
	if !have && len(p.jobs) >= MaxPendingJobs {
		p.jobsMu.Unlock()
		p.log.Warn("too many jobs kept for delivery; this one is not recorded", "job_id", id, "kept", MaxPendingJobs)
		return false
	}
	p.jobs[id] = struct{}{}
	p.jobsMu.Unlock()
	if !p.write(pendingJob{JobID: id, StartedAt: at.UTC()}) {
		p.jobsMu.Lock()
		delete(p.jobs, id)
		p.jobsMu.Unlock()
		return false
	}
	return true
}

// finished records a job's result, to deliver after a restart if need be.
func (p *pendingStore) finished(id string, started time.Time, res agentproto.CompleteRequest) {
	if p == nil || !p.has(id) {
		return
	}
	if n := len(res.Data) + len(res.Output) + len(res.Error); n > MaxPendingResultBytes {
		// The control plane refuses it anyway; the agent then reports a
		// plain failure (complete).
		res = agentproto.CompleteRequest{Status: agentproto.StatusFailed,
			Error: fmt.Sprintf("the job's result (%d bytes) is larger than the agent keeps for delivery", n)}
	}
	p.write(pendingJob{JobID: id, StartedAt: started.UTC(), Result: &res})
}

// done forgets a job: its result was delivered or will never be.
func (p *pendingStore) done(id string) {
	if p == nil || !p.has(id) {
		return
	}
	p.remove(p.jobPath(id))
	p.jobsMu.Lock()
	delete(p.jobs, id)
	p.jobsMu.Unlock()
}

func (p *pendingStore) has(id string) bool {
	p.jobsMu.Lock()
	defer p.jobsMu.Unlock()
	_, ok := p.jobs[id]
	return ok
}

func (p *pendingStore) write(j pendingJob) bool {
	b, err := json.Marshal(j)
	if err == nil {
		err = atomicfile.WriteFile(p.jobPath(j.JobID), b, 0o600)
	}
	if err != nil {
		p.log.Warn("could not record the job in the state directory; a restart would lose its result", "job_id", j.JobID, "err", err)
		return false
	}
	return true
}

func (p *pendingStore) remove(path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("could not remove a file of the state directory", "path", path, "err", err)
	}
}
