package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// proxyWithState is a Proxy on c that keeps its revision in dir for
// server serverID.
func proxyWithState(c *testlab.Caddy, dir, serverID string) *proxy.Proxy {
	return proxy.New(proxy.Settings{
		AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort,
		ListenHost: "127.0.0.1", AccessLog: c.AccessLog, StateDir: dir, ServerID: serverID,
	}, nil)
}

// revisionConfig is the proxy state of revision rev: one site, r<rev>.test.
func revisionConfig(rev int64) agentproto.ProxyConfig {
	return agentproto.ProxyConfig{Revision: rev, Sites: []agentproto.ProxySite{
		{Hostname: fmt.Sprintf("r%d.test", rev), AppID: "app_1", TLSMode: agentproto.TLSOff},
	}}
}

// loadedConfig is the configuration Caddy runs, from its admin API.
func loadedConfig(t *testing.T, c *testlab.Caddy) string {
	t.Helper()
	return string(c.LoadedConfig(t))
}

// wantLoaded fails unless Caddy runs the state of revision rev.
func wantLoaded(t *testing.T, c *testlab.Caddy, rev int64, what string) {
	t.Helper()
	cfg := loadedConfig(t, c)
	for _, h := range strings.Split(cfg, `"r`)[1:] {
		host, _, _ := strings.Cut(h, `"`)
		if strings.HasSuffix(host, ".test") && host != fmt.Sprintf("%d.test", rev) {
			t.Fatalf("%s: Caddy serves r%s, want only r%d.test", what, host, rev)
		}
	}
	if !strings.Contains(cfg, fmt.Sprintf(`"r%d.test"`, rev)) {
		t.Fatalf("%s: Caddy does not serve r%d.test:\n%s", what, rev, cfg)
	}
}

func wantRevision(t *testing.T, p *proxy.Proxy, want int64) {
	t.Helper()
	if got, err := p.Revision(); err != nil || got != want {
		t.Fatalf("revision: got %d (%v), want %d", got, err, want)
	}
}

// TestRevisionNeverGoesBack: a state older than one applied is refused,
// and Caddy keeps the newer one; an equal one is applied again; the
// revision survives a restart of the agent (a new Proxy on the same state
// directory), and is forgotten only for another enrollment.
func TestRevisionNeverGoesBack(t *testing.T) {
	c := testlab.StartCaddy(t)
	dir := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	p := proxyWithState(c, dir, "srv_1")
	wantRevision(t, p, 0)

	if err := p.Apply(ctx, revisionConfig(5), nil); err != nil {
		t.Fatal(err)
	}
	wantLoaded(t, c, 5, "after revision 5")
	err := p.Apply(ctx, revisionConfig(4), nil)
	if !proxy.IsStale(err) {
		t.Fatalf("applying revision 4 after 5: got %v, want a stale error", err)
	}
	wantLoaded(t, c, 5, "after refusing revision 4")
	if err := p.Apply(ctx, revisionConfig(5), nil); err != nil {
		t.Fatalf("applying revision 5 again: %v", err)
	}
	wantRevision(t, p, 5)

	// The agent restarts.
	p = proxyWithState(c, dir, "srv_1")
	wantRevision(t, p, 5)
	if err := p.Apply(ctx, revisionConfig(3), nil); !proxy.IsStale(err) {
		t.Fatalf("applying revision 3 after a restart: got %v, want a stale error", err)
	}
	wantLoaded(t, c, 5, "after refusing revision 3 after a restart")
	if err := p.Apply(ctx, revisionConfig(7), nil); err != nil {
		t.Fatal(err)
	}
	wantLoaded(t, c, 7, "after revision 7")

	// The ProxyApply executor skips an old state and succeeds.
	payload, _ := json.Marshal(agentproto.ProxyApplyPayload{Proxy: revisionConfig(6)})
	ev := &sink{}
	data, _, err := executor(p, agentproto.JobProxyApply).Run(ctx, agentproto.Job{Type: agentproto.JobProxyApply, Payload: payload}, nil, ev)
	if err != nil {
		t.Fatalf("proxy.apply of revision 6: %v", err)
	}
	if res := data.(agentproto.ProxyApplyResult); !res.Skipped || res.Revision != 6 || res.AppliedRevision != 7 {
		t.Fatalf("proxy.apply of revision 6: result %+v, want skipped for revision 7", res)
	}
	if len(ev.events) != 1 || !strings.Contains(ev.events[0], "older than revision 7") {
		t.Fatalf("proxy.apply of revision 6: events %q", ev.events)
	}
	wantLoaded(t, c, 7, "after proxy.apply of revision 6")

	// Revisions are numbered per server: another enrollment starts over.
	p = proxyWithState(c, dir, "srv_2")
	wantRevision(t, p, 0)
	if err := p.Apply(ctx, revisionConfig(1), nil); err != nil {
		t.Fatalf("revision 1 of another enrollment: %v", err)
	}
	wantLoaded(t, c, 1, "after another enrollment's revision 1")

	// A state file that cannot be read stops every apply rather than
	// risk going back.
	if err := os.WriteFile(filepath.Join(dir, proxy.StateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	p = proxyWithState(c, dir, "srv_2")
	if err := p.Apply(ctx, revisionConfig(9), nil); err == nil || !strings.Contains(err.Error(), proxy.StateFile) {
		t.Fatalf("apply with a corrupt state file: %v", err)
	}
	wantLoaded(t, c, 1, "after an apply with a corrupt state file")
}

// TestRevisionRace: applies of many revisions racing in any order end
// with the highest one loaded.
func TestRevisionRace(t *testing.T) {
	c := testlab.StartCaddy(t)
	p := proxyWithState(c, t.TempDir(), "srv_1")
	const n = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for _, rev := range rand.Perm(n) {
		wg.Go(func() {
			err := p.Apply(context.Background(), revisionConfig(int64(rev+1)), nil)
			if err != nil && !proxy.IsStale(err) {
				t.Errorf("revision %d: %v", rev+1, err)
			}
			if err != nil {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wantRevision(t, p, n)
	wantLoaded(t, c, n, fmt.Sprintf("after %d racing applies (%d refused as stale)", n, refused))
}
