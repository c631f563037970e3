package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestExecutorsRunProxyJobs: this build runs proxy.apply and domain.check.
func TestExecutorsRunProxyJobs(t *testing.T) {
	types := executors().Types()
	for _, want := range []string{agentproto.JobProxyApply, agentproto.JobDomainCheck} {
		if !slices.Contains(types, want) {
			t.Errorf("no executor for %s; registered: %v", want, types)
		}
	}
}

func parseRun(t *testing.T, args ...string) runCmd {
	t.Helper()
	var c cli
	p, err := kong.New(&c, kong.Name("capstan-agent"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(append([]string{"run"}, args...)); err != nil {
		t.Fatal(err)
	}
	return c.Run
}

// TestProxyFlags reads the settings on a file system of its own (root):
// whether this machine has an upstream directory of its own does not
// matter.
func TestProxyFlags(t *testing.T) {
	root := t.TempDir()
	r := parseRun(t)
	want := proxy.Settings{AdminURL: "unix//run/capstan-proxy/admin.sock|0660", HTTPPort: 80, HTTPSPort: 443, AccessLog: "/var/log/caddy/capstan-access.log"}
	if got := r.settings(root); got != want || r.StateDir != "/var/lib/capstan-agent" {
		t.Errorf("defaults: %+v, state dir %q; want %+v, /var/lib/capstan-agent", got, r.StateDir, want)
	}
	if err := r.settings(root).Check(); err != nil {
		t.Errorf("the default settings do not check: %v", err)
	}
	// The default upstream directory, once the installer made it.
	if err := os.MkdirAll(filepath.Join(root, "var/lib/capstan-proxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	want.UpstreamDir = "/var/lib/capstan-proxy"
	if got := r.settings(root); got != want {
		t.Errorf("defaults with the upstream directory: %+v; want %+v", got, want)
	}

	t.Setenv("CAPSTAN_CADDY_ADMIN", "http://127.0.0.1:3019")
	t.Setenv("CAPSTAN_PROXY_HTTP_PORT", "8080")
	t.Setenv("CAPSTAN_PROXY_HTTPS_PORT", "8443")
	t.Setenv("CAPSTAN_PROXY_ACCESS_LOG", "/tmp/access.log")
	t.Setenv("CAPSTAN_ACME_EMAIL", "ops@example.com")
	t.Setenv("CAPSTAN_DNS_SERVER", "127.0.0.1:5353")
	t.Setenv("CAPSTAN_AGENT_STATE_DIR", "/tmp/capstan-state")
	t.Setenv("CAPSTAN_PROXY_UPSTREAM_DIR", "/srv/upstreams")
	r = parseRun(t)
	want = proxy.Settings{
		AdminURL: "http://127.0.0.1:3019", HTTPPort: 8080, HTTPSPort: 8443, AccessLog: "/tmp/access.log",
		ACMEEmail: "ops@example.com", DNSServer: "127.0.0.1:5353",
	}
	if got := r.settings(root); got != want || r.StateDir != "/tmp/capstan-state" {
		t.Errorf("from the environment: %+v, state dir %q; want %+v", got, r.StateDir, want)
	}
	r = parseRun(t, "--proxy-https-port", "9443", "--caddy-admin", "http://localhost:2999", "--proxy-listen-host", "127.0.0.1")
	if s := r.settings(root); s.HTTPSPort != 9443 || s.AdminURL != "http://localhost:2999" || s.ListenHost != "127.0.0.1" {
		t.Errorf("flags: %+v", s)
	}

	// The upstream directory is used when it exists, as the installer
	// makes it for a Caddy that reads upstreams from files.
	if err := os.MkdirAll(filepath.Join(root, "srv/upstreams"), 0o755); err != nil {
		t.Fatal(err)
	}
	if s := parseRun(t).settings(root); s.UpstreamDir != "/srv/upstreams" {
		t.Errorf("existing upstream directory: settings have %q, want /srv/upstreams", s.UpstreamDir)
	}
	if s := parseRun(t, "--proxy-upstream-dir", "/srv/missing").settings(root); s.UpstreamDir != "" {
		t.Errorf("missing upstream directory: settings have %q, want none", s.UpstreamDir)
	}
}
