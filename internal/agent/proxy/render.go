package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent/caddyadmin"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Names in the rendered configuration. The access loggers are
// http.log.access.<server name>.
const (
	httpsServer = "capstan_https"
	httpServer  = "capstan_http"
	accessLog   = "capstan_access"
	// portServerPrefix names the server of a published port:
	// capstan_port_<port>.
	portServerPrefix = "capstan_port_"

	// tryDuration is how long a request keeps retrying to dial its
	// upstream (a container being switched or restarting) before 502.
	tryDuration = "5s"
	tryInterval = "100ms"
	// gracePeriod bounds how long a /load waits for the previous
	// configuration's requests to finish.
	gracePeriod = "10s"

	unavailableBody = "This application has no running container.\n"
	unknownSiteBody = "No site is configured for this host name.\n"
)

// maxHostname bounds hostnames below DNS's 253: Caddy 2.6 names its
// certificate files after them (name + ".json"), and a name too long for
// the filesystem fails the load after the new servers started, which
// leaves them serving next to the old ones.
const maxHostname = 250

// CheckHostname reports whether h is a hostname the proxy may serve: DNS
// labels of letters, digits, '-' and '_', an optional leading "*." wildcard,
// at most 250 characters. It keeps Caddy placeholders ({…}) and anything
// else that is not a name out of the configuration.
func CheckHostname(h string) error {
	if h == "" {
		return fmt.Errorf("empty hostname")
	}
	if len(h) > maxHostname {
		return fmt.Errorf("hostname %.40q…: longer than %d characters", h, maxHostname)
	}
	for i, label := range strings.Split(h, ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 {
			return fmt.Errorf("hostname %q: empty label or label longer than 63 characters", h)
		}
		for _, c := range []byte(label) {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("hostname %q: invalid character %q", h, c)
			}
		}
	}
	return nil
}

// checkUpstream accepts host:port with a numeric port.
func checkUpstream(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("upstream %q: %v", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("upstream %q: invalid port", addr)
	}
	if _, err := netip.ParseAddr(host); err != nil && CheckHostname(host) != nil {
		return fmt.Errorf("upstream %q: invalid host", addr)
	}
	return nil
}

// site is a validated ProxySite.
type site struct {
	host     string // lowercased
	appID    string
	tls      bool   // auto or internal
	issuer   string // "internal" or "acme"; empty when !tls
	redirWWW bool
}

// sites validates and normalizes cfg. Hostnames must be unique; a www
// redirect whose name is also a site of its own is left out.
func sites(cfg agentproto.ProxyConfig) ([]site, error) {
	out := make([]site, 0, len(cfg.Sites))
	seen := map[string]bool{}
	for i, s := range cfg.Sites {
		h := strings.ToLower(s.Hostname)
		if err := CheckHostname(h); err != nil {
			return nil, fmt.Errorf("site %d: %w", i, err)
		}
		if seen[h] {
			return nil, fmt.Errorf("site %d: hostname %s appears twice", i, h)
		}
		seen[h] = true
		if s.AppID == "" {
			return nil, fmt.Errorf("site %d (%s): no app_id", i, h)
		}
		st := site{host: h, appID: s.AppID, redirWWW: s.RedirectWWW}
		switch s.TLSMode {
		case agentproto.TLSAuto:
			st.tls, st.issuer = true, "acme"
		case agentproto.TLSInternal:
			st.tls, st.issuer = true, "internal"
		case agentproto.TLSOff:
		default:
			return nil, fmt.Errorf("site %d (%s): invalid tls_mode %q", i, h, s.TLSMode)
		}
		if st.redirWWW {
			if err := CheckHostname("www." + h); err != nil {
				return nil, fmt.Errorf("site %d: www redirect: %w", i, err)
			}
		}
		out = append(out, st)
	}
	for i := range out {
		if out[i].redirWWW && seen["www."+out[i].host] {
			out[i].redirWWW = false
		}
	}
	slices.SortFunc(out, func(a, b site) int { return strings.Compare(a.host, b.host) })
	return out, nil
}

// published is a validated ProxyPort.
type published struct {
	appID string
	bind  netip.Addr
	port  int
}

func (p published) listen() string {
	return net.JoinHostPort(p.bind.String(), strconv.Itoa(p.port))
}

// ports validates cfg's published ports against st: a port is published
// once (whatever its address: a wildcard address overlaps every other),
// never on a port of the proxy's own servers or its admin endpoint, and
// its bind is an IP address literal. They come sorted by port.
func ports(st Settings, cfg agentproto.ProxyConfig) ([]published, error) {
	reserved := map[int]string{st.HTTPPort: "the proxy's HTTP port", st.HTTPSPort: "the proxy's HTTPS port"}
	if e, err := caddyadmin.Parse(st.AdminURL); err == nil && e.Socket == "" {
		if _, p, err := net.SplitHostPort(e.Listen); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				reserved[n] = "the proxy's admin endpoint"
			}
		}
	}
	out := make([]published, 0, len(cfg.Ports))
	seen := map[int]string{}
	for i, pp := range cfg.Ports {
		if pp.AppID == "" {
			return nil, fmt.Errorf("port %d: no app_id", i)
		}
		if pp.Port < 1 || pp.Port > 65535 {
			return nil, fmt.Errorf("port %d (app %s): port %d out of range", i, pp.AppID, pp.Port)
		}
		bind, err := netip.ParseAddr(pp.Bind)
		if err != nil || bind.Zone() != "" {
			return nil, fmt.Errorf("port %d (app %s): bind %q is not an IP address", i, pp.AppID, pp.Bind)
		}
		if what, ok := reserved[pp.Port]; ok {
			return nil, fmt.Errorf("port %d (app %s): port %d is %s", i, pp.AppID, pp.Port, what)
		}
		if other, ok := seen[pp.Port]; ok {
			return nil, fmt.Errorf("port %d (app %s): port %d is published by app %s too", i, pp.AppID, pp.Port, other)
		}
		seen[pp.Port] = pp.AppID
		out = append(out, published{appID: pp.AppID, bind: bind.Unmap(), port: pp.Port})
	}
	slices.SortFunc(out, func(a, b published) int { return a.port - b.port })
	return out, nil
}

// The subset of Caddy's JSON configuration that is rendered
// (https://caddyserver.com/docs/json/).
type (
	caddyConfig struct {
		Admin   adminConfig   `json:"admin"`
		Logging loggingConfig `json:"logging"`
		Apps    appsConfig    `json:"apps"`
	}
	adminConfig struct {
		Listen string `json:"listen"`
		// Origins are the Host headers the admin API accepts; on a unix
		// socket, Caddy before 2.7 accepts only an empty one unless told.
		Origins []string `json:"origins,omitempty"`
	}
	loggingConfig struct {
		Logs map[string]*logConfig `json:"logs"`
	}
	logConfig struct {
		Writer  *logWriter  `json:"writer,omitempty"`
		Encoder *logEncoder `json:"encoder,omitempty"`
		Include []string    `json:"include,omitempty"`
		Exclude []string    `json:"exclude,omitempty"`
	}
	logWriter struct {
		Output   string `json:"output"`
		Filename string `json:"filename"`
	}
	logEncoder struct {
		Format string `json:"format"`
	}
	appsConfig struct {
		HTTP httpApp `json:"http"`
		TLS  tlsApp  `json:"tls"`
		PKI  pkiApp  `json:"pki"`
	}
	httpApp struct {
		HTTPPort    int                `json:"http_port"`
		HTTPSPort   int                `json:"https_port"`
		GracePeriod string             `json:"grace_period"`
		Servers     map[string]*server `json:"servers"`
	}
	server struct {
		Listen      []string   `json:"listen"`
		Protocols   []string   `json:"protocols"`
		TLSPolicies []struct{} `json:"tls_connection_policies,omitempty"`
		AutoHTTPS   autoHTTPS  `json:"automatic_https"`
		// Logs nil: no access log (published ports).
		Logs   *serverLogs `json:"logs,omitempty"`
		Routes []route     `json:"routes"`
	}
	autoHTTPS struct {
		Disable          bool `json:"disable,omitempty"`
		DisableRedirects bool `json:"disable_redirects,omitempty"`
	}
	serverLogs struct {
		DefaultLoggerName string `json:"default_logger_name"`
	}
	route struct {
		Match    []hostMatch `json:"match,omitempty"`
		Handle   []handler   `json:"handle"`
		Terminal bool        `json:"terminal,omitempty"`
	}
	hostMatch struct {
		Host []string `json:"host"`
	}
	// handler is a reverse_proxy or static_response handler.
	handler struct {
		Handler string `json:"handler"`
		// reverse_proxy
		Upstreams     []upstream     `json:"upstreams,omitempty"`
		LoadBalancing *loadBalancing `json:"load_balancing,omitempty"`
		// static_response
		StatusCode int                 `json:"status_code,omitempty"`
		Headers    map[string][]string `json:"headers,omitempty"`
		Body       string              `json:"body,omitempty"`
	}
	upstream struct {
		Dial string `json:"dial"`
	}
	loadBalancing struct {
		TryDuration string `json:"try_duration"`
		TryInterval string `json:"try_interval"`
	}
	tlsApp struct {
		Automation *automation `json:"automation,omitempty"`
	}
	automation struct {
		Policies []policy `json:"policies"`
	}
	policy struct {
		Subjects []string `json:"subjects"`
		Issuers  []issuer `json:"issuers"`
	}
	issuer struct {
		Module string `json:"module"`
		Email  string `json:"email,omitempty"`
	}
	pkiApp struct {
		CertificateAuthorities map[string]pkiCA `json:"certificate_authorities"`
	}
	pkiCA struct {
		// InstallTrust is always false: the agent never touches the
		// system trust store. Not omitempty: false must be explicit.
		InstallTrust bool `json:"install_trust"`
	}
)

// render builds the whole Caddy configuration for sites and published
// ports, each served by upstreams[appID], or answering 503 when its app
// has none.
//
// Shape: one HTTPS server (tls auto and internal sites, TLS always on) and
// one HTTP server (tls off sites, plus a 308 to HTTPS for every TLS site);
// both end with a 404 catch-all. Caddy's own HTTP→HTTPS redirects are
// disabled: on our HTTP server it would append them behind our catch-all,
// and with a non-default HTTPS port it injects a catch-all redirect of its
// own; the explicit routes do the same (308, Location with the HTTPS port
// unless 443). Certificates: one automation policy per issuer (internal,
// acme) with the TLS sites' names as subjects; the local CA never installs
// its root into the system trust store. Each published port is a server
// of its own (capstan_port_<port>): plain HTTP on bind:port, every
// request to its app's upstream whatever the host, no access log (the
// traffic reports count domains).
func render(st Settings, sites []site, pubs []published, upstreams map[string]string) caddyConfig {
	httpsS := &server{
		Listen:      []string{net.JoinHostPort(st.ListenHost, strconv.Itoa(st.HTTPSPort))},
		Protocols:   []string{"h1", "h2"},
		TLSPolicies: []struct{}{{}},
		AutoHTTPS:   autoHTTPS{DisableRedirects: true},
		Logs:        &serverLogs{DefaultLoggerName: httpsServer},
	}
	httpS := &server{
		Listen:    []string{net.JoinHostPort(st.ListenHost, strconv.Itoa(st.HTTPPort))},
		Protocols: []string{"h1", "h2"},
		AutoHTTPS: autoHTTPS{Disable: true},
		Logs:      &serverLogs{DefaultLoggerName: httpServer},
	}
	subjects := map[string][]string{} // issuer module → names
	for _, s := range sites {
		serve := serveHandler(st, s.appID, upstreams[s.appID])
		if !s.tls {
			httpS.Routes = append(httpS.Routes, hostRoute(s.host, serve))
			if s.redirWWW {
				httpS.Routes = append(httpS.Routes, hostRoute("www."+s.host,
					redirect(http301, "http://"+s.host+portSuffix(st.HTTPPort, 80)+"{http.request.uri}")))
			}
			continue
		}
		toHTTPS := "https://" + s.host + portSuffix(st.HTTPSPort, 443) + "{http.request.uri}"
		httpsS.Routes = append(httpsS.Routes, hostRoute(s.host, serve))
		httpS.Routes = append(httpS.Routes, hostRoute(s.host, redirect(http308, toHTTPS)))
		subjects[s.issuer] = append(subjects[s.issuer], s.host)
		if s.redirWWW {
			www := "www." + s.host
			httpsS.Routes = append(httpsS.Routes, hostRoute(www, redirect(http301, toHTTPS)))
			httpS.Routes = append(httpS.Routes, hostRoute(www, redirect(http301, toHTTPS)))
			subjects[s.issuer] = append(subjects[s.issuer], www)
		}
	}
	notFound := route{Handle: []handler{static(404, unknownSiteBody)}}
	httpsS.Routes = append(httpsS.Routes, notFound)
	httpS.Routes = append(httpS.Routes, notFound)

	servers := map[string]*server{httpsServer: httpsS, httpServer: httpS}
	for _, p := range pubs {
		servers[portServerPrefix+strconv.Itoa(p.port)] = &server{
			Listen:    []string{p.listen()},
			Protocols: []string{"h1", "h2c"},
			AutoHTTPS: autoHTTPS{Disable: true},
			Routes:    []route{{Handle: []handler{serveHandler(st, p.appID, upstreams[p.appID])}, Terminal: true}},
		}
	}

	cfg := caddyConfig{
		Admin: st.admin(),
		Logging: loggingConfig{Logs: map[string]*logConfig{
			// The default log (stderr) keeps everything else.
			"default": {Exclude: accessLoggers()},
			accessLog: {
				Writer:  &logWriter{Output: "file", Filename: st.AccessLog},
				Encoder: &logEncoder{Format: "json"},
				Include: accessLoggers(),
			},
		}},
		Apps: appsConfig{
			HTTP: httpApp{
				HTTPPort: st.HTTPPort, HTTPSPort: st.HTTPSPort, GracePeriod: gracePeriod,
				Servers: servers,
			},
			PKI: pkiApp{CertificateAuthorities: map[string]pkiCA{"local": {InstallTrust: false}}},
		},
	}
	var policies []policy
	if names := subjects["internal"]; len(names) > 0 {
		policies = append(policies, policy{Subjects: names, Issuers: []issuer{{Module: "internal"}}})
	}
	if names := subjects["acme"]; len(names) > 0 {
		policies = append(policies, policy{Subjects: names, Issuers: []issuer{{Module: "acme", Email: st.ACMEEmail}}})
	}
	if len(policies) > 0 {
		cfg.Apps.TLS.Automation = &automation{Policies: policies}
	}
	return cfg
}

func accessLoggers() []string {
	return []string{"http.log.access." + httpsServer, "http.log.access." + httpServer}
}

const (
	http301 = 301
	http308 = 308
)

func hostRoute(host string, h handler) route {
	return route{Match: []hostMatch{{Host: []string{host}}}, Handle: []handler{h}, Terminal: true}
}

// serveHandler proxies to app's upstream addr, or answers 503 when there
// is none. With an upstream directory, Caddy reads the address from the
// app's file there ({file.*}) at every request and dial retry.
func serveHandler(st Settings, app, addr string) handler {
	if addr == "" {
		h := static(503, unavailableBody)
		h.Headers["Retry-After"] = []string{"10"}
		return h
	}
	dial := addr
	if path, ok := st.upstreamFile(app); ok {
		dial = "{file." + path + "}"
	}
	// No active or passive health checks: the one upstream is never
	// marked down by the proxy (the deployer checks the app's health);
	// a failed dial is retried for tryDuration, which covers a switch.
	return handler{
		Handler:       "reverse_proxy",
		Upstreams:     []upstream{{Dial: dial}},
		LoadBalancing: &loadBalancing{TryDuration: tryDuration, TryInterval: tryInterval},
	}
}

func static(status int, body string) handler {
	return handler{
		Handler: "static_response", StatusCode: status, Body: body,
		Headers: map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}},
	}
}

func redirect(status int, location string) handler {
	return handler{Handler: "static_response", StatusCode: status, Headers: map[string][]string{"Location": {location}}}
}

func portSuffix(port, def int) string {
	if port == def {
		return ""
	}
	return ":" + strconv.Itoa(port)
}
