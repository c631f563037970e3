package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// composeStack is an application stack with the images of a compose
// application: the web and worker program of testdata/stack in versions
// (v1, v2 and a broken one whose health check answers 500) and the
// Redis-compatible engine image of the test lab.
type composeStack struct {
	*appStack
	Stack map[string]string // version → image reference
	Redis string
}

func newComposeStack(t testing.TB) *composeStack {
	t.Helper()
	s := &composeStack{appStack: newAppStack(t, appStackOptions{Images: map[string]int{}}), Stack: map[string]string{}}
	s.Redis = testlab.EngineImage(t, "redis")
	prog := testlab.GoProgram(t, "testdata/stack")
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	for v, health := range map[string]int{"v1": 200, "v2": 200, "broken": 500} {
		ref := fmt.Sprintf("127.0.0.1:1/capstan-e2e/stack:%s-%s", v, run)
		dockerfile := fmt.Sprintf("FROM scratch\nCOPY stack /stack\nENV VERSION=%s HEALTH_STATUS=%d\nENTRYPOINT [\"/stack\"]\nLABEL dev.capstan.e2e.run=%s\n",
			v, health, run)
		buildImageFromProgram(t, s.Docker, ref, dockerfile, "stack", prog)
		s.Stack[v] = ref
	}
	return s
}

// document is the compose document of the test's application: web (of
// version web) and worker (v1) from the stack image, and a cache with a
// named volume that web waits for to be healthy. cacheArgs are extra
// arguments of the cache's redis-server.
func (s *composeStack) document(web string, cacheArgs ...string) string {
	args := append([]string{"redis-server", "--appendonly", "yes", "--protected-mode", "no"}, cacheArgs...)
	return fmt.Sprintf(`services:
  web:
    image: %s
    environment:
      GREETING: hello
    env_file: .env
    expose: ["8080"]
    depends_on:
      cache:
        condition: service_healthy
  worker:
    image: %s
    environment:
      ROLE: worker
    depends_on: [cache]
    restart: unless-stopped
  cache:
    image: %s
    command: [%s]
    volumes:
      - data:/data
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
      timeout: 3s
      retries: 30
    mem_limit: 256m
volumes:
  data: {}
`, s.Stack[web], s.Stack["v1"], s.Redis, quoteAll(args))
}

func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, ", ")
}

// composeObjects lists what the engine has of a compose application:
// containers by service (running ones' ids), volumes and networks.
func (s *composeStack) composeObjects(t testing.TB, appID string) (containers map[string][]string, volumes, networks []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	containers = map[string][]string{}
	for _, label := range []string{agentproto.LabelApp, agentproto.LabelComposeApp} {
		res, err := s.Docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label+"="+appID)})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Items {
			svc := c.Labels[agentproto.LabelService]
			containers[svc] = append(containers[svc], c.ID[:12]+"/"+string(c.State))
		}
	}
	vr, err := s.Docker.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelComposeApp+"="+appID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vr.Items {
		volumes = append(volumes, v.Name)
	}
	nr, err := s.Docker.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("label", agentproto.LabelComposeApp+"="+appID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nr.Items {
		networks = append(networks, n.Name)
	}
	return containers, volumes, networks
}

// removeCompose removes whatever of a compose application the test left.
func (s *composeStack) removeCompose(t testing.TB, appID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, label := range []string{agentproto.LabelApp, agentproto.LabelComposeApp} {
		res, err := s.Docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label+"="+appID)})
		if err != nil {
			t.Errorf("listing containers: %v", err)
			return
		}
		for _, c := range res.Items {
			if _, err := s.Docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("removing container %s: %v", c.ID, err)
			}
		}
	}
	_, vols, nets := s.composeObjects(t, appID)
	for _, v := range vols {
		if _, err := s.Docker.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing volume %s: %v", v, err)
		}
	}
	for _, n := range nets {
		if _, err := s.Docker.NetworkRemove(ctx, n, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing network %s: %v", n, err)
		}
	}
}

// createStackApp creates the compose application name of document doc,
// deployed at once, and serves it on host through Caddy; it returns the
// application and the site's URL.
func (s *composeStack) createStackApp(t testing.TB, name, host, doc string) (AppInfo, string) {
	t.Helper()
	app := s.createApp(t, map[string]any{
		"name": name, "kind": "compose", "source": map[string]any{"type": "inline"},
		"compose": doc, "web_service": "web", "container_port": 8080, "health_path": "/health",
		"env": []map[string]string{{"key": "TOKEN", "value": "t0ken-" + name}},
	})
	t.Cleanup(func() { s.removeCompose(t, app.ID) })
	if app.Kind != "compose" || app.Latest == nil {
		t.Fatalf("created %+v", app)
	}
	s.waitDeployment(t, app.Latest.ID, "succeeded", 100*time.Millisecond, deployTimeout)
	s.addDomain(t, app.ID, host, "internal", "succeeded")
	return app, s.Caddy.URL("https", host, "/")
}

// redeployWith replaces the application's document and deploys it; it
// returns the deployment's id.
func (s *composeStack) redeployWith(t testing.TB, appID, doc string) string {
	t.Helper()
	resp := s.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/applications/" + appID, Token: s.Token, JSON: map[string]any{"compose": doc}})
	expectStatus(t, resp, http.StatusOK)
	return s.deploy(t, appID, nil)
}

func body(t testing.TB, hc *http.Client, method, url string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return string(b)
}

// TestComposeAppOnRealStack deploys a compose application of a web
// service, a worker and a Redis-compatible cache with a named volume
// (the web service waiting for the cache to be healthy) through the real
// agent, Docker and Caddy: it serves; redeploys lose no request under
// load; a broken web service keeps the old release serving; a rollback
// re-creates the kept release; the volume's data survives all of it and
// the cache's replacement; per-service state and logs; delete keeps the
// volume unless purged.
func TestComposeAppOnRealStack(t *testing.T) {
	t.Parallel()
	s := newComposeStack(t)
	hc := s.Client(t)
	app, url := s.createStackApp(t, "shop", "shop.test", s.document("v1"))
	s.waitSite(t, hc, url, "v1 hello", 30*time.Second)

	// The services share the application's network (web and worker reach
	// "cache"), web has the application's env through env_file, the
	// volume keeps data.
	if got := body(t, hc, http.MethodPost, url+"put?v=kept-through-releases"); got != "stored" {
		t.Fatalf("put: %q", got)
	}
	if got := body(t, hc, http.MethodGet, url+"env?key=TOKEN"); got != "t0ken-shop" {
		t.Fatalf("the web service's TOKEN: %q", got)
	}
	testlab.EventuallyReport(t, 30*time.Second, "the worker counts ticks in the cache", func() (bool, string) {
		v := body(t, hc, http.MethodGet, url+"ticks")
		n, _ := strconv.Atoi(v)
		return n > 0, v
	})
	objs, vols, nets := s.composeObjects(t, app.ID)
	if len(objs["web"]) != 1 || len(objs["worker"]) != 1 || len(objs["cache"]) != 1 || len(vols) != 1 || len(nets) != 1 {
		t.Fatalf("containers %v, volumes %v, networks %v", objs, vols, nets)
	}
	cache := objs["cache"][0]

	// Redeploy under load: a new web service; the unchanged cache and
	// worker stay.
	valid := func(b string) bool { return b == "v1 hello" || b == "v2 hello" }
	load := startLoad(t, hc, url, 4, 2*time.Millisecond, valid)
	load.waitAnswer(t, "v1 hello", 20*time.Second)
	load.Take()
	second := s.redeployWith(t, app.ID, s.document("v2"))
	s.waitDeployment(t, second, "succeeded", 100*time.Millisecond, deployTimeout)
	load.waitAnswer(t, "v2 hello", 20*time.Second)
	if c := load.Take(); c.Failures != 0 {
		t.Fatalf("the redeploy failed requests: %s", c)
	}
	objs, _, _ = s.composeObjects(t, app.ID)
	if len(objs["web"]) != 1 || len(objs["cache"]) != 1 || objs["cache"][0] != cache {
		t.Fatalf("after the redeploy: %v (the cache was %s)", objs, cache)
	}
	d := s.deployment(t, second)
	if d.Result == nil || len(d.Result.Services) != 3 || d.Result.Services["web"] != d.ImageID {
		t.Fatalf("the release of %s: %+v (image %s)", second, d.Result, d.ImageID)
	}

	// A broken web service: the deployment fails, v2 serves throughout.
	broken := s.redeployWith(t, app.ID, s.document("broken"))
	bd, _ := s.waitDeployment(t, broken, "failed", 100*time.Millisecond, failedDeployTimeout)
	if bd.Error == nil || !strings.Contains(*bd.Error, "web") {
		t.Fatalf("the broken deployment's error: %v", bd.Error)
	}
	load.waitAnswer(t, "v2 hello", 20*time.Second)
	if c := load.Take(); c.Failures != 0 || c.Bodies["v2 hello"] == 0 {
		t.Fatalf("while the broken release failed: %s", c)
	}

	// Rollback to the first release: its document and images.
	resp := s.Post(t, "/api/v1/deployments/"+app.Latest.ID+"/rollback", s.Token, nil)
	var rb deployAccepted
	expectJSON(t, resp, http.StatusAccepted, &rb)
	s.waitDeployment(t, rb.DeploymentID, "succeeded", 100*time.Millisecond, deployTimeout)
	load.waitAnswer(t, "v1 hello", 20*time.Second)
	load.Stop()
	if c := load.Take(); c.Failures != 0 {
		t.Fatalf("the rollback failed requests: %s", c)
	}
	if got := body(t, hc, http.MethodGet, url+"get"); got != "kept-through-releases" {
		t.Fatalf("the volume's data after the releases: %q", got)
	}

	// A changed cache is replaced: its data stays in the volume.
	changed := s.redeployWith(t, app.ID, s.document("v1", "--maxmemory", "200mb"))
	s.waitDeployment(t, changed, "succeeded", 100*time.Millisecond, deployTimeout)
	objs, _, _ = s.composeObjects(t, app.ID)
	if len(objs["cache"]) != 1 || objs["cache"][0] == cache {
		t.Fatalf("the cache was not replaced: %v (was %s)", objs, cache)
	}
	testlab.EventuallyReport(t, 30*time.Second, "the replaced cache has the data", func() (bool, string) {
		a, err := fetch(hc, url+"get")
		return err == nil && a.Body == "kept-through-releases", fmt.Sprintf("%+v %v", a, err)
	})

	// Per-service state, from the server's inventory, and a service's logs.
	testlab.EventuallyReport(t, 2*time.Minute, "the detail shows every service running", func() (bool, string) {
		r := s.Get(t, "/api/v1/applications/"+app.ID+"?reveal=false", s.Token)
		var det struct {
			Services *struct {
				Services []struct {
					Service, State, DeploymentID string
				} `json:"services"`
			} `json:"services"`
		}
		r.JSON(t, &det)
		if det.Services == nil || len(det.Services.Services) != 3 {
			return false, string(r.Body)
		}
		for _, sv := range det.Services.Services {
			if sv.State != "running" {
				return false, string(r.Body)
			}
		}
		return true, ""
	})
	resp = s.Post(t, "/api/v1/applications/"+app.ID+"/logs", s.Token, map[string]any{"service": "worker", "lines": 20})
	var lj struct {
		ID string `json:"job_id"`
	}
	expectJSON(t, resp, http.StatusAccepted, &lj)
	s.waitJob(t, lj.ID, "succeeded", jobTimeout)
	r := s.Get(t, "/api/v1/applications/"+app.ID+"/logs/"+lj.ID, s.Token)
	if !strings.Contains(string(r.Body), "worker counting ticks") {
		t.Fatalf("the worker's log: %s", r.Body)
	}

	// Delete keeps the volume; a purge removes it.
	var rm struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	expectJSON(t, s.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/applications/" + app.ID, Token: s.Token}), http.StatusAccepted, &rm)
	s.waitJob(t, rm.Job.ID, "succeeded", jobTimeout)
	objs, vols, nets = s.composeObjects(t, app.ID)
	if len(objs) != 0 || len(vols) != 1 || len(nets) != 0 {
		t.Fatalf("after delete: containers %v, volumes %v, networks %v", objs, vols, nets)
	}

	other, _ := s.createStackApp(t, "cart", "cart.test", s.document("v1"))
	if _, vols, _ := s.composeObjects(t, other.ID); len(vols) != 1 {
		t.Fatalf("volumes of cart: %v", vols)
	}
	resp = s.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/applications/" + other.ID + "?purge=true", Token: s.Token})
	expectJSON(t, resp, http.StatusAccepted, &rm)
	s.waitJob(t, rm.Job.ID, "succeeded", jobTimeout)
	objs, vols, nets = s.composeObjects(t, other.ID)
	if len(objs) != 0 || len(vols) != 0 || len(nets) != 0 {
		t.Fatalf("after delete with purge: containers %v, volumes %v, networks %v", objs, vols, nets)
	}
}

// TestComposeAppRefusesUnsupportedKeys: 422 naming each key Capstan does
// not run, and nothing created.
func TestComposeAppRefusesUnsupportedKeys(t *testing.T) {
	t.Parallel()
	r := newAppRig(t, store.SQLite)
	doc := "services:\n  web:\n    image: nginx\n    ports: [\"80:80\"]\n    cap_add: [NET_ADMIN]\n  db:\n    image: postgres\n    deploy: {replicas: 2}\nconfigs:\n  c: {file: ./c}\n"
	resp := r.Post(t, "/api/v1/applications", r.Token, map[string]any{"name": "stack", "server_id": r.serverID, "kind": "compose",
		"source": map[string]any{"type": "inline"}, "compose": doc, "web_service": "web", "container_port": 80, "deploy": false})
	p := expectProblem(t, resp, http.StatusUnprocessableEntity, "validation-failed")
	for _, k := range []string{"services.web.ports", "services.web.cap_add", "services.db.deploy", "configs"} {
		if !strings.Contains(string(resp.Body), k) {
			t.Fatalf("the problem does not name %s: %s", k, resp.Body)
		}
	}
	if fields := problemFields(p); len(fields) == 0 || fields[0] != "compose" {
		t.Fatalf("fields %v", fields)
	}
	list := r.Get(t, "/api/v1/applications", r.Token)
	if strings.Contains(string(list.Body), `"stack"`) {
		t.Fatalf("an application was created: %s", list.Body)
	}
}
