package e2e

// Request traffic with junk Host headers, and the images kept for
// rollbacks, on the real stack (control plane, agent, Caddy, Docker).

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// appTrafficTotals reads an application's or a server's other-bucket
// request totals over the last hour.
func (s *appStack) trafficTotals(t testing.TB, path string) AppTraffic {
	t.Helper()
	var tr AppTraffic
	expectJSON(t, s.Get(t, path, s.Token), http.StatusOK, &tr)
	return tr
}

// Scanner-style requests (Host: an IP literal, random names), sent to
// Caddy on 127.0.0.1 alongside the application's real traffic, leave the
// application's counts exact, are counted only in the server's other
// bucket, and no report is refused.
func TestAppTrafficWithJunkHosts(t *testing.T) {
	const host = "shop.test"
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0}})
	app := s.createApp(t, map[string]any{
		"name": "shop", "source": map[string]any{"type": "image", "image": s.Images["v1"].Ref},
		"container_port": 8080, "health_path": "/health",
	})
	s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	s.addDomain(t, app.ID, host, "off", "succeeded")

	hc := s.Client(t)
	url := s.Caddy.URL("http", host, "/")
	s.waitSite(t, hc, url, "v1 ", 20*time.Second)
	// Every junk request goes to Caddy on 127.0.0.1; only its Host header
	// names something else.
	raw := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	caddy := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Caddy.HTTPPort)) + "/"
	junk := func(h string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, caddy, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = h
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatalf("junk request with Host %s: %v", h, err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the count matters
		resp.Body.Close()
	}
	// The application's clients' requests, with junk ones between them.
	var real, junkSent int64
	for i := range 40 {
		a, err := fetch(hc, url)
		if err != nil || a.Status != http.StatusOK {
			t.Fatalf("GET %s: %+v, %v", url, a, err)
		}
		real++
		if i%2 == 0 {
			junk("203.0.113.9")
			junk(fmt.Sprintf("scan-%d.invalid-%d.example", i, time.Now().UnixNano()))
			junk("203.0.113.9:80")
			junkSent += 3
		}
	}

	// The reporter counts the waitSite polls too: the truth is Caddy's
	// access log, whose lines for the site must all be the application's
	// and whose other lines must all be in the other bucket.
	appPath := "/api/v1/applications/" + app.ID + "/requests?range=1h"
	otherPath := "/api/v1/servers/" + s.serverID + "/requests/other?range=1h"
	var tr, other AppTraffic
	var logged map[string]int64
	testlab.Eventually(t, trafficTimeout, "the application's and the other bucket's counts to match the access log", func() bool {
		logged = accessLogHosts(t, s.Caddy.AccessLog)
		other = s.trafficTotals(t, otherPath)
		tr = s.trafficTotals(t, appPath)
		return tr.Totals.Count == logged[host] && logged[host] >= real && other.Totals.Count == junkSent
	})
	t.Logf("application: %+v; other: %+v; access log: %v", tr.Totals, other.Totals, logged)
	var junkLogged int64
	for h, n := range logged {
		if h != host {
			junkLogged += n
		}
	}
	if junkLogged != junkSent {
		t.Errorf("the access log has %d junk requests, want %d", junkLogged, junkSent)
	}
	// Every answer to the application's clients was a 200, and nothing
	// of the junk (Caddy answers unknown hosts 404) is in its counts.
	if tr.Totals.Count != tr.Totals.Status2xx || tr.Totals.Status4xx != 0 {
		t.Errorf("application traffic %+v, want only its own requests, all 2xx", tr.Totals)
	}
	if other.Totals.Status4xx != junkSent {
		t.Errorf("other bucket %+v, want %d answered 404", other.Totals, junkSent)
	}
	if strings.Contains(s.ControlPlane.Logs(), "invalid entries skipped") {
		t.Errorf("the control plane skipped entries of the agent's reports:\n%s", s.ControlPlane.Logs())
	}
	if l := s.Agent.Logs(); strings.Contains(l, "refused") || strings.Contains(l, "skipped a traffic entry") {
		t.Errorf("the agent's traffic reports were refused or cut:\n%s", l)
	}
}

// accessLogHosts counts the requests of Caddy's JSON access log by the
// Host they carried (port and case as sent).
func accessLogHosts(t testing.TB, path string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, e := range accessLogEntries(t, path) {
		out[e.Host]++
	}
	return out
}

// ServerImages is the images part of a server's inventory.
type ServerImages struct {
	Inventory *struct {
		CollectedAt time.Time `json:"collected_at"`
		Images      []struct {
			ID        string    `json:"id"`
			Tags      []string  `json:"tags"`
			SizeBytes int64     `json:"size_bytes"`
			Created   time.Time `json:"created"`
		} `json:"images"`
	} `json:"inventory"`
}

func (s *ServerImages) has(id string) bool {
	return s.Inventory != nil && slices.ContainsFunc(s.Inventory.Images, func(im struct {
		ID        string    `json:"id"`
		Tags      []string  `json:"tags"`
		SizeBytes int64     `json:"size_bytes"`
		Created   time.Time `json:"created"`
	}) bool {
		return im.ID == id
	})
}

// Seven deployments of one application on the real Docker engine: the
// image that fell out of the last five is pruned, the last five are kept,
// the server's inventory lists the images, and a rollback to the pruned
// one is refused with 409 before any job is queued.
func TestImagesPrunedAndRollbackRefused(t *testing.T) {
	versions := map[string]int{}
	for i := 1; i <= 7; i++ {
		versions[fmt.Sprintf("v%d", i)] = 0
	}
	s := newAppStack(t, appStackOptions{Images: versions})
	img := func(i int) webImage { return s.Images[fmt.Sprintf("v%d", i)] }
	app := s.createApp(t, map[string]any{
		"name": "keeper", "source": map[string]any{"type": "image", "image": img(1).Ref},
		"container_port": 8080, "health_path": "/health",
	})
	first, _ := s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	for i := 2; i <= 7; i++ {
		d, _ := s.waitDeployment(t, s.deploy(t, app.ID, map[string]any{"ref": img(i).Ref}), "succeeded", pollInterval, deployTimeout)
		if d.ImageID != img(i).ID {
			t.Fatalf("deployment %d ran image %s, want %s", i, d.ImageID, img(i).ID)
		}
		if i == 7 {
			// Pruned after the result, reported as a later event.
			testlab.Eventually(t, time.Minute, "the seventh deployment's event pruning v1's image", func() bool {
				d, _ := s.waitDeployment(t, d.ID, "succeeded", pollInterval, deployTimeout)
				_, ok := findEvent(d.Events, "pruned image "+strings.TrimPrefix(img(1).ID, "sha256:")[:12])
				return ok
			})
		}
	}
	present := func(id string) bool {
		_, err := s.Docker.ImageInspect(t.Context(), id)
		return err == nil
	}
	if present(img(1).ID) {
		t.Errorf("v1's image is still on the engine after it fell out of the last five deployments")
	}
	for i := 3; i <= 7; i++ {
		if !present(img(i).ID) {
			t.Errorf("v%d's image, one of the last five deployments', was pruned", i)
		}
	}

	// The inventory lists the images with their tags, size and creation
	// time, and soon no longer v1's.
	var srv ServerImages
	testlab.Eventually(t, 90*time.Second, "an inventory without v1's image", func() bool {
		resp := s.Get(t, "/api/v1/servers/"+s.serverID, s.Token)
		expectStatus(t, resp, http.StatusOK)
		srv = ServerImages{}
		resp.JSON(t, &srv)
		return srv.Inventory != nil && srv.Inventory.Images != nil && srv.has(img(7).ID) && !srv.has(img(1).ID)
	})
	for _, im := range srv.Inventory.Images {
		if im.ID == img(7).ID && (!slices.Contains(im.Tags, img(7).Ref) || im.SizeBytes <= 0 || im.Created.IsZero()) {
			t.Errorf("v7's image in the inventory: %+v", im)
		}
	}

	// A rollback to v1 is refused up front: 409, and nothing is queued.
	jobsBefore := len(s.listJobs(t, "?server_id="+s.serverID))
	p := expectProblem(t, s.Post(t, "/api/v1/deployments/"+first.ID+"/rollback", s.Token, nil), http.StatusConflict, "image-gone")
	if !strings.Contains(p.Detail, img(1).ID) {
		t.Errorf("problem detail %q does not name the image", p.Detail)
	}
	if got := len(s.listJobs(t, "?server_id="+s.serverID)); got != jobsBefore {
		t.Errorf("jobs after the refused rollback: %d, want %d", got, jobsBefore)
	}
	// A rollback to a kept image still works.
	third := s.deployments(t, app.ID, img(3).ID)
	var a deployAccepted
	expectJSON(t, s.Post(t, "/api/v1/deployments/"+third+"/rollback", s.Token, nil), http.StatusAccepted, &a)
	s.waitDeployment(t, a.DeploymentID, "succeeded", pollInterval, deployTimeout)
}

// deployments returns the id of an application's succeeded deployment
// that ran imageID.
func (s *appStack) deployments(t testing.TB, appID, imageID string) string {
	t.Helper()
	resp := s.Get(t, "/api/v1/applications/"+appID+"/deployments", s.Token)
	var list struct {
		Deployments []AppDeployment `json:"deployments"`
	}
	expectJSON(t, resp, http.StatusOK, &list)
	for _, d := range list.Deployments {
		if d.Status == "succeeded" && d.ImageID == imageID {
			return d.ID
		}
	}
	t.Fatalf("no succeeded deployment ran %s: %s", imageID, resp.Body)
	return ""
}
