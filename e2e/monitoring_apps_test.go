package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAppDownAndTLSExpiringOnRealStack runs an application behind a real
// Caddy through a real agent that probes its health every second. A
// domain with a certificate from Caddy's local CA (12 hours of life) is
// checked by the control plane on its own, and tls_expiring (threshold
// one day) opens from the evaluation loop. The application's container
// starts failing its health check: app_down opens only after its
// duration, and resolves when the container is healthy again; deleting
// the domain resolves tls_expiring.
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

	resp := s.Post(t, "/api/v1/domains", s.Token, map[string]any{"hostname": host, "application_id": app.ID, "tls_mode": "internal"})
	expectStatus(t, resp, http.StatusCreated)
	var dom domainChange
	resp.JSON(t, &dom)
	s.waitJob(t, dom.JobID, "succeeded", jobTimeout)
	var expiring AlertInfo
	eventually(t, 2*time.Minute, "tls_expiring opened after the control plane checked the domain", func() bool {
		var ok bool
		expiring, ok = s.alertOf(t, tls.ID, "open")
		return ok
	})
	if expiring.Subject.Type != "domain" || expiring.Subject.ID != dom.Domain.ID || expiring.Subject.Name != host ||
		expiring.Value <= 0 || expiring.Value > 0.5 || expiring.Unit != "days" {
		t.Fatalf("tls_expiring alert: %+v; want the domain's 12-hour certificate", expiring)
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
	eventually(t, time.Minute, "app_down opened", func() bool {
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
	eventually(t, time.Minute, "app_down resolved", func() bool {
		_, ok := s.alertOf(t, down.ID, "resolved")
		return ok
	})

	expectStatus(t, s.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/domains/" + dom.Domain.ID, Token: s.Token}), http.StatusOK)
	eventually(t, time.Minute, "tls_expiring resolved once the domain is gone", func() bool {
		_, ok := s.alertOf(t, tls.ID, "resolved")
		return ok
	})
}
