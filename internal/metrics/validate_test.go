package metrics

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

var now = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)

func goodSample(at time.Time) agentproto.MetricSample {
	return agentproto.MetricSample{
		At: at, CPUPercent: 12.5, Load1: 0.5, Load5: 0.4, Load15: 0.3,
		MemoryTotal: 8 << 30, MemoryUsed: 2 << 30, MemoryAvailable: 6 << 30,
		SwapTotal: 1 << 30, SwapUsed: 256 << 20,
		Filesystems: []agentproto.FilesystemSample{
			{Mount: "/", Device: "/dev/sda1", FSType: "ext4", BytesTotal: 100, BytesUsed: 40, InodesTotal: 1000, InodesUsed: 10},
			{Mount: "/data", Device: "/dev/sdb1", FSType: "xfs", BytesTotal: 200, BytesUsed: 150, InodesTotal: 1000, InodesUsed: 900},
		},
		NetRxBytesPerS: 1000, NetTxBytesPerS: 2000, UptimeSeconds: 3600,
	}
}

// fields returns the field names of an Invalid error, failing otherwise.
func fields(t *testing.T, err error) []string {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Invalid {
		t.Fatalf("got %v, want an Invalid fault", err)
	}
	var out []string
	for _, f := range fe.Fields {
		if f.Field == "" || f.Message == "" {
			t.Fatalf("field error without field or message: %+v", f)
		}
		out = append(out, f.Field)
	}
	return out
}

func TestValidateSamplesDerives(t *testing.T) {
	got, err := ValidateSamples(agentproto.MetricsRequest{Samples: []agentproto.MetricSample{goodSample(now.Add(-time.Hour))}}, now)
	if err != nil {
		t.Fatal(err)
	}
	s := got[0]
	if s.MemoryUsedPercent == nil || *s.MemoryUsedPercent != 25 {
		t.Fatalf("memory used%%: got %v, want 25", s.MemoryUsedPercent)
	}
	if s.SwapUsedPercent == nil || *s.SwapUsedPercent != 25 {
		t.Fatalf("swap used%%: got %v, want 25", s.SwapUsedPercent)
	}
	if s.DiskUsedPercent == nil || *s.DiskUsedPercent != 75 {
		t.Fatalf("disk used%% (the fullest filesystem): got %v, want 75", s.DiskUsedPercent)
	}

	m := goodSample(now)
	m.SwapTotal, m.SwapUsed, m.Filesystems = 0, 0, nil
	got, err = ValidateSamples(agentproto.MetricsRequest{Samples: []agentproto.MetricSample{m}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].SwapUsedPercent != nil || got[0].DiskUsedPercent != nil {
		t.Fatalf("without swap and filesystems: got swap %v, disk %v, want nil", got[0].SwapUsedPercent, got[0].DiskUsedPercent)
	}
}

func TestValidateSamplesAcceptsBufferedBatch(t *testing.T) {
	var req agentproto.MetricsRequest
	for _, age := range []time.Duration{7*24*time.Hour - time.Minute, 30 * time.Minute, time.Hour, 0, -4 * time.Minute} {
		req.Samples = append(req.Samples, goodSample(now.Add(-age)))
	}
	if _, err := ValidateSamples(req, now); err != nil {
		t.Fatalf("buffered batch: %v", err)
	}
}

func TestValidateSamplesAcceptsOddFilesystems(t *testing.T) {
	// Stacked mounts and mount points with control characters exist;
	// refusing them would lose whole reports.
	m := goodSample(now)
	m.Filesystems[1].Mount = "/"
	m.Filesystems = append(m.Filesystems, agentproto.FilesystemSample{Mount: "/mnt/a\tb\nc", Device: "host:/export", FSType: "fuse.sshfs"})
	got, err := ValidateSamples(agentproto.MetricsRequest{Samples: []agentproto.MetricSample{m}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if d := got[0].DiskUsedPercent; d == nil || *d != 75 {
		t.Fatalf("disk used%%: %v, want 75 (a filesystem without a size counts for nothing)", d)
	}
}

func TestValidateSamplesRefusesBadValues(t *testing.T) {
	big := uint64(math.MaxInt64) + 1
	cases := []struct {
		name  string
		edit  func(m *agentproto.MetricSample)
		field string
	}{
		{"no time", func(m *agentproto.MetricSample) { m.At = time.Time{} }, "samples[1].at"},
		{"too old", func(m *agentproto.MetricSample) { m.At = now.Add(-7*24*time.Hour - time.Second) }, "samples[1].at"},
		{"future", func(m *agentproto.MetricSample) { m.At = now.Add(5*time.Minute + time.Second) }, "samples[1].at"},
		{"cpu over 100", func(m *agentproto.MetricSample) { m.CPUPercent = 150 }, "samples[1].cpu_percent"},
		{"cpu negative", func(m *agentproto.MetricSample) { m.CPUPercent = -1 }, "samples[1].cpu_percent"},
		{"cpu NaN", func(m *agentproto.MetricSample) { m.CPUPercent = math.NaN() }, "samples[1].cpu_percent"},
		{"cpu Inf", func(m *agentproto.MetricSample) { m.CPUPercent = math.Inf(1) }, "samples[1].cpu_percent"},
		{"load1 negative", func(m *agentproto.MetricSample) { m.Load1 = -0.1 }, "samples[1].load1"},
		{"load5 NaN", func(m *agentproto.MetricSample) { m.Load5 = math.NaN() }, "samples[1].load5"},
		{"load15 -Inf", func(m *agentproto.MetricSample) { m.Load15 = math.Inf(-1) }, "samples[1].load15"},
		{"rx negative", func(m *agentproto.MetricSample) { m.NetRxBytesPerS = -5 }, "samples[1].net_rx_bytes_per_s"},
		{"tx Inf", func(m *agentproto.MetricSample) { m.NetTxBytesPerS = math.Inf(1) }, "samples[1].net_tx_bytes_per_s"},
		{"memory used over total", func(m *agentproto.MetricSample) { m.MemoryUsed = m.MemoryTotal + 1 }, "samples[1].memory_used"},
		{"memory available over total", func(m *agentproto.MetricSample) { m.MemoryAvailable = m.MemoryTotal + 1 }, "samples[1].memory_available"},
		{"memory total too large", func(m *agentproto.MetricSample) { m.MemoryTotal = big }, "samples[1].memory_total"},
		{"swap used over total", func(m *agentproto.MetricSample) { m.SwapUsed = m.SwapTotal + 1 }, "samples[1].swap_used"},
		{"uptime too large", func(m *agentproto.MetricSample) { m.UptimeSeconds = big }, "samples[1].uptime_seconds"},
		{"fs bytes used over total", func(m *agentproto.MetricSample) { m.Filesystems[1].BytesUsed = 201 }, "samples[1].filesystems[1].bytes_used"},
		{"fs inodes used over total", func(m *agentproto.MetricSample) { m.Filesystems[0].InodesUsed = 1001 }, "samples[1].filesystems[0].inodes_used"},
		{"fs bytes total too large", func(m *agentproto.MetricSample) { m.Filesystems[0].BytesTotal = big }, "samples[1].filesystems[0].bytes_total"},
		{"fs no mount", func(m *agentproto.MetricSample) { m.Filesystems[0].Mount = "" }, "samples[1].filesystems[0].mount"},
		{"fs long mount", func(m *agentproto.MetricSample) { m.Filesystems[0].Mount = "/" + strings.Repeat("a", 4096) }, "samples[1].filesystems[0].mount"},
		{"fs long device", func(m *agentproto.MetricSample) { m.Filesystems[0].Device = strings.Repeat("d", 4097) }, "samples[1].filesystems[0].device"},
		{"fs long fstype", func(m *agentproto.MetricSample) { m.Filesystems[0].FSType = strings.Repeat("x", 256) }, "samples[1].filesystems[0].fstype"},
		{"fs not UTF-8", func(m *agentproto.MetricSample) { m.Filesystems[0].Mount = "/\xff" }, "samples[1].filesystems[0].mount"},
		{"too many filesystems", func(m *agentproto.MetricSample) {
			m.Filesystems = make([]agentproto.FilesystemSample, agentproto.MaxFilesystemsSample+1)
		}, "samples[1].filesystems"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := goodSample(now.Add(-time.Minute))
			c.edit(&bad)
			req := agentproto.MetricsRequest{Samples: []agentproto.MetricSample{goodSample(now.Add(-2 * time.Minute)), bad, goodSample(now)}}
			got, err := ValidateSamples(req, now)
			if got != nil {
				t.Fatalf("got samples %v with an invalid report", got)
			}
			if f := fields(t, err); !slices.Equal(f, []string{c.field}) {
				t.Fatalf("fields: got %v, want [%s]", f, c.field)
			}
		})
	}
}

func TestValidateSamplesBatchSize(t *testing.T) {
	if f := fields(t, func() error { _, err := ValidateSamples(agentproto.MetricsRequest{}, now); return err }()); !slices.Equal(f, []string{"samples"}) {
		t.Fatalf("empty report: fields %v", f)
	}
	req := agentproto.MetricsRequest{Samples: make([]agentproto.MetricSample, agentproto.MaxMetricSamples+1)}
	if _, err := ValidateSamples(req, now); !slices.Equal(fields(t, err), []string{"samples"}) {
		t.Fatalf("too many samples: %v", err)
	}
	req.Samples = req.Samples[:agentproto.MaxMetricSamples]
	for i := range req.Samples {
		req.Samples[i] = goodSample(now.Add(-time.Duration(i) * 5 * time.Second))
	}
	if _, err := ValidateSamples(req, now); err != nil {
		t.Fatalf("a full report: %v", err)
	}
	// Many bad samples make a bounded problem.
	for i := range req.Samples {
		req.Samples[i].CPUPercent = 101
	}
	if n := len(fields(t, func() error { _, err := ValidateSamples(req, now); return err }())); n != maxFieldErrors {
		t.Fatalf("field errors: got %d, want %d", n, maxFieldErrors)
	}
}

func goodInventory() agentproto.InventoryRequest {
	return agentproto.InventoryRequest{
		CollectedAt: now.Add(-time.Minute),
		Services:    []agentproto.ServiceInfo{{Name: "nginx.service", Description: "web", LoadState: "loaded", ActiveState: "active", SubState: "running", Enabled: "enabled"}},
		Containers: []agentproto.ContainerInfo{{ID: "abc123", Name: "db", Image: "postgres:17", State: "running", Status: "Up 3 hours",
			Ports:  []agentproto.ContainerPort{{IP: "0.0.0.0", HostPort: 5432, ContainerPort: 5432, Protocol: "tcp"}},
			Labels: map[string]string{"app": "db"}}},
		Ports:    []agentproto.ListeningPort{{Protocol: "tcp", Address: "0.0.0.0", Port: 22, Process: "sshd", PID: 1}},
		Volumes:  []agentproto.VolumeInfo{{Name: "pgdata", Driver: "local", SizeBytes: -1, Containers: 1}},
		Networks: []agentproto.NetworkInfo{{ID: "n1", Name: "bridge", Driver: "bridge", Scope: "local", Containers: -1}},
	}
}

func TestValidateInventory(t *testing.T) {
	if err := ValidateInventory(goodInventory(), now); err != nil {
		t.Fatal(err)
	}
	unread := agentproto.InventoryRequest{CollectedAt: now}
	if err := ValidateInventory(unread, now); err != nil {
		t.Fatalf("nil lists (not readable): %v", err)
	}
	cases := []struct {
		name  string
		edit  func(r *agentproto.InventoryRequest)
		field string
	}{
		{"no time", func(r *agentproto.InventoryRequest) { r.CollectedAt = time.Time{} }, "collected_at"},
		{"future", func(r *agentproto.InventoryRequest) { r.CollectedAt = now.Add(time.Hour) }, "collected_at"},
		{"too many services", func(r *agentproto.InventoryRequest) { r.Services = make([]agentproto.ServiceInfo, MaxServices+1) }, "services"},
		{"too many containers", func(r *agentproto.InventoryRequest) { r.Containers = make([]agentproto.ContainerInfo, MaxContainers+1) }, "containers"},
		{"too many ports", func(r *agentproto.InventoryRequest) { r.Ports = make([]agentproto.ListeningPort, MaxPorts+1) }, "ports"},
		{"service without name", func(r *agentproto.InventoryRequest) { r.Services[0].Name = "" }, "services[0].name"},
		{"long description", func(r *agentproto.InventoryRequest) { r.Services[0].Description = strings.Repeat("x", 1025) }, "services[0].description"},
		{"container without id", func(r *agentproto.InventoryRequest) { r.Containers[0].ID = "" }, "containers[0].id"},
		{"long image", func(r *agentproto.InventoryRequest) { r.Containers[0].Image = strings.Repeat("i", 1025) }, "containers[0].image"},
		{"negative restarts", func(r *agentproto.InventoryRequest) { r.Containers[0].RestartCount = -1 }, "containers[0].restart_count"},
		{"host port too large", func(r *agentproto.InventoryRequest) { r.Containers[0].Ports[0].HostPort = 65536 }, "containers[0].ports[0].host_port"},
		{"container port negative", func(r *agentproto.InventoryRequest) { r.Containers[0].Ports[0].ContainerPort = -1 }, "containers[0].ports[0].container_port"},
		{"long label", func(r *agentproto.InventoryRequest) { r.Containers[0].Labels["app"] = strings.Repeat("l", 16385) }, "containers[0].labels.app"},
		{"port too large", func(r *agentproto.InventoryRequest) { r.Ports[0].Port = 70000 }, "ports[0].port"},
		{"port without protocol", func(r *agentproto.InventoryRequest) { r.Ports[0].Protocol = "" }, "ports[0].protocol"},
		{"negative pid", func(r *agentproto.InventoryRequest) { r.Ports[0].PID = -2 }, "ports[0].pid"},
		{"long process", func(r *agentproto.InventoryRequest) { r.Ports[0].Process = strings.Repeat("p", 513) }, "ports[0].process"},
		{"volume size below unknown", func(r *agentproto.InventoryRequest) { r.Volumes[0].SizeBytes = -2 }, "volumes[0].size_bytes"},
		{"volume without name", func(r *agentproto.InventoryRequest) { r.Volumes[0].Name = "" }, "volumes[0].name"},
		{"too many networks", func(r *agentproto.InventoryRequest) { r.Networks = make([]agentproto.NetworkInfo, MaxNetworks+1) }, "networks"},
		{"network containers below unknown", func(r *agentproto.InventoryRequest) { r.Networks[0].Containers = -2 }, "networks[0].containers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := goodInventory()
			c.edit(&r)
			f := fields(t, ValidateInventory(r, now))
			if !slices.Contains(f, c.field) {
				t.Fatalf("fields: got %v, want %s among them", f, c.field)
			}
		})
	}
}

func TestValidateContainerSamples(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	good := agentproto.ContainerSample{ID: "c1", Name: "web", CPUPercent: 5, MemoryUsed: 10, MemoryLimit: 100}
	req := agentproto.MetricsRequest{Samples: []agentproto.MetricSample{{At: now, Containers: []agentproto.ContainerSample{good}}}}
	if _, err := ValidateSamples(req, now); err != nil {
		t.Fatalf("a good sample: %v", err)
	}
	bad := good
	bad.ID, bad.CPUPercent, bad.NetRxBytesPerS = "", 101, -1
	req.Samples[0].Containers = []agentproto.ContainerSample{good, bad}
	_, err := ValidateSamples(req, now)
	got := fields(t, err)
	for _, f := range []string{"samples[0].containers[1].id", "samples[0].containers[1].cpu_percent", "samples[0].containers[1].net_rx_bytes_per_s"} {
		if !slices.Contains(got, f) {
			t.Errorf("fields %v do not name %s", got, f)
		}
	}
}
