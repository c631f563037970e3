package e2e

// Harness of the application tests (apps_test.go) and the deploy
// benchmarks (deploy_bench_test.go): a control plane, a real Caddy and an
// enrolled capstan-agent driving both Caddy and the Docker engine, the
// images of a tiny versioned web server (built FROM scratch here, tagged
// under a registry that cannot be reached), clients that reach the
// applications through Caddy by name, a load generator, and a DNS server
// for domain checks. Everything listens on 127.0.0.1.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Time limits of the application harness.
const (
	// deployTimeout bounds a deployment that should succeed: no pull
	// (the registry is unreachable), a start, a health check, a proxy
	// load and the drain of the old container.
	deployTimeout = 2 * time.Minute
	// failedDeployTimeout bounds a deployment whose health check fails:
	// the control plane gives the agent 60 s for it.
	failedDeployTimeout = 3 * time.Minute
	// trafficTimeout bounds the wait for the agent's traffic report (it
	// reports every 10 s).
	trafficTimeout = 90 * time.Second
)

// webImage is one image of internal/agent/deploy/testdata/web.
type webImage struct {
	Version string
	Ref     string // 127.0.0.1:1/capstan-e2e/web:<version>-<run>
	ID      string
}

// appStackOptions configure newAppStack.
type appStackOptions struct {
	// Images maps image versions (v1, v2…) to the status their /health
	// answers (0: 200).
	Images map[string]int
	// DNS, when set, maps hostnames to the IPv4 address a DNS server
	// started for the agent's domain checks (--dns-server) answers.
	DNS map[string]string
	// Plane configures the control plane (the zero value: SQLite).
	Plane Options
	// AgentEnv holds extra KEY=value variables of the agent.
	AgentEnv []string
	// AgentArgs are extra arguments of capstan-agent run.
	AgentArgs []string
}

// appStack is a fleet with one server whose real agent drives a real Caddy
// and the Docker engine under test.
type appStack struct {
	*appRig
	Caddy  *testlab.Caddy
	Docker *client.Client
	Agent  *AgentProcess
	Images map[string]webImage
	// DNS is the address of the test's DNS server ("" without one).
	DNS string
	// StateDir is the agent's --state-dir.
	StateDir string

	rootsOnce sync.Once
	roots     *x509.CertPool
}

// newAppStack starts the control plane, Caddy (admin API, HTTP and HTTPS
// on free 127.0.0.1 ports, its own XDG directories) and an enrolled
// capstan-agent pointed at both, and builds the images. Without Docker or
// Caddy the test is skipped, or fails when CI=true. Containers of the
// applications created through the stack, the images and the processes
// are removed when the test ends.
func newAppStack(t testing.TB, opts appStackOptions) *appStack {
	t.Helper()
	docker := testlab.Docker(t)
	testlab.CaddyBinary(t)
	f := newFleet(t, opts.Plane)
	c := testlab.StartCaddy(t)
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	images := buildWebImages(t, docker, run, opts.Images)
	s := &appStack{Caddy: c, Docker: docker, Images: images}
	if opts.DNS != nil {
		s.DNS = startDNSServer(t, opts.DNS)
	}

	e, config := f.enrollServer(t, "app-host")
	s.appRig = &appRig{Fleet: f, serverID: e.Server.ID}
	// Registered before the agent starts, so it runs after the agent
	// stopped (cleanups run last first): the agent creates no container
	// behind it.
	t.Cleanup(func() { s.removeAppContainers(t) })

	args := []string{
		"--caddy-admin", c.AdminURL,
		"--proxy-http-port", strconv.Itoa(c.HTTPPort),
		"--proxy-https-port", strconv.Itoa(c.HTTPSPort),
		"--proxy-listen-host", "127.0.0.1",
		"--proxy-access-log", c.AccessLog,
		"--state-dir", filepath.Join(t.TempDir(), "state"),
	}
	s.StateDir = args[len(args)-1]
	if c.UpstreamDir != "" {
		args = append(args, "--proxy-upstream-dir", c.UpstreamDir)
	}
	if s.DNS != "" {
		args = append(args, "--dns-server", s.DNS)
	}
	args = append(args, opts.AgentArgs...)
	s.Agent = startAgentWith(t, config, slices.Concat(opts.AgentEnv, testlab.DockerEnv()), args...)
	testlab.Eventually(t, startTimeout, "the agent is online", func() bool {
		if !s.Agent.Running() {
			t.Fatalf("capstan-agent exited:\n%s", s.Agent.Logs())
		}
		return f.server(t, e.Server.ID).Status == "online"
	})
	return s
}

// buildWebImages builds one image of internal/agent/deploy/testdata/web
// per version FROM scratch (legacy builder, no registry), with VERSION and
// HEALTH_STATUS in the image's environment and a reference under
// 127.0.0.1:1, a registry that refuses connections: the agent's pull
// fails at once and it runs the local image. The images are removed when
// the test ends.
func buildWebImages(t testing.TB, cli *client.Client, run string, versions map[string]int) map[string]webImage {
	t.Helper()
	prog := testlab.GoProgram(t, "../internal/agent/deploy/testdata/web")
	images := map[string]webImage{}
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		health := versions[v]
		if health == 0 {
			health = http.StatusOK
		}
		ref := fmt.Sprintf("127.0.0.1:1/capstan-e2e/web:%s-%s", v, run)
		// The label makes the image this run's own, whatever else runs on
		// the engine.
		dockerfile := fmt.Sprintf("FROM scratch\nCOPY web /web\nENV VERSION=%s HEALTH_STATUS=%d\nENTRYPOINT [\"/web\"]\nLABEL dev.capstan.e2e.run=%s\n",
			v, health, run)
		images[v] = webImage{Version: v, Ref: ref, ID: buildImageFromProgram(t, cli, ref, dockerfile, "web", prog)}
	}
	return images
}

// buildImageFromProgram builds an image tagged ref of a Dockerfile and one
// executable, and removes it (if the agent did not prune it) when the
// test ends. It returns the image's id.
func buildImageFromProgram(t testing.TB, cli *client.Client, ref, dockerfile, name string, prog []byte) string {
	t.Helper()
	return testlab.BuildImage(t, cli, ref, dockerfile, map[string][]byte{name: prog}).ID
}

// appContainers lists the containers of an application through the Engine
// API, in any state.
func (s *appStack) appContainers(t testing.TB, appID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Docker.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", agentproto.LabelApp+"="+appID),
	})
	if err != nil {
		t.Fatalf("listing the containers of %s: %v", appID, err)
	}
	var names []string
	for _, c := range res.Items {
		names = append(names, strings.TrimPrefix(c.Names[0], "/")+" ("+string(c.State)+")")
	}
	return names
}

// removeAppContainers force-removes every container of this stack's
// server's applications that is still there (a failed test may leave
// some).
func (s *appStack) removeAppContainers(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := s.Get(t, "/api/v1/applications?server_id="+s.serverID, s.Token)
	var list struct {
		Applications []struct {
			ID string `json:"id"`
		} `json:"applications"`
	}
	if r.Status == http.StatusOK {
		_ = json.Unmarshal(r.Body, &list)
	}
	ids := map[string]bool{}
	for _, a := range list.Applications {
		ids[a.ID] = true
	}
	// Applications deleted by the test are not listed any more: their
	// containers are found by this run's images.
	res, err := s.Docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", agentproto.LabelApp)})
	if err != nil {
		t.Errorf("listing application containers: %v", err)
		return
	}
	mine := map[string]bool{}
	for _, img := range s.Images {
		mine[img.ID] = true
	}
	for _, c := range res.Items {
		if !ids[c.Labels[agentproto.LabelApp]] && !mine[c.ImageID] {
			continue
		}
		if _, err := s.Docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing container %s: %v", c.ID, err)
		}
	}
}

// Roots is Caddy's local CA root, read from its data directory once Caddy
// made it.
func (s *appStack) Roots(t testing.TB) *x509.CertPool {
	t.Helper()
	s.rootsOnce.Do(func() { s.roots = s.Caddy.RootPool(t) })
	return s.roots
}

// localIntermediate is the intermediate certificate of Caddy's local CA,
// which signs the certificates of tls internal sites.
func (s *appStack) localIntermediate(t testing.TB) *x509.Certificate {
	t.Helper()
	return s.Caddy.Intermediate(t)
}

// Client reaches sites through Caddy: every connection goes to Caddy's
// HTTP or HTTPS port on 127.0.0.1 (by the URL's port), TLS with the URL's
// hostname as server name and Caddy's local root as the only trusted
// one; connections are kept alive, one per concurrent request, as a
// browser's are.
func (s *appStack) Client(t testing.TB) *http.Client {
	t.Helper()
	return s.Caddy.Client(s.Roots(t))
}

// FreshClient is Client with a new connection (TCP and TLS handshake) for
// every request.
func (s *appStack) FreshClient(t testing.TB) *http.Client {
	t.Helper()
	hc := s.Client(t)
	tr := hc.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	return &http.Client{Transport: tr, Timeout: hc.Timeout, CheckRedirect: hc.CheckRedirect}
}

// siteAnswer is one answer of a site through Caddy.
type siteAnswer struct {
	Status   int
	Body     string
	Location string
}

func fetch(hc *http.Client, url string) (siteAnswer, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return siteAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return siteAnswer{Status: resp.StatusCode, Body: string(b), Location: resp.Header.Get("Location")}, err
}

// waitSite polls url until it answers 200 with body want.
func (s *appStack) waitSite(t testing.TB, hc *http.Client, url, want string, timeout time.Duration) {
	t.Helper()
	testlab.EventuallyReport(t, timeout, fmt.Sprintf("GET %s answers 200 %q", url, want), func() (bool, string) {
		a, err := fetch(hc, url)
		return err == nil && a.Status == http.StatusOK && a.Body == want, fmt.Sprintf("%+v, %v", a, err)
	})
}

// createApp creates an application on the stack's server and returns its
// detail (with its first deployment as latest, unless deploy is false).
func (r *appRig) createApp(t testing.TB, body map[string]any) AppInfo {
	t.Helper()
	b := map[string]any{"server_id": r.serverID}
	maps.Copy(b, body)
	var app AppInfo
	expectJSON(t, r.Post(t, "/api/v1/applications", r.Token, b), http.StatusCreated, &app)
	return app
}

// createWebApp creates an application of the v1 web image whose answer
// greets name, and waits (polling every poll) until its first deployment
// succeeded.
func (s *appStack) createWebApp(t testing.TB, name string, poll time.Duration) AppInfo {
	t.Helper()
	app := s.createApp(t, map[string]any{
		"name": name, "source": map[string]any{"type": "image", "image": s.Images["v1"].Ref},
		"container_port": 8080, "health_path": "/health",
		"env": []map[string]string{{"key": "GREETING", "value": name}},
	})
	s.waitDeployment(t, app.Latest.ID, "succeeded", poll, deployTimeout)
	return app
}

// addDomain serves host for the application with the TLS mode and waits
// until its proxy job ended with want; it returns the reply.
func (s *appStack) addDomain(t testing.TB, appID, host, tlsMode, want string) domainChange {
	t.Helper()
	var dom domainChange
	expectJSON(t, s.Post(t, "/api/v1/domains", s.Token, map[string]any{"hostname": host, "application_id": appID, "tls_mode": tlsMode}),
		http.StatusCreated, &dom)
	s.waitJob(t, dom.JobID, want, jobTimeout)
	return dom
}

// deploy queues a deployment (body nil: none) and returns its id.
func (s *appStack) deploy(t testing.TB, appID string, body any) string {
	t.Helper()
	resp := s.Post(t, "/api/v1/applications/"+appID+"/deployments", s.Token, body)
	var a deployAccepted
	expectJSON(t, resp, http.StatusAccepted, &a)
	if a.DeploymentID == "" {
		t.Fatalf("deploy reply: %s", resp.Body)
	}
	return a.DeploymentID
}

// deployment returns GET /api/v1/deployments/{id}.
func (s *appStack) deployment(t testing.TB, id string) AppDeployment {
	t.Helper()
	var d AppDeployment
	expectJSON(t, s.Get(t, "/api/v1/deployments/"+id, s.Token), http.StatusOK, &d)
	return d
}

// waitDeployment polls a deployment every interval until it ended, and
// fails the test unless it ended with status want within timeout. It
// returns the deployment and when its end was seen.
func (s *appStack) waitDeployment(t testing.TB, id, want string, interval, timeout time.Duration) (AppDeployment, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d := s.deployment(t, id)
		switch d.Status {
		case "succeeded", "failed", "cancelled", "superseded":
			seen := time.Now()
			if d.Status != want {
				t.Fatalf("deployment %s ended %s (error %s), want %s; events:\n%s", id, d.Status, deref(d.Error), want, eventsText(d.Events))
			}
			return d, seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment %s is still %s after %s, want %s; events:\n%s", id, d.Status, timeout, want, eventsText(d.Events))
		}
		time.Sleep(interval)
	}
}

func eventsText(events []JobEvent) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "  %s %-5s %s %s\n", e.At.Format("15:04:05.000"), e.Level, e.Message, e.Data)
	}
	return b.String()
}

// findEvent returns the first event whose message contains text.
func findEvent(events []JobEvent, text string) (JobEvent, bool) {
	for _, e := range events {
		if strings.Contains(e.Message, text) {
			return e, true
		}
	}
	return JobEvent{}, false
}

// loadGen requests one URL in a loop from several goroutines and counts
// the answers by body. A failure is a transport error, a status other
// than 200, or a body that is not one of the expected ones.
type loadGen struct {
	hc    *http.Client
	url   string
	valid func(body string) bool

	stop atomic.Bool
	wg   sync.WaitGroup

	mu       sync.Mutex
	bodies   map[string]int64
	lastSeen map[string]time.Time
	failures int64
	errs     []string
}

// loadCounts is what a loadGen counted in one phase.
type loadCounts struct {
	Bodies map[string]int64
	// LastSeen is when the last request answered with each body was
	// sent: one sent before a switch may be answered by the old release
	// after it, and that is no downtime.
	LastSeen map[string]time.Time
	Failures int64
	Errors   []string // the first few
}

// add counts o's requests and failures in c too.
func (c *loadCounts) add(o loadCounts) {
	c.Failures += o.Failures
	c.Errors = append(c.Errors, o.Errors...)
	if c.Bodies == nil {
		c.Bodies = map[string]int64{}
	}
	for k, v := range o.Bodies {
		c.Bodies[k] += v
	}
}

func (c loadCounts) Requests() int64 {
	n := c.Failures
	for _, v := range c.Bodies {
		n += v
	}
	return n
}

func (c loadCounts) String() string {
	keys := slices.Sorted(maps.Keys(c.Bodies))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%q: %d", k, c.Bodies[k]))
	}
	s := fmt.Sprintf("%d requests (%s), %d failed", c.Requests(), strings.Join(parts, ", "), c.Failures)
	if len(c.Errors) > 0 {
		s += "; first failures: " + strings.Join(c.Errors, "; ")
	}
	return s
}

// startLoad starts clients goroutines requesting url with hc, each pausing
// pause between its requests. valid says which bodies are right answers.
func startLoad(t testing.TB, hc *http.Client, url string, clients int, pause time.Duration, valid func(string) bool) *loadGen {
	t.Helper()
	g := &loadGen{hc: hc, url: url, valid: valid, bodies: map[string]int64{}, lastSeen: map[string]time.Time{}}
	for range clients {
		g.wg.Go(func() {
			for !g.stop.Load() {
				sent := time.Now()
				a, err := fetch(hc, url)
				g.record(a, err, sent)
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	t.Cleanup(g.Stop)
	return g
}

func (g *loadGen) record(a siteAnswer, err error, sent time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil && (a.Status != http.StatusOK || !g.valid(a.Body)) {
		err = fmt.Errorf("HTTP %d %q", a.Status, a.Body)
	}
	if err != nil {
		g.failures++
		if len(g.errs) < 5 {
			g.errs = append(g.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
		}
		return
	}
	g.bodies[a.Body]++
	if sent.After(g.lastSeen[a.Body]) {
		g.lastSeen[a.Body] = sent
	}
}

// Take returns the counts since the last Take (or the start) and starts a
// new phase.
func (g *loadGen) Take() loadCounts {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := loadCounts{Bodies: g.bodies, LastSeen: g.lastSeen, Failures: g.failures, Errors: g.errs}
	g.bodies, g.lastSeen, g.failures, g.errs = map[string]int64{}, map[string]time.Time{}, 0, nil
	return c
}

// waitAnswer waits until the clients got body as an answer in this phase
// (since the last Take).
func (g *loadGen) waitAnswer(t testing.TB, body string, timeout time.Duration) {
	t.Helper()
	testlab.EventuallyReport(t, timeout, fmt.Sprintf("the load's clients get %q", body), func() (bool, string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.bodies[body] > 0, fmt.Sprintf("answers %v, %d failures", g.bodies, g.failures)
	})
}

// Stop stops the clients and waits for them.
func (g *loadGen) Stop() {
	g.stop.Store(true)
	g.wg.Wait()
}

// startDNSServer answers DNS queries over UDP on 127.0.0.1: A records of
// the hostnames in answers (name → IPv4), an empty answer for their other
// types, NXDOMAIN for other names. It returns its address.
func startDNSServer(t testing.TB, answers map[string]string) string {
	t.Helper()
	addrs := map[string]netip.Addr{}
	for name, ip := range answers {
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.Is4() {
			t.Fatalf("DNS answer %s → %q: not an IPv4 address", name, ip)
		}
		addrs[strings.ToLower(strings.TrimSuffix(name, "."))] = a
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			if resp := dnsReply(buf[:n], addrs); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

// dnsReply answers a DNS query with one question (RFC 1035, section 4);
// nil for what is not one.
func dnsReply(q []byte, addrs map[string]netip.Addr) []byte {
	const (
		typeA     = 1
		classIN   = 1
		rcodeOK   = 0
		rcodeErr  = 1 // FORMERR
		rcodeName = 3 // NXDOMAIN
	)
	if len(q) < 12 || q[2]&0x80 != 0 { // too short, or a response
		return nil
	}
	reply := func(rcode byte, question []byte, answer []byte) []byte {
		h := make([]byte, 12, 12+len(question)+len(answer))
		copy(h[0:2], q[0:2])                  // id
		h[2] = 0x80 | 0x04 | q[2]&(0x78|0x01) // QR, AA, the query's opcode and RD
		h[3] = 0x80 | rcode                   // RA
		if question != nil {
			binary.BigEndian.PutUint16(h[4:6], 1)
		}
		if answer != nil {
			binary.BigEndian.PutUint16(h[6:8], 1)
		}
		return append(append(h, question...), answer...)
	}
	if binary.BigEndian.Uint16(q[4:6]) != 1 {
		return reply(rcodeErr, nil, nil)
	}
	var labels []string
	off := 12
	for {
		if off >= len(q) {
			return reply(rcodeErr, nil, nil)
		}
		l := int(q[off])
		off++
		if l == 0 {
			break
		}
		if l > 63 || off+l > len(q) {
			return reply(rcodeErr, nil, nil)
		}
		labels = append(labels, strings.ToLower(string(q[off:off+l])))
		off += l
	}
	if off+4 > len(q) {
		return reply(rcodeErr, nil, nil)
	}
	question := q[12 : off+4]
	qtype, qclass := binary.BigEndian.Uint16(q[off:]), binary.BigEndian.Uint16(q[off+2:])
	addr, known := addrs[strings.Join(labels, ".")]
	if !known {
		return reply(rcodeName, question, nil)
	}
	if qtype != typeA || qclass != classIN {
		return reply(rcodeOK, question, nil)
	}
	ip := addr.As4()
	answer := []byte{0xc0, 12, 0, typeA, 0, classIN, 0, 0, 0, 60, 0, 4} // name: the question's; TTL 60 s
	return reply(rcodeOK, question, append(answer, ip[:]...))
}

// statusCounter counts the answers of an HTTP transport: the total and
// per status class (index 1 to 5).
type statusCounter struct {
	http.RoundTripper
	n [6]atomic.Int64
}

func (c *statusCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.RoundTripper.RoundTrip(req)
	if err == nil {
		c.n[0].Add(1)
		if class := resp.StatusCode / 100; class >= 1 && class <= 5 {
			c.n[class].Add(1)
		}
	}
	return resp, err
}

// Counts returns the total and the counts per status class.
func (c *statusCounter) Counts() [6]int64 {
	var out [6]int64
	for i := range c.n {
		out[i] = c.n[i].Load()
	}
	return out
}

// domainChange is the reply of the domain endpoints that queue proxy.apply.
type domainChange struct {
	Domain struct {
		ID       string `json:"id"`
		Hostname string `json:"hostname"`
		TLSMode  string `json:"tls_mode"`
	} `json:"domain"`
	JobID string  `json:"job_id"`
	Job   JobInfo `json:"job"`
}

// DomainInfo is a domain with its latest check, as the API shows it.
type DomainInfo struct {
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	Check    *struct {
		JobID          string     `json:"job_id"`
		Status         string     `json:"status"`
		Addresses      []string   `json:"addresses"`
		ComparedWith   string     `json:"compared_with"`
		PointsToServer bool       `json:"points_to_server"`
		CertIssuer     string     `json:"cert_issuer"`
		CertNotAfter   *time.Time `json:"cert_not_after"`
		CertNotBefore  *time.Time `json:"cert_not_before"`
		CertDNSNames   []string   `json:"cert_dns_names"`
		Errors         []string   `json:"errors"`
		Notes          []string   `json:"notes"`
		CheckedAt      time.Time  `json:"checked_at"`
	} `json:"check"`
	Proxy struct {
		Status string  `json:"status"`
		JobID  *string `json:"job_id"`
		Error  *string `json:"error"`
	} `json:"proxy"`
}

// AppTraffic is GET /api/v1/applications/{id}/requests.
type AppTraffic struct {
	Hosts         []string `json:"hosts"`
	BucketSeconds int      `json:"bucket_seconds"`
	Points        []struct {
		Count int64 `json:"count"`
	} `json:"points"`
	Totals struct {
		Count     int64    `json:"count"`
		Status2xx int64    `json:"status_2xx"`
		Status3xx int64    `json:"status_3xx"`
		Status4xx int64    `json:"status_4xx"`
		Status5xx int64    `json:"status_5xx"`
		BytesOut  int64    `json:"bytes_out"`
		P95Ms     *float64 `json:"p95_ms"`
	} `json:"totals"`
}

// AppLogsRead is GET /api/v1/applications/{id}/logs/{job_id}.
type AppLogsRead struct {
	Status       string               `json:"status"`
	Error        *string              `json:"error"`
	State        string               `json:"state"`
	StartedAt    *time.Time           `json:"started_at"`
	RestartCount int                  `json:"restart_count"`
	ContainerID  string               `json:"container_id"`
	Lines        []agentproto.LogLine `json:"lines"`
}

// accessEntry is one request of Caddy's JSON access log.
type accessEntry struct {
	Host   string // lowercased, without a port
	Status int    // 0 when the proxy logged the request without an answer
}

// accessLogEntries reads the requests of Caddy's JSON access log at path.
func accessLogEntries(t testing.TB, path string) []accessEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []accessEntry
	for _, line := range bytes.Split(b, []byte("\n")) {
		var l struct {
			Logger  string `json:"logger"`
			Status  int    `json:"status"`
			Request struct {
				Host string `json:"host"`
			} `json:"request"`
		}
		if len(line) == 0 || json.Unmarshal(line, &l) != nil || !strings.HasPrefix(l.Logger, "http.log.access") {
			continue
		}
		h := strings.ToLower(l.Request.Host)
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		out = append(out, accessEntry{Host: h, Status: l.Status})
	}
	return out
}
