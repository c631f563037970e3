// Package health probes the applications an agent runs: for each
// application, the health path of its live container on the container's
// loopback port (not through the proxy), as the control plane's app_down
// rule needs. It talks to the Docker engine and to the containers only.
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
	docker Docker
	hc     *http.Client
	now    func() time.Time
}

// ProbeTimeout bounds one probe.
const ProbeTimeout = 5 * time.Second

// New returns a prober of the applications in docker's containers.
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

// Probe probes every application with a health path: the newest running
// container of each (an application without one is unhealthy).
func (p *Prober) Probe(ctx context.Context) ([]agentproto.AppProbe, error) {
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
	out := make([]agentproto.AppProbe, len(apps))
	done := make(chan struct{}, len(apps))
	for i, app := range apps {
		go func() {
			defer func() { done <- struct{}{} }()
			out[i] = p.probe(ctx, app, byApp[app])
		}()
	}
	for range apps {
		<-done
	}
	return out, nil
}

// probe probes one application's live container: its newest running one,
// else its newest one.
func (p *Prober) probe(ctx context.Context, app string, items []container.Summary) agentproto.AppProbe {
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
	c := items[0]
	r := agentproto.AppProbe{AppID: app, DeploymentID: c.Labels[agentproto.LabelDeployment], At: p.now().UTC()}
	if c.State != container.StateRunning {
		r.Error = "no running container (the newest is " + string(c.State) + ")"
		return r
	}
	addr := upstreamOf(c)
	if addr == "" {
		r.Error = "the container's port is not published on 127.0.0.1"
		return r
	}
	path := c.Labels[agentproto.LabelHealthPath]
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	req.Header.Set("User-Agent", "capstan-agent health probe")
	resp, err := p.hc.Do(req)
	if err != nil {
		r.Error = "GET " + path + ": " + strings.TrimPrefix(err.Error(), "Get \"http://"+addr+path+"\": ")
		return r
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	r.StatusCode = resp.StatusCode
	r.Healthy = resp.StatusCode >= 200 && resp.StatusCode < 400
	if !r.Healthy {
		r.Error = fmt.Sprintf("GET %s answered HTTP %d", path, resp.StatusCode)
	}
	return r
}

// upstreamOf is the loopback address the container's port label is
// published on, or "".
func upstreamOf(c container.Summary) string {
	port, err := strconv.Atoi(c.Labels[agentproto.LabelPort])
	if err != nil {
		return ""
	}
	for _, pt := range c.Ports {
		if int(pt.PrivatePort) == port && pt.PublicPort != 0 && (!pt.IP.IsValid() || pt.IP == loopback) && pt.Type == "tcp" {
			return netip.AddrPortFrom(loopback, pt.PublicPort).String()
		}
	}
	return ""
}
