package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
)

// leaseTimeout bounds the wait for a lost agent's job to fail: the lease
// (30 s) plus the reaper's period (2 s) and slack for a loaded machine.
const leaseTimeout = 2 * time.Minute

// revokeTimeout bounds the wait for a revoked agent to exit: one heartbeat
// interval (10 s) plus one claim wait (25 s) and slack for a loaded
// machine.
const revokeTimeout = 90 * time.Second

// TestAgentCoreFlow enrolls a real agent with the CLI, runs it, and has it
// run an agent.ping queued through the API, on both stores.
func TestAgentCoreFlow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		f := newFleet(t, Options{Dialect: d})

		// Validation of the enrollment request.
		tooMany := make([]string, 21)
		for i := range tooMany {
			tooMany[i] = "tag-" + string(rune('a'+i))
		}
		for _, tc := range []struct {
			name string
			body map[string]any
		}{
			{"bad name", map[string]any{"name": "bad name!"}},
			{"empty name", map[string]any{"name": ""}},
			{"21 tags", map[string]any{"name": "web-1", "tags": tooMany}},
			{"41-char tag", map[string]any{"name": "web-1", "tags": []string{strings.Repeat("x", 41)}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := f.Post(t, "/api/v1/servers/enrollments", f.Token, tc.body)
				expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			})
		}
		if got := f.listServers(t); len(got) != 0 {
			t.Fatalf("invalid enrollments created servers: %+v", got)
		}

		before := time.Now()
		r := f.enrollmentReq(t, "web-1", []string{"prod", "eu"})
		expectStatus(t, r, http.StatusCreated)
		var e Enrollment
		r.JSON(t, &e)
		if got, want := e.Server.Status, "pending"; got != want {
			t.Errorf("server.status: got %q, want %q", got, want)
		}
		if got, want := e.Server.Name, "web-1"; got != want {
			t.Errorf("server.name: got %q, want %q", got, want)
		}
		if got, want := e.Server.Tags, []string{"prod", "eu"}; !slices.Equal(got, want) {
			t.Errorf("server.tags: got %q, want %q", got, want)
		}
		if !strings.HasPrefix(e.Token, "ept_") || len(e.Token) < 40 {
			t.Errorf("token: got %q, want ept_ and 256 random bits", e.Token)
		}
		if !strings.Contains(e.InstallCommand, f.URL+"/agent/install.sh") || !strings.Contains(e.InstallCommand, e.Token) {
			t.Errorf("install_command %q lacks %s/agent/install.sh or the token", e.InstallCommand, f.URL)
		}
		if e.ExpiresAt.Before(before.Add(59*time.Minute)) || e.ExpiresAt.After(time.Now().Add(61*time.Minute)) {
			t.Errorf("expires_at: got %s, want about an hour from now", e.ExpiresAt)
		}
		if e.Server.Facts != nil {
			t.Errorf("pending server has facts: %+v", e.Server.Facts)
		}

		// Enroll with the CLI.
		config := enrollAgent(t, f.ControlPlane, e.Token)
		fi, err := os.Stat(config)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
			t.Errorf("config mode: got %v, want %v", got, want)
		}
		raw, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatalf("config is not a JSON object: %v\n%s", err, raw)
		}
		var keys []string
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if got, want := keys, []string{"agent_token", "api_url", "heartbeat_seconds", "metrics_seconds", "server_id", "server_name"}; !slices.Equal(got, want) {
			t.Errorf("config fields: got %q, want %q", got, want)
		}
		cfg := readAgentConfig(t, config)
		if got, want := cfg, (AgentConfig{APIURL: f.URL, ServerID: e.Server.ID, ServerName: "web-1", AgentToken: cfg.AgentToken,
			HeartbeatSeconds: 10, MetricsSeconds: 15}); got != want {
			t.Errorf("config: got %+v, want %+v", got, want)
		}
		if !strings.HasPrefix(cfg.AgentToken, "agt_") {
			t.Errorf("agent_token: got %q, want agt_…", cfg.AgentToken)
		}

		srv := f.server(t, e.Server.ID)
		if got, want := srv.Status, "online"; got != want {
			t.Errorf("status after enroll: got %q, want %q", got, want)
		}
		if srv.Facts == nil || srv.Facts.Hostname == "" || srv.Facts.Arch == "" || srv.Facts.CPUCount < 1 || srv.Facts.Kernel == "" {
			t.Errorf("facts after enroll: got %+v, want hostname, arch, kernel and cpu_count", srv.Facts)
		} else if got, want := srv.Facts.AgentVersion, buildVersion; got != want {
			t.Errorf("facts.agent_version: got %q, want %q", got, want)
		}
		if got, want := srv.AgentVersion, buildVersion; got != want {
			t.Errorf("agent_version: got %q, want %q", got, want)
		}
		if srv.EnrolledAt == nil {
			t.Errorf("enrolled_at is null")
		}

		// status --json reads the config and never prints the token.
		st := agentCLI(t, "status", "--config", config, "--json")
		if st.ExitCode != 0 {
			t.Fatalf("capstan-agent status: exit %d\n%s", st.ExitCode, st.Stderr)
		}
		if strings.Contains(st.Stdout, cfg.AgentToken) {
			t.Errorf("status --json prints the agent token")
		}
		var status struct {
			Enrolled bool   `json:"enrolled"`
			ServerID string `json:"server_id"`
			APIURL   string `json:"api_url"`
		}
		if err := json.Unmarshal([]byte(st.Stdout), &status); err != nil {
			t.Fatalf("status --json: %v\n%s", err, st.Stdout)
		}
		if !status.Enrolled || status.ServerID != e.Server.ID || status.APIURL != f.URL {
			t.Errorf("status --json: got %s", st.Stdout)
		}

		// Run the agent and queue a ping.
		agent := startAgent(t, config)
		r = f.action(t, e.Server.ID, map[string]any{"type": "agent.ping", "payload": map[string]any{"message": "hi"}})
		expectStatus(t, r, http.StatusAccepted)
		var acc Accepted
		r.JSON(t, &acc)
		if !strings.HasPrefix(acc.JobID, "job_") {
			t.Fatalf("job_id: got %q", acc.JobID)
		}
		if got, want := acc.Status, "queued"; got != want {
			t.Errorf("status: got %q, want %q", got, want)
		}
		if got, want := r.Header.Get("Location"), "/api/v1/jobs/"+acc.JobID; got != want {
			t.Errorf("Location: got %q, want %q", got, want)
		}
		if got, want := acc.Job.ServerID, e.Server.ID; got != want {
			t.Errorf("job.server_id: got %q, want %q", got, want)
		}
		if got, want := acc.Job.CreatedBy, f.Admin.ID; got != want {
			t.Errorf("job.created_by: got %q, want %q", got, want)
		}

		j := f.waitJob(t, acc.JobID, "succeeded", jobTimeout)
		var res agentproto.PingResult
		if err := json.Unmarshal(j.Data, &res); err != nil {
			t.Fatalf("ping data: %v\n%s", err, j.Data)
		}
		if got, want := res.Message, "hi"; got != want {
			t.Errorf("data.message: got %q, want %q", got, want)
		}
		if got, want := res.AgentVersion, buildVersion; got != want {
			t.Errorf("data.agent_version: got %q, want %q", got, want)
		}
		if res.Facts.Hostname == "" || res.Facts.Arch == "" || res.Facts.CPUCount < 1 {
			t.Errorf("data.facts: got %+v", res.Facts)
		}
		if res.AgentTime.IsZero() {
			t.Errorf("data.agent_time is zero")
		}
		if j.Error != nil {
			t.Errorf("error: got %q, want null", *j.Error)
		}
		if j.StartedAt == nil || j.FinishedAt == nil || j.FinishedAt.Before(*j.StartedAt) {
			t.Errorf("started_at %v, finished_at %v", j.StartedAt, j.FinishedAt)
		}
		if !slices.ContainsFunc(j.Events, func(e JobEvent) bool { return e.Level == "info" && e.Message == "pong" }) {
			t.Errorf("events: got %+v, want the agent's info event \"pong\"", j.Events)
		}

		// Listing: limit is bounded, newest first.
		r = f.Get(t, "/api/v1/jobs?server_id="+e.Server.ID+"&limit=101", f.Token)
		expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
		second := f.ping(t, e.Server.ID, "")
		f.waitJob(t, second, "succeeded", jobTimeout)
		list := f.listJobs(t, "?server_id="+e.Server.ID)
		var got []string
		for _, j := range list {
			got = append(got, j.ID)
		}
		if want := []string{second, acc.JobID}; !slices.Equal(got, want) {
			t.Errorf("GET /api/v1/jobs?server_id: got %q, want %q (newest first)", got, want)
		}
		if got := f.listJobs(t, "?limit=1"); len(got) != 1 || got[0].ID != second {
			t.Errorf("GET /api/v1/jobs?limit=1: got %+v, want only %s", got, second)
		}
		if got := f.listJobs(t, "?server_id=srv_unknown"); len(got) != 0 {
			t.Errorf("jobs of an unknown server: got %+v", got)
		}

		if !agent.Running() {
			t.Fatalf("agent exited: %s", agent.Logs())
		}
		if got, want := f.server(t, e.Server.ID).Status, "online"; got != want {
			t.Errorf("status while the agent runs: got %q, want %q", got, want)
		}
		if got, want := agent.Terminate(t), 0; got != want {
			t.Errorf("agent exit code on SIGTERM: got %d, want %d", got, want)
		}
	})
}

// listServers returns GET /api/v1/servers.
func (f *Fleet) listServers(t testing.TB) []ServerInfo {
	t.Helper()
	var out struct {
		Servers []ServerInfo `json:"servers"`
	}
	expectJSON(t, f.Get(t, "/api/v1/servers", f.Token), http.StatusOK, &out)
	return out.Servers
}

// problemFields lists the fields of a validation problem.
func problemFields(p Problem) []string {
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
	}
	return fields
}

// TestJobIdempotencyAndValidation queues actions on a server whose agent is
// not running: an idempotency key returns the first job, and invalid actions
// are refused without creating a job.
func TestJobIdempotencyAndValidation(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "db-1")
	id := e.Server.ID

	body := map[string]any{"type": "agent.ping", "payload": map[string]any{"message": "once"}, "idempotency_key": "deploy-42"}
	r := f.action(t, id, body)
	expectStatus(t, r, http.StatusAccepted)
	var first Accepted
	r.JSON(t, &first)

	r = f.action(t, id, body)
	expectStatus(t, r, http.StatusOK)
	var again Accepted
	r.JSON(t, &again)
	if got, want := again.JobID, first.JobID; got != want {
		t.Errorf("repeated request: job_id %q, want the first job %q", got, want)
	}
	if got, want := r.Header.Get("Location"), "/api/v1/jobs/"+first.JobID; got != want {
		t.Errorf("repeated request: Location %q, want %q", got, want)
	}

	r = f.action(t, id, map[string]any{"type": "agent.ping", "payload": map[string]any{"message": "twice"}, "idempotency_key": "deploy-42"})
	p := expectProblem(t, r, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if got, want := problemFields(p), []string{"idempotency_key"}; !slices.Equal(got, want) {
		t.Errorf("idempotency-key-reused: error fields %q, want %q", got, want)
	}
	r = f.action(t, id, map[string]any{"type": "service.restart", "payload": map[string]any{"unit": "nginx.service"}, "idempotency_key": "deploy-42"})
	expectProblem(t, r, http.StatusUnprocessableEntity, "idempotency-key-reused")

	// The same key on another server is another request.
	other := f.createEnrollment(t, "db-2")
	r = f.action(t, other.Server.ID, body)
	expectStatus(t, r, http.StatusAccepted)

	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"unknown type", map[string]any{"type": "shell.exec", "payload": map[string]any{}}, "type"},
		{"missing type", map[string]any{"payload": map[string]any{}}, "type"},
		{"unit with shell metacharacters", map[string]any{"type": "service.restart", "payload": map[string]any{"unit": "foo;rm -rf /.service"}}, "payload.unit"},
		{"unit with a path", map[string]any{"type": "service.start", "payload": map[string]any{"unit": "../x.service"}}, "payload.unit"},
		{"unit without .service", map[string]any{"type": "service.stop", "payload": map[string]any{"unit": "nginx"}}, "payload.unit"},
		{"unit starting with -", map[string]any{"type": "service.stop", "payload": map[string]any{"unit": "-x.service"}}, "payload.unit"},
		{"missing unit", map[string]any{"type": "service.restart"}, "payload.unit"},
		{"bad container", map[string]any{"type": "container.restart", "payload": map[string]any{"container": "bad name!"}}, "payload.container"},
		{"lines 0", map[string]any{"type": "service.logs", "payload": map[string]any{"unit": "nginx.service", "lines": 0}}, "payload.lines"},
		{"lines 501", map[string]any{"type": "container.logs", "payload": map[string]any{"container": "web", "lines": 501}}, "payload.lines"},
		{"unknown payload field", map[string]any{"type": "agent.ping", "payload": map[string]any{"message": "x", "command": "id"}}, "payload"},
		{"payload of the wrong type", map[string]any{"type": "service.start", "payload": map[string]any{"unit": 7}}, "payload"},
		{"long ping message", map[string]any{"type": "agent.ping", "payload": map[string]any{"message": strings.Repeat("m", 257)}}, "payload.message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.action(t, id, tc.body)
			p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if fields := problemFields(p); !slices.Contains(fields, tc.field) {
				t.Errorf("errors: got fields %q, want %q", fields, tc.field)
			}
		})
	}
	if got := f.listJobs(t, "?server_id="+id); len(got) != 1 || got[0].ID != first.JobID {
		t.Errorf("jobs of the server: got %+v, want only %s", got, first.JobID)
	}

	// Valid actions of every kind are queued.
	for _, body := range []map[string]any{
		{"type": "service.restart", "payload": map[string]any{"unit": "nginx.service"}},
		{"type": "service.logs", "payload": map[string]any{"unit": "getty@tty1.service"}},
		{"type": "container.stop", "payload": map[string]any{"container": "web_1"}},
		{"type": "container.logs", "payload": map[string]any{"container": "web", "lines": 500}},
		{"type": "agent.ping"},
	} {
		r := f.action(t, id, body)
		expectStatus(t, r, http.StatusAccepted)
	}
	var lines struct {
		Job struct {
			Payload agentproto.ServiceLogsPayload `json:"payload"`
		} `json:"job"`
	}
	r = f.action(t, id, map[string]any{"type": "service.logs", "payload": map[string]any{"unit": "ssh.service"}})
	expectJSON(t, r, http.StatusAccepted, &lines)
	if got, want := lines.Job.Payload.Lines, 200; got != want {
		t.Errorf("service.logs default lines: got %d, want %d", got, want)
	}

	r = f.action(t, "srv_unknown", map[string]any{"type": "agent.ping"})
	expectProblem(t, r, http.StatusNotFound, "not-found")
}

// TestJobCancel cancels a job queued for a server whose agent is not
// running.
func TestJobCancel(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e, config := f.enrollServer(t, "cache-1")
	token := readAgentConfig(t, config).AgentToken

	id := f.ping(t, e.Server.ID, "never")
	r := f.Post(t, "/api/v1/jobs/"+id+"/cancel", f.Token, nil)
	var j JobInfo
	expectJSON(t, r, http.StatusOK, &j)
	if got, want := j.Status, "cancelled"; got != want {
		t.Errorf("status: got %q, want %q", got, want)
	}
	if j.FinishedAt == nil {
		t.Errorf("finished_at is null")
	}
	if got, want := f.job(t, id).Status, "cancelled"; got != want {
		t.Errorf("GET after cancel: status %q, want %q", got, want)
	}

	r = f.Post(t, "/api/v1/jobs/"+id+"/cancel", f.Token, nil)
	expectProblem(t, r, http.StatusConflict, "job-not-queued")
	r = f.Post(t, "/api/v1/jobs/job_unknown/cancel", f.Token, nil)
	expectProblem(t, r, http.StatusNotFound, "not-found")

	// The agent never gets a cancelled job.
	if job := f.claim(t, token, 0); job != nil {
		t.Fatalf("claim after cancel: got job %s", job.ID)
	}

	// Nor does cancelling a job the agent already holds work.
	id = f.ping(t, e.Server.ID, "held")
	job := f.claim(t, token, 5)
	if job == nil || job.ID != id {
		t.Fatalf("claim: got %+v, want job %s", job, id)
	}
	r = f.Post(t, "/api/v1/jobs/"+id+"/cancel", f.Token, nil)
	expectProblem(t, r, http.StatusConflict, "job-not-queued")
	r = f.agentCall(t, token, http.MethodPost, "/jobs/"+id+"/complete", agentproto.CompleteRequest{Status: "succeeded"})
	expectStatus(t, r, http.StatusOK)
	if got, want := f.job(t, id).Status, "succeeded"; got != want {
		t.Errorf("status: got %q, want %q", got, want)
	}
}

// TestAgentReconnectsAfterControlPlaneRestart restarts the control plane
// while the agent long-polls: the agent reconnects and runs the next job.
func TestAgentReconnectsAfterControlPlaneRestart(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e, config := f.enrollServer(t, "app-1")
	agent := startAgent(t, config)
	f.waitJob(t, f.ping(t, e.Server.ID, "before"), "succeeded", jobTimeout)

	// The agent claims its next job while it runs one, so it now waits in
	// a claim long poll, which the shutdown must end rather than wait out.
	old := f.ControlPlane
	f.restart(t)
	if !agent.Running() {
		t.Fatalf("agent exited when the control plane stopped:\n%s", agent.Logs())
	}
	if !claimEndedByShutdown(old) {
		t.Errorf("the old control plane's log shows no claim answered 204 during its shutdown")
	}

	j := f.waitJob(t, f.ping(t, e.Server.ID, "after"), "succeeded", jobTimeout)
	var res agentproto.PingResult
	if err := json.Unmarshal(j.Data, &res); err != nil {
		t.Fatal(err)
	}
	if got, want := res.Message, "after"; got != want {
		t.Errorf("data.message: got %q, want %q", got, want)
	}
	if got, want := f.server(t, e.Server.ID).Status, "online"; got != want {
		t.Errorf("status: got %q, want %q", got, want)
	}
	if !agent.Running() {
		t.Fatalf("agent exited:\n%s", agent.Logs())
	}
}

// waitClaimClosed waits until the control plane has answered a claim after
// since: the long poll of an agent that was killed at since ends when the
// server notices the closed connection, and a job queued before that could
// still be handed to the dead connection.
func waitClaimClosed(t *testing.T, cp *ControlPlane, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, l := range cp.LogLines() {
			if l["msg"] != "request" || l["path"] != "/agent/v1/jobs/claim" {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"]))
			if at.After(since) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the killed agent's claim did not end within a minute:\n%s", cp.Logs())
}

// claimEndedByShutdown reports whether cp's log shows a claim long poll
// answered 204 after the shutdown began.
func claimEndedByShutdown(cp *ControlPlane) bool {
	shutting := false
	for _, l := range cp.LogLines() {
		switch {
		case l["msg"] == "shutting down; waiting for in-flight requests":
			shutting = true
		case shutting && l["msg"] == "request" && l["path"] == "/agent/v1/jobs/claim" && l["status"] == float64(http.StatusNoContent):
			return true
		}
	}
	return false
}

// TestAgentLostJobFails kills an agent and leaves a job it claimed
// unfinished: the job fails with agent_lost once its lease lapses. Another
// server's agent can neither see nor finish the job.
func TestAgentLostJobFails(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e, config := f.enrollServer(t, "worker-1")
	token := readAgentConfig(t, config).AgentToken
	agent := startAgent(t, config)
	f.waitJob(t, f.ping(t, e.Server.ID, "alive"), "succeeded", jobTimeout)

	// The agent dies; whoever holds its credential claims the next job and
	// never finishes it.
	killed := time.Now()
	agent.Kill(t)
	waitClaimClosed(t, f.ControlPlane, killed)
	id := f.ping(t, e.Server.ID, "lost")
	claimed := time.Now()
	job := f.claim(t, token, 5)
	if job == nil || job.ID != id {
		t.Fatalf("claim: got %+v, want job %s", job, id)
	}
	if got, want := job.LeaseSeconds, 30; got != want {
		t.Errorf("lease_seconds: got %d, want %d", got, want)
	}
	if got, want := f.job(t, id).Status, "running"; got != want {
		t.Fatalf("status after claim: got %q, want %q", got, want)
	}
	r := f.agentCall(t, token, http.MethodGet, "/jobs/"+id+"/secrets", nil)
	expectStatus(t, r, http.StatusOK)

	// Another server's agent.
	other := f.enrollHTTP(t, f.createEnrollment(t, "worker-2").Token)
	r = f.agentCall(t, other.AgentToken, http.MethodGet, "/jobs/"+id+"/secrets", nil)
	expectProblem(t, r, http.StatusForbidden, "not-your-job")
	r = f.agentCall(t, other.AgentToken, http.MethodPost, "/jobs/"+id+"/complete", agentproto.CompleteRequest{Status: "succeeded"})
	expectProblem(t, r, http.StatusForbidden, "not-your-job")
	r = f.agentCall(t, other.AgentToken, http.MethodPost, "/jobs/"+id+"/events",
		agentproto.EventsRequest{Events: []agentproto.Event{{Level: "info", Message: "mine now"}}})
	expectProblem(t, r, http.StatusForbidden, "not-your-job")
	if got := other.AgentToken; got == token {
		t.Fatal("two servers got the same agent token")
	}

	// Wait for the lease to lapse. Midway, the other agent names the job in
	// a heartbeat: that must not extend its lease.
	heartbeatSent := false
	var heartbeatAt time.Time
	deadline := claimed.Add(leaseTimeout)
	var j JobInfo
	for {
		j = f.job(t, id)
		if j.Status != "running" {
			break
		}
		if !heartbeatSent && time.Since(claimed) > 20*time.Second {
			heartbeatAt = time.Now()
			r := f.agentCall(t, other.AgentToken, http.MethodPost, "/heartbeat",
				agentproto.HeartbeatRequest{AgentVersion: buildVersion, RunningJobIDs: []string{id}})
			expectStatus(t, r, http.StatusOK)
			heartbeatSent = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still running %s after the claim", leaseTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := j.Status, "failed"; got != want {
		t.Fatalf("status: got %q, want %q", got, want)
	}
	if got, want := deref(j.Error), "agent_lost"; got != want {
		t.Errorf("error: got %q, want %q", got, want)
	}
	if j.StartedAt == nil || j.FinishedAt == nil || j.FinishedAt.Sub(*j.StartedAt) < 30*time.Second {
		t.Errorf("failed before the 30 s lease lapsed: started_at %v, finished_at %v", j.StartedAt, j.FinishedAt)
	}
	if !heartbeatSent {
		t.Errorf("job failed before the other agent's heartbeat, %s after the claim", time.Since(claimed))
	} else if j.FinishedAt != nil && !j.FinishedAt.Before(heartbeatAt.Add(30*time.Second)) {
		t.Errorf("job failed at %v, a lease after the other agent's heartbeat at %v: the heartbeat extended the lease", j.FinishedAt, heartbeatAt)
	}

	// A late completion changes nothing.
	r = f.agentCall(t, token, http.MethodPost, "/jobs/"+id+"/complete", agentproto.CompleteRequest{Status: "succeeded"})
	expectStatus(t, r, http.StatusOK)
	if got := f.job(t, id); got.Status != "failed" || deref(got.Error) != "agent_lost" {
		t.Errorf("after a late completion: status %q, error %q; want failed, agent_lost", got.Status, deref(got.Error))
	}
	r = f.agentCall(t, token, http.MethodGet, "/jobs/"+id+"/secrets", nil)
	expectProblem(t, r, http.StatusForbidden, "job-not-running")
}

// TestRevokeStopsAgent revokes a server while its agent runs: the agent
// exits with status 78 and its token is refused; deleting the server keeps
// its jobs.
func TestRevokeStopsAgent(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e, config := f.enrollServer(t, "edge-1")
	token := readAgentConfig(t, config).AgentToken
	agent := startAgent(t, config)
	id := f.ping(t, e.Server.ID, "before revoke")
	f.waitJob(t, id, "succeeded", jobTimeout)

	r := f.Post(t, "/api/v1/servers/"+e.Server.ID+"/revoke", f.Token, nil)
	var srv ServerInfo
	expectJSON(t, r, http.StatusOK, &srv)
	if got, want := srv.Status, "revoked"; got != want {
		t.Errorf("revoke reply: status %q, want %q", got, want)
	}
	if srv.RevokedAt == nil {
		t.Errorf("revoke reply: revoked_at is null")
	}
	revoked := time.Now()
	if got, want := agent.Wait(t, revokeTimeout), agentproto.ExitRevoked; got != want {
		t.Fatalf("agent exit code: got %d, want %d\n%s", got, want, agent.Logs())
	}
	t.Logf("agent exited %s after the revocation", time.Since(revoked).Round(time.Millisecond))

	if got, want := f.server(t, e.Server.ID).Status, "revoked"; got != want {
		t.Errorf("GET server: status %q, want %q", got, want)
	}
	checkRevoked := func(t *testing.T) {
		t.Helper()
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{http.MethodPost, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: buildVersion}},
			{http.MethodPost, "/jobs/claim", agentproto.ClaimRequest{WaitSeconds: 0}},
			{http.MethodGet, "/jobs/" + id + "/secrets", nil},
			{http.MethodPost, "/jobs/" + id + "/events", agentproto.EventsRequest{Events: []agentproto.Event{{Level: "info", Message: "x"}}}},
			{http.MethodPost, "/jobs/" + id + "/complete", agentproto.CompleteRequest{Status: "succeeded"}},
		} {
			r := f.agentCall(t, token, c.method, c.path, c.body)
			expectProblem(t, r, http.StatusUnauthorized, "agent-revoked")
		}
	}
	checkRevoked(t)

	// A revoked server runs no more jobs.
	r = f.action(t, e.Server.ID, map[string]any{"type": "agent.ping"})
	expectProblem(t, r, http.StatusConflict, "server-revoked")

	// Restarting the agent does not bring it back.
	again := startAgent(t, config)
	if got, want := again.Wait(t, revokeTimeout), agentproto.ExitRevoked; got != want {
		t.Fatalf("restarted agent exit code: got %d, want %d\n%s", got, want, again.Logs())
	}

	r = f.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/servers/" + e.Server.ID, Token: f.Token})
	expectStatus(t, r, http.StatusNoContent)
	r = f.Get(t, "/api/v1/servers/"+e.Server.ID, f.Token)
	expectProblem(t, r, http.StatusNotFound, "not-found")
	if slices.ContainsFunc(f.listServers(t), func(s ServerInfo) bool { return s.ID == e.Server.ID }) {
		t.Errorf("GET /api/v1/servers still lists the deleted server")
	}
	list := f.listJobs(t, "")
	if !slices.ContainsFunc(list, func(j JobInfo) bool { return j.ID == id && j.Status == "succeeded" }) {
		t.Errorf("GET /api/v1/jobs: got %+v, want the deleted server's job %s", list, id)
	}
	if got := f.listJobs(t, "?server_id="+e.Server.ID); len(got) != 1 || got[0].ID != id {
		t.Errorf("GET /api/v1/jobs?server_id of the deleted server: got %+v, want %s", got, id)
	}
	if got, want := f.job(t, id).Status, "succeeded"; got != want {
		t.Errorf("GET job of the deleted server: status %q, want %q", got, want)
	}
	t.Run("after delete", checkRevoked)
	r = f.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/servers/" + e.Server.ID, Token: f.Token})
	expectProblem(t, r, http.StatusNotFound, "not-found")
}

// TestRevokeEndsQueuedAndRunningJobs revokes a server that has a queued and
// a running job.
func TestRevokeEndsQueuedAndRunningJobs(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "edge-2")
	token := f.enrollHTTP(t, e.Token).AgentToken
	running := f.ping(t, e.Server.ID, "running")
	if job := f.claim(t, token, 5); job == nil || job.ID != running {
		t.Fatalf("claim: got %+v, want %s", job, running)
	}
	queued := f.ping(t, e.Server.ID, "queued")

	r := f.Post(t, "/api/v1/servers/"+e.Server.ID+"/revoke", f.Token, nil)
	expectStatus(t, r, http.StatusOK)
	if j := f.job(t, running); j.Status != "failed" || deref(j.Error) != "server_revoked" {
		t.Errorf("running job: status %q, error %q; want failed, server_revoked", j.Status, deref(j.Error))
	}
	if j := f.job(t, queued); j.Status != "cancelled" || deref(j.Error) != "server_revoked" {
		t.Errorf("queued job: status %q, error %q; want cancelled, server_revoked", j.Status, deref(j.Error))
	}
	r = f.agentCall(t, token, http.MethodPost, "/jobs/"+running+"/complete", agentproto.CompleteRequest{Status: "succeeded"})
	expectProblem(t, r, http.StatusUnauthorized, "agent-revoked")
}

// TestEnrollmentTokens: a token works once, reissuing replaces it, and
// unknown tokens are refused.
func TestEnrollmentTokens(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})

	// Redeemed once with the CLI; not again.
	a, config := f.enrollServer(t, "node-a")
	r := f.Post(t, "/agent/v1/enroll", "", agentproto.EnrollRequest{Token: a.Token})
	expectProblem(t, r, http.StatusUnauthorized, "invalid-enrollment-token")
	fresh := t.TempDir() + "/agent.json"
	res := agentCLI(t, "enroll", "--url", f.URL, "--token", a.Token, "--config", fresh)
	if res.ExitCode == 0 {
		t.Errorf("enroll with a used token: exit 0\n%s", res.Stdout)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("enroll with a used token wrote %s (%v)", fresh, err)
	}
	// An enrolled agent's config is not replaced without --force.
	b := f.createEnrollment(t, "node-b")
	res = agentCLI(t, "enroll", "--url", f.URL, "--token", b.Token, "--config", config)
	if res.ExitCode == 0 {
		t.Errorf("enroll over an existing config without --force: exit 0")
	}
	if got, want := readAgentConfig(t, config).ServerID, a.Server.ID; got != want {
		t.Errorf("config after refused enroll: server_id %q, want %q", got, want)
	}

	// Reissuing invalidates the previous token.
	var b2 Enrollment
	expectJSON(t, f.Post(t, "/api/v1/servers/"+b.Server.ID+"/enrollments", f.Token, nil), http.StatusCreated, &b2)
	if b2.Token == b.Token || !strings.HasPrefix(b2.Token, "ept_") {
		t.Fatalf("reissued token: got %q (old %q)", b2.Token, b.Token)
	}
	if got, want := b2.Server.ID, b.Server.ID; got != want {
		t.Errorf("reissued server id: got %q, want %q", got, want)
	}
	if got, want := b2.Server.Status, "pending"; got != want {
		t.Errorf("reissued server status: got %q, want %q", got, want)
	}
	if !strings.Contains(b2.InstallCommand, b2.Token) {
		t.Errorf("reissued install_command %q lacks the new token", b2.InstallCommand)
	}
	r = f.Post(t, "/agent/v1/enroll", "", agentproto.EnrollRequest{Token: b.Token})
	expectProblem(t, r, http.StatusUnauthorized, "invalid-enrollment-token")
	res = agentCLI(t, "enroll", "--url", f.URL, "--token", b.Token, "--config", config, "--force")
	if res.ExitCode == 0 {
		t.Errorf("enroll --force with a replaced token: exit 0")
	}
	if got, want := readAgentConfig(t, config).ServerID, a.Server.ID; got != want {
		t.Errorf("config after refused enroll --force: server_id %q, want %q", got, want)
	}
	// The new token works, with --force over the old config.
	res = agentCLI(t, "enroll", "--url", f.URL, "--token", b2.Token, "--config", config, "--force")
	if res.ExitCode != 0 {
		t.Fatalf("enroll --force with the reissued token: exit %d\n%s", res.ExitCode, res.Stderr)
	}
	if got, want := readAgentConfig(t, config).ServerID, b.Server.ID; got != want {
		t.Errorf("config after enroll --force: server_id %q, want %q", got, want)
	}
	if got, want := f.server(t, b.Server.ID).Status, "online"; got != want {
		t.Errorf("status: got %q, want %q", got, want)
	}

	// Garbage.
	for _, tok := range []string{"ept_garbage", "ept_", "agt_" + strings.TrimPrefix(b2.Token, "ept_"), "", strings.Repeat("ept_", 40)} {
		r := f.Post(t, "/agent/v1/enroll", "", agentproto.EnrollRequest{Token: tok})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-enrollment-token")
	}

	// Enrolled servers get no new token; unknown ones are not found.
	for _, id := range []string{a.Server.ID, b.Server.ID} {
		r = f.Post(t, "/api/v1/servers/"+id+"/enrollments", f.Token, nil)
		expectProblem(t, r, http.StatusConflict, "server-already-enrolled")
	}
	r = f.Post(t, "/api/v1/servers/srv_unknown/enrollments", f.Token, nil)
	expectProblem(t, r, http.StatusNotFound, "not-found")

	// A name is taken once.
	r = f.enrollmentReq(t, "node-a", nil)
	expectProblem(t, r, http.StatusConflict, "server-name-taken")

	// Audit: the enrollments and enrollments by agents were recorded.
	if got := len(auditEntries(t, f.ControlPlane, f.Token, "server.enrolled")); got != 2 {
		t.Errorf("server.enrolled audit entries: got %d, want 2", got)
	}
}
