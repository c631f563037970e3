package proxy_test

// Upstream discovery against a real Docker engine: an image built here
// (FROM scratch and testdata/hello), containers labelled as the deployer
// labels them, with their port published on 127.0.0.1.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agent/proxy/caddytest"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// requireDocker returns a client of the engine under test
// (CAPSTAN_TEST_DOCKER_HOST, else DOCKER_HOST, else the default socket);
// without one the test is skipped, or fails when CI=true.
func requireDocker(t *testing.T) *client.Client {
	t.Helper()
	opts := []client.Opt{client.FromEnv}
	if h := os.Getenv("CAPSTAN_TEST_DOCKER_HOST"); h != "" {
		opts = append(opts, client.WithHost(h))
	}
	cli, err := client.New(opts...)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		msg := fmt.Sprintf("no Docker engine (scripts/testenv.sh up starts one): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so this is a failure rather than a skip")
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func buildHello(t *testing.T, cli *client.Client) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./testdata/hello")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/hello: %v\n%s", err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY hello /hello\nENTRYPOINT [\"/hello\"]\n")},
		{"hello", 0o755, prog},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("capstan-test-proxy-hello:%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("ImageBuild: %v", err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Contains(out, []byte("Successfully tagged")) {
		t.Fatalf("image build failed:\n%s", out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	return tag
}

// runApp starts a container of app, as the deployer labels it, with port
// 8080 published on an ephemeral port of 127.0.0.1.
func runApp(t *testing.T, cli *client.Client, image, app, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := network.MustParsePort("8080/tcp")
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: image, Env: []string{"NAME=" + name},
			ExposedPorts: network.PortSet{port: {}},
			Labels:       map[string]string{agentproto.LabelApp: app, agentproto.LabelPort: "8080"},
		},
		HostConfig: &container.HostConfig{
			PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: ""}}},
		},
	})
	if err != nil {
		t.Fatalf("creating container: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cli.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("starting container: %v", err)
	}
	return res.ID
}

func TestApplyFindsLiveContainers(t *testing.T) {
	cli := requireDocker(t)
	image := buildHello(t, cli)
	c := caddytest.Start(t)
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
	caddytest.Eventually(t, 15*time.Second, "the site of a stopped container to answer 503", func() bool {
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
