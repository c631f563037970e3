package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestAppsOnRealStack runs an application end to end with real processes:
// capstan serve, a Caddy and an enrolled capstan-agent driving it and the
// Docker engine. Images are local only (their registry cannot be reached).
// It deploys, serves a domain over HTTPS from Caddy's local CA, redeploys
// under load without failing a request, survives a broken release, rolls
// back, applies settings only on the next deployment, reads the live
// container's log, reports the traffic, checks the domain against a DNS
// server of the test, and removes everything.
func TestAppsOnRealStack(t *testing.T) {
	t.Parallel()
	const host = "app.test"
	s := newAppStack(t, appStackOptions{
		Images: map[string]int{"v1": 0, "v2": 0, "v3": http.StatusInternalServerError},
		DNS:    map[string]string{host: "127.0.0.1"},
	})
	v1, v2, v3 := s.Images["v1"], s.Images["v2"], s.Images["v3"]

	// The first deployment: the pull fails (no registry), the agent runs
	// the local image of that exact reference and says so.
	app := s.createApp(t, map[string]any{
		"name": "web", "source": map[string]any{"type": "image", "image": v1.Ref},
		"container_port": 8080, "health_path": "/health",
		"env": []map[string]string{{"key": "GREETING", "value": "one"}},
	})
	if app.Latest == nil || app.Status != "deploying" {
		t.Fatalf("created application: %+v", app)
	}
	d1, _ := s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	if ev, ok := findEvent(d1.Events, "registry unreachable; using the local image "+v1.Ref); !ok || ev.Level != "warn" {
		t.Fatalf("no warn event about the local image fallback; events:\n%s", eventsText(d1.Events))
	}
	if d1.Result == nil || d1.Result.Pulled || d1.ImageID != v1.ID || d1.Result.ImageID != v1.ID || d1.Result.HealthStatus != http.StatusOK ||
		d1.Result.HostPort == 0 {
		t.Fatalf("first deployment: image %s, result %+v; want image %s, not pulled, healthy", d1.ImageID, d1.Result, v1.ID)
	}
	if got := s.appContainers(t, app.ID); len(got) != 1 || !strings.HasSuffix(got[0], "(running)") {
		t.Fatalf("containers after the first deployment: %v", got)
	}

	// A domain with a certificate from Caddy's local CA.
	resp := s.Post(t, "/api/v1/domains", s.Token, map[string]any{"hostname": host, "application_id": app.ID, "tls_mode": "internal"})
	var dom domainChange
	expectJSON(t, resp, http.StatusCreated, &dom)
	if dom.JobID == "" || dom.Job.Type != "proxy.apply" {
		t.Fatalf("domain create: %s", resp.Body)
	}
	s.waitJob(t, dom.JobID, "succeeded", jobTimeout)
	// Every request of the test to the site goes through hc, which counts
	// the answers by status class.
	hc := s.Client(t)
	sent := &statusCounter{RoundTripper: hc.Transport}
	hc.Transport = sent
	url := s.Caddy.URL("https", host, "/")
	s.waitSite(t, hc, url, "v1 one", time.Minute)
	a, err := fetch(hc, s.Caddy.URL("http", host, "/x?y=1"))
	if want := s.Caddy.URL("https", host, "/x?y=1"); err != nil || a.Status != http.StatusPermanentRedirect || a.Location != want {
		t.Fatalf("plain HTTP: %+v, %v; want 308 to %s", a, err, want)
	}

	// Browser-like clients: several, each on its own kept-alive
	// connection, for the rest of the test.
	bodies := []string{"v1 one", "v2 one", "v1 two", "v2 two"}
	load := startLoad(t, hc, url, 4, 10*time.Millisecond, func(b string) bool { return slices.Contains(bodies, b) })
	load.waitAnswer(t, "v1 one", time.Minute)

	// v2: the switch fails no request. A pipeline deploys it with a
	// deploy token for this application alone, which changes nothing
	// else and reads no secret.
	resp = s.patch(t, "/api/v1/applications/"+app.ID, map[string]any{"image": v2.Ref})
	expectStatus(t, resp, http.StatusOK)
	resp = s.Post(t, "/api/v1/tokens", s.Token, map[string]any{"name": "pipeline", "scopes": []string{"deploy"},
		"resources": []string{"app:" + app.ID}})
	var pipeline struct {
		Token string `json:"token"`
	}
	expectJSON(t, resp, http.StatusCreated, &pipeline)
	for _, c := range []struct {
		method, path, code string
		body               any
	}{
		{http.MethodPatch, "/api/v1/applications/" + app.ID + "/env", "token-scope", map[string]any{"set": map[string]string{"GREETING": "x"}}},
		{http.MethodPost, "/api/v1/applications", "token-scope", map[string]any{}},
		{http.MethodGet, "/api/v1/users", "session-required", nil},
		{http.MethodPost, "/api/v1/platform/recovery-kit", "session-required", map[string]any{}},
	} {
		if r := s.Do(t, Req{Method: c.method, Path: c.path, Token: pipeline.Token, JSON: c.body}); r.Status != http.StatusForbidden ||
			problemCode(r) != c.code {
			t.Errorf("%s %s with the deploy token: %d %s, want 403 %s", c.method, c.path, r.Status, r.Body, c.code)
		}
	}
	if r := s.Get(t, "/api/v1/applications/"+app.ID, pipeline.Token); r.Status != http.StatusOK || strings.Contains(string(r.Body), `"one"`) {
		t.Errorf("the application read with the deploy token: %d %s, want 200 without the environment's values", r.Status, r.Body)
	}
	var byToken deployAccepted
	expectJSON(t, s.Post(t, "/api/v1/applications/"+app.ID+"/deployments", pipeline.Token, nil), http.StatusAccepted, &byToken)
	d2, done := s.waitDeployment(t, byToken.DeploymentID, "succeeded", pollInterval, deployTimeout)
	load.waitAnswer(t, "v2 one", time.Minute)
	c := load.Take()
	t.Logf("deploying v2: %s", c)
	if c.Failures != 0 {
		t.Errorf("requests failed while v2 was deployed: %s", c)
	}
	if c.Bodies["v1 one"] == 0 || c.Bodies["v2 one"] == 0 || !c.LastSeen["v1 one"].Before(done) {
		t.Errorf("want v1 until the switch and v2 after it: %s (v1 last seen %s, deployment done %s)", c,
			c.LastSeen["v1 one"].Format(time.StampMilli), done.Format(time.StampMilli))
	}
	s.waitSite(t, hc, url, "v2 one", time.Minute)

	// v3 is broken: its health check answers 500 until the deployment
	// fails (the agent waits 60 s), and v2 serves throughout. Meanwhile
	// the agent checks the domain: the test's DNS server resolves it, and
	// Caddy serves a certificate of its local CA's intermediate.
	d3ID := s.deploy(t, app.ID, map[string]any{"ref": v3.Ref})

	var check Accepted
	expectJSON(t, s.Post(t, "/api/v1/domains/"+dom.Domain.ID+"/check", s.Token, nil), http.StatusAccepted, &check)
	s.waitJob(t, check.JobID, "succeeded", jobTimeout)
	resp = s.Get(t, "/api/v1/domains/"+dom.Domain.ID, s.Token)
	var di DomainInfo
	expectJSON(t, resp, http.StatusOK, &di)
	if ch := di.Check; ch == nil || ch.JobID != check.JobID || ch.Status != "succeeded" || !slices.Equal(ch.Addresses, []string{"127.0.0.1"}) ||
		ch.CertIssuer != s.localIntermediate(t).Subject.String() || ch.CertNotAfter == nil || !ch.CertNotAfter.After(time.Now()) ||
		!slices.Contains(ch.CertDNSNames, host) || len(ch.Errors) != 0 {
		t.Errorf("domain check: %s", resp.Body)
	}

	d3, _ := s.waitDeployment(t, d3ID, "failed", pollInterval, failedDeployTimeout)
	if e := deref(d3.Error); !strings.Contains(e, "health check failed") || !strings.Contains(e, "/health") || !strings.Contains(e, "HTTP 500") ||
		!strings.Contains(e, "version v3 is broken") {
		t.Errorf("broken deployment's error: %q", e)
	}
	if ev, ok := findEvent(d3.Events, "health check failed"); !ok || ev.Level != "error" {
		t.Errorf("no error event with the health check's reason; events:\n%s", eventsText(d3.Events))
	}
	if _, ok := findEvent(d3.Events, "registry unreachable; using the local image "+v3.Ref); !ok {
		t.Errorf("no event about the local image fallback; events:\n%s", eventsText(d3.Events))
	}
	if got := s.appInfo(t, app.ID); got.Status != "running" || got.Current == nil || got.Current.ID != d2.ID || got.Latest == nil || got.Latest.ID != d3ID {
		t.Errorf("after the broken deployment: status %s, current %+v, latest %+v", got.Status, got.Current, got.Latest)
	}
	if got := s.appContainers(t, app.ID); len(got) != 1 {
		t.Errorf("containers after the broken deployment (want v2's only): %v", got)
	}
	c = load.Take()
	t.Logf("deploying the broken v3: %s", c)
	if c.Failures != 0 || c.Bodies["v2 one"] == 0 || len(c.Bodies) != 1 {
		t.Errorf("while v3 failed, want v2 only and no failure: %s", c)
	}

	// Rollback to the first deployment: a new deployment of its image.
	load.waitAnswer(t, "v2 one", time.Minute)
	resp = s.Post(t, "/api/v1/deployments/"+d1.ID+"/rollback", s.Token, nil)
	var rb deployAccepted
	expectJSON(t, resp, http.StatusAccepted, &rb)
	if rb.DeploymentID == d1.ID || deref(rb.Deployment.RollbackOf) != d1.ID || rb.Deployment.Spec.PinnedImageID != v1.ID {
		t.Fatalf("rollback: %s", resp.Body)
	}
	drb, done := s.waitDeployment(t, rb.DeploymentID, "succeeded", pollInterval, deployTimeout)
	if deref(drb.RollbackOf) != d1.ID || drb.ImageID != v1.ID {
		t.Errorf("rollback deployment: rollback_of %s, image %s", deref(drb.RollbackOf), drb.ImageID)
	}
	if _, ok := findEvent(drb.Events, "(rollback)"); !ok {
		t.Errorf("the rollback did not use the pinned local image; events:\n%s", eventsText(drb.Events))
	}
	load.waitAnswer(t, "v1 one", time.Minute)
	c = load.Take()
	t.Logf("rolling back to v1: %s", c)
	if c.Failures != 0 || c.Bodies["v2 one"] == 0 || c.Bodies["v1 one"] == 0 || !c.LastSeen["v2 one"].Before(done) {
		t.Errorf("rolling back, want v2 then v1 and no failure: %s", c)
	}
	s.waitSite(t, hc, url, "v1 one", time.Minute)
	load.waitAnswer(t, "v1 one", time.Minute)

	// A setting changes the next deployment only. The application's
	// image is still v2 (the rollback and v3's ref did not change it).
	resp = s.patch(t, "/api/v1/applications/"+app.ID, map[string]any{"env": []map[string]string{{"key": "GREETING", "value": "two"}}})
	expectStatus(t, resp, http.StatusOK)
	for range 20 {
		if a, err := fetch(hc, url); err != nil || a.Body != "v1 one" {
			t.Fatalf("after the PATCH, before a deployment: %+v, %v; want the live app unchanged", a, err)
		}
	}
	d4, done := s.waitDeployment(t, s.deploy(t, app.ID, nil), "succeeded", pollInterval, deployTimeout)
	load.waitAnswer(t, "v2 two", time.Minute)
	load.Stop()
	c = load.Take()
	t.Logf("deploying the new environment: %s", c)
	if c.Failures != 0 || c.Bodies["v1 one"] == 0 || c.Bodies["v2 two"] == 0 || !c.LastSeen["v1 one"].Before(done) {
		t.Errorf("deploying the new environment, want v1 one then v2 two and no failure: %s", c)
	}
	s.waitSite(t, hc, url, "v2 two", time.Minute)

	// The traffic the agent reports from Caddy's access log: each answer
	// the test got, once, plus the requests Caddy logged without an
	// answer (status 0: a request cut off by a reload, which the client's
	// transport retried on a new connection; only the retry's answer
	// reached the test).
	want := sent.Counts()
	unanswered := int64(0)
	for _, e := range accessLogEntries(t, s.Caddy.AccessLog) {
		if e.Host == host && e.Status == 0 {
			unanswered++
		}
	}
	want[0] += unanswered
	var tr AppTraffic
	deadline := time.Now().Add(trafficTimeout)
	for {
		resp = s.Get(t, "/api/v1/applications/"+app.ID+"/requests?range=1h", s.Token)
		expectJSON(t, resp, http.StatusOK, &tr)
		if tr.Totals.Count >= want[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("traffic: %d requests reported within %s, want the %d answered: %s", tr.Totals.Count, trafficTimeout, want[0], resp.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("traffic: %s; the clients got %v (total with %d unanswered, 1xx…5xx)", resp.Body[strings.Index(string(resp.Body), `"totals"`):], want, unanswered)
	if got := [6]int64{tr.Totals.Count, 0, tr.Totals.Status2xx, tr.Totals.Status3xx, tr.Totals.Status4xx, tr.Totals.Status5xx}; got != want ||
		tr.BucketSeconds != 60 || len(tr.Points) != 60 || !slices.Contains(tr.Hosts, host) || want[3] != 1 ||
		tr.Totals.BytesOut <= 0 || tr.Totals.P95Ms == nil || *tr.Totals.P95Ms <= 0 {
		t.Errorf("traffic reported %v (total, 1xx…5xx), want %v: %s", got, want, resp.Body)
	}

	// The live container's log and state.
	var la Accepted
	expectJSON(t, s.Post(t, "/api/v1/applications/"+app.ID+"/logs", s.Token, map[string]any{"lines": 50}), http.StatusAccepted, &la)
	var logs AppLogsRead
	deadline = time.Now().Add(jobTimeout)
	for {
		resp = s.Get(t, "/api/v1/applications/"+app.ID+"/logs/"+la.JobID, s.Token)
		expectJSON(t, resp, http.StatusOK, &logs)
		if logs.Status == "succeeded" {
			break
		}
		if logs.Status == "failed" || logs.Status == "cancelled" || time.Now().After(deadline) {
			t.Fatalf("log read: %s", resp.Body)
		}
		time.Sleep(pollInterval)
	}
	if logs.State != "running" || logs.RestartCount != 0 || logs.StartedAt == nil || d4.Job == nil || d4.Job.StartedAt == nil ||
		logs.StartedAt.Before(d4.Job.StartedAt.Add(-time.Second)) || logs.StartedAt.After(time.Now()) ||
		d4.Result == nil || logs.ContainerID != d4.Result.ContainerID {
		t.Errorf("log read of the live container (deployment %s, container %v): state %s, started %v, restarts %d, container %s",
			d4.ID, d4.Result, logs.State, logs.StartedAt, logs.RestartCount, logs.ContainerID)
	}
	var stdout, stderr bool
	for _, l := range logs.Lines {
		stdout = stdout || (l.Stream == "stdout" && l.Message == "version v2 listening on :8080")
		stderr = stderr || (l.Stream == "stderr" && l.Message == "ready (stderr)")
	}
	if !stdout || !stderr || len(logs.Lines) > 50 {
		t.Errorf("log lines of the live container: %+v", logs.Lines)
	}

	// Removal: the containers and the domain's route go.
	resp = s.del(t, "/api/v1/applications/"+app.ID)
	expectStatus(t, resp, http.StatusAccepted)
	testlab.Eventually(t, jobTimeout, "the application is removed", func() bool {
		r := s.Get(t, "/api/v1/applications/"+app.ID, s.Token)
		if r.Status == http.StatusOK {
			var a AppInfo
			r.JSON(t, &a)
			if a.Status == "removal_failed" {
				t.Fatalf("removal failed: %s", deref(a.RemoveError))
			}
			return false
		}
		expectProblem(t, r, http.StatusNotFound, "not-found")
		return true
	})
	if got := s.appContainers(t, app.ID); len(got) != 0 {
		t.Errorf("containers after the removal: %v", got)
	}
	expectProblem(t, s.Get(t, "/api/v1/domains/"+dom.Domain.ID, s.Token), http.StatusNotFound, "not-found")
	a, err = fetch(hc, s.Caddy.URL("http", host, "/"))
	if err != nil || a.Status != http.StatusNotFound {
		t.Errorf("plain HTTP after the removal: %+v, %v; want 404", a, err)
	}
	if a, err := fetch(s.FreshClient(t), url); err == nil && a.Status != http.StatusNotFound && a.Status != http.StatusServiceUnavailable {
		t.Errorf("HTTPS after the removal: %+v; want 404, 503 or no certificate", a)
	} else {
		t.Logf("HTTPS after the removal: %+v, %v", a, err)
	}
	if b := s.Caddy.LoadedConfig(t); strings.Contains(string(b), host) {
		t.Errorf("Caddy's configuration still names %s: %s", host, b)
	}
}

// TestAppsAPIRefusesMalformedInput covers what TestApplicationAPIRefusesBadInput
// does not: missing and mistyped fields, unknown fields, and bodies that are
// not JSON, on each write endpoint that takes a body. Every refusal names the
// field; nothing is created or queued.
func TestAppsAPIRefusesMalformedInput(t *testing.T) {
	t.Parallel()
	r := newAppRig(t, store.SQLite)
	app := r.createApp(t, map[string]any{"name": "web", "deploy": false,
		"source": map[string]any{"type": "image", "image": "nginx:1.27"}, "container_port": 80})
	resp := r.Post(t, "/api/v1/domains", r.Token, map[string]any{"hostname": "example.com", "application_id": app.ID})
	var dom domainChange
	expectJSON(t, resp, http.StatusCreated, &dom)
	r.claimAs(t, "proxy.apply")

	apps, appPath, domPath := "/api/v1/applications", "/api/v1/applications/"+app.ID, "/api/v1/domains/"+dom.Domain.ID
	// newApp is a valid body for POST /api/v1/applications with fields
	// (raw JSON values) replaced, added or, when empty, left out.
	newApp := func(fields map[string]string) string {
		b := map[string]json.RawMessage{"name": json.RawMessage(`"api"`), "server_id": json.RawMessage(`"` + r.serverID + `"`),
			"source": json.RawMessage(`{"type":"image","image":"nginx"}`), "container_port": json.RawMessage(`80`)}
		for k, v := range fields {
			if v == "" {
				delete(b, k)
			} else {
				b[k] = json.RawMessage(v)
			}
		}
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	domain := func(extra string) string { return `{"application_id":"` + app.ID + `",` + extra + `}` }
	for _, tc := range []struct {
		method, path, body string
		fields             []string // 422 naming these; nil: 400 malformed-request
	}{
		{"POST", apps, `{}`, []string{"name", "server_id", "source"}},
		{"POST", apps, newApp(map[string]string{"server_id": ""}), []string{"server_id"}},
		// Only service applications go without a container port.
		{"POST", apps, newApp(map[string]string{"container_port": ""}), []string{"container_port"}},
		{"POST", apps, newApp(map[string]string{"container_port": `"80"`}), []string{"container_port"}},
		{"POST", apps, newApp(map[string]string{"deploy": `"yes"`}), []string{"deploy"}},
		{"POST", apps, newApp(map[string]string{"bogus": `1`}), []string{"bogus"}},
		{"POST", apps, newApp(map[string]string{"source": `{"type":"image"}`}), []string{"source.image"}},
		{"POST", apps, newApp(map[string]string{"source": `{"image":"nginx"}`}), []string{"source.type"}},
		{"POST", apps, newApp(map[string]string{"source": `{"type":"svn","image":"nginx"}`}), []string{"source.type"}},
		{"POST", apps, newApp(map[string]string{"env": `[{"key":"A","value":"a\u0000b"}]`}), []string{"env[0].value"}},
		{"POST", apps, newApp(map[string]string{"env": `[{"value":"x"}]`}), []string{"env[0].key"}},
		{"POST", apps, newApp(map[string]string{"env": `{"A":"x"}`}), []string{"env"}},
		{"POST", apps, `[]`, []string{""}},
		{"POST", apps, `{"name":`, nil},
		{"PATCH", appPath, `{"bogus":1}`, []string{"bogus"}},
		{"PATCH", appPath, `{"container_port":"x"}`, []string{"container_port"}},
		{"PATCH", appPath, `{"health_path":"health"}`, []string{"health_path"}},
		{"PATCH", appPath, `{"name":""}`, []string{"name"}},
		{"PATCH", appPath, `{"image":""}`, []string{"image"}},
		{"PATCH", appPath, `{"image":"nginx:2","source":{"type":"image","image":"nginx:3"}}`, []string{"image"}},
		{"PATCH", appPath, `{"source":{"type":"git","installation_id":1,"repo_id":2,"branch":"main"}}`, []string{"source.type"}},
		{"PATCH", appPath, `{"env":[{"key":"","value":"x"}]}`, []string{"env[0].key"}},
		{"PATCH", appPath, `null`, []string{""}},
		{"PATCH", appPath, `{`, nil},
		{"POST", appPath + "/deployments", `{"ref":5}`, []string{"ref"}},
		{"POST", appPath + "/deployments", `{"ref":"nginx@sha256:abc"}`, []string{"ref"}},
		{"POST", appPath + "/deployments", `{"bogus":true}`, []string{"bogus"}},
		{"POST", appPath + "/deployments", `{"ref":`, nil},
		{"POST", appPath + "/logs", `{"lines":-1}`, []string{"lines"}},
		{"POST", appPath + "/logs", `{"lines":"x"}`, []string{"lines"}},
		{"POST", appPath + "/logs", `{"since":"2024-01-01"}`, []string{"since"}},
		{"POST", appPath + "/logs", `{"bogus":1}`, []string{"bogus"}},
		{"POST", appPath + "/logs", `{"lines":`, nil},
		{"POST", "/api/v1/domains", `{}`, []string{"hostname", "application_id"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"a.example.org","bogus":1`), []string{"bogus"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"a.example.org","redirect_www":"yes"`), []string{"redirect_www"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"a.example.org:8080"`), []string{"hostname"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"https://a.example.org"`), []string{"hostname"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"a.example.org."`), []string{"hostname"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"-a.example.org"`), []string{"hostname"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"a..example.org"`), []string{"hostname"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"a.example.123"`), []string{"hostname"}},
		{"POST", "/api/v1/domains", domain(`"hostname":"bücher.example"`), []string{"hostname"}},
		{"POST", "/api/v1/domains", `{"hostname":`, nil},
		{"PATCH", domPath, `{}`, []string{"tls_mode"}},
		{"PATCH", domPath, `{"tls_mode":null}`, []string{"tls_mode"}},
		{"PATCH", domPath, `{"tls_mode":"off","redirect_www":true}`, []string{"redirect_www"}},
		{"PATCH", domPath, `{"tls_mode":`, nil},
	} {
		t.Run(tc.method+" "+strings.TrimPrefix(tc.path, "/api/v1/")+" "+tc.body, func(t *testing.T) {
			resp := r.Do(t, Req{Method: tc.method, Path: tc.path, Token: r.Token, Body: []byte(tc.body), ContentType: "application/json"})
			if tc.fields == nil {
				expectProblem(t, resp, http.StatusBadRequest, "malformed-request")
				return
			}
			p := expectProblem(t, resp, http.StatusUnprocessableEntity, "validation-failed")
			if got := problemFields(p); !sameFields(got, tc.fields) {
				t.Errorf("fields %q, want %q: %s", got, tc.fields, resp.Body)
			}
		})
	}
	// Not JSON at all.
	resp = r.Do(t, Req{Method: http.MethodPost, Path: apps, Token: r.Token, Body: []byte("name=api"), ContentType: "application/x-www-form-urlencoded"})
	expectProblem(t, resp, http.StatusUnsupportedMediaType, "unsupported-media-type")

	r.noClaim(t)
	if jobs := r.listJobs(t, "?server_id="+r.serverID); len(jobs) != 1 {
		t.Errorf("bad input queued jobs: %d", len(jobs))
	}
	if got := r.appInfo(t, app.ID); got.Name != "web" || got.ContainerPort != 80 || got.Source.Image != "nginx:1.27" || got.HealthPath != "/" {
		t.Errorf("bad input changed the application: %+v", got)
	}
	resp = r.Get(t, "/api/v1/domains", r.Token)
	expectStatus(t, resp, http.StatusOK)
	if strings.Count(string(resp.Body), `"hostname"`) != 1 || !strings.Contains(string(resp.Body), `"tls_mode":"auto"`) {
		t.Errorf("bad input changed the domains: %s", resp.Body)
	}
	if list := r.Get(t, apps, r.Token); strings.Contains(string(list.Body), `"name":"api"`) {
		t.Errorf("bad input created an application: %s", list.Body)
	}
}

// sameFields compares field lists as sets.
func sameFields(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(slices.Compact(g), slices.Compact(w))
}
