package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agent/traffic"
)

// proxyFlags configure the reverse proxy (Caddy) the agent drives and the
// traffic report read from its access log.
type proxyFlags struct {
	CaddyAdmin     string `name:"caddy-admin" env:"CAPSTAN_CADDY_ADMIN" default:"unix//run/capstan-proxy/admin.sock|0660" help:"Caddy's admin API: a unix socket as Caddy's admin.listen names it (unix//path|mode, the installer's), or http://host:port. The agent renders the same address into Caddy's configuration."`
	ProxyHTTPPort  int    `name:"proxy-http-port" env:"CAPSTAN_PROXY_HTTP_PORT" default:"80" help:"Port the proxy serves HTTP on."`
	ProxyHTTPSPort int    `name:"proxy-https-port" env:"CAPSTAN_PROXY_HTTPS_PORT" default:"443" help:"Port the proxy serves HTTPS on."`
	ProxyListen    string `name:"proxy-listen-host" env:"CAPSTAN_PROXY_LISTEN_HOST" help:"IP address the proxy's servers listen on (default: every interface)."`
	ProxyAccessLog string `name:"proxy-access-log" env:"CAPSTAN_PROXY_ACCESS_LOG" default:"/var/log/caddy/capstan-access.log" help:"File Caddy writes its JSON access log to; the traffic report reads it."`
	ACMEEmail      string `name:"acme-email" env:"CAPSTAN_ACME_EMAIL" help:"E-mail of the ACME account for automatic certificates (optional)."`
	DNSServer      string `name:"dns-server" env:"CAPSTAN_DNS_SERVER" help:"DNS server (ip:port) domain checks ask instead of the host's resolver."`
	ProxyUpstreams string `name:"proxy-upstream-dir" env:"CAPSTAN_PROXY_UPSTREAM_DIR" default:"/var/lib/capstan-proxy" help:"Directory, readable by Caddy, of a file per application with its upstream address; Caddy 2.8 and later read it at every request, so a release switches without reloading Caddy. Used when it exists (the installer makes it for Caddy 2.8 or later)."`
	StateDir       string `name:"state-dir" env:"CAPSTAN_AGENT_STATE_DIR" default:"/var/lib/capstan-agent" type:"path" help:"Directory of the agent's state (created 0700): the proxy's applied revision, the traffic report's position, and the metric samples and job results not delivered yet (kept across restarts)."`
}

// settings are the proxy's settings on the host whose file system is
// under root ("/"; tests pass a directory of their own).
func (f proxyFlags) settings(root string) proxy.Settings {
	return proxy.Settings{
		AdminURL: f.CaddyAdmin, HTTPPort: f.ProxyHTTPPort, HTTPSPort: f.ProxyHTTPSPort, ListenHost: f.ProxyListen,
		AccessLog: f.ProxyAccessLog, ACMEEmail: f.ACMEEmail, DNSServer: f.DNSServer,
		UpstreamDir: f.upstreamDir(root),
	}
}

// upstreamDir is the proxy's upstream directory if it is one under root,
// else "": without it, upstreams are written into Caddy's configuration.
func (f proxyFlags) upstreamDir(root string) string {
	path := f.ProxyUpstreams
	if filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return f.ProxyUpstreams
	}
	return ""
}

// trafficReporter reports the requests of the proxy's access log.
func (f proxyFlags) trafficReporter(log *slog.Logger) *traffic.Reporter {
	return traffic.New(traffic.Options{LogPath: f.ProxyAccessLog, StateDir: f.StateDir, Logger: log,
		Sites: traffic.NewCaddySites(f.CaddyAdmin)})
}

// trafficLoop runs rep.
func trafficLoop(rep *traffic.Reporter) agent.Loop {
	return agent.Loop{Name: "traffic report", Run: func(ctx context.Context, c *agent.Client) error {
		return rep.Run(ctx, c)
	}}
}
