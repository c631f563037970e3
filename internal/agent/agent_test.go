package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/testlab"
)

const waitLong = time.Minute

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is an agent under test.
type running struct {
	agent *agent.Agent
	log   *syncBuffer
	stop  context.CancelFunc
	done  chan error
}

// wait returns Run's error, failing the test if Run does not return.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// shutdown cancels Run's context and returns its error once every agent
// goroutine has ended.
func (r *running) shutdown(t *testing.T) error {
	t.Helper()
	r.stop()
	err := r.wait(t)
	noAgentGoroutines(t)
	return err
}

// noAgentGoroutines fails if a goroutine running agent code is left.
func noAgentGoroutines(t *testing.T) {
	t.Helper()
	testlab.Eventually(t, 30*time.Second, "agent goroutines to end", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for g := range strings.SplitSeq(stacks, "\n\n") {
			if strings.Contains(g, "capstan/internal/agent.") {
				return false
			}
		}
		return true
	})
}

func config(cp *agenttest.ControlPlane) agent.Config {
	return agent.Config{
		APIURL: cp.URL, ServerID: cp.ServerID(), ServerName: cp.ServerName(),
		AgentToken: cp.AgentToken(), HeartbeatSeconds: 1, MetricsSeconds: 60,
	}
}

// start runs an agent against cp with reg (nil: agent.ping only) and fast
// backoff; it is shut down at the end of the test.
func start(t *testing.T, cp *agenttest.ControlPlane, reg agent.Registry, mut ...func(*agent.Options)) *running {
	t.Helper()
	if reg == nil {
		reg = agent.Registry{}
		agent.Ping{Version: "test"}.Register(reg)
	}
	logs := &syncBuffer{}
	opts := agent.Options{
		Config:    config(cp),
		Version:   "test",
		Executors: reg,
		Logger:    slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Backoff:   agent.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}
	for _, m := range mut {
		m(&opts)
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{agent: a, log: logs, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		r.wait(t)
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	return r
}

func newJob(typ string, payload any) agentproto.Job {
	b, _ := json.Marshal(payload)
	return agentproto.Job{ID: ids.New(ids.Job), Type: typ, Payload: b, TimeoutSeconds: 30}
}

// waitCompletion waits for the first accepted completion of a job.
func waitCompletion(t *testing.T, cp *agenttest.ControlPlane, id string) agentproto.CompleteRequest {
	t.Helper()
	testlab.Eventually(t, waitLong, "completion of "+id, func() bool { return len(cp.Completions(id)) > 0 })
	return cp.Completions(id)[0]
}

// gate is an executor that blocks until released.
type gate struct {
	started chan string
	release chan struct{}
	runs    atomic.Int32
	cur     atomic.Int32
	max     atomic.Int32
}

func newGate() *gate {
	return &gate{started: make(chan string, 16), release: make(chan struct{})}
}

func (g *gate) Run(ctx context.Context, job agentproto.Job, _ map[string]string, ev agent.EventSink) (any, any, error) {
	g.runs.Add(1)
	n := g.cur.Add(1)
	defer g.cur.Add(-1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			break
		}
	}
	g.started <- job.ID
	select {
	case <-g.release:
		return map[string]string{"job": job.ID}, "released", nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func registry(typ string, e agent.Executor) agent.Registry {
	r := agent.Registry{}
	r.Register(typ, e)
	return r
}

func TestPingJobCompletesWithPingResult(t *testing.T) {
	cp := agenttest.New(t)
	start(t, cp, nil)
	job := newJob(agentproto.JobAgentPing, agentproto.PingPayload{Message: "hello"})
	cp.Enqueue(job, nil)

	res := waitCompletion(t, cp, job.ID)
	if got, want := res.Status, agentproto.StatusSucceeded; got != want {
		t.Fatalf("status = %q (error %q), want %q", got, res.Error, want)
	}
	var pr agentproto.PingResult
	if err := json.Unmarshal(res.Data, &pr); err != nil {
		t.Fatalf("data %s: %v", res.Data, err)
	}
	if got, want := pr.Message, "hello"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got, want := pr.AgentVersion, "test"; got != want {
		t.Errorf("agent_version = %q, want %q", got, want)
	}
	if pr.Facts.Hostname == "" || pr.Facts.CPUCount == 0 || pr.AgentTime.IsZero() {
		t.Errorf("ping result lacks facts or time: %+v", pr)
	}
	evs, _ := cp.Events(job.ID)
	if got, want := len(evs), 1; got != want {
		t.Fatalf("%d events, want %d: %+v", got, want, evs)
	}
	if got, want := evs[0].Message, "pong"; got != want {
		t.Errorf("event message = %q, want %q", got, want)
	}
	if got, want := evs[0].Level, agentproto.LevelInfo; got != want {
		t.Errorf("event level = %q, want %q", got, want)
	}
	if got, want := cp.EventsAtCompletion(job.ID), 1; got != want {
		t.Errorf("events received before completion = %d, want %d", got, want)
	}
}

func TestFirstHeartbeatCarriesFacts(t *testing.T) {
	cp := agenttest.New(t)
	start(t, cp, nil)
	testlab.Eventually(t, waitLong, "two heartbeats", func() bool { return len(cp.Heartbeats()) >= 2 })
	hbs := cp.Heartbeats()
	if hbs[0].Facts == nil || hbs[0].Facts.Hostname == "" {
		t.Errorf("first heartbeat facts = %+v, want host facts", hbs[0].Facts)
	}
	if hbs[1].Facts != nil {
		t.Errorf("second heartbeat repeats facts")
	}
	if got, want := hbs[0].AgentVersion, "test"; got != want {
		t.Errorf("agent_version = %q, want %q", got, want)
	}
}

func TestUnknownJobTypeFails(t *testing.T) {
	cp := agenttest.New(t)
	start(t, cp, nil)
	job := newJob("nope.nothing", nil)
	cp.Enqueue(job, nil)
	res := waitCompletion(t, cp, job.ID)
	if got, want := res.Status, agentproto.StatusFailed; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	if got, want := res.Error, "unsupported job type: nope.nothing"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestJobDeliveredTwiceRunsOnce(t *testing.T) {
	cp := agenttest.New(t)
	var runs atomic.Int32
	ex := agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, _ map[string]string, _ agent.EventSink) (any, any, error) {
		return map[string]int32{"run": runs.Add(1)}, nil, nil
	})
	start(t, cp, registry("count", ex))

	// Delivered again after it finished: completed again with the
	// remembered result, not executed.
	job := newJob("count", nil)
	cp.Enqueue(job, nil)
	first := waitCompletion(t, cp, job.ID)
	cp.Enqueue(job, nil)
	testlab.Eventually(t, waitLong, "second completion", func() bool { return len(cp.Completions(job.ID)) == 2 })
	if got, want := runs.Load(), int32(1); got != want {
		t.Fatalf("executor ran %d times, want %d", got, want)
	}
	if second := cp.Completions(job.ID)[1]; !bytes.Equal(second.Data, first.Data) || second.Status != first.Status {
		t.Fatalf("second completion %+v, want the remembered %+v", second, first)
	}
}

func TestJobDeliveredTwiceWhileRunningIsIgnored(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	r := start(t, cp, registry("gate", g))
	job := newJob("gate", nil)
	cp.Enqueue(job, nil)
	<-g.started
	cp.Enqueue(job, nil)
	testlab.Eventually(t, waitLong, "the re-delivery to be ignored", func() bool {
		return strings.Contains(r.log.String(), "job delivered again while it runs; ignored")
	})
	close(g.release)
	waitCompletion(t, cp, job.ID)
	if got, want := g.runs.Load(), int32(1); got != want {
		t.Fatalf("executor ran %d times, want %d", got, want)
	}
	if got, want := len(cp.Completions(job.ID)), 1; got != want {
		t.Fatalf("%d completions, want %d", got, want)
	}
}

func TestHeartbeatCarriesRunningJobIDs(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	start(t, cp, registry("gate", g))
	job := newJob("gate", nil)
	cp.Enqueue(job, nil)
	<-g.started
	testlab.Eventually(t, waitLong, "a heartbeat listing the job", func() bool {
		for _, hb := range cp.Heartbeats() {
			if slices.Equal(hb.RunningJobIDs, []string{job.ID}) {
				return true
			}
		}
		return false
	})
	close(g.release)
	res := waitCompletion(t, cp, job.ID)
	if got, want := res.Status, agentproto.StatusSucceeded; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	if got, want := string(res.Output), `"released"`; got != want {
		t.Errorf("output = %s, want %s", got, want)
	}
	n := len(cp.Heartbeats())
	testlab.Eventually(t, waitLong, "a heartbeat after completion", func() bool { return len(cp.Heartbeats()) > n })
	if hb := cp.Heartbeats()[n]; len(hb.RunningJobIDs) != 0 {
		t.Errorf("heartbeat after completion lists %v", hb.RunningJobIDs)
	}
}

func TestRevokedStopsRun(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	r := start(t, cp, registry("gate", g))
	job := newJob("gate", nil)
	cp.Enqueue(job, nil)
	<-g.started
	cp.Revoke()
	err := r.wait(t)
	if !errors.Is(err, agent.ErrRevoked) {
		t.Fatalf("Run = %v, want ErrRevoked", err)
	}
	var rerr *agent.RevokedError
	if !errors.As(err, &rerr) || rerr.Problem.Type != agentproto.ProblemAgentRevoked {
		t.Fatalf("Run = %#v, want *RevokedError of type %s", err, agentproto.ProblemAgentRevoked)
	}
	if got, want := rerr.ExitCode(), agentproto.ExitRevoked; got != want {
		t.Fatalf("ExitCode() = %d, want %d", got, want)
	}
	noAgentGoroutines(t)
	if !strings.Contains(r.log.String(), "revoked") {
		t.Errorf("log does not say why the agent stopped:\n%s", r.log.String())
	}
}

func TestUnknownAgentTokenStopsRun(t *testing.T) {
	cp := agenttest.New(t)
	r := start(t, cp, nil, func(o *agent.Options) { o.Config.AgentToken = "agt_wrong" })
	err := r.wait(t)
	var rerr *agent.RevokedError
	if !errors.As(err, &rerr) || rerr.Problem.Type != agentproto.ProblemInvalidAgentToken {
		t.Fatalf("Run = %v, want *RevokedError of type %s", err, agentproto.ProblemInvalidAgentToken)
	}
}

func TestCompleteRetriedUntilAccepted(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetCompleteHook(func(_ string, attempt int) int {
		if attempt <= 3 {
			return 503
		}
		return 0
	})
	start(t, cp, nil)
	job := newJob(agentproto.JobAgentPing, nil)
	cp.Enqueue(job, nil)
	res := waitCompletion(t, cp, job.ID)
	if got, want := res.Status, agentproto.StatusSucceeded; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	if got, want := cp.CompleteAttempts(job.ID), 4; got != want {
		t.Fatalf("complete attempts = %d, want %d", got, want)
	}
}

func TestCompleteGivesUpOnConflict(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetCompleteHook(func(string, int) int { return 409 })
	r := start(t, cp, nil)
	job := newJob(agentproto.JobAgentPing, nil)
	cp.Enqueue(job, nil)
	testlab.Eventually(t, waitLong, "a completion attempt", func() bool { return cp.CompleteAttempts(job.ID) > 0 })
	testlab.Eventually(t, waitLong, "the agent to give up", func() bool {
		return strings.Contains(r.log.String(), "refused the job result; giving up")
	})
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	if got, want := cp.CompleteAttempts(job.ID), 1; got != want {
		t.Fatalf("complete attempts = %d, want %d", got, want)
	}
}

func TestCompleteRejectedResultBecomesFailure(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetCompleteHook(func(_ string, attempt int) int {
		if attempt == 1 {
			return 413
		}
		return 0
	})
	start(t, cp, nil)
	job := newJob(agentproto.JobAgentPing, nil)
	cp.Enqueue(job, nil)
	res := waitCompletion(t, cp, job.ID)
	if res.Status != agentproto.StatusFailed || !strings.Contains(res.Error, "rejected") || res.Data != nil {
		t.Fatalf("completion = %+v, want a plain failure", res)
	}
}

func TestPanickingExecutorFailsJob(t *testing.T) {
	cp := agenttest.New(t)
	ex := agent.ExecutorFunc(func(context.Context, agentproto.Job, map[string]string, agent.EventSink) (any, any, error) {
		panic("boom")
	})
	start(t, cp, registry("panic", ex))
	job := newJob("panic", nil)
	cp.Enqueue(job, nil)
	res := waitCompletion(t, cp, job.ID)
	if got, want := res.Status, agentproto.StatusFailed; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	if !strings.Contains(res.Error, "panicked: boom") {
		t.Fatalf("error = %q, want it to mention the panic", res.Error)
	}
	// The agent keeps working.
	ping := newJob(agentproto.JobAgentPing, nil)
	cp.Enqueue(ping, nil)
	waitCompletion(t, cp, ping.ID)
}

func TestExecutorErrorFailsJob(t *testing.T) {
	cp := agenttest.New(t)
	ex := agent.ExecutorFunc(func(context.Context, agentproto.Job, map[string]string, agent.EventSink) (any, any, error) {
		return nil, "partial output", errors.New("unit not found")
	})
	start(t, cp, registry("err", ex))
	job := newJob("err", nil)
	cp.Enqueue(job, nil)
	res := waitCompletion(t, cp, job.ID)
	if res.Status != agentproto.StatusFailed || res.Error != "unit not found" || string(res.Output) != `"partial output"` {
		t.Fatalf("completion = %+v, want failed with error and output", res)
	}
}

func TestJobTimeout(t *testing.T) {
	cp := agenttest.New(t)
	ex := agent.ExecutorFunc(func(ctx context.Context, _ agentproto.Job, _ map[string]string, _ agent.EventSink) (any, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	start(t, cp, registry("slow", ex))
	job := newJob("slow", nil)
	job.TimeoutSeconds = 1
	cp.Enqueue(job, nil)
	res := waitCompletion(t, cp, job.ID)
	if res.Status != agentproto.StatusFailed || !strings.Contains(res.Error, "timed out after 1s") {
		t.Fatalf("completion = %+v, want failed with a timeout", res)
	}
}

func TestSecretsPassedAndMasked(t *testing.T) {
	cp := agenttest.New(t)
	const secret = "hunter2-very-secret"
	ex := agent.ExecutorFunc(func(_ context.Context, _ agentproto.Job, s map[string]string, ev agent.EventSink) (any, any, error) {
		ev.Emit(agentproto.LevelInfo, "using "+s["password"], map[string]string{"pw": s["password"]})
		return map[string]bool{"got_secret": s["password"] == secret}, "echo " + s["password"], nil
	})
	r := start(t, cp, registry("secret", ex))
	job := newJob("secret", nil)
	cp.Enqueue(job, map[string]string{"password": secret})
	res := waitCompletion(t, cp, job.ID)
	if got, want := string(res.Data), `{"got_secret":true}`; got != want {
		t.Fatalf("data = %s, want %s", got, want)
	}
	evs, _ := cp.Events(job.ID)
	all, _ := json.Marshal([]any{res, evs})
	if strings.Contains(string(all), secret) {
		t.Fatalf("secret sent back to the control plane: %s", all)
	}
	if strings.Contains(r.log.String(), secret) {
		t.Fatalf("secret in the agent log")
	}
}

func TestEventsAreBatchedAndFlushedBeforeCompletion(t *testing.T) {
	cp := agenttest.New(t)
	const n = 300
	ex := agent.ExecutorFunc(func(_ context.Context, _ agentproto.Job, _ map[string]string, ev agent.EventSink) (any, any, error) {
		for i := range n {
			ev.Emit(agentproto.LevelDebug, fmt.Sprintf("step %d", i), map[string]int{"i": i})
		}
		return nil, nil, nil
	})
	start(t, cp, registry("chatty", ex))
	job := newJob("chatty", nil)
	cp.Enqueue(job, nil)
	waitCompletion(t, cp, job.ID)
	evs, posts := cp.Events(job.ID)
	if got, want := len(evs), n; got != want {
		t.Fatalf("%d events, want %d", got, want)
	}
	for i, e := range evs {
		if want := fmt.Sprintf("step %d", i); e.Message != want {
			t.Fatalf("event %d = %q, want %q (order)", i, e.Message, want)
		}
	}
	if posts > 10 {
		t.Errorf("%d event posts for %d events, want batches", posts, n)
	}
	if got, want := cp.EventsAtCompletion(job.ID), n; got != want {
		t.Errorf("events received before completion = %d, want %d", got, want)
	}
}

func TestEventsFlushedPromptlyWhileRunning(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	ex := agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, s map[string]string, ev agent.EventSink) (any, any, error) {
		ev.Emit(agentproto.LevelInfo, "working", nil)
		return g.Run(ctx, job, s, ev)
	})
	start(t, cp, registry("gate", ex))
	job := newJob("gate", nil)
	cp.Enqueue(job, nil)
	<-g.started
	begin := time.Now()
	testlab.Eventually(t, waitLong, "the event", func() bool { evs, _ := cp.Events(job.ID); return len(evs) == 1 })
	if d := time.Since(begin); d > time.Second {
		t.Errorf("event took %s to arrive, want about 100 ms", d)
	}
	close(g.release)
	waitCompletion(t, cp, job.ID)
}

func TestMaxConcurrentJobsFromHeartbeat(t *testing.T) {
	cp := agenttest.New(t)
	cp.SetConfig(agentproto.Config{HeartbeatSeconds: 1, ClaimWaitSeconds: 1, MaxConcurrentJobs: 1})
	g := newGate()
	r := start(t, cp, registry("gate", g))
	testlab.Eventually(t, waitLong, "config applied", func() bool { return r.agent.Settings().MaxConcurrentJobs == 1 })
	if got, want := r.agent.Settings().ClaimWaitSeconds, 1; got != want {
		t.Fatalf("claim_wait_seconds = %d, want %d", got, want)
	}
	j1, j2 := newJob("gate", nil), newJob("gate", nil)
	cp.Enqueue(j1, nil)
	cp.Enqueue(j2, nil)
	<-g.started
	// While the only slot is taken, j2 stays queued across heartbeats.
	n := len(cp.Heartbeats())
	testlab.Eventually(t, waitLong, "two more heartbeats", func() bool { return len(cp.Heartbeats()) >= n+2 })
	if got, want := cp.QueueLen(), 1; got != want {
		t.Fatalf("queue length with the slot taken = %d, want %d", got, want)
	}
	close(g.release)
	waitCompletion(t, cp, j1.ID)
	waitCompletion(t, cp, j2.ID)
	if got, want := g.max.Load(), int32(1); got != want {
		t.Fatalf("max concurrent jobs = %d, want %d", got, want)
	}
}

func TestReconnectsAfterOutage(t *testing.T) {
	cp := agenttest.New(t)
	cp.FailHeartbeats(4)
	r := start(t, cp, nil)
	testlab.Eventually(t, waitLong, "heartbeats to recover", func() bool {
		return strings.Contains(r.log.String(), "heartbeat recovered")
	})
	if got := len(cp.Heartbeats()); got < 5 {
		t.Fatalf("%d heartbeats, want ≥ 5 (4 failures, then success)", got)
	}
}

func TestShutdownLetsRunningJobFinish(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	r := start(t, cp, registry("gate", g))
	job := newJob("gate", nil)
	cp.Enqueue(job, nil)
	<-g.started
	r.stop()
	close(g.release)
	if err := r.shutdown(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if got := cp.Completions(job.ID); len(got) != 1 || got[0].Status != agentproto.StatusSucceeded {
		t.Fatalf("completions = %+v, want one success delivered before Run returned", got)
	}
}

func TestShutdownGraceCancelsJob(t *testing.T) {
	cp := agenttest.New(t)
	g := newGate()
	r := start(t, cp, registry("gate", g), func(o *agent.Options) { o.ShutdownGrace = 100 * time.Millisecond })
	job := newJob("gate", nil)
	cp.Enqueue(job, nil)
	<-g.started
	if err := r.shutdown(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	got := cp.Completions(job.ID)
	if len(got) != 1 || got[0].Status != agentproto.StatusFailed || !strings.Contains(got[0].Error, "shutting down") {
		t.Fatalf("completions = %+v, want one failure saying the agent is shutting down", got)
	}
}

func TestRunStopsWhileControlPlaneDown(t *testing.T) {
	cp := agenttest.New(t)
	cp.Close()
	r := start(t, cp, nil)
	testlab.Eventually(t, waitLong, "a failed heartbeat", func() bool { return strings.Contains(r.log.String(), "heartbeat failed") })
	if err := r.shutdown(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if strings.Contains(r.log.String(), "context canceled") {
		t.Errorf("cancellation logged as a failure:\n%s", r.log.String())
	}
}

// TestWithdrawnJobNeverRuns: a job without secrets whose claim answer the
// agent reads after the control plane took the job back (the agent was
// frozen while its lease lapsed) is confirmed before it runs, refused,
// and dropped: its executor never runs and no result is sent.
func TestWithdrawnJobNeverRuns(t *testing.T) {
	cp := agenttest.New(t)
	var runs atomic.Int32
	ex := agent.ExecutorFunc(func(context.Context, agentproto.Job, map[string]string, agent.EventSink) (any, any, error) {
		runs.Add(1)
		return nil, nil, nil
	})
	r := start(t, cp, registry("count", ex))
	stale := newJob("count", nil)
	cp.Enqueue(stale, nil)
	cp.Withdraw(stale.ID)
	// A job queued after it runs: by then the stale one was dealt with.
	next := newJob("count", nil)
	cp.Enqueue(next, nil)
	waitCompletion(t, cp, next.ID)
	testlab.Eventually(t, waitLong, "the withdrawn job to be dropped", func() bool {
		return strings.Contains(r.log.String(), "job abandoned: the control plane no longer hands it to this agent")
	})
	if got := runs.Load(); got != 1 {
		t.Fatalf("executor ran %d times, want 1 (the withdrawn job never)", got)
	}
	if c := cp.Completions(stale.ID); len(c) != 0 {
		t.Fatalf("the withdrawn job was completed: %+v", c)
	}
}
