package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/stream"
	"github.com/capstan-dev/capstan/internal/testlab"
)

type sseMessage = testlab.SSEMessage

// sseClient reads a stream's messages.
type sseClient struct{ *testlab.SSE }

func (e *testEnv) ticket(t testing.TB, token string) string {
	t.Helper()
	r := e.request(t, http.MethodPost, "/api/v1/stream/tickets", token, nil)
	expectStatus(t, r, http.StatusCreated)
	var out struct {
		Ticket    string    `json:"ticket"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	r.decode(t, &out)
	if !strings.HasPrefix(out.Ticket, "stk_") || time.Until(out.ExpiresAt) > stream.TicketTTL+time.Minute {
		t.Fatalf("ticket %+v", out)
	}
	return out.Ticket
}

// openStream opens the stream with a ticket, after last (0: from now).
func (e *testEnv) openStream(t testing.TB, ticket string, last int64) (*http.Response, error) {
	t.Helper()
	url := e.ts.URL + "/api/v1/stream?ticket=" + ticket
	if last > 0 {
		url += "&last_event_id=" + strconv.FormatInt(last, 10)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	return http.DefaultClient.Do(req)
}

func (e *testEnv) stream(t testing.TB, token string, last int64) *sseClient {
	t.Helper()
	resp, err := e.openStream(t, e.ticket(t, token), last)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &sseClient{testlab.ReadSSE(t, resp)}
}

// next returns the next message, failing after a deadline.
func (c *sseClient) next(t testing.TB) sseMessage {
	t.Helper()
	return c.Next(t, 10*time.Second)
}

// until returns the messages up to and including the first for which
// done is true.
func (c *sseClient) until(t testing.TB, done func(sseMessage) bool) []sseMessage {
	t.Helper()
	return c.Until(t, 10*time.Second, done)
}

// runJob queues a job for a new server, has "the agent" run it with a
// progress event and fail it with an error, all holding marker.
func (e *testEnv) runJob(t testing.TB, marker string) jobs.Job {
	t.Helper()
	ctx := context.Background()
	en, err := e.srv.deps.Servers.CreateEnrollment(ctx, audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "test"}},
		"stream-"+strconv.FormatInt(time.Now().UnixNano(), 36), nil)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := e.jobs.Enqueue(ctx, jobs.NewJob{ServerID: en.Server.ID,
		Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{Message: marker})})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.jobs.Claim(ctx, en.Server.ID, time.Second); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if err := e.jobs.AddEvents(ctx, en.Server.ID, j.ID, []agentproto.Event{{Level: agentproto.LevelInfo, Message: "progress " + marker}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.Complete(ctx, en.Server.ID, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusFailed,
		Error: "failed: " + marker, Output: json.RawMessage(`"output ` + marker + `"`)}); err != nil {
		t.Fatal(err)
	}
	return j
}

func finished(id string) func(sseMessage) bool {
	return func(m sseMessage) bool {
		return m.Event == stream.TypeJob && strings.Contains(m.Data, `"id":"`+id+`"`) && strings.Contains(m.Data, `"status":"failed"`)
	}
}

// An administrator's stream carries a job's states, its events and its
// error; a member's carries its states only, with the error's class, and
// never its payload, events, error text or output.
func TestStreamRoleFiltering(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, adminSecret := e.createUser(t, "admin@example.com", true)
	_, memberSecret := e.createUser(t, "member@example.com", false)
	adminToken, _ := e.signIn(t, "admin@example.com", adminSecret)
	memberToken, _ := e.signIn(t, "member@example.com", memberSecret)
	admin := e.stream(t, adminToken, 0)
	member := e.stream(t, memberToken, 0)

	const marker = "s3cret-stream-0461"
	j := e.runJob(t, marker)

	got := admin.until(t, finished(j.ID))
	var types []string
	for _, m := range got {
		types = append(types, m.Event)
	}
	if strings.Join(types, ",") != "job,job,job.events,job" {
		t.Fatalf("admin's messages: %v", types)
	}
	if !strings.Contains(got[0].Data, `"status":"queued"`) || !strings.Contains(got[1].Data, `"status":"running"`) {
		t.Errorf("admin's job states: %s / %s", got[0].Data, got[1].Data)
	}
	if !strings.Contains(got[2].Data, "progress "+marker) || !strings.Contains(got[3].Data, "failed: "+marker) {
		t.Errorf("admin's events and error: %s / %s", got[2].Data, got[3].Data)
	}
	if strings.Contains(got[3].Data, "output "+marker) {
		t.Errorf("the stream carries a job's output (it is fetched from the job): %s", got[3].Data)
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID <= got[i-1].ID {
			t.Errorf("ids do not grow: %d then %d", got[i-1].ID, got[i].ID)
		}
	}

	mgot := member.until(t, finished(j.ID))
	if len(mgot) != 3 {
		t.Fatalf("member's messages: %+v", mgot)
	}
	for _, m := range mgot {
		if m.Event != stream.TypeJob || strings.Contains(m.Data, marker) {
			t.Errorf("member receives %s: %s", m.Event, m.Data)
		}
		var v jobs.Job
		if err := json.Unmarshal([]byte(m.Data), &v); err != nil || !v.Redacted {
			t.Errorf("member's job is not redacted: %s", m.Data)
		}
	}
	if !strings.Contains(mgot[2].Data, `"error":"failed"`) {
		t.Errorf("member's finished job lacks the error class: %s", mgot[2].Data)
	}
}

// A ticket opens one stream: of many requests with it at once, exactly
// one gets the stream.
func TestStreamTicketSingleUse(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, secret := e.createUser(t, "admin@example.com", true)
	token, _ := e.signIn(t, "admin@example.com", secret)
	ticket := e.ticket(t, token)

	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	problems := make([]string, n)
	for i := range n {
		wg.Go(func() {
			resp, err := e.openStream(t, ticket, 0)
			if err != nil {
				t.Error(err)
				return
			}
			codes[i] = resp.StatusCode
			if resp.StatusCode != http.StatusOK {
				var p Problem
				json.NewDecoder(resp.Body).Decode(&p) //nolint:errcheck // checked through p.Type
				problems[i] = p.Type
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	ok := 0
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusUnauthorized:
			if !strings.HasSuffix(problems[i], "/invalid-stream-ticket") {
				t.Errorf("problem %q", problems[i])
			}
		default:
			t.Errorf("status %d", c)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d requests opened a stream with one ticket (%v)", ok, n, codes)
	}
}

// A ticket is refused when it is unknown, malformed or its session ended;
// taking one needs a signed-in caller.
func TestStreamTicketRefused(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, secret := e.createUser(t, "admin@example.com", true)
	token, _ := e.signIn(t, "admin@example.com", secret)

	expectProblem(t, e.request(t, http.MethodPost, "/api/v1/stream/tickets", "", nil), http.StatusUnauthorized, "invalid-token")
	for _, ticket := range []string{"stk_unknown", "cat_notaticket", strings.Repeat("x", 50)} {
		expectProblem(t, e.request(t, http.MethodGet, "/api/v1/stream?ticket="+ticket, "", nil), http.StatusUnauthorized, "invalid-stream-ticket")
	}
	expectStatus(t, e.request(t, http.MethodGet, "/api/v1/stream", "", nil), http.StatusUnprocessableEntity)
	ticket := e.ticket(t, token)
	expectStatus(t, e.request(t, http.MethodGet, "/api/v1/stream?last_event_id=x&ticket="+ticket, "", nil), http.StatusUnprocessableEntity)

	// Signing out ends the session: its unused tickets open nothing.
	ticket = e.ticket(t, token)
	expectStatus(t, e.request(t, http.MethodPost, "/api/v1/auth/logout", token, nil), http.StatusNoContent)
	expectProblem(t, e.request(t, http.MethodGet, "/api/v1/stream?ticket="+ticket, "", nil), http.StatusUnauthorized, "invalid-stream-ticket")
}

// A client that reconnects with the id of the last message it saw gets
// the messages it missed, then the live ones; with an id the control
// plane no longer reaches back to it gets "reset".
func TestStreamResume(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, secret := e.createUser(t, "admin@example.com", true)
	token, _ := e.signIn(t, "admin@example.com", secret)
	first := e.stream(t, token, 0)
	j := e.runJob(t, "one")
	seen := first.until(t, finished(j.ID))
	first.Resp.Body.Close()

	// Reconnect after the first message: the other three come again, in
	// order, then a new job's messages live.
	again := e.stream(t, token, seen[0].ID)
	for _, want := range seen[1:] {
		if m := again.next(t); m.ID != want.ID || m.Event != want.Event || m.Data != want.Data {
			t.Fatalf("resumed %+v, want %+v", m, want)
		}
	}
	j2 := e.runJob(t, "two")
	if m := again.next(t); m.Event != stream.TypeJob || !strings.Contains(m.Data, j2.ID) || m.ID <= seen[len(seen)-1].ID {
		t.Fatalf("live after the backlog: %+v", m)
	}

	// An id from before this control plane started (or another one's), or
	// one it never gave: reset, with an id to resume from.
	for _, last := range []int64{1, time.Now().Add(time.Hour).UnixMicro()} {
		c := e.stream(t, token, last)
		m := c.next(t)
		if m.Event != stream.TypeReset || m.ID < seen[len(seen)-1].ID {
			t.Fatalf("after id %d: %+v, want reset", last, m)
		}
	}
}
