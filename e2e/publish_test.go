package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// publishedApp is what the published-port tests read of an application.
type publishedApp struct {
	ID      string `json:"id"`
	Publish *struct {
		HostPort int    `json:"host_port"`
		Bind     string `json:"bind"`
	} `json:"publish"`
	Addresses []struct {
		Kind    string `json:"kind"`
		Address string `json:"address"`
		URL     string `json:"url"`
	} `json:"addresses"`
}

func (s *appStack) publishedApp(t testing.TB, id string) publishedApp {
	t.Helper()
	var a publishedApp
	expectJSON(t, s.Get(t, "/api/v1/applications/"+id, s.Token), http.StatusOK, &a)
	return a
}

// waitRemoved deletes an application and waits until it is gone.
func (s *appStack) waitRemoved(t testing.TB, id string) {
	t.Helper()
	resp := s.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/applications/" + id, Token: s.Token})
	expectStatus(t, resp, http.StatusAccepted)
	testlab.Eventually(t, jobTimeout, "application "+id+" is removed", func() bool {
		r := s.Get(t, "/api/v1/applications/"+id, s.Token)
		if r.Status == http.StatusOK {
			var a AppInfo
			r.JSON(t, &a)
			if a.Status == "removal_failed" {
				t.Fatalf("removal of %s failed: %s", id, deref(a.RemoveError))
			}
			return false
		}
		expectProblem(t, r, http.StatusNotFound, "not-found")
		return true
	})
}

// TestPublishOnRealStack: an application without a domain published on a
// port of its server is served there by the real Caddy, switched to each
// release with no request failing and back on a rollback; the port is
// one application's; a port another program holds fails the deployment
// with Caddy's bind error; removing the application closes the port.
func TestPublishOnRealStack(t *testing.T) {
	t.Parallel()
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0, "v2": 0}})
	v1, v2 := s.Images["v1"], s.Images["v2"]
	port := testlab.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	url := "http://" + addr + "/"

	app := s.createApp(t, map[string]any{
		"name": "published", "source": map[string]any{"type": "image", "image": v1.Ref},
		"container_port": 8080, "health_path": "/health",
		"env":     []map[string]string{{"key": "GREETING", "value": "pub"}},
		"publish": map[string]any{"host_port": port},
	})
	d1, _ := s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	pa := s.publishedApp(t, app.ID)
	if pa.Publish == nil || pa.Publish.HostPort != port || pa.Publish.Bind != "127.0.0.1" ||
		len(pa.Addresses) != 1 || pa.Addresses[0].Kind != "port" || pa.Addresses[0].Address != addr || pa.Addresses[0].URL != url {
		t.Fatalf("application: publish %+v, addresses %+v; want %s", pa.Publish, pa.Addresses, addr)
	}
	kept := &http.Client{Timeout: 10 * time.Second}
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	s.waitSite(t, kept, url, "v1 pub", time.Minute)
	if d1.Result == nil || d1.Result.HostPort == port {
		t.Fatalf("first deployment's result %+v: want a loopback port of its own", d1.Result)
	}

	// A release while clients hit the published port: none fails.
	valid := func(b string) bool { return b == "v1 pub" || b == "v2 pub" }
	loadKept := startLoad(t, kept, url, 2, 5*time.Millisecond, valid)
	loadFresh := startLoad(t, fresh, url, 2, 5*time.Millisecond, valid)
	loadKept.waitAnswer(t, "v1 pub", time.Minute)
	loadFresh.waitAnswer(t, "v1 pub", time.Minute)
	s.waitDeployment(t, s.deploy(t, app.ID, map[string]any{"ref": v2.Ref}), "succeeded", pollInterval, deployTimeout)
	loadKept.waitAnswer(t, "v2 pub", time.Minute)
	loadFresh.waitAnswer(t, "v2 pub", time.Minute)
	loadKept.Stop()
	loadFresh.Stop()
	k, f := loadKept.Take(), loadFresh.Take()
	t.Logf("release on the published port: kept-alive %s; new connections %s", k, f)
	if k.Failures != 0 || f.Failures != 0 {
		t.Errorf("requests to the published port failed during the release: kept-alive %s; new connections %s", k, f)
	}
	s.waitSite(t, fresh, url, "v2 pub", time.Minute)

	// A rollback keeps the port.
	resp := s.Post(t, "/api/v1/deployments/"+d1.ID+"/rollback", s.Token, nil)
	var rb deployAccepted
	expectJSON(t, resp, http.StatusAccepted, &rb)
	s.waitDeployment(t, rb.DeploymentID, "succeeded", pollInterval, deployTimeout)
	s.waitSite(t, fresh, url, "v1 pub", time.Minute)

	// The port is this application's on the server, whatever the bind.
	for _, bind := range []string{"127.0.0.1", "0.0.0.0"} {
		resp = s.Post(t, "/api/v1/applications", s.Token, map[string]any{
			"server_id": s.serverID, "name": "second", "source": map[string]any{"type": "image", "image": v2.Ref},
			"container_port": 8080, "deploy": false, "publish": map[string]any{"host_port": port, "bind": bind},
		})
		if p := expectProblem(t, resp, http.StatusConflict, "port-published"); !strings.Contains(p.Detail, fmt.Sprint(port)) {
			t.Errorf("409 does not name the port: %s", resp.Body)
		}
	}

	// A port another program holds: the deployment fails with Caddy's
	// bind error, and the published application still serves.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldAddr := held.Addr().String()
	other := s.createApp(t, map[string]any{
		"name": "blocked", "source": map[string]any{"type": "image", "image": v2.Ref},
		"container_port": 8080, "health_path": "/health",
		"publish": map[string]any{"host_port": held.Addr().(*net.TCPAddr).Port},
	})
	bad, _ := s.waitDeployment(t, other.Latest.ID, "failed", pollInterval, deployTimeout)
	if e := deref(bad.Error); !strings.Contains(e, "published port "+heldAddr) || !strings.Contains(e, "address already in use") {
		t.Errorf("deployment on a held port: error %q, want it to name %s and Caddy's bind error", e, heldAddr)
	}
	s.waitSite(t, fresh, url, "v1 pub", time.Minute)
	s.waitRemoved(t, other.ID)

	// Removal closes the port.
	s.waitRemoved(t, app.ID)
	testlab.Eventually(t, jobTimeout, addr+" is closed", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if b := s.Caddy.LoadedConfig(t); strings.Contains(string(b), addr) {
		t.Errorf("Caddy's configuration still names %s: %s", addr, b)
	}
}
