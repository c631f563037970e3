package proxy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func TestRenderShape(t *testing.T) {
	st := Settings{AdminURL: "http://127.0.0.1:2999", HTTPPort: 8080, HTTPSPort: 8443, ACMEEmail: "ops@example.com"}.withDefaults()
	ss, err := sites(agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "App.Example.com", AppID: "app_1", TLSMode: agentproto.TLSAuto, RedirectWWW: true},
		{Hostname: "int.test", AppID: "app_2", TLSMode: agentproto.TLSInternal},
		{Hostname: "plain.test", AppID: "app_3", TLSMode: agentproto.TLSOff, RedirectWWW: true},
		{Hostname: "down.test", AppID: "app_4", TLSMode: agentproto.TLSInternal},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := render(st, ss, nil, map[string]string{"app_1": "127.0.0.1:9001", "app_2": "127.0.0.1:9002", "app_3": "127.0.0.1:9003"})
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{
		`"admin":{"listen":"127.0.0.1:2999"}`,
		`"certificate_authorities":{"local":{"install_trust":false}}`,
		`"filename":"/var/log/caddy/capstan-access.log"`,
		`"include":["http.log.access.capstan_https","http.log.access.capstan_http"]`,
		`"http_port":8080,"https_port":8443`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("rendered config lacks %s:\n%s", want, js)
		}
	}

	https, http := c.Apps.HTTP.Servers[httpsServer], c.Apps.HTTP.Servers[httpServer]
	if !slices.Equal(https.Listen, []string{":8443"}) || !slices.Equal(http.Listen, []string{":8080"}) {
		t.Errorf("listen: https %v, http %v", https.Listen, http.Listen)
	}
	if !https.AutoHTTPS.DisableRedirects || len(https.TLSPolicies) != 1 {
		t.Errorf("https server: automatic_https %+v, %d TLS policies", https.AutoHTTPS, len(https.TLSPolicies))
	}
	byHost := func(s *server) map[string]handler {
		m := map[string]handler{}
		for _, r := range s.Routes {
			if len(r.Match) == 0 {
				m["*"] = r.Handle[0]
				continue
			}
			m[r.Match[0].Host[0]] = r.Handle[0]
		}
		return m
	}
	hs, h := byHost(https), byHost(http)
	check := func(name string, got handler, wantHandler string, wantStatus int, wantLocation string) {
		t.Helper()
		if got.Handler != wantHandler || got.StatusCode != wantStatus {
			t.Errorf("%s: got %s %d, want %s %d", name, got.Handler, got.StatusCode, wantHandler, wantStatus)
		}
		if loc := got.Headers["Location"]; wantLocation != "" && (len(loc) != 1 || loc[0] != wantLocation) {
			t.Errorf("%s: Location %v, want %s", name, loc, wantLocation)
		}
	}
	check("https app", hs["app.example.com"], "reverse_proxy", 0, "")
	if u := hs["app.example.com"].Upstreams; len(u) != 1 || u[0].Dial != "127.0.0.1:9001" {
		t.Errorf("https app upstreams %v", u)
	}
	check("https www.app", hs["www.app.example.com"], "static_response", 301, "https://app.example.com:8443{http.request.uri}")
	check("http app", h["app.example.com"], "static_response", 308, "https://app.example.com:8443{http.request.uri}")
	check("http www.app", h["www.app.example.com"], "static_response", 301, "https://app.example.com:8443{http.request.uri}")
	check("https int", hs["int.test"], "reverse_proxy", 0, "")
	check("http plain", h["plain.test"], "reverse_proxy", 0, "")
	check("http www.plain", h["www.plain.test"], "static_response", 301, "http://plain.test:8080{http.request.uri}")
	check("https down", hs["down.test"], "static_response", 503, "")
	check("https catch-all", hs["*"], "static_response", 404, "")
	check("http catch-all", h["*"], "static_response", 404, "")
	if _, ok := hs["plain.test"]; ok {
		t.Error("tls off site is served on HTTPS")
	}
	if r := https.Routes[len(https.Routes)-1]; len(r.Match) != 0 {
		t.Error("the HTTPS catch-all is not last")
	}

	pol := c.Apps.TLS.Automation.Policies
	if len(pol) != 2 {
		t.Fatalf("policies: %+v", pol)
	}
	if pol[0].Issuers[0].Module != "internal" || !slices.Equal(pol[0].Subjects, []string{"down.test", "int.test"}) {
		t.Errorf("internal policy %+v", pol[0])
	}
	if pol[1].Issuers[0].Module != "acme" || pol[1].Issuers[0].Email != "ops@example.com" ||
		!slices.Equal(pol[1].Subjects, []string{"app.example.com", "www.app.example.com"}) {
		t.Errorf("acme policy %+v", pol[1])
	}
}

func TestRenderDefaultPorts(t *testing.T) {
	st := Settings{}.withDefaults()
	ss, err := sites(agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "a.test", AppID: "x", TLSMode: agentproto.TLSAuto, RedirectWWW: true},
		{Hostname: "b.test", AppID: "y", TLSMode: agentproto.TLSOff, RedirectWWW: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := render(st, ss, nil, nil)
	b, _ := json.Marshal(c)
	// The admin API stays on the agent's socket, openable by Caddy's
	// account and group only: no TCP port of the host answers it.
	if !strings.Contains(string(b), `"admin":{"listen":"unix//run/capstan-proxy/admin.sock|0660","origins":["caddy"]}`) {
		t.Errorf("admin %+v, want the unix socket /run/capstan-proxy/admin.sock with mode 0660, accepting Host caddy", c.Admin)
	}
	if strings.Contains(string(b), "2019") {
		t.Errorf("the rendered configuration names Caddy's TCP admin port 2019: %s", b)
	}
	for _, want := range []string{
		`"https://a.test{http.request.uri}"`, `"http://b.test{http.request.uri}"`,
		`"listen":[":443"]`, `"listen":[":80"]`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("rendered config lacks %s", want)
		}
	}
	if c.Apps.TLS.Automation.Policies[0].Issuers[0].Email != "" {
		t.Error("acme issuer has an e-mail though none is set")
	}
}

func TestSitesRefused(t *testing.T) {
	for name, s := range map[string]agentproto.ProxySite{
		"placeholder": {Hostname: "{env.HOME}.test", AppID: "a", TLSMode: agentproto.TLSOff},
		"space":       {Hostname: "a b.test", AppID: "a", TLSMode: agentproto.TLSOff},
		"empty":       {Hostname: "", AppID: "a", TLSMode: agentproto.TLSOff},
		"empty label": {Hostname: "a..test", AppID: "a", TLSMode: agentproto.TLSOff},
		"port":        {Hostname: "a.test:80", AppID: "a", TLSMode: agentproto.TLSOff},
		"too long":    {Hostname: strings.Repeat("a.", 126) + "test", AppID: "a", TLSMode: agentproto.TLSOff},
		"long www":    {Hostname: strings.Repeat("a.", 122) + "test", AppID: "a", TLSMode: agentproto.TLSOff, RedirectWWW: true},
		"tls mode":    {Hostname: "a.test", AppID: "a", TLSMode: "on"},
		"no app":      {Hostname: "a.test", TLSMode: agentproto.TLSOff},
	} {
		if _, err := sites(agentproto.ProxyConfig{Sites: []agentproto.ProxySite{s}}); err == nil {
			t.Errorf("%s: %q accepted", name, s.Hostname)
		}
	}
	dup := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "a.test", AppID: "a", TLSMode: agentproto.TLSOff},
		{Hostname: "A.test", AppID: "b", TLSMode: agentproto.TLSOff},
	}}
	if _, err := sites(dup); err == nil {
		t.Error("duplicate hostname accepted")
	}
	// A www name that is a site of its own is not also a redirect.
	ss, err := sites(agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "a.test", AppID: "a", TLSMode: agentproto.TLSInternal, RedirectWWW: true},
		{Hostname: "www.a.test", AppID: "b", TLSMode: agentproto.TLSInternal},
	}})
	if err != nil || ss[0].redirWWW {
		t.Errorf("www collision: %v, %+v", err, ss)
	}
	if err := CheckHostname("*.wild.test"); err != nil {
		t.Errorf("wildcard refused: %v", err)
	}
	for _, u := range []string{"127.0.0.1", "127.0.0.1:0", "127.0.0.1:x", "{env.X}:80", "[::1]:99999"} {
		if checkUpstream(u) == nil {
			t.Errorf("upstream %q accepted", u)
		}
	}
	if err := checkUpstream("127.0.0.1:8080"); err != nil {
		t.Error(err)
	}
}

func TestSettingsCheck(t *testing.T) {
	for _, s := range []Settings{{}, {AdminURL: "unix//run/caddy.sock"}, {AdminURL: "http://127.0.0.1:2019"}} {
		if err := s.Check(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, s := range []Settings{
		{AdminURL: "http://127.0.0.1"},
		{AdminURL: "https://127.0.0.1:2019"},
		{AdminURL: "unix/run/caddy.sock"},
		{AdminURL: "unix//run/caddy.sock|0440"},
		{AdminURL: "unix//run/{env.X}.sock"},
		{HTTPPort: 443},
		{HTTPSPort: 70000},
		{DNSServer: "dns.example:53"},
	} {
		if s.Check() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

func TestRenderPublishedPorts(t *testing.T) {
	st := Settings{AdminURL: "http://127.0.0.1:2999", HTTPPort: 8080, HTTPSPort: 8443, UpstreamDir: "/run/ups"}.withDefaults()
	cfg := agentproto.ProxyConfig{
		Sites: []agentproto.ProxySite{{Hostname: "a.test", AppID: "app_1", TLSMode: agentproto.TLSOff}},
		Ports: []agentproto.ProxyPort{
			{AppID: "app_2", Bind: "::1", Port: 9300},
			{AppID: "app_1", Bind: "127.0.0.1", Port: 9100},
			{AppID: "app_3", Bind: "0.0.0.0", Port: 9200},
		},
	}
	ss, err := sites(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := ports(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ids := appIDs(ss, pubs); !slices.Equal(ids, []string{"app_1", "app_3", "app_2"}) {
		t.Errorf("apps served: %v", ids)
	}
	c := render(st, ss, pubs, map[string]string{"app_1": "127.0.0.1:7001", "app_2": "127.0.0.1:7002"})
	if n := len(c.Apps.HTTP.Servers); n != 5 {
		t.Fatalf("%d servers, want the HTTPS and HTTP ones and one per published port", n)
	}
	for port, want := range map[string]struct {
		listen, dial string
		status       int
	}{
		"9100": {"127.0.0.1:9100", "{file./run/ups/app_1}", 0},
		"9300": {"[::1]:9300", "{file./run/ups/app_2}", 0},
		"9200": {"0.0.0.0:9200", "", 503}, // app_3 has no upstream
	} {
		s := c.Apps.HTTP.Servers[portServerPrefix+port]
		if s == nil {
			t.Fatalf("no server for port %s", port)
		}
		if !slices.Equal(s.Listen, []string{want.listen}) || !s.AutoHTTPS.Disable || s.Logs != nil || len(s.TLSPolicies) != 0 {
			t.Errorf("port %s: listen %v, automatic_https %+v, logs %+v, %d TLS policies", port, s.Listen, s.AutoHTTPS, s.Logs, len(s.TLSPolicies))
		}
		if len(s.Routes) != 1 || len(s.Routes[0].Match) != 0 {
			t.Fatalf("port %s: routes %+v, want one for every host", port, s.Routes)
		}
		h := s.Routes[0].Handle[0]
		if want.status != 0 {
			if h.Handler != "static_response" || h.StatusCode != want.status {
				t.Errorf("port %s: %+v, want %d", port, h, want.status)
			}
			continue
		}
		if h.Handler != "reverse_proxy" || len(h.Upstreams) != 1 || h.Upstreams[0].Dial != want.dial {
			t.Errorf("port %s: %+v, want a reverse proxy to %s", port, h, want.dial)
		}
	}
	b, _ := json.Marshal(c)
	if strings.Contains(string(b), "http.log.access."+portServerPrefix) {
		t.Errorf("a published port has an access log: %s", b)
	}
}

func TestPortsRefused(t *testing.T) {
	st := Settings{AdminURL: "http://127.0.0.1:2999", HTTPPort: 8080, HTTPSPort: 8443}.withDefaults()
	for name, pp := range map[string]agentproto.ProxyPort{
		"no app":     {Bind: "127.0.0.1", Port: 9000},
		"zero port":  {AppID: "a", Bind: "127.0.0.1"},
		"big port":   {AppID: "a", Bind: "127.0.0.1", Port: 65536},
		"hostname":   {AppID: "a", Bind: "localhost", Port: 9000},
		"empty bind": {AppID: "a", Port: 9000},
		"zone":       {AppID: "a", Bind: "fe80::1%eth0", Port: 9000},
		"with port":  {AppID: "a", Bind: "127.0.0.1:9000", Port: 9000},
		"http port":  {AppID: "a", Bind: "127.0.0.1", Port: 8080},
		"https port": {AppID: "a", Bind: "127.0.0.1", Port: 8443},
		"admin port": {AppID: "a", Bind: "127.0.0.1", Port: 2999},
	} {
		if _, err := ports(st, agentproto.ProxyConfig{Ports: []agentproto.ProxyPort{pp}}); err == nil {
			t.Errorf("%s: %+v accepted", name, pp)
		}
	}
	// A port is published once, whatever the addresses: 0.0.0.0 overlaps
	// 127.0.0.1.
	if _, err := ports(st, agentproto.ProxyConfig{Ports: []agentproto.ProxyPort{
		{AppID: "a", Bind: "127.0.0.1", Port: 9000}, {AppID: "b", Bind: "0.0.0.0", Port: 9000},
	}}); err == nil {
		t.Error("one port published twice accepted")
	}
	// On a socket, no TCP port is the admin endpoint's.
	sock := Settings{}.withDefaults()
	if _, err := ports(sock, agentproto.ProxyConfig{Ports: []agentproto.ProxyPort{{AppID: "a", Bind: "127.0.0.1", Port: 2999}}}); err != nil {
		t.Error(err)
	}
}
