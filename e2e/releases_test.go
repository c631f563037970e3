package e2e

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestReleasesDropNoConnection redeploys an application served by Caddy
// (a domain with a certificate of its local CA) ten times in a row while
// clients request it through Caddy without pause: four open a new TCP and
// TLS connection for every request, two keep theirs alive. Not one request
// fails. Each release makes Caddy load a new configuration, which binds
// new listeners and closes the old ones; a connection waiting in an old
// listener's queue is handed over to the new one
// (net.ipv4.tcp_migrate_req=1, which the agent installer sets on servers
// and scripts/testenv.sh on the test machine) instead of being reset.
// A release itself loads nothing: the agent rewrites the file Caddy reads
// the application's upstream from at every request (Caddy 2.8 or later,
// which servers get from the installer and the test machine from
// scripts/testenv.sh).
func TestReleasesDropNoConnection(t *testing.T) {
	t.Parallel()
	if got := tcpMigrateReq(); got != "1" {
		t.Fatalf("net.ipv4.tcp_migrate_req is %s in this network namespace, want 1 as on an installed server (scripts/testenv.sh up sets it)", got)
	}
	if v := testlab.CaddyVersion(t); !testlab.CaddyAtLeast(v, 2, 8) {
		t.Fatalf("caddy %s cannot read upstreams from files, so every release reloads it; want 2.8 or later as on an installed server (scripts/testenv.sh up builds it)", v)
	}
	const host, redeploys = "release.test", 10
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0, "v2": 0}})
	app := s.createWebApp(t, "steady", pollInterval)
	s.addDomain(t, app.ID, host, "internal", "succeeded")
	url := s.Caddy.URL("https", host, "/")
	s.waitSite(t, s.Client(t), url, "v1 steady", time.Minute)

	valid := func(body string) bool { return body == "v1 steady" || body == "v2 steady" }
	fresh := startLoad(t, s.FreshClient(t), url, 4, 2*time.Millisecond, valid)
	kept := startLoad(t, s.Client(t), url, 2, 2*time.Millisecond, valid)
	fresh.waitAnswer(t, "v1 steady", time.Minute)
	kept.waitAnswer(t, "v1 steady", time.Minute)
	// Each deployment succeeds only once the proxy serves its container.
	for i := range redeploys {
		want := []string{"v2", "v1"}[i%2]
		s.waitDeployment(t, s.deploy(t, app.ID, map[string]any{"ref": s.Images[want].Ref}), "succeeded", pollInterval, deployTimeout)
	}
	fresh.Stop()
	kept.Stop()
	f, k := fresh.Take(), kept.Take()
	t.Logf("%d releases: a new connection per request: %s; kept-alive connections: %s", redeploys, f, k)
	if f.Failures != 0 || k.Failures != 0 {
		t.Errorf("requests failed across %d releases: new connections %s; kept-alive %s", redeploys, f, k)
	}
	if f.Bodies["v1 steady"] == 0 || f.Bodies["v2 steady"] == 0 || k.Bodies["v1 steady"] == 0 || k.Bodies["v2 steady"] == 0 {
		t.Errorf("want answers of both versions on both kinds of connection: new %s; kept %s", f, k)
	}
}
