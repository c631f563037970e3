// Package deploy runs the application jobs of the agent: app.deploy (a
// zero-downtime release of one application's image, with a health check
// and a proxy switch), app.remove and app.logs. It talks to the local
// Docker engine through its API only (github.com/moby/moby/client; the API
// version is negotiated down to the engine's), and to the server's reverse
// proxy through the Proxy interface.
//
// An application's containers are those labelled agentproto.LabelApp with
// its id. A release starts a new container next to the live one, waits for
// it to answer its health check and switches the proxy to it: the release
// is done (its result is sent) once the new container serves. The old
// container serves until the switch, and stays untouched when any step
// before the switch fails; after the switch it is stopped and removed, and
// old images pruned, next to the delivery of the result, reported as later
// events of the job. Jobs of one application run one at a time: the next
// waits for that clean-up.
package deploy

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Proxy applies the server's desired proxy state. upstreams overrides the
// upstream ("127.0.0.1:PORT") of the given application ids; other
// applications' upstreams are found from their live containers' labels.
// A state older than one applied before is refused with a
// *proxy.StaleError.
type Proxy interface {
	Apply(ctx context.Context, cfg agentproto.ProxyConfig, upstreams map[string]string) error
}

// Defaults of Options.
const (
	DefaultStopTimeout   = 10 * time.Second
	DefaultDrain         = time.Second
	DefaultHealthTimeout = 60 * time.Second
	// DefaultHealthInterval is the time between two health probes.
	DefaultHealthInterval = 200 * time.Millisecond
)

// Options configure a Deployer. The zero value is usable: the local
// engine, no proxy, the defaults above.
type Options struct {
	// Host is the Docker engine's address (e.g. unix:///var/run/docker.sock);
	// empty means DOCKER_HOST, or the default socket.
	Host string
	// Proxy switches the server's reverse proxy. Nil means this agent has
	// no proxy: releases skip the switch (an application without domains
	// still works), app.remove does not touch a proxy.
	Proxy Proxy
	// Desired fetches the server's current desired proxy state, which a
	// release's switch and app.remove apply. Nil means none: they apply
	// the state their job was made with.
	Desired DesiredProxy
	// StopTimeout is how long an old container gets to stop gracefully
	// before it is killed.
	StopTimeout time.Duration
	// Drain is how long a release waits after switching the proxy before
	// it stops the old container, for requests the proxy sent it just
	// before the switch.
	Drain time.Duration
	// HealthInterval is the time between two health probes.
	HealthInterval time.Duration
	// BuildDir is where deploys from git fetch their commit, in a
	// directory of their own removed after the build; "" means the
	// system's temporary directory.
	BuildDir string
	// StateDir is the agent's state directory, where service
	// applications keep their checkouts, helper requests and live slots;
	// "" means this agent runs no service applications.
	StateDir string
	// AppsDir and UnitDir are where the helper puts service applications'
	// releases and units; "" means AppsDir and UnitDir (tests only).
	AppsDir, UnitDir string
	// Systemd connects to systemd; nil means the system bus.
	Systemd func(ctx context.Context) (*sddbus.Conn, error)
	// Journal reads service applications' logs; nil means none.
	Journal Journal
}

// Deployer runs the application jobs against one Docker engine. It is safe
// for concurrent jobs; jobs of one application are serialized.
type Deployer struct {
	opts  Options
	locks appLocks
	sw    switchboard
	// images is held shared by every container deploy and exclusively
	// by a prune's removal, which so never takes an image a release is
	// about to run.
	images sync.RWMutex

	docker dockerc.Lazy
}

// New returns a Deployer.
func New(opts Options) *Deployer {
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Drain < 0 {
		opts.Drain = 0
	} else if opts.Drain == 0 {
		opts.Drain = DefaultDrain
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	return &Deployer{opts: opts, sw: switchboard{proxy: opts.Proxy, pending: map[string]string{}}}
}

// Register adds app.deploy, app.remove, app.logs and docker.prune to r.
func (d *Deployer) Register(r agent.Registry) {
	agent.Handle(r, agentproto.AppDeploy, d.runDeploy)
	agent.Handle(r, agentproto.AppRemove, d.runRemove)
	agent.Handle(r, agentproto.AppLogs, d.runLogs)
	agent.Handle(r, agentproto.DockerPrune, d.runPrune)
}

// client returns the engine's API client, made on first use. Making it
// does not connect; the API version is negotiated on the first request.
func (d *Deployer) client() (*client.Client, error) {
	return d.docker.Client(d.opts.Host)
}

// Close releases the client's connections; jobs after it fail.
func (d *Deployer) Close() error {
	return d.docker.Close()
}

// appPattern is an application id as it may reach the engine (in a label
// filter).
var appPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func checkAppID(id string) error {
	if !appPattern.MatchString(id) {
		return fmt.Errorf("invalid app_id %q", id)
	}
	return nil
}

// appLocks serializes the jobs of one application.
type appLocks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// lock waits until no other job of app runs, or ctx ends.
func (l *appLocks) lock(ctx context.Context, app string, events agent.EventSink) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]chan struct{}{}
	}
	ch, ok := l.m[app]
	if !ok {
		ch = make(chan struct{}, 1)
		l.m[app] = ch
	}
	l.mu.Unlock()
	unlock = func() { <-ch }
	select {
	case ch <- struct{}{}:
		return unlock, nil
	default:
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("another job of application %s is running on this server; waiting for it to finish", app), nil)
	select {
	case ch <- struct{}{}:
		return unlock, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another job of application %s: %w", app, ctx.Err())
	}
}

// switchboard serializes the agent's proxy applies and remembers, for the
// applications in the middle of a release, which container the proxy must
// send them to: the old one until the switch, the new one after it, until
// the old one is gone. Every apply passes those as overrides, so that the
// apply of another application's job never picks a container that is not
// healthy yet, or one about to be stopped.
type switchboard struct {
	proxy   Proxy
	mu      sync.Mutex
	pending map[string]string // app id → upstream
}

// hold pins app's upstream for the applies of other jobs.
func (s *switchboard) hold(app, upstream string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[app] = upstream
}

// release unpins app's upstream: its live container is found from the
// labels again.
func (s *switchboard) release(app string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, app)
}

// apply applies cfg with the pinned upstreams and own (which wins); on
// success own's upstreams are pinned until released (the caller releases
// them).
func (s *switchboard) apply(ctx context.Context, cfg agentproto.ProxyConfig, own map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ups map[string]string
	if len(s.pending)+len(own) > 0 {
		ups = maps.Clone(s.pending)
		if ups == nil {
			ups = map[string]string{}
		}
		maps.Copy(ups, own)
	}
	if err := s.proxy.Apply(ctx, cfg, ups); err != nil {
		return err
	}
	maps.Copy(s.pending, own)
	return nil
}

// siteCount is the number of cfg's sites and published ports that
// serve app: what of it goes through the proxy.
func siteCount(cfg agentproto.ProxyConfig, app string) int {
	n := 0
	for _, s := range cfg.Sites {
		if s.AppID == app {
			n++
		}
	}
	for _, p := range cfg.Ports {
		if p.AppID == app {
			n++
		}
	}
	return n
}
