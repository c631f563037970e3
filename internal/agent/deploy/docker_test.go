package deploy

// Tests against a real Docker engine: the images are built here, FROM
// scratch with a static Go HTTP server (testdata/web), with the legacy
// builder. Their references name a registry that cannot be reached
// (127.0.0.1:1), so every pull by reference fails the same way with or
// without network access, and the release runs the local image.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

type testImage = testlab.Image

// buildImages builds one image of testdata/web per variant (VERSION and
// HEALTH_STATUS in the image's environment), tagged
// 127.0.0.1:1/capstan-test/web:<variant>-<run>; they are removed when t
// ends.
func buildImages(t *testing.T, cli *client.Client, run string, variants map[string]string) map[string]testImage {
	t.Helper()
	images := map[string]testImage{}
	for _, variant := range slices.Sorted(maps.Keys(variants)) {
		// The label makes the image this run's own: runs of this test at
		// the same time (go test ./...) must not share image ids.
		ref := fmt.Sprintf("127.0.0.1:1/capstan-test/web:%s-%s", variant, run)
		images[variant] = testlab.ProgramImage(t, cli, ref, "./testdata/web",
			fmt.Sprintf("ENV VERSION=%s HEALTH_STATUS=%s", variant, variants[variant]),
			"LABEL dev.capstan.test.run="+run)
	}
	return images
}

// fakeProxy records applies and keeps the upstream each application was
// last switched to; its next fails applies fail with fail.
type fakeProxy struct {
	mu      sync.Mutex
	calls   []proxyCall
	current map[string]string
	fail    error
	fails   int
}

type proxyCall struct {
	Cfg       agentproto.ProxyConfig
	Upstreams map[string]string
	Err       error
}

func (f *fakeProxy) Apply(ctx context.Context, cfg agentproto.ProxyConfig, upstreams map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := proxyCall{Cfg: cfg, Upstreams: maps.Clone(upstreams)}
	if f.fails > 0 {
		f.fails--
		c.Err = f.fail
	}
	f.calls = append(f.calls, c)
	if c.Err != nil {
		return c.Err
	}
	if f.current == nil {
		f.current = map[string]string{}
	}
	maps.Copy(f.current, upstreams)
	return nil
}

func (f *fakeProxy) upstream(app string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current[app]
}

func (f *fakeProxy) failNext(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails, f.fail = n, err
}

func (f *fakeProxy) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeProxy) callsSince(n int) []proxyCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[n:])
}

type recorder struct {
	mu     sync.Mutex
	events []string
	at     []time.Time
}

func (r *recorder) Emit(level, message string, _ any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, level+": "+message)
	r.at = append(r.at, time.Now())
	if os.Getenv("DEPLOY_TEST_TRACE") != "" {
		fmt.Printf("%s %s: %s\n", time.Now().Format("15:04:05.000"), level, message)
	}
}

func (r *recorder) has(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// between is the time from the first event starting with from to the
// first one after it starting with to.
func (r *recorder) between(from, to string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.events, func(e string) bool { return strings.HasPrefix(e, from) })
	if i < 0 {
		return 0, false
	}
	for j := i + 1; j < len(r.events); j++ {
		if strings.HasPrefix(r.events[j], to) {
			return r.at[j].Sub(r.at[i]), true
		}
	}
	return 0, false
}

var jobSeq atomic.Int64

// runJob runs one job like the agent does.
func runJob(t *testing.T, ex agent.Executor, jobType string, payload any, secrets map[string]string) (any, *recorder, error) {
	t.Helper()
	rec := &recorder{}
	data, err := runJobTo(t, ex, jobType, payload, secrets, rec)
	return data, rec, err
}

// runJobTo is runJob with the events going to rec.
func runJobTo(t *testing.T, ex agent.Executor, jobType string, payload any, secrets map[string]string, rec *recorder) (any, error) {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job := agentproto.Job{ID: fmt.Sprintf("job_test%d", jobSeq.Add(1)), Type: jobType, Payload: raw, HasSecrets: secrets != nil}
	data, _, err := ex.Run(ctx, job, secrets, rec)
	return data, err
}

func deployOK(t *testing.T, d *Deployer, p agentproto.DeployPayload, secrets map[string]string) (agentproto.DeployResult, *recorder) {
	t.Helper()
	start := time.Now()
	data, rec, err := runJob(t, executor(d, agentproto.JobAppDeploy), agentproto.JobAppDeploy, p, secrets)
	if err != nil {
		t.Fatalf("app.deploy %s: %v\nevents:\n%s", p.DeploymentID, err, strings.Join(rec.events, "\n"))
	}
	res := data.(agentproto.DeployResult)
	t.Logf("app.deploy %s: %s, %d events", p.DeploymentID, time.Since(start).Round(time.Millisecond), len(rec.events))
	return res, rec
}

func deployFails(t *testing.T, d *Deployer, p agentproto.DeployPayload, secrets map[string]string, want ...string) (*recorder, error) {
	t.Helper()
	start := time.Now()
	data, rec, err := runJob(t, executor(d, agentproto.JobAppDeploy), agentproto.JobAppDeploy, p, secrets)
	if err == nil {
		t.Fatalf("app.deploy %s succeeded (%+v), want a failure", p.DeploymentID, data)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("app.deploy %s error %q does not contain %q", p.DeploymentID, err, w)
		}
	}
	t.Logf("app.deploy %s failed as expected in %s: %v", p.DeploymentID, time.Since(start).Round(time.Millisecond), err)
	return rec, err
}

// get answers GET http://<upstream>/.
func get(upstream string) (string, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	res, err := hc.Get("http://" + upstream + "/")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("HTTP %d: %s", res.StatusCode, b)
	}
	return string(b), nil
}

func mustGet(t *testing.T, upstream, want string) {
	t.Helper()
	got, err := get(upstream)
	if err != nil || got != want {
		t.Fatalf("GET http://%s/ = %q, %v; want %q", upstream, got, err, want)
	}
}

// containersOf lists the application's containers.
func containersOf(t *testing.T, cli *client.Client, app string) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := appContainers(ctx, cli, app)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func onlyContainer(t *testing.T, cli *client.Client, app, id string) {
	t.Helper()
	list := containersOf(t, cli, app)
	if len(list) != 1 || list[0].ID != id || list[0].State != container.StateRunning {
		var got []string
		for _, c := range list {
			got = append(got, fmt.Sprintf("%s %s", shortID(c.ID), c.State))
		}
		t.Fatalf("containers of %s = %v, want only %s running", app, got, shortID(id))
	}
}

func imageExists(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	_, err := cli.ImageInspect(context.Background(), id)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func removeAppContainers(t *testing.T, cli *client.Client, app string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := appContainers(ctx, cli, app)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, c := range list {
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: removing container %s: %v", c.ID, err)
		}
	}
}

// TestReleases runs one application through its life on the engine:
// releases, failed ones, a rollback, logs, pruning and removal. The steps
// depend on each other and run in order.
func TestReleases(t *testing.T) {
	cli := testlab.Docker(t)
	begin := time.Now()
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	images := buildImages(t, cli, run, map[string]string{"v1": "200", "v2": "200", "broken": "500"})
	v1, v2, broken := images["v1"], images["v2"], images["broken"]
	t.Logf("images built in %s: v1 %s, v2 %s, broken %s", time.Since(begin).Round(time.Millisecond),
		shortImage(v1.ID), shortImage(v2.ID), shortImage(broken.ID))

	app := "app_test" + strings.ReplaceAll(run, "-", "x")
	t.Cleanup(func() { removeAppContainers(t, cli, app) })
	fake := &fakeProxy{}
	d := New(Options{Host: testlab.DockerHost(), Proxy: fake, Drain: 300 * time.Millisecond, StopTimeout: 3 * time.Second, HealthInterval: 100 * time.Millisecond})
	t.Cleanup(func() { d.Close() })

	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "web.example.test", AppID: app, TLSMode: agentproto.TLSInternal},
		{Hostname: "other.example.test", AppID: "app_other", TLSMode: agentproto.TLSOff},
	}}
	secrets := map[string]string{"GREETING": "hello from secrets"}
	depSeq := 0
	payload := func(img testImage) agentproto.DeployPayload {
		depSeq++
		return agentproto.DeployPayload{
			AppID: app, AppName: "Web Test", DeploymentID: fmt.Sprintf("dep_01test%s%04d", run[len(run)-6:], depSeq),
			Image: img.Ref, ContainerPort: 8080, HealthPath: "/health", EnvKeys: []string{"GREETING"},
			MemoryLimitBytes: 64 << 20, HealthTimeoutSeconds: 20, Proxy: cfg,
		}
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	var cur agentproto.DeployResult // the live release
	step("deploy v1", func(t *testing.T) {
		p := payload(v1)
		res, rec := deployOK(t, d, p, secrets)
		if res.HostPort <= 0 || res.ImageID != v1.ID || res.Pulled || res.HealthStatus != 200 || res.ContainerID == "" || len(res.RemovedIDs) != 0 {
			t.Errorf("result = %+v", res)
		}
		if _, err := time.Parse(time.RFC3339Nano, res.HealthCheckedAt); err != nil {
			t.Errorf("health_checked_at %q: %v", res.HealthCheckedAt, err)
		}
		if !rec.has("warn: registry unreachable; using the local image " + v1.Ref) {
			t.Errorf("no warning about the local image: %q", rec.events)
		}
		wantName := "capstan-web-test-" + p.DeploymentID[len(p.DeploymentID)-8:]
		if res.ContainerName != wantName {
			t.Errorf("container name %q, want %q", res.ContainerName, wantName)
		}
		insp, err := cli.ContainerInspect(context.Background(), res.ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := insp.Container
		wantLabels := map[string]string{agentproto.LabelApp: app, agentproto.LabelAppName: "Web Test",
			agentproto.LabelDeployment: p.DeploymentID, agentproto.LabelPort: "8080"}
		for k, v := range wantLabels {
			if c.Config.Labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, c.Config.Labels[k], v)
			}
		}
		if c.HostConfig.Memory != 64<<20 || c.HostConfig.RestartPolicy.Name != container.RestartPolicyUnlessStopped {
			t.Errorf("memory %d, restart policy %q", c.HostConfig.Memory, c.HostConfig.RestartPolicy.Name)
		}
		for port, bs := range c.NetworkSettings.Ports {
			for _, b := range bs {
				if b.HostIP.String() != "127.0.0.1" {
					t.Errorf("port %s published on %s, want 127.0.0.1 only", port, b.HostIP)
				}
			}
		}
		if !slices.Contains(c.Config.Env, "GREETING=hello from secrets") {
			t.Errorf("env %q", c.Config.Env)
		}
		up := fmt.Sprintf("127.0.0.1:%d", res.HostPort)
		mustGet(t, up, "v1 hello from secrets")
		if got := fake.upstream(app); got != up {
			t.Errorf("proxy upstream %q, want %q", got, up)
		}
		if calls := fake.callsSince(0); len(calls) != 1 || len(calls[0].Cfg.Sites) != 2 {
			t.Errorf("proxy calls %+v", calls)
		}
		cur = res
	})

	step("the host port survives a restart", func(t *testing.T) {
		// A crash or reboot restarts the container; the proxy's upstream
		// must still reach it.
		if _, err := cli.ContainerRestart(context.Background(), cur.ContainerID, client.ContainerRestartOptions{}); err != nil {
			t.Fatal(err)
		}
		insp, err := cli.ContainerInspect(context.Background(), cur.ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, bs := range insp.Container.NetworkSettings.Ports {
			for _, b := range bs {
				got, _ = strconv.Atoi(b.HostPort)
			}
		}
		if want := cur.HostPort; got != want {
			t.Fatalf("host port after restart: got %d, want %d", got, want)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/health", cur.HostPort)
		testlab.EventuallyReport(t, time.Minute, "the restarted container answers "+url, func() (bool, string) {
			resp, err := http.Get(url)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	})

	step("deploy v2 without downtime", func(t *testing.T) {
		var (
			stop     atomic.Bool
			wg       sync.WaitGroup
			mu       sync.Mutex
			failures []string
			seen     = map[string]int{}
			total    int
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				body, err := get(fake.upstream(app))
				mu.Lock()
				total++
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					seen[body]++
				}
				mu.Unlock()
			}
		}()
		// Requests reach v1 before the release and v2 after it.
		answered := func(body string) func() bool {
			return func() bool {
				mu.Lock()
				defer mu.Unlock()
				return seen[body] > 0
			}
		}
		testlab.Eventually(t, time.Minute, "an answer of v1", answered("v1 hello from secrets"))
		p := payload(v2)
		p.KeepImageIDs = []string{v1.ID}
		res, rec := deployOK(t, d, p, secrets)
		testlab.Eventually(t, time.Minute, "an answer of v2", answered("v2 hello from secrets"))
		stop.Store(true)
		wg.Wait()
		t.Logf("%d requests during the release: %v", total, seen)
		if len(failures) > 0 {
			t.Errorf("%d of %d requests failed during the release: %q", len(failures), total, failures[:min(5, len(failures))])
		}
		if seen["v1 hello from secrets"] == 0 || seen["v2 hello from secrets"] == 0 {
			t.Errorf("answers seen %v, want both versions", seen)
		}
		if res.ImageID != v2.ID {
			t.Errorf("result %+v; want v2", res)
		}
		// Removed after the result, which the executor run on its own
		// (outside an agent) waits for; the events say so.
		if !rec.has("info: stopping and removing the old container "+cur.ContainerName) || !rec.has("info: removed 1 old containers") {
			t.Errorf("no events about removing the v1 container:\n%s", strings.Join(rec.events, "\n"))
		}
		onlyContainer(t, cli, app, res.ContainerID)
		if !imageExists(t, cli, v1.ID) {
			t.Error("the v1 image is gone; it was in keep_image_ids")
		}
		cur = res
	})

	step("broken release fails and leaves v2 serving", func(t *testing.T) {
		calls := fake.callCount()
		p := payload(broken)
		p.HealthTimeoutSeconds = 2
		rec, _ := deployFails(t, d, p, secrets, "health check failed", "within 2s", "HTTP 500", "unhealthy: version broken is broken")
		if !rec.has("error: health check failed") || !rec.has("warn: the last ") {
			t.Errorf("events %q", rec.events)
		}
		onlyContainer(t, cli, app, cur.ContainerID)
		up := fmt.Sprintf("127.0.0.1:%d", cur.HostPort)
		if fake.upstream(app) != up || fake.callCount() != calls {
			t.Errorf("the proxy was touched: upstream %q, calls %+v", fake.upstream(app), fake.callsSince(calls))
		}
		mustGet(t, up, "v2 hello from secrets")
	})

	step("crashing release fails fast", func(t *testing.T) {
		p := payload(v2)
		p.EnvKeys = []string{"GREETING", "CRASH"}
		rec, _ := deployFails(t, d, p, map[string]string{"GREETING": "x", "CRASH": "1"}, "exited")
		// Failing fast means the deploy gives up when the container exits
		// (as it starts, or during the health check), not when the health
		// timeout passes: from creating the container to printing its last
		// log lines, which the failure does at once. Pulling and removing
		// take what the machine makes them take.
		took, ok := rec.between("info: creating container ", "warn: the last ")
		if health := time.Duration(p.HealthTimeoutSeconds) * time.Second; !ok || took >= health/2 {
			t.Errorf("from creating the container to its failure: %s (recorded %v), the health timeout is %s:\n%s", took, ok, health, strings.Join(rec.events, "\n"))
		}
		if !rec.has("warn: the last ") {
			t.Errorf("no log lines in the events: %q", rec.events)
		}
		onlyContainer(t, cli, app, cur.ContainerID)
	})

	step("missing secret fails before any change", func(t *testing.T) {
		p := payload(v2)
		p.EnvKeys = []string{"GREETING", "NOT_SENT"}
		deployFails(t, d, p, secrets, "environment variable NOT_SENT has no value")
		onlyContainer(t, cli, app, cur.ContainerID)
	})

	step("rollback to an image that is gone", func(t *testing.T) {
		p := payload(v1)
		p.ImageID = "sha256:" + strings.Repeat("0", 64)
		deployFails(t, d, p, secrets, "image sha256:"+strings.Repeat("0", 64)+" is no longer on this server")
		onlyContainer(t, cli, app, cur.ContainerID)
	})

	step("pull failure without a local image", func(t *testing.T) {
		p := payload(v1)
		p.Image = "127.0.0.1:1/capstan-test/absent:" + run
		deployFails(t, d, p, secrets, "pulling "+p.Image, "no local image")
		onlyContainer(t, cli, app, cur.ContainerID)
	})

	step("proxy failure removes the new container", func(t *testing.T) {
		calls := fake.callCount()
		fake.failNext(1, errors.New("caddy said no"))
		p := payload(v1)
		rec, _ := deployFails(t, d, p, secrets, "switching the proxy to the new container: caddy said no")
		if !rec.has("info: applied the proxy state again with the application's previous container") {
			t.Errorf("no restore: %q", rec.events)
		}
		onlyContainer(t, cli, app, cur.ContainerID)
		up := fmt.Sprintf("127.0.0.1:%d", cur.HostPort)
		mustGet(t, up, "v2 hello from secrets")
		if fake.upstream(app) != up {
			t.Errorf("upstream %q, want %q", fake.upstream(app), up)
		}
		// The failed switch, then the restore: both while v2 was pinned.
		got := fake.callsSince(calls)
		if len(got) != 2 || got[0].Err == nil || got[0].Upstreams[app] == up || got[1].Err != nil || got[1].Upstreams[app] != up {
			t.Errorf("proxy calls %+v; events %q", got, rec.events)
		}
	})

	step("rollback to v1 by image id", func(t *testing.T) {
		p := payload(v1)
		p.ImageID = v1.ID
		p.KeepImageIDs = []string{v2.ID}
		res, _ := deployOK(t, d, p, secrets)
		if res.ImageID != v1.ID || res.Pulled {
			t.Errorf("result %+v", res)
		}
		up := fmt.Sprintf("127.0.0.1:%d", res.HostPort)
		mustGet(t, up, "v1 hello from secrets")
		if fake.upstream(app) != up {
			t.Errorf("upstream %q, want %q", fake.upstream(app), up)
		}
		onlyContainer(t, cli, app, res.ContainerID)
		if !imageExists(t, cli, v2.ID) {
			t.Error("the v2 image is gone; it was in keep_image_ids")
		}
		cur = res
	})

	step("app.logs", func(t *testing.T) {
		// The engine copies the container's output to its log on its
		// own time: wait for the lines the program printed at start.
		var res agentproto.AppLogsResult
		testlab.EventuallyReport(t, time.Minute, "app.logs holds the program's first lines", func() (bool, string) {
			data, rec, err := runJob(t, executor(d, agentproto.JobAppLogs), agentproto.JobAppLogs, agentproto.AppLogsPayload{AppID: app, Lines: 50}, nil)
			if err != nil {
				t.Fatalf("app.logs: %v (%q)", err, rec.events)
			}
			res = data.(agentproto.AppLogsResult)
			var out, errLine bool
			for _, l := range res.Lines {
				out = out || l.Message == "version v1 listening on :8080" && l.Stream == "stdout" && l.Priority == 6
				errLine = errLine || l.Message == "ready (stderr)" && l.Stream == "stderr" && l.Priority == 3
			}
			return out && errLine, fmt.Sprintf("%+v", res.Lines)
		})
		if res.ContainerID != cur.ContainerID || res.State != "running" || res.RestartCount != 0 || time.Since(res.StartedAt) > 10*time.Minute {
			t.Errorf("result %+v", res)
		}
		for _, l := range res.Lines {
			if l.At.IsZero() || time.Since(l.At) > 10*time.Minute {
				t.Errorf("line %+v has no recent time", l)
			}
		}

		data, _, err := runJob(t, executor(d, agentproto.JobAppLogs), agentproto.JobAppLogs, agentproto.AppLogsPayload{AppID: app, Lines: 1}, nil)
		if err != nil || len(data.(agentproto.AppLogsResult).Lines) != 1 {
			t.Errorf("lines 1: %+v, %v", data, err)
		}
		future := time.Now().Add(time.Hour)
		data, _, err = runJob(t, executor(d, agentproto.JobAppLogs), agentproto.JobAppLogs, agentproto.AppLogsPayload{AppID: app, Lines: 10, Since: &future}, nil)
		if err != nil || len(data.(agentproto.AppLogsResult).Lines) != 0 {
			t.Errorf("since an hour from now: %+v, %v", data, err)
		}
		if _, _, err := runJob(t, executor(d, agentproto.JobAppLogs), agentproto.JobAppLogs, agentproto.AppLogsPayload{AppID: app, Lines: 1001}, nil); err == nil {
			t.Error("lines 1001 accepted")
		}
	})

	step("old images are pruned unless kept", func(t *testing.T) {
		p := payload(v2)
		res, _ := deployOK(t, d, p, secrets)
		if imageExists(t, cli, v1.ID) {
			t.Error("the v1 image is still there")
		}
		if !imageExists(t, cli, v2.ID) {
			t.Error("the v2 image is gone")
		}
		cur = res
	})

	step("deploys of one application are serialized", func(t *testing.T) {
		// The test holds the application's lock, as a running job
		// would: both deploys must wait for it, then run one after the
		// other.
		unlock, err := d.locks.lock(context.Background(), app, &recorder{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		results := make([]agentproto.DeployResult, 2)
		recs := []*recorder{{}, {}}
		errs := make([]error, 2)
		ps := []agentproto.DeployPayload{payload(v2), payload(v2)}
		for i := range 2 {
			wg.Go(func() {
				var data any
				data, errs[i] = runJobTo(t, executor(d, agentproto.JobAppDeploy), agentproto.JobAppDeploy, ps[i], secrets, recs[i])
				if errs[i] == nil {
					results[i] = data.(agentproto.DeployResult)
				}
			})
		}
		testlab.Eventually(t, time.Minute, "both deploys wait for the application's lock", func() bool {
			return recs[0].has("info: another job of application") && recs[1].has("info: another job of application")
		})
		unlock()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("deploy %d: %v (%q)", i, err, recs[i].events)
			}
		}
		list := containersOf(t, cli, app)
		if len(list) != 1 || (list[0].ID != results[0].ContainerID && list[0].ID != results[1].ContainerID) {
			t.Errorf("containers %+v after two concurrent deploys", list)
		}
		cur = agentproto.DeployResult{ContainerID: list[0].ID}
	})

	step("app.remove", func(t *testing.T) {
		calls := fake.callCount()
		rest := agentproto.ProxyConfig{Sites: cfg.Sites[1:]}
		data, rec, err := runJob(t, executor(d, agentproto.JobAppRemove), agentproto.JobAppRemove, agentproto.RemovePayload{AppID: app, Proxy: rest}, nil)
		if err != nil {
			t.Fatalf("app.remove: %v (%q)", err, rec.events)
		}
		if got := data.(agentproto.RemoveResult).RemovedIDs; !slices.Equal(got, []string{cur.ContainerID}) {
			t.Errorf("removed %q, want %q", got, cur.ContainerID)
		}
		if list := containersOf(t, cli, app); len(list) != 0 {
			t.Errorf("containers left: %+v", list)
		}
		got := fake.callsSince(calls)
		if len(got) != 1 || len(got[0].Upstreams) != 0 || len(got[0].Cfg.Sites) != 1 {
			t.Errorf("proxy calls %+v", got)
		}
		data, _, err = runJob(t, executor(d, agentproto.JobAppRemove), agentproto.JobAppRemove, agentproto.RemovePayload{AppID: app, Proxy: rest}, nil)
		if err != nil || len(data.(agentproto.RemoveResult).RemovedIDs) != 0 {
			t.Errorf("second app.remove: %+v, %v", data, err)
		}
		_, _, err = runJob(t, executor(d, agentproto.JobAppLogs), agentproto.JobAppLogs, agentproto.AppLogsPayload{AppID: app}, nil)
		if err == nil || err.Error() != "application "+app+" has no container on this server" {
			t.Errorf("app.logs after app.remove: %v", err)
		}
	})

	step("proxy failure for an application without domains", func(t *testing.T) {
		other := app + "-nodomain"
		t.Cleanup(func() { removeAppContainers(t, cli, other) })
		fake.failNext(1, errors.New("caddy is not running"))
		p := payload(v2)
		p.AppID = other
		res, rec := deployOK(t, d, p, secrets)
		if !rec.has("warn: could not apply the proxy state: caddy is not running; the application has no domains") {
			t.Errorf("events %q", rec.events)
		}
		onlyContainer(t, cli, other, res.ContainerID)
		if _, _, err := runJob(t, executor(d, agentproto.JobAppRemove), agentproto.JobAppRemove, agentproto.RemovePayload{AppID: other, Proxy: cfg}, nil); err != nil {
			t.Fatal(err)
		}
	})

	step("without a proxy", func(t *testing.T) {
		other := app + "-noproxy"
		t.Cleanup(func() { removeAppContainers(t, cli, other) })
		bare := New(Options{Host: testlab.DockerHost(), StopTimeout: 3 * time.Second})
		defer bare.Close()
		p := payload(v2)
		p.AppID, p.Proxy = other, agentproto.ProxyConfig{}
		res, rec := deployOK(t, bare, p, secrets)
		mustGet(t, fmt.Sprintf("127.0.0.1:%d", res.HostPort), "v2 hello from secrets")
		if !rec.has("info: this agent has no proxy") {
			t.Errorf("events %q", rec.events)
		}
		if _, _, err := runJob(t, executor(bare, agentproto.JobAppRemove), agentproto.JobAppRemove, agentproto.RemovePayload{AppID: other}, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("TestReleases took %s", time.Since(begin).Round(time.Millisecond))
}

// executor is the agent's executor of jobType with d's handlers.
func executor(d *Deployer, jobType string) agent.Executor {
	r := agent.Registry{}
	d.Register(r)
	return r[jobType]
}
