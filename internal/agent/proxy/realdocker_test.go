package proxy_test

// Upstream discovery against a real Docker engine: an image built here
// (FROM scratch and testdata/hello), containers labelled as the deployer
// labels them, with their port published on 127.0.0.1.

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// runApp starts a container of app, as the deployer labels it, with port
// 8080 published on an ephemeral port of 127.0.0.1, answering "hello
// <greeting>". It returns the container's name.
func runApp(t *testing.T, cli *client.Client, image, app, greeting string) string {
	t.Helper()
	port := network.MustParsePort("8080/tcp")
	name := testlab.CreateContainer(t, cli, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: image, Env: []string{"NAME=" + greeting},
			ExposedPorts: network.PortSet{port: {}},
			Labels:       map[string]string{agentproto.LabelApp: app, agentproto.LabelPort: "8080"},
		},
		HostConfig: &container.HostConfig{
			PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: ""}}},
		},
	})
	testlab.StartContainer(t, cli, name)
	return name
}

func TestApplyFindsLiveContainers(t *testing.T) {
	cli := testlab.Docker(t)
	image := testlab.ProgramImage(t, cli, testlab.UniqueName("capstan-test-proxy-hello:"), "./testdata/hello").Ref
	c := testlab.StartCaddy(t)
	app := fmt.Sprintf("app_proxytest_%d", time.Now().UnixNano())
	first := runApp(t, cli, image, app, "first")

	p := proxy.New(proxy.Settings{
		AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort, ListenHost: "127.0.0.1", AccessLog: c.AccessLog,
	}, cli)
	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: "hello.test", AppID: app, TLSMode: agentproto.TLSOff}}}
	if err := p.Apply(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	hc := c.Client(nil)
	waitFor(t, hc, c.URL("http", "hello.test", "/"), 200, "hello first")

	// A stopped container is not live: the site answers 503.
	ctx := context.Background()
	if _, err := cli.ContainerKill(ctx, first, client.ContainerKillOptions{}); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, time.Minute, "the site of a stopped container to answer 503", func() bool {
		if err := p.Apply(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
		a, err := get(hc, c.URL("http", "hello.test", "/"))
		return err == nil && a.status == 503
	})

	runApp(t, cli, image, app, "second")
	if err := p.Apply(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, hc, c.URL("http", "hello.test", "/"), 200, "hello second")
}
