package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// rawAgentCall sends one /agent/v1 request from any goroutine (no t.Fatal).
func rawAgentCall(cp *ControlPlane, token, path string, body any) (*Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, cp.URL+"/agent/v1"+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cp.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: rb}, err
}

// TestAgentClaimSlots: one agent token fires 10 claim long polls at once.
// At most 2 wait; each newer one ends the oldest at once (204), so 8 are
// answered long before their 25 s wait, and a queued job goes to one of
// the 2 still waiting.
func TestAgentClaimSlots(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "claims")
	agent := f.enrollHTTP(t, e.Token)

	type answer struct {
		status int
		body   []byte
		took   time.Duration
		err    error
	}
	answers := make(chan answer, 10)
	start := time.Now()
	for range 10 {
		go func() {
			t0 := time.Now()
			r, err := rawAgentCall(f.ControlPlane, agent.AgentToken, "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 25})
			a := answer{err: err, took: time.Since(t0)}
			if r != nil {
				a.status, a.body = r.Status, r.Body
			}
			answers <- a
		}()
	}
	// Long before any wait ends, 8 claims are answered empty.
	var early []answer
	deadline := time.After(15 * time.Second)
	for len(early) < 8 {
		select {
		case a := <-answers:
			early = append(early, a)
		case <-deadline:
			t.Fatalf("after 15 s only %d of 10 parallel claims were answered; want 8 answered at once, 2 waiting", len(early))
		}
	}
	for _, a := range early {
		if a.err != nil || a.status != http.StatusNoContent {
			t.Fatalf("pushed-out claim: %d %s (err %v), want 204", a.status, a.body, a.err)
		}
	}
	t.Logf("8 of 10 parallel claims answered empty within %s", time.Since(start).Round(time.Millisecond))
	select {
	case a := <-answers:
		t.Fatalf("a 9th claim was answered (%d %s after %s): want 2 still waiting", a.status, a.body, a.took)
	default:
	}

	// The 2 waiting claims are live: a queued job goes to one of them.
	jobID := f.ping(t, agent.ServerID, "to a waiting claim")
	select {
	case a := <-answers:
		var c agentproto.ClaimResponse
		if a.err != nil || a.status != http.StatusOK || json.Unmarshal(a.body, &c) != nil || c.Job.ID != jobID {
			t.Fatalf("waiting claim: %d %s (err %v), want job %s", a.status, a.body, a.err, jobID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no waiting claim received the queued job")
	}
}

// TestAgentReportRateLimits floods the report endpoints from one agent
// token: beyond each per-server token bucket the answer is 429 with
// Retry-After, and nothing of a refused report is stored.
func TestAgentReportRateLimits(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "flood")
	agent := f.enrollHTTP(t, e.Token)
	other := f.enrollHTTP(t, f.createEnrollment(t, "neighbour").Token)

	type result struct {
		status     int
		retryAfter string
		typ        string
		err        error
	}
	// At most 12 at once: one server's agent has 16 requests in flight at
	// the most, and what is tested here is the rate, not that bound.
	inFlight := make(chan struct{}, 12)
	flood := func(n int, path string, body func(i int) any) []result {
		var wg sync.WaitGroup
		out := make([]result, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				inFlight <- struct{}{}
				defer func() { <-inFlight }()
				r, err := rawAgentCall(f.ControlPlane, agent.AgentToken, path, body(i))
				if err != nil {
					out[i].err = err
					return
				}
				var p Problem
				_ = json.Unmarshal(r.Body, &p)
				out[i] = result{status: r.Status, retryAfter: r.Header.Get("Retry-After"), typ: p.Type}
			}()
		}
		wg.Wait()
		return out
	}
	count := func(rs []result, what string) (accepted, limited int) {
		t.Helper()
		for _, r := range rs {
			switch {
			case r.err != nil:
				t.Fatalf("%s: %v", what, r.err)
			case r.status == http.StatusNoContent:
				accepted++
			case r.status == http.StatusTooManyRequests:
				limited++
				if s, err := strconv.Atoi(r.retryAfter); err != nil || s < 1 {
					t.Errorf("%s: 429 with Retry-After %q, want whole seconds ≥ 1", what, r.retryAfter)
				}
				if r.typ != "https://capstan.dev/problems/agent-rate-limited" {
					t.Errorf("%s: 429 of type %q", what, r.typ)
				}
			default:
				t.Fatalf("%s: status %d", what, r.status)
			}
		}
		return accepted, limited
	}

	// Metrics: 40 reports of 100 samples each (4,000 samples at distinct
	// times within the last hour) against a bucket of 1,440 and one a
	// second.
	const perReport = 100
	base := time.Now().UTC().Add(-59 * time.Minute).Truncate(time.Second)
	began := time.Now()
	res := flood(40, "/metrics", func(i int) any {
		req := agentproto.MetricsRequest{}
		for j := range perReport {
			req.Samples = append(req.Samples, mxSample(base.Add(time.Duration(i*perReport+j)*800*time.Millisecond), 10))
		}
		return req
	})
	elapsed := time.Since(began)
	accepted, limited := count(res, "metrics")
	limit := 1440 + int(elapsed.Seconds()+1)
	t.Logf("metrics: %d of 40 reports accepted, %d answered 429, in %s", accepted, limited, elapsed.Round(time.Millisecond))
	if limited == 0 || accepted*perReport > limit {
		t.Fatalf("metrics: %d samples accepted in %s, want at most %d and some 429s", accepted*perReport, elapsed, limit)
	}
	if got := len(mxSeriesOf(t, f.ControlPlane, f.Token, agent.ServerID, "1h").Series); got != accepted*perReport {
		t.Fatalf("metrics: %d samples stored, want exactly the %d accepted", got, accepted*perReport)
	}
	// Another server's bucket is its own.
	r := f.Post(t, "/agent/v1/metrics", other.AgentToken, agentproto.MetricsRequest{Samples: []agentproto.MetricSample{mxSample(time.Now().UTC().Add(-time.Minute), 5)}})
	expectStatus(t, r, http.StatusNoContent)

	// Inventory: 30 reports against a bucket of 10 and one every 10 s.
	res = flood(30, "/inventory", func(i int) any {
		return agentproto.InventoryRequest{CollectedAt: time.Now().UTC(),
			Services: []agentproto.ServiceInfo{{Name: fmt.Sprintf("s%d.service", i), LoadState: "loaded", ActiveState: "active", SubState: "running"}}}
	})
	accepted, limited = count(res, "inventory")
	t.Logf("inventory: %d of 30 accepted, %d answered 429", accepted, limited)
	if accepted > 12 || limited == 0 {
		t.Fatalf("inventory: %d of 30 accepted, %d limited; want at most 10 (+1 a 10 s) and the rest 429", accepted, limited)
	}

	// Job events: 60 posts of 100 events on a running job against a
	// bucket of 2,000 and 50 a second.
	jobID := f.ping(t, agent.ServerID, "events flood")
	if j := f.claim(t, agent.AgentToken, 5); j == nil || j.ID != jobID {
		t.Fatalf("claimed %+v, want job %s", j, jobID)
	}
	began = time.Now()
	res = flood(60, "/jobs/"+jobID+"/events", func(i int) any {
		req := agentproto.EventsRequest{}
		for j := range perReport {
			req.Events = append(req.Events, agentproto.Event{At: time.Now().UTC(), Level: agentproto.LevelInfo, Message: fmt.Sprintf("event %d.%d", i, j)})
		}
		return req
	})
	elapsed = time.Since(began)
	accepted, limited = count(res, "events")
	limit = 2000 + 50*int(elapsed.Seconds()+1)
	t.Logf("events: %d of 60 posts accepted, %d answered 429, in %s", accepted, limited, elapsed.Round(time.Millisecond))
	if limited == 0 || accepted*perReport > limit {
		t.Fatalf("events: %d accepted in %s, want at most %d and some 429s", accepted*perReport, elapsed, limit)
	}
	if got := len(f.job(t, jobID).Events); got != accepted*perReport {
		t.Fatalf("events: %d stored, want exactly the %d accepted", got, accepted*perReport)
	}
}
