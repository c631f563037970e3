package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// caddyLoaded is the part of Caddy's running configuration the proxy
// state tests read: the hosts each server matches, and the names Caddy
// manages certificates for.
type caddyLoaded struct {
	Apps struct {
		HTTP struct {
			Servers map[string]struct {
				Routes []struct {
					Match []struct {
						Host []string `json:"host"`
					} `json:"match"`
				} `json:"routes"`
			} `json:"servers"`
		} `json:"http"`
		TLS struct {
			Automation *struct {
				Policies []struct {
					Subjects []string `json:"subjects"`
				} `json:"policies"`
			} `json:"automation"`
		} `json:"tls"`
	} `json:"apps"`
}

// caddyConfig reads the configuration Caddy runs from its admin API.
func (s *appStack) caddyConfig(t testing.TB) caddyLoaded {
	t.Helper()
	b := s.Caddy.LoadedConfig(t)
	var c caddyLoaded
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("Caddy's configuration: %v\n%s", err, b)
	}
	return c
}

// served reports whether any of Caddy's servers matches host.
func (c caddyLoaded) served(host string) bool {
	for _, srv := range c.Apps.HTTP.Servers {
		for _, r := range srv.Routes {
			for _, m := range r.Match {
				if slices.Contains(m.Host, host) {
					return true
				}
			}
		}
	}
	return false
}

// certified reports whether Caddy manages a certificate for host.
func (c caddyLoaded) certified(host string) bool {
	if c.Apps.TLS.Automation == nil {
		return false
	}
	for _, p := range c.Apps.TLS.Automation.Policies {
		if slices.Contains(p.Subjects, host) {
			return true
		}
	}
	return false
}

// gatedHealthPort waits until the container of a deployment runs and its
// health check answers 503 because it waits for POST /ready (the web
// image's HEALTH_GATE), and returns the port it is published on.
func (s *appStack) gatedHealthPort(t testing.TB, deploymentID string, timeout time.Duration) int {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	port := 0
	testlab.Eventually(t, timeout, "the release of "+deploymentID+" waits in its health check", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := s.Docker.ContainerList(ctx, client.ContainerListOptions{
			Filters: client.Filters{}.Add("label", agentproto.LabelDeployment+"="+deploymentID).Add("status", "running"),
		})
		if err != nil || len(res.Items) != 1 {
			return false
		}
		for _, p := range res.Items[0].Ports {
			if p.PrivatePort == 8080 && p.PublicPort != 0 {
				port = int(p.PublicPort)
			}
		}
		if port == 0 {
			return false
		}
		a, err := fetch(hc, fmt.Sprintf("http://127.0.0.1:%d/health", port))
		return err == nil && a.Status == http.StatusServiceUnavailable && a.Body == "waiting for POST /ready"
	})
	return port
}

// TestProxyStateNotUndoneByDeploy: a domain deleted and a TLS mode
// changed while a release waits in its health check stay so after the
// release switches the proxy: the switch applies the server's current
// proxy state, not the one its job was made with.
func TestProxyStateNotUndoneByDeploy(t *testing.T) {
	t.Parallel()
	const gone, kept = "gone.test", "kept.test"
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0}})
	v1 := s.Images["v1"]
	app := s.createApp(t, map[string]any{
		"name": "web", "source": map[string]any{"type": "image", "image": v1.Ref},
		"container_port": 8080, "health_path": "/health",
		"env": []map[string]string{{"key": "GREETING", "value": "one"}},
	})
	s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)

	domainIDs := map[string]string{}
	for _, host := range []string{gone, kept} {
		dom := s.addDomain(t, app.ID, host, "internal", "succeeded")
		domainIDs[host] = dom.Domain.ID
	}
	if c := s.caddyConfig(t); !c.served(gone) || !c.served(kept) || !c.certified(kept) {
		t.Fatalf("before the release: Caddy serves %s: %v, %s: %v (certificate: %v); want both, with a certificate",
			gone, c.served(gone), kept, c.served(kept), c.certified(kept))
	}

	// The next release holds in its health check until the test says.
	resp := s.patch(t, "/api/v1/applications/"+app.ID, map[string]any{"env": []map[string]string{
		{"key": "GREETING", "value": "two"}, {"key": "HEALTH_GATE", "value": "1"},
	}})
	expectStatus(t, resp, http.StatusOK)
	depID := s.deploy(t, app.ID, nil)
	port := s.gatedHealthPort(t, depID, deployTimeout)

	// Meanwhile one domain goes and the other drops TLS.
	resp = s.del(t, "/api/v1/domains/"+domainIDs[gone])
	expectStatus(t, resp, http.StatusOK)
	var del domainChange
	resp.JSON(t, &del)
	var off domainChange
	expectJSON(t, s.patch(t, "/api/v1/domains/"+domainIDs[kept], map[string]any{"tls_mode": "off"}), http.StatusOK, &off)
	for _, id := range []string{del.JobID, off.JobID} {
		s.waitJob(t, id, "succeeded", jobTimeout)
	}
	if c := s.caddyConfig(t); c.served(gone) || !c.served(kept) || c.certified(kept) {
		t.Fatalf("after the changes: Caddy serves %s: %v, %s: %v (certificate: %v); want only %s, without a certificate",
			gone, c.served(gone), kept, c.served(kept), c.certified(kept), kept)
	}
	if d := s.deployment(t, depID); d.Status != "running" {
		t.Fatalf("the release is %s while its health check is held, want running", d.Status)
	}

	// The release goes on and switches the proxy.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	r, err := hc.Post(fmt.Sprintf("http://127.0.0.1:%d/ready", port), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	d, _ := s.waitDeployment(t, depID, "succeeded", pollInterval, deployTimeout)
	if _, ok := findEvent(d.Events, "the proxy sends the application's requests to"); !ok {
		t.Fatalf("the release did not switch the proxy; events:\n%s", eventsText(d.Events))
	}
	c := s.caddyConfig(t)
	if c.served(gone) {
		t.Errorf("after the release Caddy serves %s again, deleted while the release ran; events:\n%s", gone, eventsText(d.Events))
	}
	if !c.served(kept) || c.certified(kept) {
		t.Errorf("after the release Caddy serves %s: %v, with a certificate: %v; want served over plain HTTP only (TLS off while the release ran)",
			kept, c.served(kept), c.certified(kept))
	}
	// The kept domain answers from the new release over plain HTTP, not
	// with a redirect to HTTPS.
	s.waitSite(t, s.Client(t), s.Caddy.URL("http", kept, "/"), "v1 two", 10*time.Second)
}
