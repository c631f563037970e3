package agentapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentapi"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/httpapi"
	"github.com/capstan-dev/capstan/internal/httpconn"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// claimRig is a control plane serving the agent protocol with waiting
// claims taken out of the HTTP server, as capstan serve does.
type claimRig struct {
	ts      *httptest.Server
	returns *httpconn.Returns
	jobs    *jobs.Service
	servers *servers.Service
	store   *store.Store
}

func newClaimRig(t *testing.T) *claimRig { return newClaimRigWith(t, true) }

// newClaimRigWith makes a rig whose waiting claims are taken out of the
// HTTP server when detach is true, and wait as served requests otherwise.
func newClaimRigWith(t *testing.T, detach bool) *claimRig {
	t.Helper()
	return newClaimRigIn(t, detach, 0)
}

// newClaimRigIn makes a rig as newClaimRigWith does that handles at most
// inFlight agent requests at once (0: the default).
func newClaimRigIn(t *testing.T, detach bool, inFlight int) *claimRig {
	t.Helper()
	st := storetest.Open(t, store.SQLite)
	log := slog.New(slog.DiscardHandler)
	js := jobs.NewService(jobs.Deps{Store: st, Key: secrets.GenerateKey(), Now: time.Now, Log: log})
	srvs := servers.NewService(servers.Deps{Store: st, Jobs: js, Audit: audit.NewLog(st, time.Now), Now: time.Now, PublicURL: "http://capstan.test", EnrollmentTTL: time.Hour})
	var h http.Handler
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	// A given-back connection waits as long as a kept-alive one, not only
	// the server's (short) header timeout.
	ts.Config.ReadHeaderTimeout = 500 * time.Millisecond
	returns := httpconn.NewReturns(ts.Listener.Addr(), time.Minute)
	deps := httpapi.Deps{Servers: srvs, Jobs: js, Logger: log, Version: "test", AgentInFlight: inFlight}
	if detach {
		deps.Conns = returns
	}
	h = httpapi.New(deps, agentapi.Mount(agentapi.Deps{Servers: srvs, Jobs: js}))
	ts.Config.RegisterOnShutdown(js.StopClaims)
	ts.Start()
	if detach {
		go ts.Config.Serve(returns) //nolint:errcheck // ends when the test server closes
	}
	t.Cleanup(ts.Close)
	return &claimRig{ts: ts, returns: returns, jobs: js, servers: srvs, store: st}
}

// enroll returns the id and agent token of a new server.
func (r *claimRig) enroll(t *testing.T, name string) (string, string) {
	t.Helper()
	ctx := context.Background()
	e, err := r.servers.CreateEnrollment(ctx, audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "test"}}, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.servers.Enroll(ctx, audit.Caller{}, agentproto.EnrollRequest{Token: e.Token, Facts: agentproto.Facts{Hostname: name}})
	if err != nil {
		t.Fatal(err)
	}
	return res.ServerID, res.AgentToken
}

// agentConn is an agent's keep-alive connection, written and read by hand
// so that the client side holds no goroutine.
type agentConn struct {
	net.Conn
	br *bufio.Reader
}

func (r *claimRig) dial(t *testing.T) *agentConn {
	t.Helper()
	c, err := net.Dial("tcp", r.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &agentConn{Conn: c}
}

func (c *agentConn) send(t *testing.T, token, path string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req := fmt.Sprintf("POST /agent/v1%s HTTP/1.1\r\nHost: capstan.test\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, token, len(b), b)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
}

func (c *agentConn) read(t *testing.T) (*http.Response, []byte) {
	t.Helper()
	if c.br == nil { // made at the first read: not counted in the cost of a waiting claim
		c.br = bufio.NewReader(c)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck // a failed read says so
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// heapAndGoroutines returns the live heap after a collection and the
// number of goroutines.
func heapAndGoroutines() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse, runtime.NumGoroutine()
}

// waitingClaims opens a connection per token, each with a claim waiting
// 30 s, and returns them with the heap and stacks each added and the
// goroutines they added in all, once waiting says they all wait.
func (r *claimRig) waitingClaims(t *testing.T, tokens []string, waiting func() bool) ([]*agentConn, int64, int) {
	t.Helper()
	heap0, g0 := heapAndGoroutines()
	conns := make([]*agentConn, len(tokens))
	for i, tok := range tokens {
		conns[i] = r.dial(t)
		conns[i].send(t, tok, "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 30})
	}
	testlab.Eventually(t, 30*time.Second, fmt.Sprintf("%d claims waiting", len(tokens)), waiting)
	heap1, g1 := heapAndGoroutines()
	return conns, (int64(heap1) - int64(heap0)) / int64(len(tokens)), g1 - g0
}

// TestWaitingClaimCost compares what a waiting claim costs served by
// net/http (a control plane without Deps.Conns) and taken out of it.
func TestWaitingClaimCost(t *testing.T) {
	const n = 300
	var cost [2]int64
	for i, detach := range []bool{false, true} {
		r := newClaimRigWith(t, detach)
		tokens := make([]string, n)
		for j := range n {
			_, tokens[j] = r.enroll(t, fmt.Sprintf("cost-%03d", j))
		}
		warm := r.dial(t)
		warm.send(t, tokens[0], "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 1})
		warm.read(t)
		_, g := heapAndGoroutines()
		waiting := func() bool { return runtime.NumGoroutine() >= g+2*n } // a handler and a background read each
		if detach {
			waiting = func() bool { return r.returns.Out() == n }
		}
		_, perClaim, goroutines := r.waitingClaims(t, tokens, waiting)
		cost[i] = perClaim
		t.Logf("detached %v: %d waiting claims, %d goroutines more, %d bytes of heap and stacks each", detach, n, goroutines, perClaim)
		r.jobs.StopClaims()
	}
	if cost[1]*4 > cost[0] {
		t.Errorf("a detached waiting claim costs %d bytes, a served one %d: want at most a quarter", cost[1], cost[0])
	}
}

// Waiting claims are held without a goroutine each and with a few hundred
// bytes: N waiting claims on N connections add a handful of goroutines in
// all and a bounded heap per claim. Each is still answered: a queued job
// wakes its claim at once and the connection serves the agent's next
// request; a claim whose agent hung up gets no job; a wait ends with 204;
// a shutdown answers every claim and closes its connection.
func TestParkedClaims(t *testing.T) {
	r := newClaimRig(t)
	const n = 300
	ids, tokens := make([]string, n), make([]string, n)
	for i := range n {
		ids[i], tokens[i] = r.enroll(t, fmt.Sprintf("parked-%03d", i))
	}
	// Warm up the server's pools and code paths with one claim answered.
	warm := r.dial(t)
	warm.send(t, tokens[0], "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 1})
	if resp, body := warm.read(t); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("warm-up claim: %d %s", resp.StatusCode, body)
	}

	conns, perClaim, goroutines := r.waitingClaims(t, tokens, func() bool { return r.returns.Out() == n })
	t.Logf("%d waiting claims: %d goroutines more, %d bytes of heap and stacks each (server and client sides)", n, goroutines, perClaim)
	// Served by net/http, each waiting claim held two goroutines (the
	// handler's and the connection's background read) and the server's
	// buffers: about 20 KiB (TestWaitingClaimCost).
	if goroutines > 10 {
		t.Errorf("%d waiting claims added %d goroutines; want none per claim", n, goroutines)
	}
	if perClaim > 8<<10 {
		t.Errorf("a waiting claim costs %d bytes of heap and stacks; want at most 8 KiB", perClaim)
	}

	// A queued job goes to its waiting claim at once, and the connection
	// then serves the agent's next request.
	ctx := context.Background()
	j, _, err := r.jobs.Enqueue(ctx, jobs.NewJob{ServerID: ids[0], Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{Message: "wake"})})
	if err != nil {
		t.Fatal(err)
	}
	resp, body := conns[0].read(t)
	var claim agentproto.ClaimResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &claim) != nil || claim.Job.ID != j.ID {
		t.Fatalf("woken claim: %d %s; want job %s", resp.StatusCode, body, j.ID)
	}
	if resp.Header.Get("X-Request-ID") == "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("woken claim's headers: %v", resp.Header)
	}
	if resp.Close {
		t.Fatal("an answered claim's connection was closed; want it kept for the next request")
	}
	// The agent runs the job before its next call: the connection waits
	// longer than the server's header timeout, as a kept-alive one.
	idle := time.Now()
	testlab.Eventually(t, 10*time.Second, "2 header timeouts passed", func() bool { return time.Since(idle) > time.Second })
	conns[0].send(t, tokens[0], "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: "test", RunningJobIDs: []string{j.ID}})
	if resp, body := conns[0].read(t); resp.StatusCode != http.StatusOK || !resp.Close {
		// A report's connection closes after the answer: an agent
		// keeps one connection, its claim's.
		t.Fatalf("heartbeat on the connection of an answered claim: %d %s (close %v), want 200 and the connection closed", resp.StatusCode, body, resp.Close)
	}

	// An agent that hung up gets no job: it stays queued.
	conns[1].Close()
	out := r.returns.Out()
	j1, _, err := r.jobs.Enqueue(ctx, jobs.NewJob{ServerID: ids[1], Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{Message: "gone"})})
	if err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, 30*time.Second, "the claim of the agent that hung up dropped", func() bool { return r.returns.Out() == out-1 })
	if got, _, err := r.jobs.Get(ctx, j1.ID); err != nil || got.Status != jobs.Queued {
		t.Fatalf("job for an agent that hung up: %v (err %v), want queued", got.Status, err)
	}

	// A wait that ends without a job is answered 204 on time.
	short := r.dial(t)
	start := time.Now()
	short.send(t, tokens[2], "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 1})
	if resp, body := short.read(t); resp.StatusCode != http.StatusNoContent || time.Since(start) < time.Second {
		t.Fatalf("claim waiting 1 s: %d %s after %s", resp.StatusCode, body, time.Since(start))
	}

	// A third claim of a server ends the oldest of its two at once.
	third := r.dial(t)
	third.send(t, tokens[3], "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 30})
	fourth := r.dial(t)
	fourth.send(t, tokens[3], "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 30})
	if resp, body := conns[3].read(t); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("claim pushed out by a newer one: %d %s", resp.StatusCode, body)
	}

	// Shutting down answers every waiting claim and closes its connection.
	r.jobs.StopClaims()
	for i, c := range conns[4:] {
		resp, body := c.read(t)
		if resp.StatusCode != http.StatusNoContent || !resp.Close {
			t.Fatalf("claim %d at shutdown: %d %s (close %v)", i+4, resp.StatusCode, body, resp.Close)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.returns.Wait(wctx); err != nil {
		t.Fatalf("%d claims not answered at shutdown: %v", r.returns.Out(), err)
	}
}
