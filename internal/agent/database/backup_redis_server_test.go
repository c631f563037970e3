package database

import (
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestPickKVServer: a snapshot loads into the image or the host's
// server by one rule (agentproto.LoadVersion): its own version first,
// else the newest; at the same version the host's; never an older one,
// and then the error says what there is.
func TestPickKVServer(t *testing.T) {
	versions := []string{"7.4", "7.2"}
	image := func(of, version string) agentproto.DBArtifactSource {
		return agentproto.DBArtifactSource{Version: version, Image: "redis:" + of, ImageVersion: of, Versions: versions}
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
		{"exact image, newer host server", image("7.2", "7.2"), "7.4.1", false, ""},
		{"exact image, host server of the same version", image("7.2", "7.2"), "7.2.5", true, ""},
		{"newer image, host server of the snapshot's version", image("7.4", "7.0"), "7.0.15", true, ""},
		{"newer image, no host server", image("7.4", "7.0"), "", false, ""},
		{"newer image, newer host server yet", image("7.4", "7.0"), "8.0.2", true, ""},
		{"newer image, host server newer but less so", image("7.4", "7.0"), "7.2.4", false, ""},
		{"no image, newer host server", agentproto.DBArtifactSource{Version: "7.0", Versions: versions}, "7.2.4", true, ""},
		{"an image from a control plane that names no image version", agentproto.DBArtifactSource{Version: "7.2", Image: "redis:7.2"},
			"", false, ""},
		{"no image, older host server", agentproto.DBArtifactSource{Version: "8.0", Versions: versions}, "7.0.15", false,
			"no image of redis 8.0 or newer to load the snapshot in: there are images of redis 7.4, 7.2, none at or above 8.0; " +
				"this server's redis-server is 7.0.15"},
		{"no image, no host server", agentproto.DBArtifactSource{Version: "8.0", Versions: versions}, "", false,
			"none at or above 8.0, and this server has no redis-server"},
		{"unknown version", agentproto.DBArtifactSource{Image: "redis:7.4", ImageVersion: "7.4", Versions: versions}, "7.0.15", false,
			"the instance's version is not known"},
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
