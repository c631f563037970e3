package traffic

import (
	"context"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// controlPlane keeps, like the real one, the latest values of each
// (host, minute).
type controlPlane struct {
	mu      sync.Mutex
	latest  map[key]agentproto.RequestMinute
	posts   int
	failing int // the next failing posts answer 503
}

func newControlPlane() *controlPlane {
	return &controlPlane{latest: map[key]agentproto.RequestMinute{}}
}

func (c *controlPlane) PostRequests(_ context.Context, rep agentproto.RequestsReport) (agentproto.RequestsResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failing > 0 {
		c.failing--
		return agentproto.RequestsResult{}, &agent.APIError{Method: "POST", Path: "/requests", Status: http.StatusServiceUnavailable}
	}
	c.posts++
	for _, m := range rep.Minutes {
		c.latest[key{m.Host, m.Minute.Unix()}] = m
	}
	return agentproto.RequestsResult{Stored: len(rep.Minutes)}, nil
}

func (c *controlPlane) snapshot() map[key]agentproto.RequestMinute {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.latest)
}

// traffic writes synthetic requests to a log and keeps the truth: the
// aggregates of every line written.
type traffic struct {
	t     *testing.T
	path  string
	rng   *rand.Rand
	at    time.Time
	truth *aggregator
}

func newTraffic(t *testing.T, path string) *traffic {
	tr := &traffic{t: t, path: path, rng: rand.New(rand.NewPCG(1, 2)), at: t0.Add(500 * time.Millisecond), truth: newAggregator()}
	tr.truth.maxMinutes = 1 << 30
	return tr
}

// write appends n requests, spread over hosts, 700 ms apart.
func (tr *traffic) write(n int) {
	tr.t.Helper()
	var b []byte
	hosts := []string{"a.test", "B.test:8443", "c.test"}
	statuses := []int{200, 200, 200, 201, 304, 404, 500}
	for range n {
		tr.at = tr.at.Add(700 * time.Millisecond)
		s := logLine(tr.at, hosts[tr.rng.IntN(len(hosts))], statuses[tr.rng.IntN(len(statuses))],
			tr.rng.Int64N(5000), time.Duration(tr.rng.IntN(500)+1)*time.Millisecond)
		tr.truth.addLine([]byte(s[:len(s)-1]))
		b = append(b, s...)
	}
	appendFile(tr.t, tr.path, string(b))
}

// check compares what the control plane holds with the truth.
func (tr *traffic) check(cp *controlPlane) {
	tr.t.Helper()
	got := cp.snapshot()
	if len(got) != len(tr.truth.minutes) {
		tr.t.Errorf("control plane holds %d minutes, want %d", len(got), len(tr.truth.minutes))
	}
	var total, totalWant int64
	for k, m := range tr.truth.minutes {
		want := m.report()
		totalWant += want.Count
		total += got[k].Count
		if got[k] != want {
			tr.t.Errorf("%s %s: got %+v, want %+v", k.host, time.Unix(k.minute, 0).UTC().Format("15:04"), got[k], want)
		}
	}
	if total != totalWant {
		tr.t.Errorf("total requests %d, want %d", total, totalWant)
	}
}

func newReporter(dir, logPath string) *Reporter {
	return New(Options{
		LogPath: logPath, StateDir: filepath.Join(dir, "state"),
		Now: func() time.Time { return t0 }, // backfill reaches every line
	})
}

// step is one iteration of Run: read, report.
func step(t *testing.T, r *Reporter, cp *controlPlane) {
	t.Helper()
	r.poll(context.Background())
	if err := r.flush(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
}

func TestRestartLosesAndDoublesNothing(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log", "access.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	tr := newTraffic(t, logPath)
	cp := newControlPlane()

	// First run: some lines, a report, a clean stop (state saved).
	r := newReporter(dir, logPath)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	tr.write(150)
	step(t, r, cp)
	tr.write(40)
	r.poll(context.Background())
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	r.tail.stop()
	if fi, err := os.Stat(filepath.Join(dir, "state")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v, %v", fi.Mode(), err)
	}

	// Written while the agent is stopped.
	tr.write(60)

	// Second run: resumes; then reports, reads more, saves, reports
	// again with more lines, and crashes (that last progress unsaved).
	r = newReporter(dir, logPath)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	step(t, r, cp)
	tr.check(cp)
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	tr.write(80)
	step(t, r, cp)
	tr.check(cp)
	r.tail.close() // crash: no save

	// Third run: from the state saved before the last 80 lines were
	// read and reported; they are read and reported again, with the
	// same totals.
	tr.write(30)
	r = newReporter(dir, logPath)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	step(t, r, cp)
	tr.check(cp)

	// Rotation while stopped: lines appended to the old file before it
	// was renamed, and a new file.
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	r.tail.stop()
	tr.write(25)
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	tr.write(35)
	r = newReporter(dir, logPath)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	step(t, r, cp)
	tr.check(cp)
	r.tail.stop()

	// The minutes held are bounded: closed, accepted ones are forgotten.
	if n := len(r.agg.minutes); n > 3*(lateMinutes+2) {
		t.Errorf("%d minutes held after everything was accepted", n)
	}
	t.Logf("%d minutes, %d posts", len(tr.truth.minutes), cp.posts)
}

func TestFirstStartBackfill(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	appendFile(t, logPath, logLine(t0.Add(-2*time.Hour), "old.test", 200, 1, time.Millisecond))
	appendFile(t, logPath, logLine(t0.Add(-30*time.Minute), "recent.test", 200, 1, time.Millisecond))
	r := New(Options{LogPath: logPath, StateDir: filepath.Join(dir, "state"), Now: func() time.Time { return t0 }})
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	cp := newControlPlane()
	step(t, r, cp)
	got := cp.snapshot()
	if len(got) != 1 || got[key{"recent.test", t0.Add(-30 * time.Minute).Unix()}].Count != 1 {
		t.Errorf("got %v; want only recent.test (backfill is an hour)", got)
	}
}

func TestRunReportsAndRetries(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	tr := newTraffic(t, logPath)
	tr.write(100)
	cp := newControlPlane()
	cp.failing = 2
	r := New(Options{
		LogPath: logPath, StateDir: filepath.Join(dir, "state"),
		PollInterval: 10 * time.Millisecond, FlushInterval: 30 * time.Millisecond,
		Backoff:  agent.Backoff{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		Backfill: 100 * 365 * 24 * time.Hour, // the lines are of t0
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, cp) }()
	testlab.Eventually(t, time.Minute, "every minute of the first 100 requests reported", func() bool { return len(cp.snapshot()) == len(tr.truth.minutes) })
	tr.write(50)
	testlab.Eventually(t, time.Minute, "all 150 requests reported", func() bool {
		var n int64
		for _, m := range cp.snapshot() {
			n += m.Count
		}
		return n == 150
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	tr.check(cp)
	if _, err := os.Stat(filepath.Join(dir, "state", stateName)); err != nil {
		t.Errorf("no state saved: %v", err)
	}
}

func TestStateOfAnotherLogIgnored(t *testing.T) {
	dir := t.TempDir()
	r := newReporter(dir, filepath.Join(dir, "a.log"))
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	r2 := newReporter(dir, filepath.Join(dir, "b.log"))
	r2.log = slog.New(slog.DiscardHandler)
	if r2.restore() {
		t.Error("state of a.log used for b.log")
	}
	if err := os.WriteFile(filepath.Join(dir, "state", stateName), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r2.restore() {
		t.Error("garbage state used")
	}
}
