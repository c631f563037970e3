// Package health probes the applications an agent runs, as the control
// plane's app_down rule needs: the health path of each application on its
// loopback port, not through the proxy. A container application's (and a
// compose application's web service's) live container is probed on the
// loopback port its container port is published on; a service
// application's live slot on its port.
//
// Which applications to probe, and with which health path, the control
// plane says (agentproto.HealthTargets, the answer to a health report).
// Until it has, the containers labelled with their health path
// (agentproto.LabelHealthPath) are probed. It talks to the Docker engine,
// to the applications and to nothing else.
package health

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Docker lists containers.
type Docker interface {
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
}

// Prober probes the applications' health.
type Prober struct {
	docker Docker // nil: no Docker engine
	hc     *http.Client
	now    func() time.Time
	// slots maps service applications' ids to their live slot's
	// address; nil means none run here.
	slots func(ctx context.Context) (map[string]string, error)

	mu sync.Mutex
	// targets are the applications to probe, as the control plane last
	// said; nil until it has.
	targets []agentproto.HealthTarget
}

// ServiceSlots has p find service applications' live slots with f, which
// maps an application id to the slot's loopback address.
func (p *Prober) ServiceSlots(f func(ctx context.Context) (map[string]string, error)) { p.slots = f }

// SetTargets makes the applications in t the ones probed from now on.
func (p *Prober) SetTargets(t []agentproto.HealthTarget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t == nil {
		t = []agentproto.HealthTarget{}
	}
	p.targets = t
}

// Targets returns the applications to probe, and false when the control
// plane has not said yet.
func (p *Prober) Targets() ([]agentproto.HealthTarget, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.targets, p.targets != nil
}

// ProbeTimeout bounds one probe.
const ProbeTimeout = 5 * time.Second

// New returns a prober of the applications in docker's containers (nil:
// no engine, only service applications are probed).
func New(docker Docker) *Prober {
	return &Prober{docker: docker, now: time.Now, hc: &http.Client{
		Timeout: ProbeTimeout,
		// Probes go to loopback only: never through a proxy, and a
		// redirect is an answer (3xx counts as healthy), not a hop.
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

var loopback = netip.MustParseAddr("127.0.0.1")

// Probe probes every application: the targets the control plane named,
// or, until it has, every application with a container labelled with its
// health path.
func (p *Prober) Probe(ctx context.Context) ([]agentproto.AppProbe, error) {
	targets, known := p.Targets()
	if !known {
		return p.probeLabelled(ctx)
	}
	if len(targets) > agentproto.MaxHealthProbes {
		targets = targets[:agentproto.MaxHealthProbes]
	}
	var byApp map[string][]container.Summary
	var listErr error
	if slices.ContainsFunc(targets, func(t agentproto.HealthTarget) bool { return t.Kind != agentproto.AppKindService }) {
		byApp, listErr = p.appContainers(ctx)
	}
	var slots map[string]string
	var slotErr error
	if slices.ContainsFunc(targets, func(t agentproto.HealthTarget) bool { return t.Kind == agentproto.AppKindService }) {
		if p.slots == nil {
			slotErr = fmt.Errorf("this agent runs no service applications")
		} else {
			slots, slotErr = p.slots(ctx)
		}
	}
	return p.each(len(targets), func(i int) agentproto.AppProbe {
		t := targets[i]
		r := agentproto.AppProbe{AppID: t.AppID, DeploymentID: t.DeploymentID, At: p.now().UTC()}
		if t.Kind == agentproto.AppKindService {
			switch addr, ok := slots[t.AppID]; {
			case slotErr != nil:
				r.Error = "finding the live slot: " + slotErr.Error()
			case !ok:
				r.Error = "no live slot on this server"
			default:
				p.get(ctx, &r, addr, t.HealthPath)
			}
			return r
		}
		if listErr != nil {
			r.Error = listErr.Error()
			return r
		}
		items := byApp[t.AppID]
		if len(items) == 0 {
			r.Error = "no container of the application on this server"
			return r
		}
		c := live(items)
		if d := c.Labels[agentproto.LabelDeployment]; d != "" {
			r.DeploymentID = d
		}
		if c.State != container.StateRunning {
			r.Error = "no running container (the newest is " + string(c.State) + ")"
			return r
		}
		addr := upstreamOf(c, t.ContainerPort)
		if addr == "" {
			r.Error = "the container's port is not published on 127.0.0.1"
			return r
		}
		p.get(ctx, &r, addr, t.HealthPath)
		return r
	}), nil
}

// appContainers lists the containers of applications (a compose
// application's web service's among them) by application id.
func (p *Prober) appContainers(ctx context.Context) (map[string][]container.Summary, error) {
	if p.docker == nil {
		return nil, fmt.Errorf("no Docker engine on this server")
	}
	res, err := p.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", agentproto.LabelApp)})
	if err != nil {
		return nil, fmt.Errorf("listing application containers: %w", err)
	}
	byApp := map[string][]container.Summary{}
	for _, c := range res.Items {
		if app := c.Labels[agentproto.LabelApp]; app != "" {
			byApp[app] = append(byApp[app], c)
		}
	}
	return byApp, nil
}

// probeLabelled probes the applications whose containers carry their
// health path: the newest running container of each (an application
// without one is unhealthy).
func (p *Prober) probeLabelled(ctx context.Context) ([]agentproto.AppProbe, error) {
	if p.docker == nil {
		return nil, nil
	}
	res, err := p.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", agentproto.LabelHealthPath)})
	if err != nil {
		return nil, fmt.Errorf("listing application containers: %w", err)
	}
	byApp := map[string][]container.Summary{}
	for _, c := range res.Items {
		if app := c.Labels[agentproto.LabelApp]; app != "" && c.Labels[agentproto.LabelHealthPath] != "" {
			byApp[app] = append(byApp[app], c)
		}
	}
	apps := make([]string, 0, len(byApp))
	for app := range byApp {
		apps = append(apps, app)
	}
	slices.Sort(apps)
	if len(apps) > agentproto.MaxHealthProbes {
		apps = apps[:agentproto.MaxHealthProbes]
	}
	return p.each(len(apps), func(i int) agentproto.AppProbe {
		c := live(byApp[apps[i]])
		r := agentproto.AppProbe{AppID: apps[i], DeploymentID: c.Labels[agentproto.LabelDeployment], At: p.now().UTC()}
		if c.State != container.StateRunning {
			r.Error = "no running container (the newest is " + string(c.State) + ")"
			return r
		}
		addr := upstreamOf(c, 0)
		if addr == "" {
			r.Error = "the container's port is not published on 127.0.0.1"
			return r
		}
		p.get(ctx, &r, addr, c.Labels[agentproto.LabelHealthPath])
		return r
	}), nil
}

// each runs probe for 0..n-1 at once and returns the results in order.
func (p *Prober) each(n int, probe func(i int) agentproto.AppProbe) []agentproto.AppProbe {
	out := make([]agentproto.AppProbe, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = probe(i)
		}()
	}
	wg.Wait()
	return out
}

// live is an application's live container: its newest running one, else
// its newest one.
func live(items []container.Summary) container.Summary {
	slices.SortStableFunc(items, func(a, b container.Summary) int {
		ra, rb := a.State == container.StateRunning, b.State == container.StateRunning
		if ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.Created, a.Created)
	})
	return items[0]
}

// get probes path on addr into r.
func (p *Prober) get(ctx context.Context, r *agentproto.AppProbe, addr, path string) {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		r.Error = err.Error()
		return
	}
	req.Header.Set("User-Agent", "capstan-agent health probe")
	resp, err := p.hc.Do(req)
	if err != nil {
		r.Error = "GET " + path + ": " + strings.TrimPrefix(err.Error(), "Get \"http://"+addr+path+"\": ")
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	r.StatusCode = resp.StatusCode
	r.Healthy = resp.StatusCode >= 200 && resp.StatusCode < 400
	if !r.Healthy {
		r.Error = fmt.Sprintf("GET %s answered HTTP %d", path, resp.StatusCode)
	}
}

// upstreamOf is the loopback address the container's port (its port
// label, else port) is published on, or "".
func upstreamOf(c container.Summary, port int) string {
	if p, err := strconv.Atoi(c.Labels[agentproto.LabelPort]); err == nil {
		port = p
	}
	if port == 0 {
		return ""
	}
	for _, pt := range c.Ports {
		if int(pt.PrivatePort) == port && pt.PublicPort != 0 && (!pt.IP.IsValid() || pt.IP == loopback) && pt.Type == "tcp" {
			return netip.AddrPortFrom(loopback, pt.PublicPort).String()
		}
	}
	return ""
}
