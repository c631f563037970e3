package traffic_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agent/traffic"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Requests through a real Caddy end up, counted, at the control plane.
func TestRealCaddyTrafficReported(t *testing.T) {
	c := testlab.StartCaddy(t)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, strings.Repeat("x", 100))
	}))
	defer app.Close()
	up := strings.TrimPrefix(app.URL, "http://")
	p := proxy.New(proxy.Settings{
		AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort, ListenHost: "127.0.0.1", AccessLog: c.AccessLog,
	}, nil)
	err := p.Apply(context.Background(), agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "app.test", AppID: "app_1", TLSMode: agentproto.TLSInternal},
		{Hostname: "plain.test", AppID: "app_1", TLSMode: agentproto.TLSOff},
	}}, map[string]string{"app_1": up})
	if err != nil {
		t.Fatal(err)
	}
	roots := c.RootPool(t)
	// Wait for app.test's certificate with bare handshakes: they leave no
	// access log line.
	testlab.Eventually(t, time.Minute, "app.test's certificate", func() bool {
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.HTTPSPort)),
			&tls.Config{ServerName: "app.test", RootCAs: roots})
		if err == nil {
			conn.Close()
		}
		return err == nil
	})

	cp := agenttest.New(t)
	client, err := agent.NewClient(cp.URL, cp.AgentToken(), "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := traffic.New(traffic.Options{
		LogPath: c.AccessLog, StateDir: filepath.Join(t.TempDir(), "state"),
		PollInterval: 20 * time.Millisecond, FlushInterval: 100 * time.Millisecond,
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

	hc := c.Client(roots)
	want := map[string]*agentproto.RequestMinute{"app.test": {}, "plain.test": {}}
	do := func(scheme, host, path string, n int) {
		t.Helper()
		for range n {
			resp, err := hc.Get(c.URL(scheme, host, path))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			w := want[host]
			w.Count++
			w.BytesOut += int64(len(b))
			switch resp.StatusCode / 100 {
			case 2:
				w.Status2xx++
			case 3:
				w.Status3xx++
			case 4:
				w.Status4xx++
			case 5:
				w.Status5xx++
			}
		}
	}
	do("https", "app.test", "/ok", 20)
	do("https", "app.test", "/missing", 5)
	do("http", "app.test", "/to-https", 3)
	do("http", "plain.test", "/", 7)

	sum := func() map[string]agentproto.RequestMinute {
		got := map[string]agentproto.RequestMinute{}
		for _, m := range cp.RequestMinutes() {
			g := got[m.Host]
			g.Count += m.Count
			g.Status2xx += m.Status2xx
			g.Status3xx += m.Status3xx
			g.Status4xx += m.Status4xx
			g.Status5xx += m.Status5xx
			g.BytesOut += m.BytesOut
			got[m.Host] = g
		}
		return got
	}
	testlab.Eventually(t, time.Minute, "the requests at the control plane", func() bool {
		got := sum()
		return got["app.test"].Count == want["app.test"].Count && got["plain.test"].Count == want["plain.test"].Count
	})
	got := sum()
	for host, w := range want {
		if g := got[host]; g != *w {
			t.Errorf("%s: got %+v, want %+v", host, g, *w)
		}
	}
	if len(got) != 2 {
		t.Errorf("hosts reported: %v", got)
	}
	for _, m := range cp.RequestMinutes() {
		if m.Host == "app.test" && (m.P50Ms <= 0 || m.P95Ms < m.P50Ms) {
			t.Errorf("app.test %s: p50 %v, p95 %v", m.Minute, m.P50Ms, m.P95Ms)
		}
	}
	t.Logf("reported: %+v", cp.RequestMinutes())
}
