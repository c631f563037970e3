package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestPickKVServer: a snapshot loads into the image the control plane
// chose (of the snapshot's version or a newer one) when there is one;
// without one, into the host's server when LoadVersion takes its version;
// never into an older one, and then the error says what there is.
func TestPickKVServer(t *testing.T) {
	versions := []string{"7.4", "7.2"}
	image := func(of, version string) agentproto.DBArtifactSource {
		return agentproto.DBArtifactSource{Version: version, Image: "redis:" + of, ImageVersion: of, Versions: versions}
	}
	noImage := func(version string) agentproto.DBArtifactSource {
		return agentproto.DBArtifactSource{Version: version, Versions: versions}
	}
	for _, c := range []struct {
		name string
		src  agentproto.DBArtifactSource
		host string
		// wantHost; wantErr is a part of the error, "" for none.
		wantHost bool
		wantErr  string
	}{
		{"exact image, no host server", image("7.2", "7.2"), "", false, ""},
		{"exact image, older host server", image("7.2", "7.2"), "7.0.15", false, ""},
		{"exact image, host server of the same version", image("7.2", "7.2"), "7.2.5", false, ""},
		{"newer image, host server of the snapshot's version", image("7.4", "7.0"), "7.0.15", false, ""},
		{"newer image, no host server", image("7.4", "7.0"), "", false, ""},
		{"an image from a control plane that names no image version", agentproto.DBArtifactSource{Version: "7.2", Image: "redis:7.2"},
			"", false, ""},
		{"no image, host server of the snapshot's version", noImage("8.0"), "8.0.2", true, ""},
		{"no image, newer host server", noImage("8.0"), "8.2.1", true, ""},
		{"an older image is refused, the host server used", image("7.4", "8.0"), "8.0.2", true, ""},
		{"an older image is refused, no host server", image("7.4", "8.0"), "", false, "none at or above 8.0"},
		{"no image, older host server", noImage("8.0"), "7.0.15", false,
			"no image of redis 8.0 or newer to load the snapshot in: there are images of redis 7.4, 7.2, none at or above 8.0; " +
				"this server's redis-server is 7.0.15"},
		{"no image, no host server", noImage("8.0"), "", false, "none at or above 8.0, and this server has no redis-server"},
		{"unknown version", agentproto.DBArtifactSource{Versions: versions}, "7.0.15", false, "the instance's version is not known"},
	} {
		host, err := pickKVServer(agentproto.EngineRedis, c.src, c.host)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.wantErr)
		case host != c.wantHost:
			t.Errorf("%s: host %t, want %t", c.name, host, c.wantHost)
		}
	}
}

// TestHostKV loads a snapshot of a real Redis into the host's
// redis-server as a throwaway process: it reports its version and holds
// the snapshot's keys, and once removed it no longer answers and its
// directory is gone. A snapshot it cannot read fails with its output.
func TestHostKV(t *testing.T) {
	ctx := t.Context()
	r := testlab.StartRedis(t, nil)
	c := r.Client(t)
	for i := range 50 {
		if err := c.Set(ctx, fmt.Sprintf("k:%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(ctx, "h", "a", "1").Err(); err != nil {
		t.Fatal(err)
	}
	dir, err := c.ConfigGet(ctx, "dir").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rdb, err := os.ReadFile(filepath.Join(dir["dir"], "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	path, version, ok := hostKVServer(ctx, agentproto.EngineRedis)
	if !ok {
		t.Fatal("the test lab's redis-server is not found on PATH")
	}

	load := func(snapshot []byte) (*hostKV, string, string, error) {
		t.Helper()
		srv := &hostKV{path: path, version: version}
		t.Cleanup(func() { srv.remove(context.Background()) })
		port, err := agent.FreeLoopbackPort()
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := srv.start(ctx, port, bytes.NewReader(snapshot)); err != nil {
			t.Fatal(err)
		}
		got, err := engine.WaitLoaded(ctx, addr, srv.exited)
		return srv, addr, got, err
	}
	srv, addr, reported, err := load(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if reported != version {
		t.Fatalf("the server reports %s, its --version said %s", reported, version)
	}
	m, err := engine.RedisManifest(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if m.Keys["string"] != 50 || m.Keys["hash"] != 1 {
		t.Fatalf("loaded %+v, want 50 strings and a hash", m.Keys)
	}
	var res agentproto.BackupVerifyResult
	srv.describe(&res)
	if res.Loader != agentproto.DBToolHost || res.LoaderVersion != version || res.LoaderRef != path {
		t.Fatalf("described as %+v", res)
	}
	srv.remove(ctx)
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("the removed server still answers on %s", addr)
	}
	if _, err := os.Stat(srv.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the server's directory %s is left: %v", srv.dir, err)
	}

	if _, _, _, err := load([]byte("REDIS0009 not a snapshot")); err == nil || !strings.Contains(err.Error(), "did not load the snapshot") {
		t.Fatalf("a broken snapshot: %v", err)
	}
}

func TestKVServerVersion(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=c4f1b2d3e5a6b7c8\n", "7.0.15"},
		{"Valkey server v=8.0.2 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1\n", "8.0.2"},
		{"redis-server: unknown option\n", ""},
		{"Redis server v=unstable sha=0", ""},
	} {
		if got := kvServerVersion(c.out); got != c.want {
			t.Errorf("kvServerVersion(%q) = %q, want %q", c.out, got, c.want)
		}
	}
}
