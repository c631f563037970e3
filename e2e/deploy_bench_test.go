package e2e

// Benchmarks of deployments on the real stack (apps_harness_test.go):
//
//	go test -run '^$' -bench Deploy -benchtime 1x ./e2e/
//
// BenchmarkDeployOverhead: what the control plane and the agent add to a
// release, compared with the same container started straight through the
// Engine API. BenchmarkDeployUnderLoad: the requests that fail through
// Caddy during consecutive redeploys.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/deploy"
)

// benchPoll is how often the benchmarks poll a deployment.
const benchPoll = 5 * time.Millisecond

// BenchmarkDeployOverhead deploys an application (no domain, so no drain)
// 20 times, alternating two local images, and measures from the return of
// POST …/deployments to the deployment seen succeeded (GET every 5 ms).
// It compares that with the same image inspected, created, started and
// probed until its health path answers 2xx through the Engine API, with
// the agent's probe interval (200 ms) and with a 5 ms one. The agent's
// events split its side into phases.
func BenchmarkDeployOverhead(b *testing.B) {
	s := newAppStack(b, appStackOptions{Images: map[string]int{"v1": 0, "v2": 0}})
	app := s.createWebApp(b, "bench", benchPoll)

	const deploys = 20
	var (
		viaAPI, direct, directTight []time.Duration
		phases                      = map[string][]time.Duration{}
	)
	for b.Loop() {
		// Interleaved, so that the machine's ups and downs hit both.
		for i := range deploys {
			img := s.Images[[]string{"v2", "v1"}[i%2]]
			start := time.Now()
			id := s.deploy(b, app.ID, map[string]any{"ref": img.Ref})
			posted := time.Now()
			d, seen := s.waitDeployment(b, id, "succeeded", benchPoll, deployTimeout)
			viaAPI = append(viaAPI, seen.Sub(posted))
			ph := deployPhases(d, start, posted, seen)
			for name, v := range ph {
				phases[name] = append(phases[name], v)
			}
			dd := directDeploy(b, s.Docker, img.Ref, deploy.DefaultHealthInterval)
			direct = append(direct, dd["total"])
			for name, v := range dd {
				phases["direct: "+name] = append(phases["direct: "+name], v)
			}
			directTight = append(directTight, directDeploy(b, s.Docker, img.Ref, 5*time.Millisecond)["total"])
		}
	}
	api, dir, tight := median(viaAPI), median(direct), median(directTight)
	b.ReportMetric(ms(api), "ms/deploy-via-api")
	b.ReportMetric(ms(dir), "ms/deploy-direct")
	b.ReportMetric(ms(api-dir), "ms/overhead")
	b.Logf("%d deploys through the API: median %s (min %s, max %s)", len(viaAPI), api, slices.Min(viaAPI), slices.Max(viaAPI))
	b.Logf("%d direct (inspect, create, start, health every 200 ms as the agent): median %s (min %s, max %s)", len(direct), dir, slices.Min(direct), slices.Max(direct))
	b.Logf("%d direct (health every 5 ms): median %s", len(directTight), tight)
	paired := make([]time.Duration, len(viaAPI))
	for i := range viaAPI {
		paired[i] = viaAPI[i] - direct[i]
	}
	b.ReportMetric(ms(median(paired)), "ms/overhead-paired")
	b.Logf("overhead: %s (median via API − median direct); %s against the 5 ms probe; median of the paired differences %s",
		api-dir, api-tight, median(paired))
	for _, name := range slices.Sorted(maps.Keys(phases)) {
		b.Logf("  phase %-48s median %s", name, median(phases[name]))
	}
}

const phaseRemoveOld = "10 agent, after the result: stop and remove the old container"

// deployPhases splits one deployment's time by the job's timestamps
// (control plane) and its events (agent).
func deployPhases(d AppDeployment, start, posted, seen time.Time) map[string]time.Duration {
	out := map[string]time.Duration{"0 POST …/deployments (request)": posted.Sub(start)}
	if d.Job == nil || d.Job.StartedAt == nil || d.Job.FinishedAt == nil {
		return out
	}
	out["1 POST returned → agent took the job"] = d.Job.StartedAt.Sub(posted)
	out["2 agent: job taken → completed"] = d.Job.FinishedAt.Sub(*d.Job.StartedAt)
	out["9 job completed → seen succeeded by polling"] = seen.Sub(*d.Job.FinishedAt)
	at := func(text string) (time.Time, bool) {
		e, ok := findEvent(d.Events, text)
		return e.At, ok
	}
	span := func(name, from, to string) {
		a, ok1 := at(from)
		z, ok2 := at(to)
		if ok1 && ok2 {
			out[name] = z.Sub(a)
		}
	}
	if first, ok := at("pulling "); ok {
		out["3 agent: job taken → first event"] = first.Sub(*d.Job.StartedAt)
	}
	span("4 agent: pull attempt (registry unreachable)", "pulling ", "registry unreachable")
	span("5 agent: create and start the container", "creating container", "started container")
	span("6 agent: health check", "waiting up to", "healthy after")
	span("7 agent: proxy switch (Caddy /load)", "switching the proxy", "the proxy sends")
	// After the result (later events of the job): not part of the release.
	span(phaseRemoveOld, "stopping and removing the old container", "removed ")
	if last, ok := at("released deployment"); ok {
		out["8b agent: released → job completed"] = d.Job.FinishedAt.Sub(last)
	}
	return out
}

// directDeploy does what a release does to start a container, straight
// through the Engine API: inspects the image, creates and starts a
// container of it with its port published on a free loopback port, and
// probes its /health (a new connection each time, as the agent does:
// once at once, then every interval) until it answers 2xx. It returns
// the time that took ("total") and its steps, and removes the container.
func directDeploy(b *testing.B, cli *client.Client, ref string, interval time.Duration) map[string]time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	cport, _ := network.PortFrom(8080, network.TCP)
	stop := 2

	start := time.Now()
	out := map[string]time.Duration{}
	step := func(name string, from time.Time) time.Time {
		now := time.Now()
		out[name] = now.Sub(from)
		return now
	}
	insp, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		b.Fatalf("inspecting %s: %v", ref, err)
	}
	t := step("1 inspect", start)
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: insp.ID, Env: []string{"GREETING=bench"}, ExposedPorts: network.PortSet{cport: {}}, StopTimeout: &stop,
			Labels: map[string]string{"dev.capstan.e2e": "deploy-bench"},
		},
		HostConfig: &container.HostConfig{
			PortBindings:  network.PortMap{cport: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}}},
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		},
	})
	if err != nil {
		b.Fatalf("creating a container of %s: %v", ref, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cli.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Errorf("removing container %s: %v", res.ID, err)
		}
	}()
	t = step("2 create", t)
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		b.Fatalf("starting a container of %s: %v", ref, err)
	}
	t = step("3 start", t)
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	for {
		if resp, err := hc.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 300 {
				step("4 health", t)
				step("total", start)
				return out
			}
		}
		if ctx.Err() != nil {
			b.Fatalf("%s did not answer 2xx within a minute", url)
		}
		time.Sleep(interval)
	}
}

// BenchmarkDeployUnderLoad redeploys an application served by Caddy
// (app.test, TLS from the local CA) 20 times in a row, alternating two
// images, while 4 clients request it through Caddy in a loop, and counts
// the requests that failed (transport error, status other than 200, wrong
// body). keep-alive: each client keeps its connection, as browsers do.
// fresh-connection: a new TCP and TLS connection per request; Caddy 2.6
// binds new listeners on every configuration load and closes the old
// ones, which can reset a connection being set up in that instant
// (net.ipv4.tcp_migrate_req=1 makes the kernel hand them over).
func BenchmarkDeployUnderLoad(b *testing.B) {
	const host, redeploys = "app.test", 20
	s := newAppStack(b, appStackOptions{Images: map[string]int{"v1": 0, "v2": 0}})
	app := s.createWebApp(b, "bench", benchPoll)
	s.addDomain(b, app.ID, host, "internal", "succeeded")
	url := s.Caddy.URL("https", host, "/")
	s.waitSite(b, s.Client(b), url, "v1 bench", 20*time.Second)
	valid := func(body string) bool { return body == "v1 bench" || body == "v2 bench" }

	for _, mode := range []struct {
		name string
		hc   func(testing.TB) *http.Client
	}{
		{"keep-alive", s.Client},
		{"fresh-connection", s.FreshClient},
	} {
		b.Run(mode.name, func(b *testing.B) {
			var (
				total     loadCounts
				durations []time.Duration
				elapsed   time.Duration
			)
			for b.Loop() {
				load := startLoad(b, mode.hc(b), url, 4, 2*time.Millisecond, valid)
				start := time.Now()
				for i := range redeploys {
					img := s.Images[[]string{"v2", "v1"}[i%2]]
					posted := time.Now()
					_, seen := s.waitDeployment(b, s.deploy(b, app.ID, map[string]any{"ref": img.Ref}), "succeeded", benchPoll, deployTimeout)
					durations = append(durations, seen.Sub(posted))
				}
				elapsed += time.Since(start)
				load.Stop()
				total.add(load.Take())
			}
			b.ReportMetric(float64(total.Failures), "failed-requests")
			b.ReportMetric(float64(total.Requests()), "requests")
			b.ReportMetric(ms(median(durations)), "ms/redeploy")
			b.Logf("%s: %d redeploys (median %s) in %s under %.0f requests/s (net.ipv4.tcp_migrate_req %s): %s", mode.name,
				len(durations), median(durations), elapsed.Round(time.Millisecond), float64(total.Requests())/elapsed.Seconds(),
				tcpMigrateReq(), total)
			if mode.name == "keep-alive" && total.Failures != 0 {
				b.Errorf("%d requests failed on kept-alive connections", total.Failures)
			}
		})
	}
}

// tcpMigrateReq is this network namespace's net.ipv4.tcp_migrate_req.
func tcpMigrateReq() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
