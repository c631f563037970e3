package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backoff"
)

// simAgentVersion is the agent version the simulated agents report.
const simAgentVersion = "fleetsim"

// retries is an exponential backoff with jitter: 0.5 s doubling to 30 s.
type retries struct{ n int }

func (b *retries) next(rng *rand.Rand) time.Duration {
	b.n++
	d := backoff.Exponential{Base: 500 * time.Millisecond, Max: 30 * time.Second}.Delay(b.n)
	return d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
}

func (b *retries) reset() { b.n = 0 }

// agent is one simulated agent: its credential, the host it pretends to
// run on and the control plane it talks to.
type agent struct {
	sim  *sim
	idx  int
	name string
	rng  *rand.Rand
	// cp is the index in --url of the control plane the agent talks to
	// and base its URL. The agent stays with it, as a real agent stays
	// with the one address it was enrolled with: when that control plane
	// is down, the agent backs off and retries it.
	cp   int
	base string

	serverID string
	token    string
	born     time.Time
	// hc is the agent's own HTTP client, on the wire as a real agent's:
	// its claim long poll keeps one connection, and each report takes one
	// that the control plane closes after answering (see transport.go).
	hc *http.Client

	running atomic.Value // string: the id of the job being run, "" when none

	// Metric state: a random walk around this host's typical load.
	cpu, load, mem float64
	memTotal       uint64
	diskTotal      uint64
	diskUsed       uint64
	pending        []agentproto.MetricSample // not yet accepted by the control plane

	stopped atomic.Bool // revoked: the agent exits
	down    atomic.Bool // its last call failed
}

func newAgent(s *sim, idx int) *agent {
	rng := rand.New(rand.NewPCG(s.seed, uint64(idx)))
	cp := pin(idx, len(s.urls))
	a := &agent{sim: s, idx: idx, name: fmt.Sprintf("sim-%s-%05d", s.runID, idx), rng: rng, hc: &http.Client{Transport: newAgentTransport()},
		cp: cp, base: s.urls[cp]}
	a.cpu = 5 + rng.Float64()*40
	a.load = a.cpu / 25
	a.memTotal = []uint64{2, 4, 8, 16, 32}[rng.IntN(5)] << 30
	a.mem = 0.2 + rng.Float64()*0.5
	a.diskTotal = []uint64{20, 40, 80, 160}[rng.IntN(4)] << 30
	a.diskUsed = uint64(float64(a.diskTotal) * (0.2 + rng.Float64()*0.5))
	a.running.Store("")
	return a
}

// call sends one agent protocol request and records it under kind.
func (a *agent) call(ctx context.Context, kind, path string, in, out any, timeout time.Duration, want ...int) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	status, err := do(cctx, a.hc, http.MethodPost, a.base+"/agent/v1"+path, a.token, in, out, want...)
	if ctx.Err() != nil {
		return status, ctx.Err() // the run ended; not the control plane's fault
	}
	a.sim.rec.record(a.cp, kind, time.Since(start), err)
	a.observe(err)
	a.checkRevoked(err)
	return status, err
}

// observe follows whether the agent can reach the control plane: down at
// its first failed call, back at its next successful one.
func (a *agent) observe(err error) {
	now := time.Now()
	if err != nil {
		a.sim.avail.failed(now, !a.down.Swap(true))
		return
	}
	if a.down.Swap(false) {
		a.sim.avail.back(now)
	}
}

// checkRevoked stops the agent when the control plane says its credential
// is revoked or unknown, as a real agent exits.
func (a *agent) checkRevoked(err error) {
	var he *httpError
	if errors.As(err, &he) && he.Status == http.StatusUnauthorized {
		switch he.problemType() {
		case agentproto.ProblemAgentRevoked, agentproto.ProblemInvalidAgentToken:
			a.stopped.Store(true)
		}
	}
}

func (a *agent) facts() agentproto.Facts {
	return agentproto.Facts{Hostname: a.name, OS: "debian", OSVersion: "12", Kernel: "6.1.0-28-amd64", Arch: "amd64",
		CPUCount: []int{1, 2, 4, 8}[a.idx%4], MemoryBytes: a.memTotal, AgentVersion: simAgentVersion,
		PublicAddresses: []string{fmt.Sprintf("203.0.113.%d", a.idx%250+1)}, PrivateAddresses: []string{fmt.Sprintf("10.%d.%d.%d", a.idx>>16&255, a.idx>>8&255, a.idx&255)}}
}

// enroll creates an enrollment as the administrator and redeems it as the
// agent, retrying with backoff until it works or ctx ends.
func (a *agent) enroll(ctx context.Context) bool {
	var b retries
	attempt := 0
	for ctx.Err() == nil {
		name := a.name
		if attempt > 0 {
			name = fmt.Sprintf("%s-r%d", a.name, attempt) // the name of a failed attempt may be taken
		}
		attempt++
		if !a.sim.acquireEnroll(ctx) {
			return false
		}
		ok := func() bool {
			defer a.sim.releaseEnroll()
			e, err := a.sim.admin.createEnrollment(ctx, name)
			if err != nil {
				return false
			}
			var res agentproto.EnrollResponse
			for try := 0; try < 3 && ctx.Err() == nil; try++ {
				start := time.Now()
				_, err = do(ctx, a.hc, http.MethodPost, a.base+"/agent/v1/enroll", "",
					agentproto.EnrollRequest{Token: e.Token, Facts: a.facts()}, &res, http.StatusOK)
				if ctx.Err() != nil {
					return false
				}
				a.sim.rec.record(a.cp, callEnroll, time.Since(start), err)
				if err == nil {
					break
				}
				var he *httpError
				if errors.As(err, &he) && he.Status == http.StatusUnauthorized {
					return false // used or expired: start over with a new enrollment
				}
				sleep(ctx, b.next(a.rng))
			}
			if err != nil || res.AgentToken == "" {
				return false
			}
			a.serverID, a.token = res.ServerID, res.AgentToken
			return true
		}()
		if ok {
			a.born = time.Now()
			return true
		}
		sleep(ctx, b.next(a.rng))
	}
	return false
}

// run enrolls the agent at its start time and then speaks the protocol
// until ctx ends.
func (a *agent) run(ctx context.Context, startAt time.Time) {
	if !sleep(ctx, time.Until(startAt)) {
		return
	}
	if !a.enroll(ctx) {
		return
	}
	a.sim.enrolled.Add(1)
	a.sim.addLive(a)
	defer a.sim.removeLive(a)

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { a.claimLoop(actx, cancel) })
	a.reportLoop(actx, cancel)
	cancel()
	wg.Wait()
	a.hc.CloseIdleConnections()
	if a.stopped.Load() {
		a.sim.stoppedAgents.Add(1)
	}
}

// jitter returns a random duration in [0, d).
func (a *agent) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(a.rng.Int64N(int64(d)))
}

// reportLoop sends heartbeats, metrics and inventories on their intervals,
// each starting at a random phase so that the fleet's calls spread out.
// The inventory goes first, as a real agent's does at start.
func (a *agent) reportLoop(ctx context.Context, stop func()) {
	cfg := a.sim.cfg
	hb := time.NewTimer(a.jitter(cfg.Heartbeat))
	mt := time.NewTimer(a.jitter(cfg.Metrics))
	inv := time.NewTimer(0)
	defer hb.Stop()
	defer mt.Stop()
	defer inv.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			a.heartbeat(ctx)
			hb.Reset(cfg.Heartbeat)
		case <-mt.C:
			a.sendMetrics(ctx)
			mt.Reset(cfg.Metrics)
		case <-inv.C:
			a.sendInventory(ctx)
			inv.Reset(cfg.Inventory)
		}
		if a.stopped.Load() {
			stop()
			return
		}
	}
}

func (a *agent) heartbeat(ctx context.Context) {
	req := agentproto.HeartbeatRequest{AgentVersion: simAgentVersion, UptimeSeconds: int64(time.Since(a.born) / time.Second)}
	if id := a.running.Load().(string); id != "" {
		req.RunningJobIDs = []string{id}
	}
	var res agentproto.HeartbeatResponse
	a.call(ctx, callHeartbeat, "/heartbeat", req, &res, 30*time.Second, http.StatusOK) //nolint:errcheck // recorded
}

// walk moves v by a random step, kept within [lo, hi].
func (a *agent) walk(v, step, lo, hi float64) float64 {
	return math.Min(hi, math.Max(lo, v+(a.rng.Float64()*2-1)*step))
}

func (a *agent) sample(now time.Time) agentproto.MetricSample {
	a.cpu = a.walk(a.cpu, 8, 0, 100)
	a.load = a.walk(a.load, 0.3, 0, 16)
	a.mem = a.walk(a.mem, 0.02, 0.05, 0.95)
	a.diskUsed = min(a.diskTotal, a.diskUsed+uint64(a.rng.IntN(1<<20)))
	used := uint64(a.mem * float64(a.memTotal))
	swapTotal := uint64(1 << 30)
	return agentproto.MetricSample{
		At: now.UTC().Truncate(time.Millisecond), CPUPercent: a.cpu, Load1: a.load, Load5: a.load * 0.9, Load15: a.load * 0.8,
		MemoryTotal: a.memTotal, MemoryUsed: used, MemoryAvailable: a.memTotal - used,
		SwapTotal: swapTotal, SwapUsed: uint64(a.rng.IntN(64 << 20)),
		Filesystems: []agentproto.FilesystemSample{
			{Mount: "/", Device: "/dev/vda1", FSType: "ext4", BytesTotal: a.diskTotal, BytesUsed: a.diskUsed,
				InodesTotal: a.diskTotal >> 14, InodesUsed: a.diskUsed >> 15},
			{Mount: "/boot/efi", Device: "/dev/vda15", FSType: "vfat", BytesTotal: 124 << 20, BytesUsed: 12 << 20},
		},
		NetRxBytesPerS: a.rng.Float64() * 2e6, NetTxBytesPerS: a.rng.Float64() * 1e6,
		UptimeSeconds: uint64(86400*(a.idx%90+1)) + uint64(time.Since(a.born)/time.Second),
	}
}

// sendMetrics takes a sample and sends it with any that earlier reports
// failed to deliver (at most an hour's worth, oldest first).
func (a *agent) sendMetrics(ctx context.Context) {
	a.pending = append(a.pending, a.sample(time.Now()))
	if n := len(a.pending) - agentproto.MaxMetricSamples; n > 0 {
		a.pending = a.pending[n:]
	}
	_, err := a.call(ctx, callMetrics, "/metrics", agentproto.MetricsRequest{Samples: a.pending}, nil, 30*time.Second, http.StatusNoContent)
	var he *httpError
	if err == nil || (errors.As(err, &he) && he.Status < 500 && he.Status != http.StatusTooManyRequests) {
		a.pending = a.pending[:0] // delivered, or refused for good
	}
}

// Services every simulated host runs; a few vary per host.
var baseServices = []string{"ssh", "cron", "rsyslog", "systemd-journald", "systemd-logind", "systemd-networkd",
	"systemd-resolved", "systemd-timesyncd", "systemd-udevd", "dbus", "getty@tty1", "serial-getty@ttyS0",
	"unattended-upgrades", "apparmor", "capstan-agent", "containerd", "docker", "nginx", "postgresql@15-main",
	"redis-server", "node-exporter", "fail2ban", "chrony", "polkit", "networkd-dispatcher", "snapd", "irqbalance",
	"multipathd", "qemu-guest-agent", "ufw", "atd", "lvm2-monitor", "systemd-journal-flush", "keyboard-setup",
	"console-setup", "e2scrub_reap", "ifupdown-pre", "kmod-static-nodes", "plymouth-quit", "user@1000"}

func (a *agent) sendInventory(ctx context.Context) {
	req := agentproto.InventoryRequest{CollectedAt: time.Now().UTC()}
	for i, name := range baseServices {
		active, sub := "active", "running"
		if (i+a.idx)%11 == 0 {
			active, sub = "inactive", "dead"
		}
		req.Services = append(req.Services, agentproto.ServiceInfo{Name: name + ".service", Description: "The " + name + " service",
			LoadState: "loaded", ActiveState: active, SubState: sub, Enabled: "enabled"})
	}
	req.Containers = []agentproto.ContainerInfo{}
	for i := range a.idx % 6 {
		req.Containers = append(req.Containers, agentproto.ContainerInfo{
			ID: fmt.Sprintf("%012x%052x", a.idx, i), Name: fmt.Sprintf("app-%d", i), Image: "registry.example.com/app:1." + fmt.Sprint(i),
			State: "running", Status: "Up 3 days", RestartCount: i % 2,
			Ports:  []agentproto.ContainerPort{{IP: "0.0.0.0", HostPort: 8000 + i, ContainerPort: 8080, Protocol: "tcp"}},
			Labels: map[string]string{"com.docker.compose.project": "app", "com.docker.compose.service": fmt.Sprintf("web%d", i)},
		})
	}
	for i, p := range []int{22, 80, 443, 5432, 6379, 9100} {
		req.Ports = append(req.Ports, agentproto.ListeningPort{Protocol: "tcp", Address: "0.0.0.0", Port: p,
			Process: strings.Fields("sshd nginx nginx postgres redis-server node_exporter")[i], PID: 1000 + i})
	}
	a.call(ctx, callInventory, "/inventory", req, nil, 30*time.Second, http.StatusNoContent) //nolint:errcheck // recorded
}

// claimLoop keeps one claim long poll outstanding; a job is run (an event,
// then the result) before the next claim. Failures back off.
func (a *agent) claimLoop(ctx context.Context, stop func()) {
	wait := a.sim.cfg.ClaimWait
	var b retries
	for ctx.Err() == nil {
		var res agentproto.ClaimResponse
		cctx, cancel := context.WithTimeout(ctx, time.Duration(wait)*time.Second+20*time.Second)
		start := time.Now()
		status, err := do(cctx, a.hc, http.MethodPost, a.base+"/agent/v1/jobs/claim", a.token,
			agentproto.ClaimRequest{WaitSeconds: wait}, &res, http.StatusOK, http.StatusNoContent)
		at := time.Now()
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			a.sim.rec.record(a.cp, callClaimError, at.Sub(start), err)
			a.observe(err)
			a.checkRevoked(err)
			if a.stopped.Load() {
				stop()
				return
			}
			sleep(ctx, b.next(a.rng))
			continue
		case status == http.StatusNoContent:
			a.sim.rec.record(a.cp, callClaimEmpty, at.Sub(start), nil)
			a.observe(nil)
			b.reset()
			continue
		}
		a.sim.rec.record(a.cp, callClaimJob, at.Sub(start), nil)
		a.observe(nil)
		b.reset()
		a.sim.dispatch.claimed(res.Job.ID, a.cp, at)
		a.runJob(ctx, res.Job)
	}
}

// runJob runs an agent.ping: one progress event, then the result. Both are
// retried with backoff while the run lasts.
func (a *agent) runJob(ctx context.Context, j agentproto.Job) {
	a.running.Store(j.ID)
	defer a.running.Store("")
	var b retries
	ev := agentproto.EventsRequest{Events: []agentproto.Event{{At: time.Now().UTC(), Level: agentproto.LevelInfo, Message: "pong"}}}
	for ctx.Err() == nil {
		_, err := a.call(ctx, callEvents, "/jobs/"+j.ID+"/events", ev, nil, 30*time.Second, http.StatusNoContent)
		if err == nil || a.stopped.Load() || isFinal(err) {
			break
		}
		sleep(ctx, b.next(a.rng))
	}
	var msg agentproto.PingPayload
	_ = json.Unmarshal(j.Payload, &msg)
	data, _ := json.Marshal(agentproto.PingResult{Message: msg.Message, AgentVersion: simAgentVersion, Facts: a.facts(), AgentTime: time.Now().UTC()})
	b.reset()
	for ctx.Err() == nil && !a.stopped.Load() {
		_, err := a.call(ctx, callComplete, "/jobs/"+j.ID+"/complete",
			agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Data: data}, nil, 30*time.Second, http.StatusOK)
		if err == nil {
			a.sim.completed.Add(1)
			a.sim.dispatch.completed(j.ID)
			return
		}
		if isFinal(err) {
			return
		}
		sleep(ctx, b.next(a.rng))
	}
}

// isFinal reports whether retrying the call cannot help (a 4xx other than
// 408 and 429).
func isFinal(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.Status >= 400 && he.Status < 500 &&
		he.Status != http.StatusRequestTimeout && he.Status != http.StatusTooManyRequests
}
