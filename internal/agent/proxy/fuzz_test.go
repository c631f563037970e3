package proxy

import (
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// FuzzRender feeds arbitrary desired proxy states (as the control plane's
// JSON) and upstreams to the Caddy configuration renderer. It never
// panics; a state it accepts renders to JSON in which every hostname is a
// checked one, every upstream a checked address, and nothing of the input
// lands outside the strings it belongs in.
func FuzzRender(f *testing.F) {
	for _, seed := range []struct{ cfg, ups string }{
		{`{"revision":1,"sites":[{"hostname":"app.example.com","app_id":"app_1","tls_mode":"auto","redirect_www":true}]}`, `{"app_1":"127.0.0.1:9001"}`},
		{`{"sites":[{"hostname":"a.test","app_id":"app_1","tls_mode":"internal"},{"hostname":"www.a.test","app_id":"app_1","tls_mode":"off"}]}`, `{"app_1":"[::1]:80"}`},
		{`{"sites":[{"hostname":"A.TEST","app_id":"x","tls_mode":"off","redirect_www":true}]}`, `{"x":"localhost:1"}`},
		{`{"sites":[{"hostname":"a\"},{\"b.test","app_id":"x","tls_mode":"auto"}]}`, `{"x":"127.0.0.1:80\"}"}`},
		{`{"sites":[{"hostname":"*.test","app_id":"x","tls_mode":"bogus"}]}`, `{}`},
		{`{"sites":null}`, `null`},
		{`{"sites":[{}]}`, `{"":""}`},
		{`{"sites":[],"ports":[{"app_id":"app_1","bind":"127.0.0.1","port":9100},{"app_id":"app_2","bind":"::","port":9200}]}`, `{"app_1":"127.0.0.1:9001"}`},
		{`{"sites":[],"ports":[{"app_id":"x","bind":"127.0.0.1\"}","port":80}]}`, `{}`},
	} {
		f.Add([]byte(seed.cfg), []byte(seed.ups))
	}
	st := Settings{AdminURL: "http://127.0.0.1:2999", HTTPPort: 8080, HTTPSPort: 8443, ACMEEmail: "ops@example.com"}.withDefaults()
	f.Fuzz(func(t *testing.T, cfgJSON, upsJSON []byte) {
		var cfg agentproto.ProxyConfig
		if json.Unmarshal(cfgJSON, &cfg) != nil {
			return
		}
		var raw map[string]string
		_ = json.Unmarshal(upsJSON, &raw)
		ss, err := sites(cfg)
		if err != nil {
			return
		}
		ups := map[string]string{}
		for app, addr := range raw {
			if checkUpstream(addr) == nil {
				ups[app] = addr
			}
		}
		pubs, err := ports(st, cfg)
		if err != nil {
			return
		}
		b, err := json.Marshal(render(st, ss, pubs, ups))
		if err != nil {
			t.Fatalf("rendering %s: %v", cfgJSON, err)
		}
		var back caddyConfig
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("the rendered configuration does not read back: %v\n%s", err, b)
		}
		for name, s := range back.Apps.HTTP.Servers {
			for _, l := range s.Listen {
				host, port, err := net.SplitHostPort(l)
				if err != nil {
					t.Fatalf("server %s listens on %q: %v", name, l, err)
				}
				if _, err := netip.ParseAddr(host); err != nil && host != "" {
					t.Fatalf("server %s listens on host %q", name, host)
				}
				if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
					t.Fatalf("server %s listens on port %q", name, port)
				}
			}
			for _, r := range s.Routes {
				for _, m := range r.Match {
					for _, h := range m.Host {
						if err := CheckHostname(h); err != nil {
							t.Fatalf("server %s matches host %q: %v", name, h, err)
						}
					}
				}
				for _, h := range r.Handle {
					for _, u := range h.Upstreams {
						if err := checkUpstream(u.Dial); err != nil {
							t.Fatalf("server %s dials %q: %v", name, u.Dial, err)
						}
					}
				}
			}
		}
	})
}
