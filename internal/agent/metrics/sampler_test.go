package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// fixtureRoot builds a host root with the testdata /proc files.
func fixtureRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for dst, src := range map[string]string{
		"proc/stat": "stat.1", "proc/meminfo": "meminfo", "proc/loadavg": "loadavg",
		"proc/uptime": "uptime", "proc/self/mounts": "mounts", "proc/net/dev": "netdev.1",
	} {
		copyFixture(t, src, filepath.Join(root, dst))
	}
	return root
}

func copyFixture(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", src))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSamplerFromFixtures(t *testing.T) {
	root := fixtureRoot(t)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s := NewSampler(root, t0)
	var statted []string
	s.statfs = func(path string) (fsUsage, error) {
		p := strings.TrimPrefix(path, root)
		if p == "" {
			p = "/"
		}
		statted = append(statted, p)
		return fsUsage{bytesTotal: 100 << 30, bytesUsed: 40 << 30, inodesTotal: 1000, inodesUsed: 10}, nil
	}
	copyFixture(t, "stat.2", filepath.Join(root, "proc/stat"))
	copyFixture(t, "netdev.2", filepath.Join(root, "proc/net/dev"))

	m, err := s.Sample(t0.Add(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.At, t0.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("at = %v, want %v", got, want)
	}
	if got, want := m.CPUPercent, 50.0; got != want {
		t.Errorf("cpu = %v, want %v", got, want)
	}
	if got, want := m.Load5, 0.58; got != want {
		t.Errorf("load5 = %v, want %v", got, want)
	}
	if got, want := m.MemoryUsed, uint64(2000000*1024); got != want {
		t.Errorf("memory used = %d, want %d", got, want)
	}
	if got, want := m.MemoryTotal-m.MemoryAvailable, m.MemoryUsed; got != want {
		t.Errorf("total − available = %d, want used %d", got, want)
	}
	if got, want := m.SwapUsed, uint64(500000*1024); got != want {
		t.Errorf("swap used = %d, want %d", got, want)
	}
	if got, want := m.NetRxBytesPerS, 1000500.0; got != want {
		t.Errorf("rx = %v, want %v", got, want)
	}
	if got, want := m.NetTxBytesPerS, 200300.0; got != want {
		t.Errorf("tx = %v, want %v", got, want)
	}
	if got, want := m.UptimeSeconds, uint64(350735); got != want {
		t.Errorf("uptime = %d, want %d", got, want)
	}
	if got, want := strings.Join(statted, ","), "/,/boot/efi,/home,/media/usb,/srv/my data,/tank/data"; got != want {
		t.Errorf("statfs of %s, want %s", got, want)
	}
	if got, want := len(m.Filesystems), 6; got != want {
		t.Fatalf("%d filesystems, want %d", got, want)
	}
	if got, want := m.Filesystems[0], (agentproto.FilesystemSample{Mount: "/", Device: "/dev/sda1", FSType: "ext4",
		BytesTotal: 100 << 30, BytesUsed: 40 << 30, InodesTotal: 1000, InodesUsed: 10}); got != want {
		t.Errorf("filesystem 0 = %+v, want %+v", got, want)
	}
	if size, est := jsonSize(t, m), EstimatedSize(m); est < size {
		t.Errorf("EstimatedSize = %d, below the JSON size %d", est, size)
	}
}

func TestSamplerReportsWhatItCannotRead(t *testing.T) {
	root := fixtureRoot(t)
	s := NewSampler(root, time.Now())
	s.statfs = func(string) (fsUsage, error) { return fsUsage{bytesTotal: 1}, nil }
	if err := os.Remove(filepath.Join(root, "proc/meminfo")); err != nil {
		t.Fatal(err)
	}
	m, err := s.Sample(time.Now())
	if err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Fatalf("err = %v, want one naming meminfo", err)
	}
	if m.MemoryTotal != 0 || m.UptimeSeconds == 0 || len(m.Filesystems) == 0 {
		t.Errorf("sample %+v: want the rest read and memory zero", m)
	}
	if _, err := json.Marshal(m); err != nil {
		t.Errorf("sample does not encode: %v", err)
	}
}

func jsonSize(t *testing.T, m agentproto.MetricSample) int {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestSampleThisHost is the smoke test on the machine running the tests.
func TestSampleThisHost(t *testing.T) {
	start := time.Now()
	s := NewSampler("/", start)
	// Burn a little CPU so the interval has ticks to measure.
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = n * n
	}
	m, err := s.Sample(time.Now())
	if err != nil {
		t.Logf("partial sample: %v", err)
	}
	t.Logf("sample: %+v", m)
	if m.MemoryTotal == 0 || m.MemoryUsed == 0 || m.MemoryUsed > m.MemoryTotal {
		t.Errorf("memory used %d of %d: want 0 < used ≤ total", m.MemoryUsed, m.MemoryTotal)
	}
	if len(m.Filesystems) == 0 {
		t.Fatal("no filesystem")
	}
	for _, f := range m.Filesystems {
		if f.BytesTotal == 0 || f.BytesUsed > f.BytesTotal || !strings.HasPrefix(f.Mount, "/") {
			t.Errorf("implausible filesystem %+v", f)
		}
		if !realFilesystem(f.FSType) {
			t.Errorf("filesystem %s of type %s should have been filtered out", f.Mount, f.FSType)
		}
	}
	if m.UptimeSeconds == 0 {
		t.Error("uptime is 0")
	}
	if m.CPUPercent < 0 || m.CPUPercent > 100 {
		t.Errorf("cpu = %v, want 0 to 100", m.CPUPercent)
	}
	if m.Load1 < 0 || m.NetRxBytesPerS < 0 || m.NetTxBytesPerS < 0 {
		t.Errorf("negative load or rates: %+v", m)
	}
	if m.At.Location() != time.UTC || m.At.Before(start) {
		t.Errorf("at = %v, want UTC after %v", m.At, start)
	}
}
