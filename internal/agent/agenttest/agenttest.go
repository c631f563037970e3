// Package agenttest is a small in-memory fake of the control plane's
// /agent/v1 endpoints, for the agent's tests. It checks the agent's bearer
// token, queues jobs for claims (long poll), and records heartbeats, events,
// completions, metric samples, inventories and request reports.
package agenttest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/ids"
)

// ControlPlane is the fake. Its fields are set by New; use the methods.
type ControlPlane struct {
	URL string

	mu           sync.Mutex
	srv          *httptest.Server
	enrollTokens map[string]bool // token → used
	enrolls      []agentproto.EnrollRequest
	serverID     string
	serverName   string
	agentToken   string
	revoked      bool
	config       agentproto.Config
	queue        []agentproto.Job
	jobAdded     chan struct{} // closed and replaced when a job is queued
	secrets      map[string]map[string]string
	withdrawn    map[string]bool
	heartbeats   []agentproto.HeartbeatRequest
	claims       int
	eventPosts   map[string]int
	events       map[string][]agentproto.Event
	completions  map[string][]agentproto.CompleteRequest
	eventsAtDone map[string]int
	attempts     map[string]int
	completeHook func(jobID string, attempt int) int
	heartbeatErr int

	samples         []agentproto.MetricSample // accepted, in arrival order
	metricsPosts    int                       // accepted posts
	metricsAttempts int                       // posts, accepted or not
	metricsStatus   int                       // answer to metrics posts; 0: accept
	refusedSamples  []agentproto.MetricSample // posted while metricsStatus refused them
	inventories     []agentproto.InventoryRequest
	inventoryStatus int // answer to inventory posts; 0: accept
	requestReports  []agentproto.RequestsReport
	requestsStatus  int // answer to request report posts; 0: accept

	throttles map[string]throttle    // route → 429s still to answer
	posts     map[string][]time.Time // route → arrival of every post
}

type throttle struct {
	n          int
	retryAfter time.Duration
}

// New starts a fake control plane, closed by t.Cleanup. Its agent token is
// fixed from the start so tests can write a config without enrolling.
func New(t testing.TB) *ControlPlane {
	cp := &ControlPlane{
		enrollTokens: map[string]bool{},
		serverID:     ids.New(ids.Server),
		serverName:   "test-server",
		agentToken:   ids.Token(strings.TrimSuffix(agentproto.AgentTokenPrefix, "_")),
		config:       agentproto.Config{HeartbeatSeconds: 1, MetricsSeconds: 60, ClaimWaitSeconds: 2, MaxConcurrentJobs: 4},
		jobAdded:     make(chan struct{}),
		secrets:      map[string]map[string]string{},
		withdrawn:    map[string]bool{},
		eventPosts:   map[string]int{},
		events:       map[string][]agentproto.Event{},
		completions:  map[string][]agentproto.CompleteRequest{},
		eventsAtDone: map[string]int{},
		attempts:     map[string]int{},
		throttles:    map[string]throttle{},
		posts:        map[string][]time.Time{},
	}
	mux := http.NewServeMux()
	p := "/agent/" + agentproto.Version
	mux.HandleFunc("POST "+p+"/enroll", cp.enroll)
	mux.HandleFunc("POST "+p+"/heartbeat", cp.auth(cp.heartbeat))
	mux.HandleFunc("POST "+p+"/jobs/claim", cp.auth(cp.claim))
	mux.HandleFunc("GET "+p+"/jobs/{id}/secrets", cp.auth(cp.jobSecrets))
	mux.HandleFunc("POST "+p+"/jobs/{id}/events", cp.auth(cp.throttled("events", cp.postEvents)))
	mux.HandleFunc("POST "+p+"/jobs/{id}/complete", cp.auth(cp.complete))
	mux.HandleFunc("POST "+p+"/metrics", cp.auth(cp.throttled("metrics", cp.metrics)))
	mux.HandleFunc("POST "+p+"/inventory", cp.auth(cp.throttled("inventory", cp.inventory)))
	mux.HandleFunc("POST "+p+"/requests", cp.auth(cp.throttled("requests", cp.requests)))
	cp.srv = httptest.NewServer(mux)
	cp.URL = cp.srv.URL
	t.Cleanup(cp.Close)
	return cp
}

// Close shuts the server down.
func (cp *ControlPlane) Close() {
	cp.srv.CloseClientConnections()
	cp.srv.Close()
}

// ServerID, ServerName and AgentToken are what enroll hands out.
func (cp *ControlPlane) ServerID() string   { return cp.serverID }
func (cp *ControlPlane) ServerName() string { return cp.serverName }
func (cp *ControlPlane) AgentToken() string { return cp.agentToken }

// SetServer makes the fake the control plane of server id with agent
// token tok (e.g. another fake's, as a restarted control plane would be).
func (cp *ControlPlane) SetServer(id, tok string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.serverID, cp.agentToken = id, tok
}

// AddEnrollmentToken makes token redeemable once.
func (cp *ControlPlane) AddEnrollmentToken(token string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.enrollTokens[token] = false
}

// Enrolls returns the enroll requests received.
func (cp *ControlPlane) Enrolls() []agentproto.EnrollRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.enrolls)
}

// Revoke makes every authenticated call answer 401 agent-revoked.
func (cp *ControlPlane) Revoke() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.revoked = true
}

// SetConfig sets the configuration heartbeats return.
func (cp *ControlPlane) SetConfig(c agentproto.Config) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.config = c
}

// FailHeartbeats makes the next n heartbeats answer 503.
func (cp *ControlPlane) FailHeartbeats(n int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.heartbeatErr = n
}

// Enqueue queues a job for the next claim; secrets (if not nil) are served
// by GET /jobs/{id}/secrets. Enqueuing the same job twice delivers it twice.
func (cp *ControlPlane) Enqueue(job agentproto.Job, secrets map[string]string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if job.CreatedAt.IsZero() {
		job.CreatedAt = time.Now().UTC()
	}
	if job.LeaseSeconds == 0 {
		job.LeaseSeconds = 60
	}
	// Every job held is confirmed through its secrets, none for most.
	cp.secrets[job.ID] = map[string]string{}
	if secrets != nil {
		cp.secrets[job.ID] = secrets
		job.HasSecrets = true
	}
	delete(cp.withdrawn, job.ID)
	cp.queue = append(cp.queue, job)
	close(cp.jobAdded)
	cp.jobAdded = make(chan struct{})
}

// Withdraw makes a job not the agent's anymore, as when its lease lapsed
// and it was queued again or failed: its secrets (the agent's confirmation
// before it runs a job) answer 403 job-not-running.
func (cp *ControlPlane) Withdraw(jobID string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.withdrawn[jobID] = true
}

// SetCompleteHook makes POST /jobs/{id}/complete answer with the status the
// hook returns for the attempt (1, 2, …); 0 or 2xx accepts the result.
func (cp *ControlPlane) SetCompleteHook(h func(jobID string, attempt int) int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.completeHook = h
}

// Heartbeats returns the heartbeats received.
func (cp *ControlPlane) Heartbeats() []agentproto.HeartbeatRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.heartbeats)
}

// Claims is the number of claims received.
func (cp *ControlPlane) Claims() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.claims
}

// Events returns the events of a job, and how many POSTs carried them.
func (cp *ControlPlane) Events(jobID string) ([]agentproto.Event, int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.events[jobID]), cp.eventPosts[jobID]
}

// EventsAtCompletion is how many events of a job had been received when
// its last completion was accepted.
func (cp *ControlPlane) EventsAtCompletion(jobID string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.eventsAtDone[jobID]
}

// QueueLen is the number of jobs not claimed yet.
func (cp *ControlPlane) QueueLen() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return len(cp.queue)
}

// Completions returns the accepted completions of a job.
func (cp *ControlPlane) Completions(jobID string) []agentproto.CompleteRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.completions[jobID])
}

// CompleteAttempts is how many completion calls a job received, accepted
// or not.
func (cp *ControlPlane) CompleteAttempts(jobID string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.attempts[jobID]
}

// SetMetricsStatus makes POST /metrics answer status (e.g. 503 for an
// outage, 422 to refuse); 0 or 2xx accepts the samples again.
func (cp *ControlPlane) SetMetricsStatus(status int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.metricsStatus = status
}

// Samples returns the metric samples accepted, in the order they arrived.
func (cp *ControlPlane) Samples() []agentproto.MetricSample {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.samples)
}

// RefusedSamples returns the samples of the posts SetMetricsStatus
// refused, in arrival order (a sample posted again appears again).
func (cp *ControlPlane) RefusedSamples() []agentproto.MetricSample {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.refusedSamples)
}

// MetricsPosts is the number of accepted metrics posts, and of all of them.
func (cp *ControlPlane) MetricsPosts() (accepted, attempts int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.metricsPosts, cp.metricsAttempts
}

// SetInventoryStatus makes POST /inventory answer status; 0 or 2xx
// accepts again.
func (cp *ControlPlane) SetInventoryStatus(status int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.inventoryStatus = status
}

// Inventories returns the inventories accepted, in arrival order.
func (cp *ControlPlane) Inventories() []agentproto.InventoryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.inventories)
}

// SetRequestsStatus makes POST /requests answer status; 0 or 2xx accepts
// again.
func (cp *ControlPlane) SetRequestsStatus(status int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.requestsStatus = status
}

// RequestReports returns the request reports accepted, in arrival order.
func (cp *ControlPlane) RequestReports() []agentproto.RequestsReport {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.requestReports)
}

// RequestMinutes is what the control plane keeps of the accepted reports:
// the latest values of each (host, minute), keyed "host minute(RFC 3339)".
func (cp *ControlPlane) RequestMinutes() map[string]agentproto.RequestMinute {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := map[string]agentproto.RequestMinute{}
	for _, r := range cp.requestReports {
		for _, m := range r.Minutes {
			out[m.Host+" "+m.Minute.UTC().Format(time.RFC3339)] = m
		}
	}
	return out
}

// Throttle makes the next n posts to route ("metrics", "inventory",
// "requests" or "events") answer 429 with Retry-After: retryAfter (in
// whole seconds), as the control plane's rate limits do.
func (cp *ControlPlane) Throttle(route string, n int, retryAfter time.Duration) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.throttles[route] = throttle{n: n, retryAfter: retryAfter}
}

// Posts returns when each post to route arrived, throttled or not.
func (cp *ControlPlane) Posts(route string) []time.Time {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.posts[route])
}

func (cp *ControlPlane) throttled(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cp.mu.Lock()
		cp.posts[route] = append(cp.posts[route], time.Now())
		th := cp.throttles[route]
		if th.n > 0 {
			cp.throttles[route] = throttle{n: th.n - 1, retryAfter: th.retryAfter}
		}
		cp.mu.Unlock()
		if th.n > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((th.retryAfter+time.Second-1)/time.Second)))
			Problem(w, http.StatusTooManyRequests, agentproto.ProblemTypeBase+"agent-rate-limited", "throttled by the test")
			return
		}
		h(w, r)
	}
}

// RequestOther is what the control plane keeps of the accepted reports'
// other buckets: the latest values of each minute, keyed by RFC 3339.
func (cp *ControlPlane) RequestOther() map[string]agentproto.RequestMinute {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := map[string]agentproto.RequestMinute{}
	for _, r := range cp.requestReports {
		for _, m := range r.Other {
			out[m.Minute.UTC().Format(time.RFC3339)] = m
		}
	}
	return out
}

// Problem writes an RFC 9457 problem.
func Problem(w http.ResponseWriter, status int, typ, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(agentproto.Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		Problem(w, http.StatusBadRequest, agentproto.ProblemTypeBase+"malformed-request", err.Error())
		return false
	}
	return true
}

func (cp *ControlPlane) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		cp.mu.Lock()
		valid, revoked := ok && tok == cp.agentToken, cp.revoked
		cp.mu.Unlock()
		switch {
		case !valid:
			Problem(w, http.StatusUnauthorized, agentproto.ProblemInvalidAgentToken, "unknown agent token")
		case revoked:
			Problem(w, http.StatusUnauthorized, agentproto.ProblemAgentRevoked, "server was revoked")
		default:
			h(w, r)
		}
	}
}

func (cp *ControlPlane) enroll(w http.ResponseWriter, r *http.Request) {
	var req agentproto.EnrollRequest
	if !decode(w, r, &req) {
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.enrolls = append(cp.enrolls, req)
	if used, ok := cp.enrollTokens[req.Token]; !ok || used {
		Problem(w, http.StatusUnauthorized, agentproto.ProblemInvalidEnrollmentToken, "enrollment token is invalid, used or expired")
		return
	}
	cp.enrollTokens[req.Token] = true
	writeJSON(w, agentproto.EnrollResponse{
		ServerID: cp.serverID, ServerName: cp.serverName, AgentToken: cp.agentToken,
		HeartbeatSeconds: cp.config.HeartbeatSeconds, MetricsSeconds: cp.config.MetricsSeconds,
	})
}

func (cp *ControlPlane) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req agentproto.HeartbeatRequest
	if !decode(w, r, &req) {
		return
	}
	cp.mu.Lock()
	cp.heartbeats = append(cp.heartbeats, req)
	fail := cp.heartbeatErr > 0
	if fail {
		cp.heartbeatErr--
	}
	c := cp.config
	cp.mu.Unlock()
	if fail {
		Problem(w, http.StatusServiceUnavailable, agentproto.ProblemTypeBase+"unavailable", "try later")
		return
	}
	writeJSON(w, agentproto.HeartbeatResponse{Config: c, ServerTime: time.Now().UTC()})
}

func (cp *ControlPlane) claim(w http.ResponseWriter, r *http.Request) {
	var req agentproto.ClaimRequest
	if !decode(w, r, &req) {
		return
	}
	if req.WaitSeconds < 0 || req.WaitSeconds > agentproto.MaxClaimWaitSeconds {
		invalid(w, "wait_seconds out of range")
		return
	}
	cp.mu.Lock()
	cp.claims++
	cp.mu.Unlock()
	timer := time.NewTimer(time.Duration(req.WaitSeconds) * time.Second)
	defer timer.Stop()
	for {
		cp.mu.Lock()
		if len(cp.queue) > 0 {
			job := cp.queue[0]
			cp.queue = cp.queue[1:]
			cp.mu.Unlock()
			writeJSON(w, agentproto.ClaimResponse{Job: job})
			return
		}
		added := cp.jobAdded
		cp.mu.Unlock()
		select {
		case <-added:
		case <-timer.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (cp *ControlPlane) jobSecrets(w http.ResponseWriter, r *http.Request) {
	cp.mu.Lock()
	s, ok := cp.secrets[r.PathValue("id")]
	withdrawn := cp.withdrawn[r.PathValue("id")]
	cp.mu.Unlock()
	if withdrawn {
		Problem(w, http.StatusForbidden, agentproto.ProblemTypeBase+"job-not-running", "The job is not running.")
		return
	}
	if !ok {
		Problem(w, http.StatusNotFound, agentproto.ProblemTypeBase+"not-found", "no such job")
		return
	}
	writeJSON(w, agentproto.SecretsResponse{Secrets: s})
}

func (cp *ControlPlane) postEvents(w http.ResponseWriter, r *http.Request) {
	var req agentproto.EventsRequest
	if !decode(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	cp.mu.Lock()
	cp.eventPosts[id]++
	cp.events[id] = append(cp.events[id], req.Events...)
	cp.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (cp *ControlPlane) complete(w http.ResponseWriter, r *http.Request) {
	var req agentproto.CompleteRequest
	if !decode(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	cp.mu.Lock()
	cp.attempts[id]++
	status := 0
	if cp.completeHook != nil {
		status = cp.completeHook(id, cp.attempts[id])
	}
	if !refused(status) {
		cp.completions[id] = append(cp.completions[id], req)
		cp.eventsAtDone[id] = len(cp.events[id])
	}
	cp.mu.Unlock()
	if refused(status) {
		refuse(w, status)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refused says whether status, the answer a test set for a post (0:
// none), refuses it.
func refused(status int) bool { return status != 0 && status/100 != 2 }

// refuse answers a post with the status the test set.
func refuse(w http.ResponseWriter, status int) {
	Problem(w, status, agentproto.ProblemTypeBase+"http-"+http.StatusText(status), "refused by the test")
}

// invalid answers a post that agentproto does not allow.
func invalid(w http.ResponseWriter, detail string) {
	Problem(w, http.StatusUnprocessableEntity, agentproto.ProblemTypeBase+"validation-failed", detail)
}

// metrics accepts a batch of samples that agentproto allows: 1 to
// MaxMetricSamples samples, each with a time and at most
// MaxFilesystemsSample filesystems. A refused batch stores nothing.
func (cp *ControlPlane) metrics(w http.ResponseWriter, r *http.Request) {
	var req agentproto.MetricsRequest
	if !decode(w, r, &req) {
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.metricsAttempts++
	if st := cp.metricsStatus; refused(st) {
		cp.refusedSamples = append(cp.refusedSamples, req.Samples...)
		refuse(w, st)
		return
	}
	if n := len(req.Samples); n == 0 || n > agentproto.MaxMetricSamples {
		invalid(w, "samples: 1 to 720")
		return
	}
	for _, s := range req.Samples {
		if s.At.IsZero() || len(s.Filesystems) > agentproto.MaxFilesystemsSample {
			invalid(w, "sample without time or with too many filesystems")
			return
		}
	}
	cp.metricsPosts++
	cp.samples = append(cp.samples, req.Samples...)
	w.WriteHeader(http.StatusNoContent)
}

func (cp *ControlPlane) inventory(w http.ResponseWriter, r *http.Request) {
	var req agentproto.InventoryRequest
	if !decode(w, r, &req) {
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if st := cp.inventoryStatus; refused(st) {
		refuse(w, st)
		return
	}
	if req.CollectedAt.IsZero() {
		invalid(w, "collected_at is required")
		return
	}
	cp.inventories = append(cp.inventories, req)
	w.WriteHeader(http.StatusNoContent)
}

func (cp *ControlPlane) requests(w http.ResponseWriter, r *http.Request) {
	var req agentproto.RequestsReport
	if !decode(w, r, &req) {
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if st := cp.requestsStatus; refused(st) {
		refuse(w, st)
		return
	}
	if len(req.Minutes)+len(req.Other) == 0 {
		invalid(w, "minutes: at least one")
		return
	}
	for _, m := range req.Other {
		if m.Host != "" || m.Minute.IsZero() || !m.Minute.Equal(m.Minute.Truncate(time.Minute)) || m.Count < 0 {
			invalid(w, "other minute with a host, or not on a minute")
			return
		}
	}
	for _, m := range req.Minutes {
		if m.Host == "" || m.Minute.IsZero() || !m.Minute.Equal(m.Minute.Truncate(time.Minute)) || m.Count < 0 {
			invalid(w, "minute without host, or not on a minute")
			return
		}
	}
	cp.requestReports = append(cp.requestReports, req)
	writeJSON(w, agentproto.RequestsResult{Stored: len(req.Minutes) + len(req.Other), Skipped: []agentproto.SkippedMinute{}})
}
