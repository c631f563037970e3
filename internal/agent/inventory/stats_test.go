package inventory

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// fakeStats is a statsAPI that answers the stats it is set to.
type fakeStats struct {
	host  string
	items []container.Summary
	body  map[string]string // by id: the engine's JSON
}

func (f *fakeStats) ContainerList(_ context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	return client.ContainerListResult{Items: f.items}, nil
}

func (f *fakeStats) ContainerStats(_ context.Context, id string, o client.ContainerStatsOptions) (client.ContainerStatsResult, error) {
	if o.Stream || o.IncludePreviousSample {
		panic("want one-shot stats")
	}
	return client.ContainerStatsResult{Body: io.NopCloser(strings.NewReader(f.body[id]))}, nil
}

func (f *fakeStats) DaemonHost() string { return f.host }
func (f *fakeStats) Close() error       { return nil }

func TestContainerStatsRates(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	writeFile(t, sock, "")
	fake := &fakeStats{host: "unix://" + sock, items: []container.Summary{{ID: "c1", Names: []string{"/web"}}}}
	s := NewContainerStats()
	s.newClient = func() (statsAPI, error) { return fake, nil }
	fake.body = map[string]string{"c1": `{"read":"2030-01-01T00:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":1000},"system_cpu_usage":100000},
		"memory_stats":{"usage":5000,"limit":100000,"stats":{"inactive_file":1000}},"networks":{"eth0":{"rx_bytes":100,"tx_bytes":10}}}`}
	got, err := s.Sample(context.Background())
	want := agentproto.ContainerSample{ID: "c1", Name: "web", MemoryUsed: 4000, MemoryLimit: 100000}
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("first sample = %+v, %v; want %+v (no rates yet)", got, err, want)
	}
	// 2 s later: 25,000 of the host's 100,000 ns were the container's;
	// 2,000 bytes in, 400 out.
	fake.body["c1"] = `{"read":"2030-01-01T00:00:02Z","cpu_stats":{"cpu_usage":{"total_usage":26000},"system_cpu_usage":200000},
		"memory_stats":{"usage":6000,"limit":100000,"stats":{"total_inactive_file":500}},"networks":{"eth0":{"rx_bytes":1100,"tx_bytes":210},"eth1":{"rx_bytes":1000,"tx_bytes":200}}}`
	got, err = s.Sample(context.Background())
	want = agentproto.ContainerSample{ID: "c1", Name: "web", CPUPercent: 25, MemoryUsed: 5500, MemoryLimit: 100000, NetRxBytesPerS: 1000, NetTxBytesPerS: 200}
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("second sample = %+v, %v; want %+v", got, err, want)
	}
	// A gone container is forgotten.
	fake.items = nil
	if got, err = s.Sample(context.Background()); err != nil || got == nil || len(got) != 0 || len(s.prev) != 0 {
		t.Fatalf("without containers: %+v, %v, remembered %d", got, err, len(s.prev))
	}
	// No engine: nil.
	fake.host = "unix://" + filepath.Join(t.TempDir(), "none.sock")
	if got, err = s.Sample(context.Background()); err != nil || got != nil {
		t.Fatalf("without an engine: %+v, %v", got, err)
	}
}

// TestContainerStatsOnThisHost samples a real container: its memory is
// known, and its CPU share is within 0 to 100.
func TestContainerStatsOnThisHost(t *testing.T) {
	cli := testlab.Docker(t)
	if h := testlab.DockerHost(); h != "" {
		t.Setenv("DOCKER_HOST", h)
	}
	image := testlab.ProgramImage(t, cli, testlab.UniqueName("capstan-inventory-test:"), "./testdata/sleeper").Ref
	name := testlab.CreateContainer(t, cli, client.ContainerCreateOptions{Config: &container.Config{Image: image}})
	testlab.StartContainer(t, cli, name)
	s := NewContainerStats()
	defer s.Close()
	var c agentproto.ContainerSample
	sample := func() {
		t.Helper()
		got, err := s.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		j := slices.IndexFunc(got, func(c agentproto.ContainerSample) bool { return c.Name == name })
		if j < 0 {
			t.Fatalf("container %s not sampled: %+v", name, got)
		}
		c = got[j]
	}
	sample()
	first := s.prev[c.ID].read
	// A rate needs a second sample from a later read of the engine's
	// counters: sample until the engine's read time has moved on.
	testlab.Eventually(t, 30*time.Second, "a later read of the container's counters", func() bool {
		sample()
		return s.prev[c.ID].read.After(first)
	})
	if len(c.ID) != 64 || c.MemoryUsed == 0 || c.MemoryLimit < c.MemoryUsed || c.CPUPercent < 0 || c.CPUPercent > 100 {
		t.Errorf("sample = %+v", c)
	}
	t.Logf("sample: %+v", c)
}
