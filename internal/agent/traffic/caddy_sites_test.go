package traffic_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agent/traffic"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Scanner-style requests to a real Caddy (an IP literal and random names
// in the Host header, sent to Caddy on loopback) are reported in the
// other bucket; the site's counts are exact and no junk host is reported
// by name.
func TestRealCaddyJunkHostsInOther(t *testing.T) {
	c := testlab.StartCaddy(t)
	sites := traffic.NewCaddySites(c.AdminURL)
	if hosts, err := sites.SiteHosts(context.Background()); err != nil || len(hosts) != 0 {
		t.Fatalf("a Caddy without configuration: got %v, %v; want no sites", hosts, err)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer app.Close()
	p := proxy.New(proxy.Settings{
		AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort, ListenHost: "127.0.0.1", AccessLog: c.AccessLog,
	}, nil)
	err := p.Apply(context.Background(), agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "plain.test", AppID: "app_1", TLSMode: agentproto.TLSOff, RedirectWWW: true},
	}}, map[string]string{"app_1": app.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := sites.SiteHosts(context.Background())
	if slices.Sort(hosts); err != nil || !slices.Equal(hosts, []string{"plain.test", "www.plain.test"}) {
		t.Fatalf("sites: got %v, %v; want plain.test and www.plain.test", hosts, err)
	}

	cp := agenttest.New(t)
	client, err := agent.NewClient(cp.URL, cp.AgentToken(), "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := traffic.New(traffic.Options{
		LogPath: c.AccessLog, StateDir: filepath.Join(t.TempDir(), "state"),
		PollInterval: 20 * time.Millisecond, FlushInterval: 100 * time.Millisecond, Sites: sites,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, client) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Every request goes to Caddy on 127.0.0.1; only the Host header
	// differs.
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	base := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.HTTPPort)) + "/"
	send := func(host string, n int) {
		t.Helper()
		for range n {
			req, err := http.NewRequest(http.MethodGet, base, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the count matters
			resp.Body.Close()
		}
	}
	send("plain.test", 12)
	send("203.0.113.9", 9)
	send("www.plain.test", 2)
	send("qzx7-random.example", 4)
	send("203.0.113.9:80", 3)
	send("plain.test", 3)
	const site, www, other = 15, 2, 16

	count := func(ms map[string]agentproto.RequestMinute, host string) (n int64) {
		for _, m := range ms {
			if m.Host == host {
				n += m.Count
			}
		}
		return n
	}
	testlab.Eventually(t, 15*time.Second, "the requests at the control plane", func() bool {
		ms, o := cp.RequestMinutes(), cp.RequestOther()
		return count(ms, "plain.test") == site && count(ms, "www.plain.test") == www && count(o, "") == other
	})
	for k, m := range cp.RequestMinutes() {
		if m.Host != "plain.test" && m.Host != "www.plain.test" {
			t.Errorf("reported by name: %s %+v", k, m)
		}
	}
	t.Logf("sites: %v; other: %v", cp.RequestMinutes(), cp.RequestOther())
}
