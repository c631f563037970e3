package inventory

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func inventory() agentproto.InventoryRequest {
	return agentproto.InventoryRequest{
		CollectedAt: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Services: []agentproto.ServiceInfo{
			{Name: "cron.service", LoadState: "loaded", ActiveState: "active", SubState: "running", Enabled: "enabled"},
			{Name: "ssh.service", LoadState: "loaded", ActiveState: "active", SubState: "running", Enabled: "enabled"},
		},
		Containers: []agentproto.ContainerInfo{
			{ID: "aaa", Name: "web", State: "running", Status: "Up 5 minutes (healthy)", Labels: map[string]string{"a": "1", "b": "2"}},
		},
		Ports: []agentproto.ListeningPort{{Protocol: "tcp", Address: "0.0.0.0", Port: 22, Process: "sshd", PID: 123}},
	}
}

func TestHashIgnoresTimeAndOrder(t *testing.T) {
	base := Hash(inventory())
	later := inventory()
	later.CollectedAt = later.CollectedAt.Add(time.Hour)
	later.Containers[0].Status = "Up 2 hours (healthy)"
	later.Containers[0].Labels = map[string]string{"b": "2", "a": "1"}
	later.Services[0], later.Services[1] = later.Services[1], later.Services[0]
	if Hash(later) != base {
		t.Error("hash changed with the collection time, status age or list order")
	}
}

func TestHashSeesChanges(t *testing.T) {
	base := Hash(inventory())
	for name, change := range map[string]func(*agentproto.InventoryRequest){
		"service stopped":  func(i *agentproto.InventoryRequest) { i.Services[1].ActiveState = "inactive" },
		"service disabled": func(i *agentproto.InventoryRequest) { i.Services[0].Enabled = "disabled" },
		"health":           func(i *agentproto.InventoryRequest) { i.Containers[0].Status = "Up 5 minutes (unhealthy)" },
		"restart":          func(i *agentproto.InventoryRequest) { i.Containers[0].RestartCount = 1 },
		"exit code":        func(i *agentproto.InventoryRequest) { i.Containers[0].Status = "Exited (1) 1 second ago" },
		"new port": func(i *agentproto.InventoryRequest) {
			i.Ports = append(i.Ports, agentproto.ListeningPort{Protocol: "tcp", Port: 80})
		},
		"process":           func(i *agentproto.InventoryRequest) { i.Ports[0].PID = 124 },
		"containers nil":    func(i *agentproto.InventoryRequest) { i.Containers = nil },
		"containers empty":  func(i *agentproto.InventoryRequest) { i.Containers = []agentproto.ContainerInfo{} },
		"label":             func(i *agentproto.InventoryRequest) { i.Containers[0].Labels["c"] = "3" },
		"services unknown":  func(i *agentproto.InventoryRequest) { i.Services = nil },
		"container renamed": func(i *agentproto.InventoryRequest) { i.Containers[0].Name = "www" },
	} {
		inv := inventory()
		change(&inv)
		if Hash(inv) == base {
			t.Errorf("%s: hash unchanged", name)
		}
	}
	empty, none := agentproto.InventoryRequest{Ports: []agentproto.ListeningPort{}}, agentproto.InventoryRequest{}
	if Hash(empty) == Hash(none) {
		t.Error("an empty list and an unknown (nil) one hash the same")
	}
}

func TestHashDoesNotModifyItsArgument(t *testing.T) {
	inv := inventory()
	inv.Services[0], inv.Services[1] = inv.Services[1], inv.Services[0]
	Hash(inv)
	if inv.Services[0].Name != "ssh.service" || inv.Containers[0].Status != "Up 5 minutes (healthy)" {
		t.Fatalf("Hash modified the inventory: %+v", inv)
	}
}

func TestStatusKey(t *testing.T) {
	for in, want := range map[string]string{
		"Up 3 minutes":                       "",
		"Up 3 minutes (healthy)":             "(healthy)",
		"Up 5 seconds (health: starting)":    "(health: starting)",
		"Exited (137) 2 hours ago":           "(137)",
		"Restarting (1) 4 seconds ago":       "(1)",
		"Up 2 days (Paused)":                 "(Paused)",
		"Created":                            "",
		"weird (unclosed":                    "",
		"Up About an hour (unhealthy) (odd)": "(unhealthy)(odd)",
	} {
		if got := statusKey(in); got != want {
			t.Errorf("statusKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCollectorPartsFailIndependently(t *testing.T) {
	root := procRoot(t, map[int]proc{123: {"sshd", []string{"socket:[1001]"}}})
	c := New(root)
	defer c.Close()
	// systemd is not init under root; Docker's socket does not exist.
	c.containers.newClient = func() (dockerAPI, error) {
		return &fakeDocker{host: "unix://" + filepath.Join(root, "docker.sock")}, nil
	}
	before := time.Now()
	inv, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Services != nil || inv.Containers != nil || inv.Images != nil {
		t.Errorf("services %v, containers %v, images %v: want nil (not on this host)", inv.Services, inv.Containers, inv.Images)
	}
	if got, want := len(inv.Ports), 9; got != want {
		t.Fatalf("%d ports, want %d", got, want)
	}
	if inv.CollectedAt.Before(before.UTC().Add(-time.Second)) || inv.CollectedAt.Location() != time.UTC {
		t.Errorf("collected_at = %v", inv.CollectedAt)
	}

	// Without /proc/net, ports are unknown and the error says so; the
	// other parts are unaffected.
	c2 := New(t.TempDir())
	defer c2.Close()
	c2.containers.newClient = c.containers.newClient
	inv, err = c2.Collect(context.Background())
	if err == nil || inv.Ports != nil {
		t.Fatalf("without /proc/net: ports %v, err %v; want nil and an error", inv.Ports, err)
	}
}

// TestCollectThisHost is the smoke test of the whole collector here.
func TestCollectThisHost(t *testing.T) {
	c := New("/")
	defer c.Close()
	inv, err := c.Collect(context.Background())
	if err != nil {
		t.Logf("partial inventory: %v", err)
	}
	if inv.Ports == nil {
		t.Error("ports unknown on this host")
	}
	if (inv.Containers == nil) != (inv.Images == nil) {
		t.Errorf("containers known %v, images known %v: both come from the same engine", inv.Containers != nil, inv.Images != nil)
	}
	t.Logf("%d services (known %v), %d containers (known %v), %d ports",
		len(inv.Services), inv.Services != nil, len(inv.Containers), inv.Containers != nil, len(inv.Ports))
}
