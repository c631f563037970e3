package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestAppDownAndTLSExpiringOnRealStack runs an application behind a real
// Caddy through a real agent that probes its health every second. A
// domain with a certificate from Caddy's local CA (12 hours of life) is
// checked by the control plane on its own; the check records the
// certificate's lifetime, and tls_expiring (threshold one day, more than
// the whole lifetime) stays closed: a fresh short-lived certificate is
// healthy. The application's container starts failing its health check:
// app_down opens only after its duration, and resolves when the
// container is healthy again. The same holds for a container without the
// health path label (as those made before it existed): the agent probes
// the applications the control plane names.
func TestAppDownAndTLSExpiringOnRealStack(t *testing.T) {
	t.Parallel()
	const host = "alerts.test"
	s := newAppStack(t, appStackOptions{
		Images:    map[string]int{"v1": 0},
		DNS:       map[string]string{host: "127.0.0.1"},
		Plane:     Options{Args: []string{"--alert-evaluation-interval=1s", "--domain-check-interval=2s"}},
		AgentArgs: []string{"--health-probe-interval=1s"},
	})
	app := s.createApp(t, map[string]any{"name": "watched", "source": map[string]any{"type": "image", "image": s.Images["v1"].Ref},
		"container_port": 8080, "health_path": "/health"})
	d, _ := s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	const hold = 4 * time.Second
	down := s.createRule(t, map[string]any{"kind": "app_down", "duration": int(hold / time.Second), "scope": "application", "scope_id": app.ID})
	tls := s.createRule(t, map[string]any{"kind": "tls_expiring", "threshold": 1, "scope": "application", "scope_id": app.ID})

	dom := s.addDomain(t, app.ID, host, "internal", "succeeded")
	var di DomainInfo
	testlab.Eventually(t, 2*time.Minute, "the control plane checked the domain's certificate", func() bool {
		resp := s.Get(t, "/api/v1/domains/"+dom.Domain.ID, s.Token)
		expectStatus(t, resp, http.StatusOK)
		di = DomainInfo{}
		resp.JSON(t, &di)
		return di.Check != nil && di.Check.CertNotAfter != nil
	})
	ch := di.Check
	if ch.CertNotBefore == nil {
		t.Fatalf("the domain check recorded no cert_not_before: %+v", ch)
	}
	if life := ch.CertNotAfter.Sub(*ch.CertNotBefore); life < 11*time.Hour || life > 13*time.Hour || time.Until(*ch.CertNotAfter) > 13*time.Hour {
		t.Fatalf("certificate from %s to %s: want Caddy's 12-hour certificate", ch.CertNotBefore, ch.CertNotAfter)
	}
	// The certificate expires within the threshold (one day), but more
	// than a third of its life is left: an evaluation after the check
	// opens nothing for it.
	for _, a := range s.evaluate(t).Opened {
		if a.RuleID == tls.ID {
			t.Fatalf("tls_expiring opened for a fresh 12-hour certificate: %+v", a)
		}
	}
	if a, ok := s.alertOf(t, tls.ID, "open"); ok {
		t.Fatalf("tls_expiring opened for a fresh 12-hour certificate: %+v", a)
	}
	// The healthy application has no alert.
	if _, ok := s.alertOf(t, down.ID, "open"); ok {
		t.Fatalf("app_down opened for a healthy application")
	}

	container := fmt.Sprintf("http://127.0.0.1:%d", d.Result.HostPort)
	post := func(path string) {
		t.Helper()
		r, err := http.Post(container+path, "text/plain", strings.NewReader(""))
		if err != nil {
			t.Fatalf("POST %s to the container: %v", path, err)
		}
		r.Body.Close()
	}
	failed := time.Now()
	post("/fail")
	var a AlertInfo
	testlab.Eventually(t, time.Minute, "app_down opened", func() bool {
		var ok bool
		a, ok = s.alertOf(t, down.ID, "open")
		return ok
	})
	if held := a.OpenedAt.Sub(failed); held < hold-time.Second {
		t.Fatalf("app_down opened %s after the health check began to fail; want at least %s", held, hold)
	}
	if a.Subject.Type != "application" || a.Subject.ID != app.ID || a.Subject.Name != "watched" || a.Severity != "critical" {
		t.Fatalf("app_down alert: %+v", a)
	}
	post("/recover")
	testlab.Eventually(t, time.Minute, "app_down resolved", func() bool {
		_, ok := s.alertOf(t, down.ID, "resolved")
		return ok
	})

	// A container made before containers carried their health path is
	// probed too: the control plane names the application to the agent.
	s.replaceWithoutHealthLabel(t, app.ID)
	testlab.Eventually(t, time.Minute, "the replaced container answers", func() bool {
		r, err := http.Get(container + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	post("/fail")
	testlab.Eventually(t, time.Minute, "app_down opened for the container without the health path label", func() bool {
		var ok bool
		a, ok = s.alertOf(t, down.ID, "open")
		return ok
	})
	if a.Subject.ID != app.ID || a.Severity != "critical" {
		t.Fatalf("app_down of the unlabelled container: %+v", a)
	}
	post("/recover")
	testlab.Eventually(t, time.Minute, "app_down of the unlabelled container resolved", func() bool {
		_, ok := s.alertOf(t, down.ID, "open")
		return !ok
	})

	if a, ok := s.alertOf(t, tls.ID, "all"); ok {
		t.Fatalf("tls_expiring alert for a fresh 12-hour certificate: %+v", a)
	}
}

// replaceWithoutHealthLabel replaces the running container of an
// application with one made the same way but without the health path
// label, on the same loopback port, as agents made them before the label
// existed.
func (s *appStack) replaceWithoutHealthLabel(t testing.TB, appID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := s.Docker.ContainerList(ctx, client.ContainerListOptions{
		Filters: client.Filters{}.Add("label", agentproto.LabelApp+"="+appID)})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the running containers of %s: %+v, %v; want one", appID, list.Items, err)
	}
	in, err := s.Docker.ContainerInspect(ctx, list.Items[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := in.Container
	if _, err := s.Docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	delete(c.Config.Labels, agentproto.LabelHealthPath)
	if _, err := s.Docker.ContainerCreate(ctx, client.ContainerCreateOptions{Name: strings.TrimPrefix(c.Name, "/"), Config: c.Config,
		HostConfig: c.HostConfig}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Docker.ContainerStart(ctx, strings.TrimPrefix(c.Name, "/"), client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
}
