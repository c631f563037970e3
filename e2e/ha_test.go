package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// replicaSet is several capstan serve processes on one PostgreSQL
// database with one secret key, behind a Caddy load balancer on loopback.
type replicaSet struct {
	replicas []*ControlPlane
	lb       *ControlPlane // the load balancer's address, for Do and agents
	fleet    *Fleet        // an administrator signed in through the first replica
}

func startReplicaSet(t testing.TB, n int, args ...string) *replicaSet {
	t.Helper()
	caddy := testlab.StartCaddy(t)
	lbURL := "http://127.0.0.1:" + strconv.Itoa(caddy.HTTPPort)
	opts := Options{Dialect: store.Postgres, PublicURL: lbURL, Args: args,
		Env: []string{"CAPSTAN_SECRET_KEY=" + secrets.GenerateKey().Encode()}}
	rs := &replicaSet{}
	var addrs []string
	for range n {
		cp := startControlPlane(t, opts)
		opts.DatabaseURL = cp.DatabaseURL
		rs.replicas = append(rs.replicas, cp)
		addrs = append(addrs, cp.Addr)
	}
	if got := caddy.LoadBalance(t, addrs...); got != lbURL {
		t.Fatalf("load balancer at %s, want %s", got, lbURL)
	}
	rs.lb = &ControlPlane{URL: lbURL, Client: rs.replicas[0].Client, Dialect: store.Postgres, DatabaseURL: opts.DatabaseURL}
	admin := newAdmin(t, rs.replicas[0], "admin@example.com")
	s := signInUser(t, rs.replicas[0], admin)
	rs.fleet = &Fleet{ControlPlane: rs.replicas[0], Opts: opts, Admin: admin, Token: s.AccessToken}
	return rs
}

// taskRounds counts the rounds of a singleton background task a control
// plane ran.
func taskRounds(cp *ControlPlane, task string) int {
	n := 0
	for _, l := range cp.LogLines() {
		if l["msg"] == "background task ran" && l["task"] == task {
			n++
		}
	}
	return n
}

// TestReplicasOnOnePostgres runs two control planes on one PostgreSQL
// database behind a load balancer:
//   - a job queued on one reaches an agent waiting on the other at once;
//   - a revocation on one refuses the agent on the other at its next call,
//     and so does disabling a user;
//   - sign-in throttling counts attempts on every replica together;
//   - the job reaper runs in one of them only.
func TestReplicasOnOnePostgres(t *testing.T) {
	rs := startReplicaSet(t, 2)
	a, b, f := rs.replicas[0], rs.replicas[1], rs.fleet

	// Dispatch: the agent waits on B, jobs are queued on A.
	rig := &dispatchRig{f: f, agentURL: b.URL}
	e := f.createEnrollment(t, "cross-1")
	rig.serverID, rig.agentToken = e.Server.ID, f.enrollHTTP(t, e.Token).AgentToken
	// Each replica's live stream, opened before the jobs.
	streamA, streamB := openLiveStream(t, a, f.Token), openLiveStream(t, b, f.Token)
	lat, _ := rig.measure(t, 20)
	s := summarize(lat)
	t.Logf("dispatch across replicas: p50 %.3f ms, p99 %.3f ms, max %.3f ms", ms(s.p50), ms(s.p99), ms(s.max))
	if s.max > 2*time.Second {
		t.Errorf("slowest dispatch across replicas took %s; the queuing must wake the claim waiting on the other replica", s.max)
	}

	// The live stream of each shows what the other did: on A, where the
	// jobs were queued, they finish (the agent reported to B); on B, they
	// are queued (on A).
	jobMessage := func(status string) func(testlab.SSEMessage) bool {
		return func(m testlab.SSEMessage) bool {
			return m.Event == "job" && strings.Contains(m.Data, `"server_id":"`+rig.serverID+`"`) &&
				strings.Contains(m.Data, `"status":"`+status+`"`)
		}
	}
	streamA.Until(t, time.Minute, jobMessage("succeeded"))
	streamB.Until(t, time.Minute, jobMessage("queued"))

	// Revocation: B has the token cached (it just served the agent's
	// calls); A revokes; B refuses the next call.
	heartbeat := func(cp *ControlPlane) *Response {
		return cp.Do(t, Req{Method: http.MethodPost, Path: "/agent/v1/heartbeat", Token: rig.agentToken, JSON: map[string]any{}})
	}
	expectStatus(t, heartbeat(b), http.StatusOK)
	expectStatus(t, heartbeat(b), http.StatusOK)
	expectStatus(t, a.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/servers/" + rig.serverID + "/revoke", Token: f.Token}), http.StatusOK)
	if r := heartbeat(b); r.Status != http.StatusUnauthorized || !strings.Contains(string(r.Body), "revoked") {
		t.Fatalf("heartbeat on the other replica right after the revocation: %d %s, want 401 revoked", r.Status, r.Body)
	}

	// An API token follows its owner's role on every replica: demoted on
	// A, its next change on B is refused, its reads still answered.
	ops := createUser(t, a, "ops@example.com", "correct horse battery staple", true)
	opsSession := signInUser(t, a, ops)
	resp := a.Post(t, "/api/v1/tokens", opsSession.AccessToken, map[string]any{"name": "pipeline", "scopes": []string{"write"}})
	var tok struct {
		Token string `json:"token"`
	}
	expectJSON(t, resp, http.StatusCreated, &tok)
	expectStatus(t, b.Post(t, "/api/v1/servers/enrollments", tok.Token, map[string]any{"name": "by-token-1"}), http.StatusCreated)
	expectStatus(t, a.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/users/" + ops.ID, Token: f.Token,
		JSON: map[string]any{"admin": false}}), http.StatusOK)
	if r := b.Post(t, "/api/v1/servers/enrollments", tok.Token, map[string]any{"name": "by-token-2"}); r.Status != http.StatusForbidden {
		t.Fatalf("a demoted owner's write token on the other replica: %d %s, want 403", r.Status, r.Body)
	}
	expectStatus(t, b.Get(t, "/api/v1/servers", tok.Token), http.StatusOK)

	// A disabled user's token is refused on every replica at once.
	member := createUser(t, a, "member@example.com", "correct horse battery staple", false)
	session := signInUser(t, a, member)
	expectStatus(t, b.Get(t, "/api/v1/servers", session.AccessToken), http.StatusOK)
	if res := a.CLI(t, "", append([]string{"user", "disable", "--email", member.Email}, a.StoreArgs()...)...); res.ExitCode != 0 {
		t.Fatalf("user disable: %d %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, cp := range rs.replicas {
		expectStatus(t, cp.Get(t, "/api/v1/servers", session.AccessToken), http.StatusUnauthorized)
	}

	// Throttling: five failed sign-ins on A; the sixth, on B, is refused
	// without being checked.
	for i := range 5 {
		r := a.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/login", JSON: map[string]string{"email": f.Admin.Email, "password": "wrong " + strconv.Itoa(i)}})
		expectStatus(t, r, http.StatusUnauthorized)
	}
	r := b.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/login", JSON: map[string]string{"email": f.Admin.Email, "password": "wrong again"}})
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("sixth failed sign-in, on the other replica: %d %s, want 429 with Retry-After", r.Status, r.Body)
	}

	// The job reaper runs (every 2 s) in one replica only.
	testlab.Eventually(t, time.Minute, "three job reaper rounds", func() bool { return taskRounds(a, "job-reaper")+taskRounds(b, "job-reaper") >= 3 })
	if ra, rb := taskRounds(a, "job-reaper"), taskRounds(b, "job-reaper"); ra > 0 && rb > 0 {
		t.Fatalf("the job reaper ran in both replicas: %d and %d rounds", ra, rb)
	}
}

// jobStarts counts, per job id, how often an agent started running it.
func jobStarts(agents ...*AgentProcess) map[string]int {
	starts := map[string]int{}
	for _, a := range agents {
		for _, line := range strings.Split(a.Logs(), "\n") {
			var l struct {
				Msg   string `json:"msg"`
				JobID string `json:"job_id"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "job started" {
				starts[l.JobID]++
			}
		}
	}
	return starts
}

// TestReplicaKilledUnderLoad: three agents reach two control planes
// through the load balancer while jobs flow; one control plane is killed
// with SIGKILL. Every agent moves to the other within its backoff, every
// job ends (none lost), and none ran twice. The failover time (from the
// kill to a new job completed on every agent) is logged.
func TestReplicaKilledUnderLoad(t *testing.T) {
	rs := startReplicaSet(t, 2)
	f := &Fleet{ControlPlane: rs.lb, Opts: rs.fleet.Opts, Admin: rs.fleet.Admin, Token: rs.fleet.Token}
	var servers []string
	var agents []*AgentProcess
	for i := range 3 {
		e := f.createEnrollment(t, "ha-"+strconv.Itoa(i))
		agents = append(agents, startAgentWith(t, enrollAgent(t, rs.lb, e.Token), nil))
		servers = append(servers, e.Server.ID)
	}
	var queued []string
	queue := func(round int) {
		for _, srv := range servers {
			queued = append(queued, f.ping(t, srv, "round "+strconv.Itoa(round)))
		}
	}
	for round := range 5 {
		queue(round)
	}
	for _, id := range queued {
		f.waitJob(t, id, "succeeded", time.Minute)
	}

	// Jobs in flight when one replica dies.
	for round := 5; round < 10; round++ {
		queue(round)
	}
	killed := time.Now()
	rs.replicas[0].Kill(t)
	for round := 10; round < 15; round++ {
		queue(round)
	}
	// Failover: a job queued now completes on every agent.
	var probes []string
	for _, srv := range servers {
		probes = append(probes, f.ping(t, srv, "after the kill"))
	}
	for _, id := range probes {
		f.waitJob(t, id, "succeeded", 2*time.Minute)
	}
	failover := time.Since(killed)
	t.Logf("failover: every agent ran a new job %s after the SIGKILL of one of two control planes", failover.Round(time.Millisecond))
	if failover > 45*time.Second {
		t.Errorf("failover took %s; agents back off at most 30 s", failover)
	}

	// Every job succeeds: a job whose claim answer died with the replica
	// is queued again when its lease lapses, and its agent runs it then. A
	// result the killed replica stored just before it died, with its
	// completion hook still to run, reads as running until the reaper of
	// the surviving replica runs the hook, jobs.StaleHookAfter later (plus
	// the reaper's lease, if the killed replica held it).
	lost := 0
	for _, id := range append(queued, probes...) {
		var j JobInfo
		testlab.EventuallyReport(t, jobs.StaleHookAfter+time.Minute, "job "+id+" ends", func() (bool, string) {
			j = f.job(t, id)
			return j.Status == "succeeded" || j.Status == "failed", j.Status
		})
		if j.Status == "failed" {
			t.Errorf("job %s failed with %q; want every job succeeded", id, deref(j.Error))
			lost++
		}
	}
	t.Logf("%d jobs: %d succeeded, %d failed", len(queued)+len(probes), len(queued)+len(probes)-lost, lost)
	for id, n := range jobStarts(agents...) {
		if n > 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	for _, a := range agents {
		if !a.Running() {
			t.Errorf("agent exited: %s", a.Logs())
		}
	}
}

// BenchmarkDispatchAcrossReplicas measures dispatch (as BenchmarkDispatch
// does) with two control planes on one PostgreSQL database: the agent
// waits on replica B while the jobs are queued on replica A, and, for
// comparison, with agent and jobs both on A.
//
//	go test -run '^$' -bench BenchmarkDispatchAcrossReplicas -benchtime 1x ./e2e/
func BenchmarkDispatchAcrossReplicas(b *testing.B) {
	rs := startReplicaSet(b, 2)
	f := rs.fleet
	for _, c := range []struct {
		name  string
		agent *ControlPlane
	}{{"same-replica", rs.replicas[0]}, {"across-replicas", rs.replicas[1]}} {
		b.Run(c.name, func(b *testing.B) {
			e := f.createEnrollment(b, c.name)
			rig := &dispatchRig{f: f, serverID: e.Server.ID, agentToken: f.enrollHTTP(b, e.Token).AgentToken, agentURL: c.agent.URL}
			var all []time.Duration
			for range b.N {
				lat, _ := rig.measure(b, dispatchJobs)
				all = append(all, lat...)
			}
			s := summarize(all)
			b.ReportMetric(ms(s.p50), "p50-ms")
			b.ReportMetric(ms(s.p99), "p99-ms")
			b.Logf("%s: %d jobs, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms", c.name, len(all), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max))
		})
	}
}

// openLiveStream opens the live stream (GET /api/v1/stream) on cp with a
// ticket taken there.
func openLiveStream(t testing.TB, cp *ControlPlane, token string) *testlab.SSE {
	t.Helper()
	var tk struct {
		Ticket string `json:"ticket"`
	}
	expectJSON(t, cp.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/stream/tickets", Token: token}), http.StatusCreated, &tk)
	return testlab.OpenSSE(t, cp.URL+"/api/v1/stream?ticket="+url.QueryEscape(tk.Ticket))
}
