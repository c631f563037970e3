// Package proxy drives the server's reverse proxy, Caddy, through its admin
// API: it renders the whole Caddy configuration from an
// agentproto.ProxyConfig, with each site's upstream being its application's
// live container, and loads it with POST /load, which Caddy applies
// atomically. It also runs the proxy.apply and domain.check jobs.
//
// What Caddy 2.6 (Debian's) does with a load, and how this package copes:
//   - A configuration refused while it is provisioned leaves the previous
//     one serving, untouched. One that fails after its servers started
//     (e.g. a certificate file name too long for the filesystem) leaves
//     those servers serving next to the previous ones until Caddy
//     restarts; hostnames are therefore checked here first (CheckHostname)
//     and both servers always listen, so that later loads bind nothing new.
//   - A reload binds new SO_REUSEPORT sockets and closes the old ones:
//     requests on established connections are not lost, but a connection
//     being set up in that instant may be reset (fewer with
//     net.ipv4.tcp_migrate_req=1), fail its TLS handshake, or be closed
//     unanswered (see below: a release reloads nothing with Caddy 2.8+).
//   - A loaded configuration lives in Caddy's memory and its autosave; run
//     Caddy with --resume (Debian's caddy-api.service) so that a restart
//     of Caddy keeps it.
//
// Caddy 2.7 and later keep their certificate cache across loads. From
// 2.8 on, Caddy reads an upstream address from a file at every request
// ({file.*}): with Settings.UpstreamDir, each app's upstream is a file
// there and the configuration names the file, so a release, which only
// changes an upstream, rewrites that file and leaves the configuration
// as it was. Caddy then reloads nothing, and no connection being set up
// at that instant is dropped (Caddy 2.6 fails its TLS handshake; a newer
// Caddy built with Go 1.24 or later closes it unanswered when the old
// server that accepted it is shutting down).
//
// The package imports agentproto, the agent runtime and the Docker client;
// nothing of the control plane.
package proxy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/caddyadmin"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Defaults of Settings.
const (
	DefaultAdminURL  = caddyadmin.Default
	DefaultHTTPPort  = 80
	DefaultHTTPSPort = 443
	DefaultAccessLog = "/var/log/caddy/capstan-access.log"

	// loadTimeout bounds one POST /load: Caddy waits up to gracePeriod for
	// the previous configuration's requests.
	loadTimeout = 60 * time.Second
	maxErrBytes = 64 << 10
)

// Settings say where Caddy is and what it serves on.
type Settings struct {
	// AdminURL is Caddy's admin API: a unix socket as Caddy's
	// admin.listen names it (unix//path|mode; DefaultAdminURL, the
	// installer's) or http://host:port. The rendered configuration keeps
	// the admin endpoint on that address.
	AdminURL string
	// HTTPPort and HTTPSPort are the ports Caddy listens on.
	HTTPPort, HTTPSPort int
	// ListenHost is the address Caddy's servers listen on; empty means
	// every interface (tests use 127.0.0.1).
	ListenHost string
	// AccessLog is the file Caddy writes its JSON access log to.
	AccessLog string
	// ACMEEmail is the ACME account's e-mail for tls auto; may be empty.
	ACMEEmail string
	// DNSServer, ip:port, is the DNS server domain.check asks; empty means
	// the host's resolver.
	DNSServer string
	// StateDir is where the highest proxy state revision applied is kept
	// (StateFile), so that an agent restart does not forget it; empty
	// means in memory only.
	StateDir string
	// ServerID is the agent's enrollment: revisions are numbered per
	// server, and a revision kept for another one is ignored.
	ServerID string
	// UpstreamDir, an absolute path Caddy can read, holds one file per
	// app with its upstream address, which Caddy 2.8 and later read at
	// every request: then a change of upstream alone needs no
	// configuration load. Empty: upstreams are written into the
	// configuration (any Caddy from 2.6).
	UpstreamDir string
}

// appFileName is an app id that can name its upstream file.
var appFileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// upstreamFile is the file of app's upstream, if there is an upstream
// directory and app's id can name a file.
func (s Settings) upstreamFile(app string) (string, bool) {
	if s.UpstreamDir == "" || !appFileName.MatchString(app) {
		return "", false
	}
	return filepath.Join(s.UpstreamDir, app), true
}

// withDefaults fills the zero fields.
func (s Settings) withDefaults() Settings {
	s.AdminURL = cmp.Or(s.AdminURL, DefaultAdminURL)
	s.HTTPPort = cmp.Or(s.HTTPPort, DefaultHTTPPort)
	s.HTTPSPort = cmp.Or(s.HTTPSPort, DefaultHTTPSPort)
	s.AccessLog = cmp.Or(s.AccessLog, DefaultAccessLog)
	return s
}

// admin is Caddy's admin configuration: the admin address as admin.listen
// (the socket with its file mode, or host:port), kept so that a /load does
// not move the admin endpoint, and on a socket the Host the agent sends.
func (s Settings) admin() adminConfig {
	e, err := caddyadmin.Parse(s.AdminURL)
	if err != nil {
		return adminConfig{}
	}
	a := adminConfig{Listen: e.Listen}
	if e.Socket != "" {
		a.Origins = []string{caddyadmin.SocketHost}
	}
	return a
}

// Check reports settings that cannot work.
func (s Settings) Check() error {
	s = s.withDefaults()
	if _, err := caddyadmin.Parse(s.AdminURL); err != nil {
		return err
	}
	for _, p := range []int{s.HTTPPort, s.HTTPSPort} {
		if p < 1 || p > 65535 {
			return fmt.Errorf("proxy port %d out of range", p)
		}
	}
	if s.HTTPPort == s.HTTPSPort {
		return fmt.Errorf("proxy HTTP and HTTPS ports are both %d", s.HTTPPort)
	}
	if s.ListenHost != "" {
		if _, err := netip.ParseAddr(s.ListenHost); err != nil {
			return fmt.Errorf("proxy listen host %q: want an IP address", s.ListenHost)
		}
	}
	if s.DNSServer != "" {
		if _, err := netAddrPort(s.DNSServer); err != nil {
			return fmt.Errorf("DNS server %q: want ip:port", s.DNSServer)
		}
	}
	if d := s.UpstreamDir; d != "" {
		// It goes into a Caddy placeholder: nothing that ends or nests one.
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || strings.ContainsAny(d, "{}\\") ||
			strings.IndexFunc(d, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			return fmt.Errorf("proxy upstream directory %q: want a clean absolute path without spaces, braces or backslashes", d)
		}
	}
	return nil
}

// Docker lists containers; *client.Client (github.com/moby/moby/client)
// satisfies it.
type Docker interface {
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
}

// LocalDocker returns a client of the local engine (DOCKER_HOST, or the
// default socket). Making it does not connect.
func LocalDocker() (*client.Client, error) {
	return dockerc.New("")
}

// Proxy applies proxy configurations to one Caddy. It is safe for
// concurrent use; applies are serialized.
type Proxy struct {
	settings Settings
	docker   Docker // nil: no discovery, sites without an override answer 503
	admin    caddyadmin.Endpoint
	adminErr error // the admin address does not parse
	hc       *http.Client

	mu sync.Mutex // serializes applies; guards current and revision*
	// current is the upstream of each app in the configuration loaded
	// last.
	current map[string]string
	// revision is the highest proxy state revision taken to apply (see
	// takeRevision); revisionLoaded says it was read from the state file.
	revision       int64
	revisionLoaded bool
	// beforeLoad, for tests, edits the rendered configuration.
	beforeLoad func(*caddyConfig)
	// onLoad (nil: none) is called after each configuration Caddy
	// accepted; set by OnLoad before the first apply.
	onLoad func()
	// others (nil: none) finds the upstreams of applications that do not
	// run in containers; set by OtherUpstreams before the first apply.
	others func(ctx context.Context) (map[string]string, error)
}

// OtherUpstreams makes fn the source of the upstreams of applications
// that are not containers (service applications' live slots); they come
// before those found by Docker labels. Call it before the first apply.
func (p *Proxy) OtherUpstreams(fn func(ctx context.Context) (map[string]string, error)) {
	p.others = fn
}

// OnLoad makes fn be called after each configuration Caddy accepted, with
// the applies still serialized: the traffic report reads the configured
// sites again then. fn must not block. Call it before the first apply.
func (p *Proxy) OnLoad(fn func()) { p.onLoad = fn }

// New returns a Proxy for the Caddy of settings (zero fields: defaults).
// docker finds the applications' live containers; nil disables that, and
// then only the upstreams passed to Apply are served.
func New(settings Settings, docker Docker) *Proxy {
	settings = settings.withDefaults()
	admin, err := caddyadmin.Parse(settings.AdminURL)
	return &Proxy{
		settings: settings,
		docker:   docker,
		admin:    admin,
		adminErr: err,
		// A load that changes the admin settings makes Caddy restart its
		// admin server, which resets the kept-alive connection of the
		// load before it: a POST on it fails and is not retried. One
		// local connection per load costs nothing in comparison.
		hc: admin.Client(false, 0),
	}
}

// Settings returns the proxy's settings, defaults filled in.
func (p *Proxy) Settings() Settings { return p.settings }

// Apply renders cfg into a whole Caddy configuration and loads it. The
// upstream ("127.0.0.1:PORT") of an app in upstreams is that one; every
// other app's is its live container's (found by Docker labels); a site
// whose app has neither answers 503. Caddy applies a load atomically: when
// it refuses one, the previous configuration keeps serving and the error
// carries Caddy's message.
//
// A cfg whose revision is lower than one applied before is not applied:
// the error is a *StaleError. Applies are serialized, so of several
// racing the highest revision is the one that stays.
func (p *Proxy) Apply(ctx context.Context, cfg agentproto.ProxyConfig, upstreams map[string]string) error {
	_, err := p.apply(ctx, cfg, upstreams)
	return err
}

// apply is Apply, returning the upstream of every app that has one.
func (p *Proxy) apply(ctx context.Context, cfg agentproto.ProxyConfig, overrides map[string]string) (map[string]string, error) {
	ss, err := sites(cfg)
	if err != nil {
		return nil, fmt.Errorf("proxy configuration: %w", err)
	}
	pubs, err := ports(p.settings, cfg)
	if err != nil {
		return nil, fmt.Errorf("proxy configuration: %w", err)
	}
	for app, addr := range overrides {
		if err := checkUpstream(addr); err != nil {
			return nil, fmt.Errorf("app %s: %w", app, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.takeRevision(cfg.Revision); err != nil {
		return nil, err
	}
	ups, err := p.upstreams(ctx, appIDs(ss, pubs), overrides)
	if err != nil {
		return nil, err
	}
	// The files first: a configuration that names one is served at once.
	// A configuration Caddy refuses leaves everything as it was, files
	// included.
	undo, err := p.writeUpstreams(ups)
	if err != nil {
		undo()
		return nil, err
	}
	c := render(p.settings, ss, pubs, ups)
	if p.beforeLoad != nil {
		p.beforeLoad(&c)
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if err := p.load(ctx, body); err != nil {
		undo()
		return nil, withPortHint(err, pubs)
	}
	if p.onLoad != nil {
		p.onLoad()
	}
	p.current = ups
	p.pruneUpstreams(ups)
	return maps.Clone(ups), nil
}

// writeUpstreams writes the upstream file of every app of ups whose
// content differs, each replaced whole (a new file renamed over the old),
// so that Caddy reads either address, never a mix. undo puts back the
// files it changed.
func (p *Proxy) writeUpstreams(ups map[string]string) (undo func(), err error) {
	type previous struct {
		path    string
		data    []byte
		existed bool
	}
	var changed []previous
	undo = func() {
		for _, c := range slices.Backward(changed) {
			if c.existed {
				_ = writeFileAtomic(c.path, c.data)
			} else {
				_ = os.Remove(c.path)
			}
		}
	}
	for _, app := range slices.Sorted(maps.Keys(ups)) {
		path, ok := p.settings.upstreamFile(app)
		if !ok {
			continue
		}
		b, err := os.ReadFile(path)
		if err == nil && string(b) == ups[app] {
			continue
		}
		if err := writeFileAtomic(path, []byte(ups[app])); err != nil {
			return undo, fmt.Errorf("proxy upstream of app %s: %w", app, err)
		}
		changed = append(changed, previous{path: path, data: b, existed: err == nil})
	}
	return undo, nil
}

// pruneUpstreams removes the upstream files of apps that are not in ups
// (the configuration just loaded names none of them).
func (p *Proxy) pruneUpstreams(ups map[string]string) {
	if p.settings.UpstreamDir == "" {
		return
	}
	entries, err := os.ReadDir(p.settings.UpstreamDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if _, ok := ups[name]; ok || !e.Type().IsRegular() || !appFileName.MatchString(name) {
			continue
		}
		_ = os.Remove(filepath.Join(p.settings.UpstreamDir, name))
	}
}

// writeFileAtomic replaces path with a file of data, mode 0644.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// appIDs are the apps that sites and published ports serve, each once,
// in order.
func appIDs(ss []site, pubs []published) []string {
	var ids []string
	seen := map[string]bool{}
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, s := range ss {
		add(s.appID)
	}
	for _, p := range pubs {
		add(p.appID)
	}
	return ids
}

// withPortHint adds to Caddy's refusal which application's published
// port could not be bound, when its message names one's address.
func withPortHint(err error, pubs []published) error {
	var le *LoadError
	if !errors.As(err, &le) {
		return err
	}
	for _, p := range pubs {
		if strings.Contains(le.Message, p.listen()) && strings.Contains(le.Message, "address already in use") {
			return fmt.Errorf("the published port %s of app %s is in use by another program on the server: %w", p.listen(), p.appID, err)
		}
	}
	return err
}

// upstreams resolves the upstream of every app of ids.
func (p *Proxy) upstreams(ctx context.Context, ids []string, overrides map[string]string) (map[string]string, error) {
	ups := map[string]string{}
	var others map[string]string
	if p.others != nil {
		var err error
		if others, err = p.others(ctx); err != nil {
			return nil, fmt.Errorf("finding the upstreams of service applications: %w", err)
		}
	}
	need := false
	for _, id := range ids {
		if addr, ok := overrides[id]; ok {
			ups[id] = addr
		} else if addr, ok := others[id]; ok && checkUpstream(addr) == nil {
			ups[id] = addr
		} else {
			need = true
		}
	}
	if !need || p.docker == nil {
		return ups, nil
	}
	live, err := liveContainers(ctx, p.docker)
	if err != nil {
		// Better the previous configuration than every site a 503.
		return nil, err
	}
	for _, id := range ids {
		addrs := live[id]
		if _, ok := ups[id]; ok || len(addrs) == 0 {
			continue
		}
		// While a release runs, an app has two containers: the one the
		// proxy sends it to stays until the deployer switches (with an
		// override), so that no apply picks a container not yet healthy
		// or one about to be stopped.
		if cur := p.current[id]; slices.Contains(addrs, cur) {
			ups[id] = cur
		} else {
			ups[id] = addrs[0]
		}
	}
	return ups, nil
}

// LiveUpstreams maps app ids to the address of their live container: a
// running container labelled agentproto.LabelApp whose container port
// (label agentproto.LabelPort) is published on 127.0.0.1. When an app has
// several (during a deploy), the newest is live.
func LiveUpstreams(ctx context.Context, docker Docker) (map[string]string, error) {
	live, err := liveContainers(ctx, docker)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for app, addrs := range live {
		out[app] = addrs[0]
	}
	return out, nil
}

// liveContainers maps app ids to the addresses of their running
// containers, newest first.
func liveContainers(ctx context.Context, docker Docker) (map[string][]string, error) {
	res, err := docker.ContainerList(ctx, client.ContainerListOptions{
		Filters: client.Filters{}.Add("label", agentproto.LabelApp).Add("status", "running"),
	})
	if err != nil {
		return nil, fmt.Errorf("listing application containers: %w", err)
	}
	items := slices.Clone(res.Items)
	slices.SortStableFunc(items, func(a, b container.Summary) int { return cmp.Compare(b.Created, a.Created) })
	out := map[string][]string{}
	for _, c := range items {
		app := c.Labels[agentproto.LabelApp]
		if app == "" || c.State != container.StateRunning {
			continue
		}
		cport, err := strconv.Atoi(c.Labels[agentproto.LabelPort])
		if err != nil {
			continue
		}
		for _, pt := range c.Ports {
			if int(pt.PrivatePort) == cport && pt.PublicPort != 0 && (pt.Type == "" || pt.Type == "tcp") &&
				pt.IP.IsValid() && pt.IP.IsLoopback() && pt.IP.Is4() {
				out[app] = append(out[app], net.JoinHostPort(pt.IP.String(), strconv.Itoa(int(pt.PublicPort))))
				break
			}
		}
	}
	return out, nil
}

// transientLoad lists refusals that say nothing about the configuration:
// Caddy 2.6 may read a certificate's metadata file while the previous
// load is still writing it, and refuses the new load for that alone.
var transientLoad = []string{"decoding certificate metadata", "unexpected end of JSON input"}

// loadRetries bounds how often a transiently refused load is tried again.
var loadRetries = []time.Duration{200 * time.Millisecond, time.Second, 3 * time.Second}

// load posts a whole configuration to Caddy's /load, trying again when
// Caddy refuses it for a transient reason.
func (p *Proxy) load(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	for i := 0; ; i++ {
		err := p.loadOnce(ctx, body)
		var le *LoadError
		if err == nil || !errors.As(err, &le) || !le.transient() || i == len(loadRetries) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(loadRetries[i]):
		}
	}
}

func (p *Proxy) loadOnce(ctx context.Context, body []byte) error {
	if p.adminErr != nil {
		return p.adminErr
	}
	u := p.settings.AdminURL
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.admin.BaseURL+"/load", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("caddy admin API at %s: %w", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBytes))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &LoadError{Status: resp.StatusCode, Message: msg}
}

// LoadError is Caddy refusing a configuration; the previous one still
// serves.
type LoadError struct {
	Status  int
	Message string // Caddy's error text
}

func (e *LoadError) transient() bool {
	for _, t := range transientLoad {
		if strings.Contains(e.Message, t) {
			return true
		}
	}
	return false
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("caddy refused the configuration (%d): %s", e.Status, e.Message)
}

// IsLoadError reports whether err is Caddy refusing a configuration.
func IsLoadError(err error) bool {
	var le *LoadError
	return errors.As(err, &le)
}
