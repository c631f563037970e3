package health

// Tests against a real Docker engine and real HTTP servers on loopback.

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// startWeb starts a container of the deploy tests' web program labelled
// as application app's live container, with labels (and so without the
// health path label unless given), its port 8080 published on a loopback
// port; it returns the address.
func startWeb(t *testing.T, cli *client.Client, img string, labels map[string]string) string {
	t.Helper()
	port, _ := network.PortFrom(8080, network.TCP)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().(*net.TCPAddr).Port
	l.Close()
	name := testlab.CreateContainer(t, cli, client.ContainerCreateOptions{
		Config: &container.Config{Image: img, Labels: labels, ExposedPorts: network.PortSet{port: {}}},
		HostConfig: &container.HostConfig{PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"),
			HostPort: strconv.Itoa(host)}}}},
	})
	testlab.StartContainer(t, cli, name)
	addr := "127.0.0.1:" + strconv.Itoa(host)
	testlab.Eventually(t, time.Minute, "the container answers", func() bool {
		r, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	return addr
}

func byApp(probes []agentproto.AppProbe) map[string]agentproto.AppProbe {
	out := map[string]agentproto.AppProbe{}
	for _, p := range probes {
		out[p.AppID] = p
	}
	return out
}

// The control plane's targets cover what labels do not: a container made
// before the health path label existed, a compose application's web
// service, a service application's live slot.
func TestProbeTargetsOfEveryKind(t *testing.T) {
	cli := testlab.Docker(t)
	run := testlab.UniqueName("")
	img := testlab.ProgramImage(t, cli, "127.0.0.1:1/capstan-test/health:"+run, "../deploy/testdata/web",
		"LABEL dev.capstan.test.run="+run)
	old := "app_old" + run
	oldAddr := startWeb(t, cli, img.ID, map[string]string{agentproto.LabelApp: old, agentproto.LabelDeployment: "dep_old",
		agentproto.LabelPort: "8080"})
	web := "app_web" + run
	startWeb(t, cli, img.ID, map[string]string{agentproto.LabelApp: web, agentproto.LabelDeployment: "dep_web",
		agentproto.LabelPort: "8080", agentproto.LabelService: "web"})

	var slotStatus atomic.Int32
	slotStatus.Store(http.StatusOK)
	slot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(slotStatus.Load()))
	}))
	t.Cleanup(slot.Close)
	svc := "app_svc" + run

	p := New(cli)
	p.ServiceSlots(func(context.Context) (map[string]string, error) {
		return map[string]string{svc: strings.TrimPrefix(slot.URL, "http://")}, nil
	})
	ctx := context.Background()

	// Until the control plane names them, only labelled containers are
	// probed: none of these.
	probes, err := p.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{old, web, svc} {
		if _, ok := byApp(probes)[app]; ok {
			t.Fatalf("%s probed before the control plane named it: %+v", app, probes)
		}
	}

	gone := "app_gone" + run
	p.SetTargets([]agentproto.HealthTarget{
		{AppID: old, Kind: agentproto.AppKindContainer, DeploymentID: "dep_old", HealthPath: "/health", ContainerPort: 8080},
		{AppID: web, Kind: agentproto.AppKindCompose, DeploymentID: "dep_web", HealthPath: "/health", ContainerPort: 8080},
		{AppID: svc, Kind: agentproto.AppKindService, DeploymentID: "dep_svc", HealthPath: "/healthz"},
		{AppID: gone, Kind: agentproto.AppKindContainer, DeploymentID: "dep_gone", HealthPath: "/"},
	})
	probes, err = p.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := byApp(probes)
	for _, c := range []struct{ app, deployment string }{{old, "dep_old"}, {web, "dep_web"}, {svc, "dep_svc"}} {
		if r := got[c.app]; !r.Healthy || r.StatusCode != http.StatusOK || r.DeploymentID != c.deployment || r.Error != "" || r.At.IsZero() {
			t.Errorf("probe of %s: %+v; want healthy, deployment %s", c.app, r, c.deployment)
		}
	}
	if r := got[gone]; r.Healthy || r.Error != "no container of the application on this server" {
		t.Errorf("probe of an application without a container: %+v", r)
	}

	// The old container and the slot start failing.
	resp, err := http.Post("http://"+oldAddr+"/fail", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	slotStatus.Store(http.StatusServiceUnavailable)
	probes, err = p.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got = byApp(probes)
	if r := got[old]; r.Healthy || r.StatusCode != http.StatusInternalServerError || r.Error != "GET /health answered HTTP 500" {
		t.Errorf("probe of the failing container: %+v", r)
	}
	if r := got[svc]; r.Healthy || r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("probe of the failing slot: %+v", r)
	}
	if r := got[web]; !r.Healthy {
		t.Errorf("probe of the healthy web service: %+v", r)
	}

	// A slot the agent no longer has.
	p.ServiceSlots(func(context.Context) (map[string]string, error) { return map[string]string{}, nil })
	probes, _ = p.Probe(ctx)
	if r := byApp(probes)[svc]; r.Healthy || r.Error != "no live slot on this server" {
		t.Errorf("probe of a service application without a live slot: %+v", r)
	}
}

// Without a Docker engine, service applications are probed still.
func TestProbeServiceSlotsWithoutDocker(t *testing.T) {
	slot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(slot.Close)
	p := New(nil)
	p.ServiceSlots(func(context.Context) (map[string]string, error) {
		return map[string]string{"app_svc": strings.TrimPrefix(slot.URL, "http://")}, nil
	})
	p.SetTargets([]agentproto.HealthTarget{{AppID: "app_svc", Kind: agentproto.AppKindService, HealthPath: "/"}})
	probes, err := p.Probe(context.Background())
	if err != nil || len(probes) != 1 || !probes[0].Healthy || probes[0].StatusCode != http.StatusNoContent {
		t.Fatalf("probes %+v, %v; want the slot healthy", probes, err)
	}
}
