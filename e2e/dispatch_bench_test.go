package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// dispatchJobs is how many jobs one iteration of BenchmarkDispatch queues.
const dispatchJobs = 1000

// BenchmarkDispatch measures how long a queued job takes to reach its agent:
// from the moment the POST /api/v1/servers/{id}/actions response is received
// to the moment the agent's claim long poll returns with the job. The agent
// is a goroutine speaking the protocol with a real agent token to a real
// control plane process (SQLite). Jobs are queued one after another, each
// once the agent has claimed and completed the previous one, so the agent is
// waiting in a long poll.
//
//	go test -run '^$' -bench BenchmarkDispatch -benchtime 1x ./e2e/
func BenchmarkDispatch(b *testing.B) {
	rig := newDispatchRig(b)
	var all, fromSend []time.Duration
	b.ResetTimer()
	for range b.N {
		lat, send := rig.measure(b, dispatchJobs)
		all, fromSend = append(all, lat...), append(fromSend, send...)
	}
	b.StopTimer()
	s, q := summarize(all), summarize(fromSend)
	b.ReportMetric(ms(s.p50), "p50-ms")
	b.ReportMetric(ms(s.p99), "p99-ms")
	b.ReportMetric(float64(s.early)/float64(len(all)), "early-frac")
	b.ReportMetric(ms(q.p50), "send-p50-ms")
	b.ReportMetric(ms(q.p99), "send-p99-ms")
	b.Logf("%d jobs, from the POST response: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; "+
		"%d claimed before the POST response arrived (counted as 0)", len(all), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max), s.early)
	b.Logf("from sending the POST: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms", ms(q.p50), ms(q.p90), ms(q.p99), ms(q.max))
}

// TestDispatchLatency runs the benchmark's measurement briefly, so that it
// keeps working, and checks that dispatch is prompt: a long poll is woken by
// the queuing, not by its timeout.
func TestDispatchLatency(t *testing.T) {
	t.Parallel()
	rig := newDispatchRig(t)
	lat, _ := rig.measure(t, 20)
	s := summarize(lat)
	t.Logf("p50 %.3f ms, p99 %.3f ms, max %.3f ms", ms(s.p50), ms(s.p99), ms(s.max))
	if s.max > 2*time.Second {
		t.Errorf("slowest dispatch took %s; a queued job must wake the waiting claim", s.max)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type latencySummary struct {
	p50, p90, p99, max time.Duration
	early              int // claimed before the POST response arrived
}

func summarize(lat []time.Duration) latencySummary {
	var s latencySummary
	sorted := make([]time.Duration, len(lat))
	for i, d := range lat {
		if d < 0 {
			s.early++
			d = 0
		}
		sorted[i] = d
	}
	slices.Sort(sorted)
	pct := func(p float64) time.Duration {
		if len(sorted) == 0 {
			return 0
		}
		i := int(p*float64(len(sorted))+0.5) - 1
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	s.p50, s.p90, s.p99, s.max = pct(0.50), pct(0.90), pct(0.99), pct(1)
	return s
}

// dispatchRig is a control plane with an administrator and one enrolled
// server whose agent token the measuring agent uses.
type dispatchRig struct {
	f          *Fleet
	serverID   string
	agentToken string
	// agentURL is where the agent's long polls go: f.URL, or another
	// control plane sharing f's database.
	agentURL string
}

func newDispatchRig(tb testing.TB) *dispatchRig {
	tb.Helper()
	f := newFleet(tb, Options{})
	e := f.createEnrollment(tb, "bench-1")
	return &dispatchRig{f: f, serverID: e.Server.ID, agentToken: f.enrollHTTP(tb, e.Token).AgentToken, agentURL: f.URL}
}

// claimed is what the protocol agent reports for each job it got.
type claimed struct {
	id  string
	at  time.Time // when the claim response arrived
	err error
}

// measure queues n agent.ping jobs one after another and returns, per job,
// the claim time minus the time the POST response arrived (lat), and minus
// the time the POST was sent (fromSend).
func (rig *dispatchRig) measure(tb testing.TB, n int) (lat, fromSend []time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan claimed)
	done := make(chan struct{})
	go func() {
		defer close(done)
		protocolAgent(ctx, rig.agentURL, rig.agentToken, got)
	}()
	defer func() {
		cancel()
		<-done
	}()

	// The API client: keep-alive, no proxy, like the harness's.
	api := &http.Client{
		Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext},
		Timeout:   30 * time.Second,
	}
	defer api.CloseIdleConnections()
	body, err := json.Marshal(map[string]any{"type": agentproto.JobAgentPing, "payload": map[string]any{"message": "bench"}})
	if err != nil {
		tb.Fatal(err)
	}
	queue := func() (id string, sent, received time.Time) {
		req, err := http.NewRequest(http.MethodPost, rig.f.URL+"/api/v1/servers/"+rig.serverID+"/actions", bytes.NewReader(body))
		if err != nil {
			tb.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+rig.f.Token)
		sent = time.Now()
		resp, err := api.Do(req)
		if err != nil {
			tb.Fatalf("queue: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		at := time.Now()
		if err != nil || resp.StatusCode != http.StatusAccepted {
			tb.Fatalf("queue: %d %v %s", resp.StatusCode, err, b)
		}
		var a Accepted
		if err := json.Unmarshal(b, &a); err != nil || a.JobID == "" {
			tb.Fatalf("queue: %v %s", err, b)
		}
		return a.JobID, sent, at
	}
	await := func(id string) time.Time {
		select {
		case c := <-got:
			if c.err != nil {
				tb.Fatalf("protocol agent: %v", c.err)
			}
			if c.id != id {
				tb.Fatalf("agent claimed %s, want %s", c.id, id)
			}
			return c.at
		case <-time.After(30 * time.Second):
			tb.Fatalf("job %s was not claimed within 30 s", id)
		}
		return time.Time{}
	}

	// Warm up: the first job also waits for the agent's first long poll.
	id, _, _ := queue()
	await(id)
	lat, fromSend = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for range n {
		id, sent, received := queue()
		at := await(id)
		lat, fromSend = append(lat, at.Sub(received)), append(fromSend, at.Sub(sent))
	}
	return lat, fromSend
}

// protocolAgent speaks /agent/v1 until ctx ends: it long-polls for a job,
// notes when the claim response arrived, completes the job, reports it on
// got, and polls again. It reports an error on got and returns at the first
// failure.
func protocolAgent(ctx context.Context, baseURL, token string, got chan<- claimed) {
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
	defer hc.CloseIdleConnections()
	call := func(path string, in any) (int, []byte, error) {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/agent/v1"+path, bytes.NewReader(b))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	report := func(c claimed) bool {
		select {
		case got <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		status, body, err := call("/jobs/claim", agentproto.ClaimRequest{WaitSeconds: agentproto.MaxClaimWaitSeconds - 5})
		at := time.Now()
		if ctx.Err() != nil {
			return
		}
		if err == nil && status != http.StatusOK && status != http.StatusNoContent {
			err = fmt.Errorf("claim: %d %s", status, body)
		}
		if err != nil {
			report(claimed{err: err})
			return
		}
		if status == http.StatusNoContent {
			continue
		}
		var c agentproto.ClaimResponse
		if err := json.Unmarshal(body, &c); err != nil {
			report(claimed{err: fmt.Errorf("claim reply: %w", err)})
			return
		}
		status, body, err = call("/jobs/"+c.Job.ID+"/complete", agentproto.CompleteRequest{Status: agentproto.StatusSucceeded,
			Data: json.RawMessage(`{"message":"bench"}`)})
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("complete: %d %s", status, body)
		}
		if err != nil {
			if ctx.Err() == nil {
				report(claimed{err: err})
			}
			return
		}
		if !report(claimed{id: c.Job.ID, at: at}) {
			return
		}
	}
}
