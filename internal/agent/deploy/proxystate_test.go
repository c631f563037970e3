package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// controlPlane answers GET /agent/v1/proxy like the control plane: the
// states queued with answer first (one per call), then the current one;
// 404 (a control plane from before revisions) while old is set.
type controlPlane struct {
	mu      sync.Mutex
	current agentproto.ProxyConfig
	queued  []agentproto.ProxyConfig
	old     bool
	calls   int
}

func (c *controlPlane) set(cfg agentproto.ProxyConfig) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current = cfg
}

func (c *controlPlane) answer(cfgs ...agentproto.ProxyConfig) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queued = append(c.queued, cfgs...)
}

func (c *controlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Method != http.MethodGet || r.URL.Path != "/agent/v1/proxy" || r.Header.Get("Authorization") != "Bearer agt_test" || c.old {
		http.NotFound(w, r)
		return
	}
	c.calls++
	cfg := c.current
	if len(c.queued) > 0 {
		cfg, c.queued = c.queued[0], c.queued[1:]
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(agentproto.ProxyStateResponse{Proxy: cfg})
}

// proxyRig is a Deployer whose proxy is a real Caddy, and whose desired
// proxy state comes over HTTP from cp through the agent's client.
type proxyRig struct {
	caddy *testlab.Caddy
	px    *proxy.Proxy
	cp    *controlPlane
	d     *Deployer
}

func newProxyRig(t *testing.T) *proxyRig {
	t.Helper()
	c := testlab.StartCaddy(t)
	px := proxy.New(proxy.Settings{AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort, ListenHost: "127.0.0.1",
		AccessLog: c.AccessLog, StateDir: filepath.Join(t.TempDir(), "state"), ServerID: "srv_1", UpstreamDir: c.UpstreamDir}, nil)
	cp := &controlPlane{}
	srv := httptest.NewServer(cp)
	t.Cleanup(srv.Close)
	cl, err := agent.NewClient(srv.URL, "agt_test", "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &proxyRig{caddy: c, px: px, cp: cp, d: New(Options{Proxy: px, Desired: cl})}
}

// state is revision rev of a server's proxy state: a.test of app_1, and
// one site of its own, r<rev>.test.
func state(rev int64) agentproto.ProxyConfig {
	return agentproto.ProxyConfig{Revision: rev, Sites: []agentproto.ProxySite{
		{Hostname: "a.test", AppID: "app_1", TLSMode: agentproto.TLSOff},
		// No TLS: certificates issued in the background after one load may
		// be read half-written by the next (Caddy 2.6).
		{Hostname: fmt.Sprintf("r%d.test", rev), AppID: "app_2", TLSMode: agentproto.TLSOff},
	}}
}

// wantState fails unless Caddy runs revision rev's sites and no other
// revision's.
func (r *proxyRig) wantState(t *testing.T, rev int64, what string) {
	t.Helper()
	cfg := string(r.caddy.LoadedConfig(t))
	for _, part := range strings.Split(cfg, `"r`)[1:] {
		host, _, _ := strings.Cut(part, `"`)
		if strings.HasSuffix(host, ".test") && host != fmt.Sprintf("%d.test", rev) {
			t.Fatalf("%s: Caddy serves r%s, want revision %d's sites only", what, host, rev)
		}
	}
	if !strings.Contains(cfg, fmt.Sprintf(`"r%d.test"`, rev)) {
		t.Fatalf("%s: Caddy does not serve r%d.test", what, rev)
	}
	if got, err := r.px.Revision(); err != nil || got != rev {
		t.Fatalf("%s: applied revision %d (%v), want %d", what, got, err, rev)
	}
}

func proxyApply(t *testing.T, px *proxy.Proxy, cfg agentproto.ProxyConfig) agentproto.ProxyApplyResult {
	t.Helper()
	data, _, err := runJob(t, proxyExecutor(px), agentproto.JobProxyApply, agentproto.ProxyApplyPayload{Proxy: cfg}, nil)
	if err != nil {
		t.Errorf("proxy.apply of revision %d: %v", cfg.Revision, err)
		return agentproto.ProxyApplyResult{}
	}
	return data.(agentproto.ProxyApplyResult)
}

// TestSwitchAppliesCurrentState: a release's switch applies the control
// plane's current proxy state, not the one its job was made with, and
// fetches it again when a newer revision was applied under it; only a
// control plane without the route makes it use the job's.
func TestSwitchAppliesCurrentState(t *testing.T) {
	r := newProxyRig(t)
	ctx := context.Background()
	release := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "new release")
	}))
	t.Cleanup(release.Close)
	own := map[string]string{"app_1": strings.TrimPrefix(release.URL, "http://")}

	// A site was deleted while the release ran: revision 2 lacks it.
	r.cp.set(state(2))
	rec := &recorder{}
	cfg, err := r.d.applyDesired(ctx, state(1), own, rec)
	if err != nil || cfg.Revision != 2 {
		t.Fatalf("switch: revision %d, %v; want 2", cfg.Revision, err)
	}
	r.wantState(t, 2, "after the switch")
	hc := r.caddy.Client(nil)
	testlab.Eventually(t, 10*time.Second, "a.test answers from the new release", func() bool {
		a, err := fetchBody(hc, r.caddy.URL("http", "a.test", "/"))
		return err == nil && a == "new release"
	})

	// The switch fetched revision 3, but a proxy.apply of revision 4 got
	// in first: it fetches again and applies revision 4.
	if res := proxyApply(t, r.px, state(4)); res.Skipped {
		t.Fatalf("proxy.apply of revision 4 skipped: %+v", res)
	}
	r.cp.answer(state(3))
	r.cp.set(state(4))
	rec = &recorder{}
	cfg, err = r.d.applyDesired(ctx, state(1), own, rec)
	if err != nil || cfg.Revision != 4 {
		t.Fatalf("switch under a newer revision: revision %d, %v; want 4; events %q", cfg.Revision, err, rec.events)
	}
	if !rec.has("info: proxy state revision 3 is older than revision 4, applied already; fetching the current proxy state again") {
		t.Errorf("events %q", rec.events)
	}
	r.wantState(t, 4, "after the switch under a newer revision")

	// A control plane from before revisions: the job's state, unless it
	// is older than one applied.
	r.cp.mu.Lock()
	r.cp.old = true
	r.cp.mu.Unlock()
	rec = &recorder{}
	if cfg, err := r.d.applyDesired(ctx, state(5), own, rec); err != nil || cfg.Revision != 5 {
		t.Fatalf("switch with an old control plane: revision %d, %v; want 5", cfg.Revision, err)
	}
	if !rec.has("info: the control plane does not serve the current proxy state; applying the job's (revision 5)") {
		t.Errorf("events %q", rec.events)
	}
	r.wantState(t, 5, "after the switch with an old control plane")
	if _, err := r.d.applyDesired(ctx, state(4), own, &recorder{}); !proxy.IsStale(err) {
		t.Fatalf("switch with an old control plane and a stale job: %v, want a stale error", err)
	}
	r.wantState(t, 5, "after refusing the stale job's state")
}

// TestSwitchRacesProxyApply: two proxy.apply jobs and a release's switch
// racing on one agent end with the highest revision applied, whatever
// their order.
func TestSwitchRacesProxyApply(t *testing.T) {
	r := newProxyRig(t)
	own := map[string]string{"app_1": "127.0.0.1:9"}
	for round := range 8 {
		base := int64(3 * round)
		// The control plane is at base+2 by the time the switch asks; the
		// jobs carry base+1 and base+2; the release's job was made at base.
		r.cp.set(state(base + 2))
		var wg sync.WaitGroup
		wg.Go(func() { proxyApply(t, r.px, state(base+1)) })
		wg.Go(func() { proxyApply(t, r.px, state(base+2)) })
		wg.Go(func() {
			rec := &recorder{}
			if cfg, err := r.d.applyDesired(context.Background(), state(base), own, rec); err != nil || cfg.Revision != base+2 {
				t.Errorf("round %d: switch applied revision %d, %v; want %d; events %q", round, cfg.Revision, err, base+2, rec.events)
			}
		})
		wg.Wait()
		r.wantState(t, base+2, fmt.Sprintf("round %d", round))
	}
}

func fetchBody(hc *http.Client, url string) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// proxyExecutor is the agent's executor of proxy.apply on px.
func proxyExecutor(px *proxy.Proxy) agent.Executor {
	r := agent.Registry{}
	px.Register(r)
	return r[agentproto.JobProxyApply]
}
