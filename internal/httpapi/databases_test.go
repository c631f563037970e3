package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

const dbPassword = "db-pass:w/rd@#-0453"

// addDatabase registers an external instance through the API and, with
// a server version, plays the agent to let its connection test pass.
func (b *boundsEnv) addDatabase(t *testing.T, name, engine, serverVersion string) databases.Registration {
	t.Helper()
	body := map[string]any{"name": name, "server_id": b.serverID, "engine": engine, "host": "127.0.0.1",
		"password": dbPassword, "tls_mode": "disable"}
	if agentproto.EngineKind(engine) == agentproto.EngineKindSQL {
		body["username"], body["database"] = "app", "app"
	}
	r := b.request(t, http.MethodPost, "/api/v1/databases/external", b.token, body)
	expectStatus(t, r, http.StatusAccepted)
	var reg databases.Registration
	r.decode(t, &reg)
	if serverVersion == "" {
		return reg
	}
	d := b.srv.deps
	j, ok, err := d.Jobs.Claim(b.ctx, b.serverID, 0)
	if err != nil || !ok || j.ID != reg.JobID {
		t.Fatalf("claim the connection test: %v %v %s, want %s", err, ok, j.ID, reg.JobID)
	}
	data, _ := json.Marshal(agentproto.DBConnectResult{ServerVersion: serverVersion})
	if _, err := d.Jobs.Complete(b.ctx, b.serverID, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Data: data}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestDatabaseRefusals: bad input to the database calls is a 422 naming
// the field (with its whole range for bounded numbers), and nothing is
// stored, queued or audited.
func TestDatabaseRefusals(t *testing.T) {
	b := newBoundsEnv(t)
	sql := b.addDatabase(t, "main", "postgres", "16.4").Instance.ID
	kv := b.addDatabase(t, "cache", "redis", "7.0.15").Instance.ID
	ext := func(extra string) string {
		return `{"name":"new","server_id":"` + b.serverID + `","host":"127.0.0.1","username":"app","database":"app",` + extra + `}`
	}
	q, kvPath := "/api/v1/databases/"+sql+"/query", "/api/v1/databases/"+kv+"/kv"
	for _, tc := range []struct {
		method, path, body string
		field, message     string
	}{
		{"POST", "/api/v1/databases/external", ext(`"engine":"oracle","tls_mode":"disable"`), "engine", "postgres, mysql"},
		{"POST", "/api/v1/databases/external", ext(`"engine":"postgres","tls_mode":"prefer"`), "tls_mode", "verify-full"},
		{"POST", "/api/v1/databases/external", ext(`"engine":"postgres"`), "tls_mode", "required"},
		{"POST", "/api/v1/databases/external", ext(`"engine":"postgres","tls_mode":"disable","port":0`), "port", "between 1 and 65535"},
		{"POST", "/api/v1/databases/external", ext(`"engine":"postgres","tls_mode":"disable","port":70000`), "port", "between 1 and 65535"},
		{"POST", "/api/v1/databases/external", ext(`"engine":"postgres","tls_mode":"disable","ca":"x"`), "ca", "verify-ca"},
		{"POST", "/api/v1/databases/external", `{"name":"main","server_id":"srv_none","engine":"postgres","host":"h","username":"u","database":"d","tls_mode":"disable"}`,
			"server_id", "no such server"},
		{"POST", q, `{"sql":"SELECT 1","max_rows":0}`, "max_rows", "between 1 and 1000"},
		{"POST", q, `{"sql":"SELECT 1","max_rows":1001}`, "max_rows", "between 1 and 1000"},
		{"POST", q, `{"sql":"SELECT 1","timeout_seconds":0}`, "timeout_seconds", "between 1 and 300"},
		{"POST", q, `{"sql":"SELECT 1","timeout_seconds":301}`, "timeout_seconds", "between 1 and 300"},
		{"POST", q, `{"sql":""}`, "sql", "required"},
		{"POST", "/api/v1/databases/" + kv + "/query", `{"sql":"SELECT 1"}`, "id", "key-value engine"},
		{"POST", "/api/v1/databases/" + kv + "/explore", `{"what":"tables"}`, "id", "key-value engine"},
		{"POST", "/api/v1/databases/" + sql + "/kv", `{"action":"info"}`, "id", "SQL engine"},
		{"POST", "/api/v1/databases/" + sql + "/explore", `{"what":"columns"}`, "table", "required"},
		{"POST", kvPath, `{"action":"scan","count":0}`, "count", "between 1 and 1000"},
		{"POST", kvPath, `{"action":"info","db":16}`, "db", "between 0 and 15"},
		{"POST", kvPath, `{"action":"delete"}`, "keys", "explicitly"},
		{"PUT", "/api/v1/databases/" + sql + "/tls", `{"tls_mode":"allow"}`, "tls_mode", "verify-full"},
		{"GET", "/api/v1/databases/" + sql + "/jobs/job_none?wait=31", "", "wait", "between 0 and 30"},
		{"GET", "/api/v1/jobs/job_none?wait=-1", "", "wait", "between 0 and 30"},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.body, func(t *testing.T) {
			before := b.state(t)
			r := b.send(t, tc.method, tc.path, tc.body)
			p := expectProblem(t, r, http.StatusUnprocessableEntity, map[bool]string{true: "wrong-engine-kind", false: "validation-failed"}[tc.field == "id"])
			i := slices.IndexFunc(p.Errors, func(e fault.FieldError) bool { return e.Field == tc.field })
			if i < 0 {
				t.Fatalf("errors %+v: none for %q", p.Errors, tc.field)
			}
			if !strings.Contains(p.Errors[i].Message, tc.message) {
				t.Fatalf("%s: message %q does not say %q", tc.field, p.Errors[i].Message, tc.message)
			}
			if strings.Contains(string(r.body), dbPassword) {
				t.Fatalf("the problem shows the password: %s", r.body)
			}
			if after := b.state(t); after != before {
				t.Fatalf("a refused request changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	// Conflicts change nothing either: a name in use, and calls on an
	// instance whose test has not passed.
	checking := b.addDatabase(t, "later", "postgres", "").Instance.ID
	for _, tc := range []struct{ path, body, code string }{
		{"/api/v1/databases/external", ext(`"name":"main","engine":"postgres","tls_mode":"disable"`)[len(`{"name":"new",`)-1:], "name-taken"},
		{"/api/v1/databases/" + checking + "/query", `{"sql":"SELECT 1"}`, "instance-not-ready"},
		{"/api/v1/databases/" + checking + "/explore", `{"what":"stats"}`, "instance-not-ready"},
	} {
		body := tc.body
		if strings.HasPrefix(body, ",") {
			body = "{" + body[1:]
		}
		before := b.state(t)
		expectProblem(t, b.send(t, "POST", tc.path, body), http.StatusConflict, tc.code)
		if after := b.state(t); after != before {
			t.Fatalf("%s: a refused request changed the state", tc.path)
		}
	}
}

// TestDatabaseQueryDefaults: absent or null bounded inputs take their
// defaults; the edges are accepted; the reply points at the instance's
// job path.
func TestDatabaseQueryDefaults(t *testing.T) {
	b := newBoundsEnv(t)
	id := b.addDatabase(t, "main", "postgres", "16.4").Instance.ID
	for _, tc := range []struct {
		body            string
		rows, timeoutMS int
		readonly        bool
	}{
		{`{"sql":"SELECT 1"}`, 100, 30000, true},
		{`{"sql":"SELECT 1","max_rows":null,"timeout_seconds":null,"readonly":null}`, 100, 30000, true},
		{`{"sql":"SELECT 1","max_rows":1,"timeout_seconds":1,"readonly":false}`, 1, 1000, false},
		{`{"sql":"SELECT 1","max_rows":1000,"timeout_seconds":300}`, 1000, 300000, true},
	} {
		r := b.send(t, "POST", "/api/v1/databases/"+id+"/query", tc.body)
		expectStatus(t, r, http.StatusAccepted)
		var out struct {
			JobID string `json:"job_id"`
		}
		r.decode(t, &out)
		if got, want := r.header.Get("Location"), "/api/v1/databases/"+id+"/jobs/"+out.JobID; got != want {
			t.Fatalf("Location: got %q, want %q", got, want)
		}
		j, _, err := b.srv.deps.Jobs.Get(b.ctx, out.JobID)
		if err != nil {
			t.Fatal(err)
		}
		var p agentproto.DBQueryPayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.MaxRows != tc.rows || p.TimeoutMS != tc.timeoutMS || p.ReadOnly != tc.readonly {
			t.Fatalf("%s: max_rows %d, timeout %d ms, readonly %v; want %d, %d, %v", tc.body, p.MaxRows, p.TimeoutMS, p.ReadOnly,
				tc.rows, tc.timeoutMS, tc.readonly)
		}
		if strings.Contains(string(r.body), dbPassword) || strings.Contains(string(j.Payload), dbPassword) {
			t.Fatalf("the password is in the reply or the payload: %s", r.body)
		}
	}
}

// TestDatabaseConnectionAccess: members read instances without secrets
// and get 403 on the connection read; an administrator's read returns the
// password and is audited with who and from where.
func TestDatabaseConnectionAccess(t *testing.T) {
	b := newBoundsEnv(t)
	id := b.addDatabase(t, "main", "postgres", "16.4").Instance.ID
	member, secret := b.createUser(t, "member@example.com", false)
	memberToken, _ := b.signIn(t, member.Email, secret)

	for _, path := range []string{"/api/v1/databases", "/api/v1/databases/" + id, "/api/v1/databases/engines"} {
		r := b.request(t, http.MethodGet, path, memberToken, nil)
		expectStatus(t, r, http.StatusOK)
		if strings.Contains(string(r.body), dbPassword) {
			t.Fatalf("%s: a member reads the password: %s", path, r.body)
		}
	}
	expectProblem(t, b.request(t, http.MethodGet, "/api/v1/databases/"+id+"/connection", memberToken, nil), http.StatusForbidden, "admin-required")
	entries := func() []map[string]any {
		t.Helper()
		r := b.send(t, "GET", "/api/v1/audit-logs?action="+databases.ActionConnectionRead, "")
		expectStatus(t, r, http.StatusOK)
		var out struct {
			Entries []map[string]any `json:"entries"`
		}
		r.decode(t, &out)
		return out.Entries
	}
	if n := len(entries()); n != 0 {
		t.Fatalf("connection reads audited after a member's refused read: %d", n)
	}

	r := b.send(t, "GET", "/api/v1/databases/"+id+"/connection", "")
	expectStatus(t, r, http.StatusOK)
	var conn databases.Connection
	r.decode(t, &conn)
	if len(conn.Logins) != 1 || conn.Logins[0].Password != dbPassword || !strings.HasPrefix(conn.Logins[0].URL, "postgres://app:") {
		t.Fatalf("connection: %+v", conn)
	}
	got := entries()
	if len(got) != 1 {
		t.Fatalf("connection reads audited: %d, want 1", len(got))
	}
	e, _ := json.Marshal(got[0])
	if !strings.Contains(string(e), `"ip":"127.0.0.1"`) || !strings.Contains(string(e), id) || strings.Contains(string(e), dbPassword) {
		t.Fatalf("audit entry (with the address and instance, without the password): %s", e)
	}
}

// TestJobWaitParameter: ?wait= answers as soon as the job ends, on the
// job path and on the instance's job path, and at the deadline otherwise.
func TestJobWaitParameter(t *testing.T) {
	b := newBoundsEnv(t)
	id := b.addDatabase(t, "main", "postgres", "16.4").Instance.ID
	other := b.addDatabase(t, "other", "postgres", "16.4").Instance.ID
	d := b.srv.deps
	queue := func() string {
		t.Helper()
		r := b.send(t, "POST", "/api/v1/databases/"+id+"/query", `{"sql":"SELECT 1"}`)
		expectStatus(t, r, http.StatusAccepted)
		var out struct {
			JobID string `json:"job_id"`
		}
		r.decode(t, &out)
		return out.JobID
	}
	for _, path := range []string{"/api/v1/jobs/%s?wait=30", "/api/v1/databases/" + id + "/jobs/%s?wait=30"} {
		jobID := queue()
		done := make(chan *response, 1)
		start := time.Now()
		go func() { done <- b.request(t, http.MethodGet, fmt.Sprintf(path, jobID), b.token, nil) }()
		j, ok, err := d.Jobs.Claim(b.ctx, b.serverID, 0)
		if err != nil || !ok || j.ID != jobID {
			t.Fatalf("claim: %v %v %s", err, ok, j.ID)
		}
		data, _ := json.Marshal(agentproto.DBQueryResult{Columns: []agentproto.DBColumn{{Name: "one", Type: "int4"}}, Rows: [][]any{{1}}, RowCount: 1})
		if _, err := d.Jobs.Complete(b.ctx, b.serverID, jobID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Data: data}); err != nil {
			t.Fatal(err)
		}
		var r *response
		select {
		case r = <-done:
		case <-time.After(25 * time.Second):
			t.Fatalf("%s: no answer when the job ended", path)
		}
		expectStatus(t, r, http.StatusOK)
		var out struct {
			Status jobs.Status     `json:"status"`
			Data   json.RawMessage `json:"data"`
		}
		r.decode(t, &out)
		if out.Status != jobs.Succeeded || !strings.Contains(string(out.Data), `"row_count":1`) {
			t.Fatalf("%s: %s", path, r.body)
		}
		t.Logf("%s answered %s after the call began", path, time.Since(start))
	}

	// Nobody runs it: the answer comes at the deadline, queued.
	jobID := queue()
	start := time.Now()
	r := b.send(t, "GET", "/api/v1/databases/"+id+"/jobs/"+jobID+"?wait=1", "")
	expectStatus(t, r, http.StatusOK)
	var out databases.JobResult
	r.decode(t, &out)
	if out.Status != jobs.Queued || time.Since(start) < time.Second {
		t.Fatalf("wait=1 on a queued job: %s after %s", out.Status, time.Since(start))
	}
	// Another instance's job is not found there.
	expectProblem(t, b.send(t, "GET", "/api/v1/databases/"+other+"/jobs/"+jobID, ""), http.StatusNotFound, "not-found")
}
