package proxy_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// fakeDocker answers ContainerList with its containers, checking the
// filters Apply must send.
type fakeDocker struct {
	t     *testing.T
	items []container.Summary
	err   error
	calls int
}

func (f *fakeDocker) ContainerList(_ context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	f.calls++
	if !o.Filters["label"][agentproto.LabelApp] || !o.Filters["status"]["running"] {
		f.t.Errorf("filters %v: want label %s and status running", o.Filters, agentproto.LabelApp)
	}
	return client.ContainerListResult{Items: f.items}, f.err
}

func appContainer(app string, created int64, cport, hport uint16, ip string) container.Summary {
	return container.Summary{
		Created: created, State: container.StateRunning,
		Labels: map[string]string{agentproto.LabelApp: app, agentproto.LabelPort: "8080"},
		Ports: []container.PortSummary{
			{IP: netip.MustParseAddr(ip), PrivatePort: cport, PublicPort: hport, Type: "tcp"},
		},
	}
}

func TestLiveUpstreams(t *testing.T) {
	d := &fakeDocker{t: t, items: []container.Summary{
		appContainer("app_1", 100, 8080, 30001, "127.0.0.1"),
		appContainer("app_1", 200, 8080, 30002, "127.0.0.1"), // newer: live
		appContainer("app_2", 100, 9999, 30003, "127.0.0.1"), // not the labelled port
		appContainer("app_3", 100, 8080, 30004, "0.0.0.0"),   // not on loopback
		appContainer("app_4", 100, 8080, 30005, "127.0.0.1"),
	}}
	got, err := proxy.LiveUpstreams(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"app_1": "127.0.0.1:30002", "app_4": "127.0.0.1:30005"}
	if len(got) != len(want) || got["app_1"] != want["app_1"] || got["app_4"] != want["app_4"] {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestApplyDiscoversUpstreams(t *testing.T) {
	c := testlab.StartCaddy(t)
	one, two := upstream(t, "one"), upstream(t, "two")
	port := func(addr string) uint16 { return netip.MustParseAddrPort(addr).Port() }
	d := &fakeDocker{t: t, items: []container.Summary{
		appContainer("app_1", 100, 8080, port(one), "127.0.0.1"),
		appContainer("app_2", 100, 8080, port(two), "127.0.0.1"),
	}}
	p := proxy.New(proxy.Settings{
		AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort, ListenHost: "127.0.0.1", AccessLog: c.AccessLog,
	}, d)
	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "a.test", AppID: "app_1", TLSMode: agentproto.TLSOff},
		{Hostname: "b.test", AppID: "app_2", TLSMode: agentproto.TLSOff},
	}}
	// app_2's override wins over its container.
	if err := p.Apply(context.Background(), cfg, map[string]string{"app_2": one}); err != nil {
		t.Fatal(err)
	}
	hc := c.Client(nil)
	waitFor(t, hc, c.URL("http", "a.test", "/"), 200, "one")
	waitFor(t, hc, c.URL("http", "b.test", "/"), 200, "one")
	if err := p.Apply(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, hc, c.URL("http", "b.test", "/"), 200, "two")

	// A release starts a newer container for app_1: the proxy stays on
	// the one it serves until an override switches it, or that one is
	// gone.
	d.items = append(d.items, appContainer("app_1", 200, 8080, port(two), "127.0.0.1"))
	if err := p.Apply(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, hc, c.URL("http", "a.test", "/"), 200, "one")
	d.items = d.items[1:]
	if err := p.Apply(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, hc, c.URL("http", "a.test", "/"), 200, "two")

	// Docker unreachable: the load is not attempted, the previous
	// configuration serves on.
	d.err = errors.New("engine down")
	if err := p.Apply(context.Background(), cfg, nil); err == nil || proxy.IsLoadError(err) {
		t.Errorf("Apply with Docker down: %v", err)
	}
	waitFor(t, hc, c.URL("http", "b.test", "/"), 200, "two")
	// With every upstream given, Docker is not asked.
	calls := d.calls
	if err := p.Apply(context.Background(), cfg, map[string]string{"app_1": two, "app_2": two}); err != nil {
		t.Fatal(err)
	}
	if d.calls != calls {
		t.Error("Docker was asked though every upstream was given")
	}
}
