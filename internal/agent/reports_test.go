package agent_test

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agent/inventory"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

var sampleBase = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// seqSampler makes sample i at sampleBase + i minutes, whatever the clock
// says, so that a sample's time shows it was not stamped on arrival.
type seqSampler struct {
	mu sync.Mutex
	n  int
}

func (s *seqSampler) Sample(time.Time) (agentproto.MetricSample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.n
	s.n++
	return agentproto.MetricSample{At: sampleBase.Add(time.Duration(i) * time.Minute), UptimeSeconds: uint64(i),
		Filesystems: []agentproto.FilesystemSample{{Mount: "/", Device: "/dev/vda1", FSType: "ext4", BytesTotal: 100, BytesUsed: uint64(i)}}}, nil
}

func (s *seqSampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// fakeInventory returns the inventory it is set to.
type fakeInventory struct {
	mu    sync.Mutex
	inv   agentproto.InventoryRequest
	calls int
}

func (f *fakeInventory) Collect(context.Context) (agentproto.InventoryRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	inv := f.inv
	inv.CollectedAt = time.Now().UTC()
	return inv, nil
}

func (f *fakeInventory) set(inv agentproto.InventoryRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inv = inv
}

func (f *fakeInventory) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// withReports makes an agent sample every metricsEvery with s and check
// the inventory of inv every 10 ms (sent again unchanged after refresh).
func withReports(s agent.MetricsSampler, inv agent.InventoryCollector, metricsEvery, refresh time.Duration) func(*agent.Options) {
	return func(o *agent.Options) {
		o.Sampler, o.Inventory = s, inv
		agent.SetReportIntervals(o, metricsEvery, 10*time.Millisecond, refresh)
	}
}

func sampleNumbers(samples []agentproto.MetricSample) []int {
	out := make([]int, len(samples))
	for i, s := range samples {
		out[i] = int(s.UptimeSeconds)
	}
	return out
}

func TestMetricsArriveWithTheirOwnTimes(t *testing.T) {
	cp := agenttest.New(t)
	s := &seqSampler{}
	start(t, cp, nil, withReports(s, &fakeInventory{}, 10*time.Millisecond, time.Hour))
	testlab.Eventually(t, waitLong, "five samples", func() bool { return len(cp.Samples()) >= 5 })
	for i, got := range cp.Samples() {
		if want := sampleBase.Add(time.Duration(i) * time.Minute); !got.At.Equal(want) {
			t.Fatalf("sample %d at %v, want %v (its own time, in order)", i, got.At, want)
		}
		if got.Filesystems[0].BytesUsed != uint64(i) {
			t.Fatalf("sample %d carries %+v", i, got.Filesystems)
		}
	}
}

func TestMetricsBacklogDeliveredInOrderAfterOutage(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetMetricsStatus(http.StatusServiceUnavailable)
	s := &seqSampler{}
	r := start(t, cp, nil, withReports(s, &fakeInventory{}, 5*time.Millisecond, time.Hour))
	testlab.Eventually(t, waitLong, "a backlog during the outage", func() bool {
		_, attempts := cp.MetricsPosts()
		return s.count() >= 40 && attempts >= 3
	})
	if got := len(cp.Samples()); got != 0 {
		t.Fatalf("%d samples stored during the outage, want 0", got)
	}
	backlog := s.count()
	cp.SetMetricsStatus(0)
	testlab.Eventually(t, waitLong, "the backlog", func() bool { return len(cp.Samples()) >= backlog+5 })
	got := sampleNumbers(cp.Samples())
	for i, n := range got {
		if n != i {
			t.Fatalf("sample %d is number %d: want every sample once, oldest first (got %v)", i, n, got)
		}
	}
	accepted, _ := cp.MetricsPosts()
	if accepted >= len(got) {
		t.Errorf("%d posts for %d samples: the backlog was not batched", accepted, len(got))
	}
	if !strings.Contains(r.log.String(), "metrics report recovered") {
		t.Errorf("log does not say the reports recovered:\n%s", r.log.String())
	}
}

func TestMetricsRefusedBatchIsDropped(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetMetricsStatus(http.StatusUnprocessableEntity)
	s := &seqSampler{}
	r := start(t, cp, nil, withReports(s, &fakeInventory{}, 5*time.Millisecond, time.Hour))
	testlab.Eventually(t, waitLong, "a refused batch", func() bool {
		return strings.Contains(r.log.String(), "control plane refused a metrics batch; dropping it")
	})
	cp.SetMetricsStatus(0)
	testlab.Eventually(t, waitLong, "samples after the refusal", func() bool { return len(cp.Samples()) >= 3 })
	got := sampleNumbers(cp.Samples())
	if got[0] == 0 {
		t.Fatalf("sample 0 was refused but delivered later: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("samples after the refusal not consecutive: %v", got)
		}
	}
}

func TestInventoryAtStartAndWhenItChanges(t *testing.T) {
	cp := agenttest.New(t)
	inv := &fakeInventory{inv: agentproto.InventoryRequest{
		Services: []agentproto.ServiceInfo{{Name: "ssh.service", LoadState: "loaded", ActiveState: "active", SubState: "running", Enabled: "enabled"}},
		Ports:    []agentproto.ListeningPort{{Protocol: "tcp", Address: "0.0.0.0", Port: 22, Process: "sshd", PID: 1}},
	}}
	start(t, cp, nil, withReports(&seqSampler{}, inv, time.Hour, time.Hour))
	testlab.Eventually(t, waitLong, "the first inventory", func() bool { return len(cp.Inventories()) == 1 })
	first := cp.Inventories()[0]
	if first.CollectedAt.IsZero() || len(first.Services) != 1 || first.Containers != nil || len(first.Ports) != 1 {
		t.Fatalf("first inventory = %+v", first)
	}
	// Unchanged: checked again and again, not sent.
	calls := inv.count()
	testlab.Eventually(t, waitLong, "more checks", func() bool { return inv.count() >= calls+5 })
	if got, want := len(cp.Inventories()), 1; got != want {
		t.Fatalf("%d inventories sent for an unchanged one, want %d", got, want)
	}
	// Changed: sent at the next check.
	changed := first
	changed.Containers = []agentproto.ContainerInfo{{ID: "abc", Name: "web", Image: "nginx", State: "running", Status: "Up 1 second"}}
	inv.set(changed)
	testlab.Eventually(t, waitLong, "the changed inventory", func() bool { return len(cp.Inventories()) == 2 })
	if got := cp.Inventories()[1]; len(got.Containers) != 1 || got.Containers[0].Name != "web" {
		t.Fatalf("second inventory = %+v, want the new container", got)
	}
}

func TestInventoryRefreshedWhenUnchanged(t *testing.T) {
	cp := agenttest.New(t)
	start(t, cp, nil, withReports(&seqSampler{}, &fakeInventory{}, time.Hour, 50*time.Millisecond))
	testlab.Eventually(t, waitLong, "the inventory sent again", func() bool { return len(cp.Inventories()) >= 3 })
}

func TestInventoryRetriedAfterOutageAndNotAfterRefusal(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetInventoryStatus(http.StatusServiceUnavailable)
	inv := &fakeInventory{}
	r := start(t, cp, nil, withReports(&seqSampler{}, inv, time.Hour, time.Hour))
	testlab.Eventually(t, waitLong, "a failed inventory", func() bool { return strings.Contains(r.log.String(), "inventory failed") })
	cp.SetInventoryStatus(0)
	testlab.Eventually(t, waitLong, "the inventory after the outage", func() bool { return len(cp.Inventories()) == 1 })

	// A refused inventory is not sent again until it changes.
	cp.SetInventoryStatus(http.StatusUnprocessableEntity)
	inv.set(agentproto.InventoryRequest{Ports: []agentproto.ListeningPort{}})
	testlab.Eventually(t, waitLong, "the refusal", func() bool {
		return strings.Contains(r.log.String(), "control plane refused the inventory")
	})
	cp.SetInventoryStatus(0)
	calls := inv.count()
	testlab.Eventually(t, waitLong, "more checks", func() bool { return inv.count() >= calls+5 })
	if got, want := len(cp.Inventories()), 1; got != want {
		t.Fatalf("%d inventories stored, want %d (the refused one is not resent unchanged)", got, want)
	}
}

// TestReportLoopsStopWithRun runs the real sampler and collector of this
// host and checks that nothing of them outlives Run.
func TestReportLoopsStopWithRun(t *testing.T) {
	cp := agenttest.New(t)
	r := start(t, cp, nil, func(o *agent.Options) {
		agent.SetReportIntervals(o, 20*time.Millisecond, 20*time.Millisecond, time.Hour)
	})
	testlab.Eventually(t, waitLong, "a sample and an inventory", func() bool {
		return len(cp.Samples()) > 0 && len(cp.Inventories()) > 0
	})
	s := cp.Samples()[0]
	if s.MemoryTotal == 0 || s.UptimeSeconds == 0 || len(s.Filesystems) == 0 {
		t.Errorf("real sample implausible: %+v", s)
	}
	if inv := cp.Inventories()[0]; inv.Ports == nil {
		t.Errorf("real inventory without ports: %+v", inv)
	}
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, 30*time.Second, "report goroutines to end", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for g := range strings.SplitSeq(stacks, "\n\n") {
			for _, pkg := range []string{"internal/agent/metrics.", "internal/agent/inventory.", "godbus/dbus", "moby/moby/client."} {
				if strings.Contains(g, pkg) {
					return false
				}
			}
		}
		return true
	})
}

func TestRevokedStopsReportLoops(t *testing.T) {
	cp := agenttest.New(t)
	s := &seqSampler{}
	r := start(t, cp, nil, withReports(s, &fakeInventory{}, 5*time.Millisecond, time.Hour))
	testlab.Eventually(t, waitLong, "samples", func() bool { return len(cp.Samples()) > 0 })
	cp.Revoke()
	if err := r.wait(t); err == nil {
		t.Fatal("Run = nil, want revoked")
	}
	n := s.count()
	noAgentGoroutines(t)
	if got := s.count(); got != n {
		t.Fatalf("sampler ran %d more times after Run returned", got-n)
	}
}

// countingCollector counts the collections of the collector it wraps.
type countingCollector struct {
	agent.InventoryCollector
	mu sync.Mutex
	n  int
}

func (c *countingCollector) Collect(ctx context.Context) (agentproto.InventoryRequest, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.InventoryCollector.Collect(ctx)
}

func (c *countingCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestInventoryOfThisHostKeepsItsParts checks, with the real collector,
// that a part readable once stays readable from one check to the next
// (connections to systemd and Docker are kept across collections).
func TestInventoryOfThisHostKeepsItsParts(t *testing.T) {
	cp := agenttest.New(t)
	host := inventory.New("/")
	defer host.Close()
	col := &countingCollector{InventoryCollector: host}
	r := start(t, cp, nil, withReports(&seqSampler{}, col, time.Hour, time.Hour))
	testlab.Eventually(t, waitLong, "ten checks", func() bool { return col.count() >= 10 })
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	invs := cp.Inventories()
	if len(invs) == 0 {
		t.Fatal("no inventory")
	}
	first := invs[0]
	for i, inv := range invs {
		if (inv.Services == nil) != (first.Services == nil) || (inv.Containers == nil) != (first.Containers == nil) || inv.Ports == nil {
			t.Errorf("inventory %d: services known %v, containers known %v, ports known %v; first: %v, %v",
				i, inv.Services != nil, inv.Containers != nil, inv.Ports != nil, first.Services != nil, first.Containers != nil)
		}
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil && first.Services == nil {
		t.Error("services unknown on a host where systemd is init")
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil && first.Containers == nil {
		t.Error("containers unknown on a host with a Docker socket")
	}
	t.Logf("%d inventories over %d checks; %d services, %d containers, %d ports",
		len(invs), col.count(), len(first.Services), len(first.Containers), len(first.Ports))
}

// watchingInventory is a fakeInventory that tells of changes when the
// test says so.
type watchingInventory struct {
	fakeInventory
	changes chan struct{}
	watched chan struct{} // closed once Watch runs
	ended   chan struct{} // closed when Watch returned
}

func newWatchingInventory() *watchingInventory {
	return &watchingInventory{changes: make(chan struct{}), watched: make(chan struct{}), ended: make(chan struct{})}
}

func (w *watchingInventory) Watch(ctx context.Context, changed func()) {
	defer close(w.ended)
	close(w.watched)
	for {
		select {
		case <-w.changes:
			changed()
		case <-ctx.Done():
			return
		}
	}
}

// TestInventorySentSoonAfterAWatchedChange: with checks an hour apart, a
// change the collector tells of is collected and sent within the
// debounce; a burst of changes makes one collection.
func TestInventorySentSoonAfterAWatchedChange(t *testing.T) {
	cp := agenttest.New(t)
	inv := newWatchingInventory()
	r := start(t, cp, nil, func(o *agent.Options) {
		o.Sampler, o.Inventory = &seqSampler{}, inv
		agent.SetReportIntervals(o, time.Hour, time.Hour, time.Hour)
		agent.SetInventoryDebounce(o, 100*time.Millisecond)
	})
	testlab.Eventually(t, waitLong, "the first inventory", func() bool { return len(cp.Inventories()) == 1 })
	<-inv.watched
	calls := inv.count()

	inv.set(agentproto.InventoryRequest{Containers: []agentproto.ContainerInfo{{ID: "abc", Name: "web", State: "running"}}})
	began := time.Now()
	for range 5 {
		inv.changes <- struct{}{}
	}
	testlab.Eventually(t, waitLong, "the changed inventory", func() bool { return len(cp.Inventories()) == 2 })
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the change was sent after %s", took)
	}
	if got := cp.Inventories()[1]; len(got.Containers) != 1 || got.Containers[0].Name != "web" {
		t.Fatalf("second inventory = %+v, want the new container", got)
	}
	if n := inv.count() - calls; n != 1 {
		t.Errorf("a burst of 5 changes made %d collections, want 1", n)
	}

	// A change that changes nothing is collected, not sent.
	inv.changes <- struct{}{}
	testlab.Eventually(t, waitLong, "the collection after the change", func() bool { return inv.count() == calls+2 })
	if got := len(cp.Inventories()); got != 2 {
		t.Errorf("%d inventories after an unchanged collection, want 2", got)
	}
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inv.ended:
	default:
		t.Error("Watch still runs after Run returned")
	}
}
