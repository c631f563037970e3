package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// upstream is an app stand-in on 127.0.0.1 that answers "<name> <host>".
func upstream(t *testing.T, name string) (addr string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.Host)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// newProxy drives c as the agent does: with upstream files when c reads
// them (Caddy 2.8 and later).
func newProxy(c *testlab.Caddy, dns string) *proxy.Proxy {
	return proxy.New(proxy.Settings{
		AdminURL: c.AdminURL, HTTPPort: c.HTTPPort, HTTPSPort: c.HTTPSPort,
		ListenHost: "127.0.0.1", AccessLog: c.AccessLog, DNSServer: dns, UpstreamDir: c.UpstreamDir,
	}, nil)
}

type answer struct {
	status   int
	body     string
	location string
}

func get(hc *http.Client, url string) (answer, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("Location")}, err
}

// waitFor polls url until it answers status with a body that starts with
// prefix (certificates are issued in the background after a load).
func waitFor(t *testing.T, hc *http.Client, url string, status int, prefix string) answer {
	t.Helper()
	var (
		a   answer
		err error
	)
	testlab.Eventually(t, time.Minute, url, func() bool {
		a, err = get(hc, url)
		return err == nil && a.status == status && strings.HasPrefix(a.body, prefix)
	})
	return a
}

func TestApplyRealCaddy(t *testing.T) {
	c := testlab.StartCaddy(t)
	p := newProxy(c, "")
	ctx := context.Background()
	one, two := upstream(t, "one"), upstream(t, "two")
	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "app.test", AppID: "app_1", TLSMode: agentproto.TLSInternal, RedirectWWW: true},
		{Hostname: "plain.test", AppID: "app_2", TLSMode: agentproto.TLSOff, RedirectWWW: true},
		{Hostname: "down.test", AppID: "app_3", TLSMode: agentproto.TLSInternal},
	}}
	start := time.Now()
	if err := p.Apply(ctx, cfg, map[string]string{"app_1": one, "app_2": two}); err != nil {
		t.Fatal(err)
	}
	t.Logf("first load: %s", time.Since(start))
	hc := c.Client(c.RootPool(t))

	t.Run("tls internal site over HTTPS", func(t *testing.T) {
		hostPort := fmt.Sprintf("app.test:%d", c.HTTPSPort)
		a := waitFor(t, hc, c.URL("https", "app.test", "/x"), 200, "one")
		if a.body != "one "+hostPort {
			t.Errorf("got %q, want %q", a.body, "one "+hostPort)
		}
	})
	t.Run("tls site on HTTP redirects to HTTPS", func(t *testing.T) {
		a := waitFor(t, hc, c.URL("http", "app.test", "/p?q=1"), 308, "")
		if want := fmt.Sprintf("https://app.test:%d/p?q=1", c.HTTPSPort); a.location != want {
			t.Errorf("Location %q, want %q", a.location, want)
		}
	})
	t.Run("redirect www over HTTPS and HTTP", func(t *testing.T) {
		want := fmt.Sprintf("https://app.test:%d/w?x=y", c.HTTPSPort)
		for _, scheme := range []string{"https", "http"} {
			a := waitFor(t, hc, c.URL(scheme, "www.app.test", "/w?x=y"), 301, "")
			if a.location != want {
				t.Errorf("%s: Location %q, want %q", scheme, a.location, want)
			}
		}
		a := waitFor(t, hc, c.URL("http", "www.plain.test", "/w"), 301, "")
		if want := fmt.Sprintf("http://plain.test:%d/w", c.HTTPPort); a.location != want {
			t.Errorf("tls off www: Location %q, want %q", a.location, want)
		}
	})
	t.Run("tls off site on HTTP only", func(t *testing.T) {
		waitFor(t, hc, c.URL("http", "plain.test", "/"), 200, "two plain.test")
		if _, err := get(hc, c.URL("https", "plain.test", "/")); err == nil {
			t.Error("tls off site answered over HTTPS")
		}
	})
	t.Run("app without upstream answers 503", func(t *testing.T) {
		waitFor(t, hc, c.URL("https", "down.test", "/"), 503, "This application has no running container")
	})
	t.Run("unknown host answers 404", func(t *testing.T) {
		waitFor(t, hc, c.URL("http", "other.test", "/"), 404, "")
	})

	t.Run("switching the upstream drops no request", func(t *testing.T) {
		// A keep-alive client whose idle connection the old server closed
		// dials again, and without net.ipv4.tcp_migrate_req a connection
		// queued on the closing listener is reset. Servers get it from the
		// installer, this machine from scripts/testenv.sh.
		if !migrateReq() && testlab.InCI() {
			t.Fatal("net.ipv4.tcp_migrate_req is not 1 on this machine (scripts/testenv.sh up sets it)")
		}
		r := switchUnderLoad(t, p, hc, c.URL("https", "app.test", "/loop"), cfg, one, two, 6)
		t.Logf("keep-alive clients: %s", r)
		if r.failures != 0 {
			t.Errorf("%d requests failed during upstream switches; first: %v", r.failures, r.firstErr)
		}
	})

	// Brand-new connections too: a switch rewrites the app's upstream
	// file and loads nothing (TestSwitchesDropNoNewConnection).
	t.Run("switching the upstream, a new connection per request", func(t *testing.T) {
		tr := hc.Transport.(*http.Transport).Clone()
		tr.DisableKeepAlives = true
		fresh := &http.Client{Transport: tr, Timeout: hc.Timeout, CheckRedirect: hc.CheckRedirect}
		r := switchUnderLoad(t, p, fresh, c.URL("https", "app.test", "/loop"), cfg, one, two, 6)
		t.Logf("a connection per request: %s", r)
		if r.failures != 0 {
			t.Errorf("%d requests on new connections failed during upstream switches; first: %v", r.failures, r.firstErr)
		}
	})

	t.Run("refused config keeps the previous one serving", func(t *testing.T) {
		// Now app_1 is on one (the last switch).
		waitFor(t, hc, c.URL("https", "app.test", "/"), 200, "one")
		proxy.InjectHostname(p, "{env.CAPSTAN_TEST_SURELY_UNSET_VARIABLE}")
		defer proxy.InjectHostname(p, "")
		err := p.Apply(ctx, cfg, map[string]string{"app_1": two, "app_2": two})
		if err == nil {
			t.Fatal("Apply succeeded with an invalid hostname")
		}
		if !proxy.IsLoadError(err) || !strings.Contains(err.Error(), "evaluated placeholder") {
			t.Errorf("error is not Caddy's: %v", err)
		}
		t.Logf("Caddy said: %v", err)
		for range 20 {
			a, err := get(hc, c.URL("https", "app.test", "/"))
			if err != nil || a.status != 200 || !strings.HasPrefix(a.body, "one") {
				t.Fatalf("after the refused load: %+v, %v (want the previous upstream, one)", a, err)
			}
		}
		// Refused before Caddy: nothing is sent.
		bad := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: "a b.test", AppID: "x", TLSMode: agentproto.TLSOff}}}
		if err := p.Apply(ctx, bad, nil); err == nil || proxy.IsLoadError(err) {
			t.Errorf("invalid hostname: %v", err)
		}
	})

	t.Run("access log is JSON", func(t *testing.T) {
		var lines []map[string]any
		testlab.Eventually(t, time.Minute, "access log lines", func() bool {
			lines = readJSONLines(t, c.AccessLog)
			return len(lines) > 0
		})
		hosts := map[string]bool{}
		for _, l := range lines {
			if lg, _ := l["logger"].(string); !strings.HasPrefix(lg, "http.log.access.") {
				t.Errorf("logger %q", lg)
			}
			req, _ := l["request"].(map[string]any)
			if req == nil || l["status"] == nil || l["duration"] == nil || l["ts"] == nil {
				t.Fatalf("line lacks fields: %v", l)
			}
			h, _ := req["host"].(string)
			hosts[strings.Split(h, ":")[0]] = true
		}
		for _, h := range []string{"app.test", "plain.test", "www.app.test", "down.test"} {
			if !hosts[h] {
				t.Errorf("no access log line for %s (hosts: %v)", h, hosts)
			}
		}
	})
}

func TestApplyNoSites(t *testing.T) {
	c := testlab.StartCaddy(t)
	p := newProxy(c, "")
	if err := p.Apply(context.Background(), agentproto.ProxyConfig{}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c.Client(nil), c.URL("http", "any.test", "/"), 404, "No site is configured")
}

// OnLoad hears of every configuration Caddy accepted, and of no other.
func TestOnLoad(t *testing.T) {
	c := testlab.StartCaddy(t)
	p := newProxy(c, "")
	var loads atomic.Int32
	p.OnLoad(func() { loads.Add(1) })
	site := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: "app.test", AppID: "app_1", TLSMode: agentproto.TLSOff}}}
	if err := p.Apply(context.Background(), site, map[string]string{"app_1": "127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	if got := loads.Load(); got != 1 {
		t.Fatalf("after one load: told %d times, want 1", got)
	}
	bad := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: "a b.test", AppID: "x", TLSMode: agentproto.TLSOff}}}
	if err := p.Apply(context.Background(), bad, nil); err == nil {
		t.Fatal("an invalid hostname was applied")
	}
	proxy.InjectHostname(p, "{env.CAPSTAN_TEST_SURELY_UNSET_VARIABLE}")
	defer proxy.InjectHostname(p, "")
	if err := p.Apply(context.Background(), site, map[string]string{"app_1": "127.0.0.1:9"}); !proxy.IsLoadError(err) {
		t.Fatalf("a configuration Caddy refuses: %v", err)
	}
	if got := loads.Load(); got != 1 {
		t.Fatalf("after refused applies: told %d times, want 1", got)
	}
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("access log line is not JSON: %v: %s", err, sc.Bytes())
		}
		out = append(out, m)
	}
	return out
}

// migrateReq reports whether this network namespace's kernel migrates
// connections queued on a closing SO_REUSEPORT listener.
func migrateReq() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

type switchResult struct {
	toOne, toTwo, failures int64
	firstErr               error
	loads                  []time.Duration
}

func (r switchResult) String() string {
	return fmt.Sprintf("%d requests to one, %d to two, %d failed; loads took %v", r.toOne, r.toTwo, r.failures, r.loads)
}

// switchUnderLoad switches app_1 of cfg between the upstreams one and two
// n times while four clients request url in a loop, and counts the
// answers.
func switchUnderLoad(t *testing.T, p *proxy.Proxy, hc *http.Client, url string, cfg agentproto.ProxyConfig, one, two string, n int) switchResult {
	t.Helper()
	var (
		stop                   atomic.Bool
		okOne, okTwo, failures atomic.Int64
		firstErr               atomic.Value
		wg                     sync.WaitGroup
		res                    switchResult
	)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				a, err := get(hc, url)
				switch {
				case err == nil && a.status == 200 && strings.HasPrefix(a.body, "one"):
					okOne.Add(1)
				case err == nil && a.status == 200 && strings.HasPrefix(a.body, "two"):
					okTwo.Add(1)
				default:
					failures.Add(1)
					if err == nil {
						err = fmt.Errorf("status %d %q", a.status, a.body)
					}
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	stopClients := sync.OnceFunc(func() { stop.Store(true); wg.Wait() })
	defer stopClients()
	for i := range n {
		target, name := two, "two"
		if i%2 == 1 {
			target, name = one, "one"
		}
		before := okOne.Load() + okTwo.Load()
		start := time.Now()
		if err := p.Apply(context.Background(), cfg, map[string]string{"app_1": target, "app_2": two}); err != nil {
			t.Fatal(err)
		}
		res.loads = append(res.loads, time.Since(start))
		waitFor(t, hc, url, 200, name)
		// Let requests flow through each configuration.
		testlab.Eventually(t, time.Minute, "requests after a switch", func() bool {
			return okOne.Load()+okTwo.Load() > before+50
		})
	}
	stopClients()
	res.toOne, res.toTwo, res.failures = okOne.Load(), okTwo.Load(), failures.Load()
	if err, ok := firstErr.Load().(error); ok {
		res.firstErr = err
	}
	if res.toOne == 0 || res.toTwo == 0 {
		t.Error("requests did not reach both upstreams")
	}
	return res
}

// TestSwitchesDropNoNewConnection switches a tls internal site's upstream
// 30 times while eight clients request it through Caddy, each request on
// a new TCP and TLS connection. Not one fails, and Caddy loads no new
// configuration: the agent rewrites the file Caddy reads the upstream
// from at every request. A switch by configuration load drops some: Caddy
// 2.6 reads its certificates back from storage after every load and fails
// the handshakes that arrive meanwhile ("tls: internal error"), and a
// newer Caddy built with a recent Go closes, unanswered, the connections
// its old server accepted last ("EOF").
func TestSwitchesDropNoNewConnection(t *testing.T) {
	c := testlab.StartCaddy(t)
	if v := testlab.CaddyVersion(t); c.UpstreamDir == "" {
		t.Fatalf("caddy %s does not read upstreams from files (2.8 or later does; scripts/testenv.sh up builds one)", v)
	}
	p := newProxy(c, "")
	one, two := upstream(t, "one"), upstream(t, "two")
	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{{Hostname: "app.test", AppID: "app_1", TLSMode: agentproto.TLSInternal}}}
	if err := p.Apply(context.Background(), cfg, map[string]string{"app_1": one}); err != nil {
		t.Fatal(err)
	}
	roots := c.RootPool(t)
	url := c.URL("https", "app.test", "/")
	waitFor(t, c.Client(roots), url, 200, "one")
	started := serverStarts(t, c)

	fresh := c.Client(roots)
	fresh.Transport.(*http.Transport).DisableKeepAlives = true
	var (
		stop               atomic.Bool
		toOne, toTwo, fail atomic.Int64
		firstErr           atomic.Value
		wg                 sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				a, err := get(fresh, url)
				switch {
				case err == nil && a.status == 200 && strings.HasPrefix(a.body, "one"):
					toOne.Add(1)
				case err == nil && a.status == 200 && strings.HasPrefix(a.body, "two"):
					toTwo.Add(1)
				default:
					fail.Add(1)
					if err == nil {
						err = fmt.Errorf("status %d %q", a.status, a.body)
					}
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	stopClients := sync.OnceFunc(func() { stop.Store(true); wg.Wait() })
	defer stopClients()
	const switches = 30
	for i := range switches {
		target, name := []string{two, one}[i%2], []string{"two", "one"}[i%2]
		if err := p.Apply(context.Background(), cfg, map[string]string{"app_1": target}); err != nil {
			t.Fatal(err)
		}
		// The next new connection already reaches the new upstream.
		if a, err := get(fresh, url); err != nil || a.status != 200 || !strings.HasPrefix(a.body, name) {
			t.Fatalf("switch %d: right after it, %+v, %v; want %s", i, a, err, name)
		}
		n := toOne.Load() + toTwo.Load() + fail.Load()
		testlab.Eventually(t, time.Minute, "requests after a switch", func() bool {
			return toOne.Load()+toTwo.Load()+fail.Load() > n+20
		})
	}
	stopClients()
	t.Logf("%d switches: %d requests to one, %d to two, %d failed (caddy %s)", switches, toOne.Load(), toTwo.Load(), fail.Load(), testlab.CaddyVersion(t))
	if n := fail.Load(); n != 0 {
		t.Errorf("%d requests on new connections failed across %d switches; first: %v", n, switches, firstErr.Load())
	}
	if toOne.Load() == 0 || toTwo.Load() == 0 {
		t.Error("requests did not reach both upstreams")
	}
	if got := serverStarts(t, c); got != started {
		t.Errorf("Caddy started its servers %d times during the switches, want none", got-started)
	}
}

// serverStarts counts the servers Caddy started so far, by its log.
func serverStarts(t *testing.T, c *testlab.Caddy) int {
	t.Helper()
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), `"msg":"server running"`)
}

// executor is the agent's executor of jobType with p's handlers.
func executor(p *proxy.Proxy, jobType string) agent.Executor {
	r := agent.Registry{}
	p.Register(r)
	return r[jobType]
}
