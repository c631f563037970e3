package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestAppRemovalWithProxyDown: the server's Caddy is down. An application
// without a domain is removed all the same (nothing of it is in the
// proxy); one with a domain fails, its error naming the site left in the
// proxy and force=true, and is removed when deleted again with force.
func TestAppRemovalWithProxyDown(t *testing.T) {
	t.Parallel()
	const host = "forced.test"
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0}})
	v1 := s.Images["v1"]
	create := func(name string) AppInfo {
		app := s.createApp(t, map[string]any{
			"name": name, "source": map[string]any{"type": "image", "image": v1.Ref},
			"container_port": 8080, "health_path": "/health",
		})
		s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
		return app
	}
	plain, served := create("plain"), create("served")
	dom := s.addDomain(t, served.ID, host, "off", "succeeded")

	s.Caddy.Stop()

	// A domain added now: its proxy job fails, the domain says so and the
	// inbox has it.
	const down = "down.test"
	failed := s.addDomain(t, served.ID, down, "off", "failed")
	var info DomainInfo
	r := s.Get(t, "/api/v1/domains/"+failed.Domain.ID, s.Token)
	expectJSON(t, r, http.StatusOK, &info)
	if info.Proxy.Status != "failed" || info.Proxy.Error == nil || !strings.Contains(*info.Proxy.Error, "caddy") ||
		info.Proxy.JobID == nil || *info.Proxy.JobID != failed.JobID {
		t.Fatalf("a domain whose proxy job failed: %+v", info.Proxy)
	}
	testlab.Eventually(t, jobTimeout, "the inbox tells of the proxy failure", func() bool {
		var inbox struct {
			Notifications []struct {
				EventType string `json:"event_type"`
				Body      string `json:"body"`
			} `json:"notifications"`
		}
		expectJSON(t, s.Get(t, "/api/v1/notifications", s.Token), http.StatusOK, &inbox)
		for _, n := range inbox.Notifications {
			if n.EventType == "proxy.failed" && strings.Contains(n.Body, down) {
				return true
			}
		}
		return false
	})

	// removed waits for the application's removal to end: "" once it is
	// gone, its remove_error if it failed.
	removed := func(app AppInfo, query string) string {
		t.Helper()
		resp := s.del(t, "/api/v1/applications/"+app.ID+query)
		expectStatus(t, resp, http.StatusAccepted)
		var out string
		testlab.Eventually(t, jobTimeout, "the removal of "+app.Name+" ends", func() bool {
			r := s.Get(t, "/api/v1/applications/"+app.ID, s.Token)
			if r.Status == http.StatusNotFound {
				return true
			}
			expectStatus(t, r, http.StatusOK)
			var a AppInfo
			r.JSON(t, &a)
			if a.Status == "removal_failed" {
				out = deref(a.RemoveError)
				return true
			}
			return false
		})
		return out
	}

	if msg := removed(plain, ""); msg != "" {
		t.Fatalf("removing an application without a domain while Caddy is down failed: %s", msg)
	}
	if got := s.appContainers(t, plain.ID); len(got) != 0 {
		t.Errorf("containers of the removed application: %v", got)
	}

	msg := removed(served, "")
	if msg == "" || !strings.Contains(msg, host) || !strings.Contains(msg, down) || !strings.Contains(msg, "force=true") {
		t.Fatalf("removing an application with a domain while Caddy is down: error %q, want one naming %s and force=true", msg, host)
	}
	if msg := removed(served, "?force=true"); msg != "" {
		t.Fatalf("a forced removal failed: %s", msg)
	}
	if got := s.appContainers(t, served.ID); len(got) != 0 {
		t.Errorf("containers of the force-removed application: %v", got)
	}
	expectProblem(t, s.Get(t, "/api/v1/domains/"+dom.Domain.ID, s.Token), http.StatusNotFound, "not-found")
}
