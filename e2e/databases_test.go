package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// EngineInfo is an engine as GET /api/v1/databases/engines shows it.
type EngineInfo struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	DefaultPort int    `json:"default_port"`
	Versions    []struct {
		Version string `json:"version"`
		Default bool   `json:"default"`
		Image   string `json:"image"`
	} `json:"versions"`
}

// TestDatabaseImagesFile: serve takes engine images from
// --database-images (the engines listing shows them; versions not named
// keep the official image), and a bad file stops it at start with a
// message that says what is wrong.
func TestDatabaseImagesFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ name, content, want string }{
		{"unknown-version.json", `{"postgres": {"9": "registry.example.com/postgres:9"}}`, `postgres: unknown version "9"`},
		{"unknown-engine.json", `{"mongodb": {"7": "mongo:7"}}`, `unknown engine "mongodb"`},
		{"bad-image.json", `{"redis": {"7.4": "not an image"}}`, `redis 7.4: image "not an image"`},
		{"not-json.json", `postgres 17 = registry.example.com/postgres:17`, "not a JSON object"},
	} {
		res := runCLI(t, childEnv(nil), "", "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--database-images", write(c.name, c.content))
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, c.want) || !strings.Contains(res.Stderr, c.name) {
			t.Errorf("%s: exit %d, stderr %q; want a failure naming the file and saying %q", c.name, res.ExitCode, res.Stderr, c.want)
		}
	}
	res := runCLI(t, childEnv([]string{"CAPSTAN_DATABASE_IMAGES=" + filepath.Join(dir, "missing.json")}), "", "serve",
		"--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "missing.json") {
		t.Errorf("a missing file from the environment: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}

	good := write("images.json", `{"postgres": {"16": "registry.example.com/pg:16-local"}, "valkey": {"8": "registry.example.com/valkey:8"}}`)
	f := newFleet(t, Options{Args: []string{"--database-images", good}})
	resp := f.Get(t, "/api/v1/databases/engines", f.Token)
	expectStatus(t, resp, http.StatusOK)
	var out struct {
		Engines []EngineInfo `json:"engines"`
	}
	resp.JSON(t, &out)
	images := map[string]string{}
	var names []string
	for _, e := range out.Engines {
		names = append(names, e.Name)
		if !e.Versions[0].Default {
			t.Errorf("%s: the newest version is not the default", e.Name)
		}
		for _, v := range e.Versions {
			images[e.Name+" "+v.Version] = v.Image
		}
	}
	if got, want := strings.Join(names, ","), "postgres,mysql,mariadb,redis,valkey"; got != want {
		t.Fatalf("engines: got %s, want %s", got, want)
	}
	for k, want := range map[string]string{
		"postgres 16": "registry.example.com/pg:16-local", "postgres 17": "postgres:17", "valkey 8": "registry.example.com/valkey:8",
		"mariadb 11.4": "mariadb:11.4", "mysql 8.4": "mysql:8.4", "redis 7.4": "redis:7.4",
	} {
		if images[k] != want {
			t.Errorf("%s: image %q, want %q", k, images[k], want)
		}
	}
}

// DatabaseInfo is a database instance as the API shows it.
type DatabaseInfo struct {
	ID            string  `json:"id"`
	Name          string  `json:"name"`
	ServerID      string  `json:"server_id"`
	Engine        string  `json:"engine"`
	Kind          string  `json:"kind"`
	Version       string  `json:"version"`
	Managed       bool    `json:"managed"`
	State         string  `json:"state"`
	LastError     *string `json:"last_error"`
	ServerVersion string  `json:"server_version"`
	CheckJobID    string  `json:"check_job_id"`
	Logins        []struct {
		Username string `json:"username"`
	} `json:"logins"`
}

// DatabaseJob is a database job as the instance's job path shows it.
type DatabaseJob struct {
	JobID  string          `json:"job_id"`
	Status string          `json:"status"`
	Error  *string         `json:"error"`
	Data   json.RawMessage `json:"data"`
}

// dbRig is a control plane with a real agent on one server.
type dbRig struct {
	*Fleet
	serverID string
	agent    *AgentProcess
}

func newDBRig(t *testing.T, d store.Dialect) *dbRig {
	t.Helper()
	f := newFleet(t, Options{Dialect: d})
	e := f.createEnrollment(t, "db-host")
	config := enrollAgent(t, f.ControlPlane, e.Token)
	return &dbRig{Fleet: f, serverID: e.Server.ID, agent: startAgent(t, config)}
}

// register registers an external instance and waits for its connection
// test; it returns the instance as it is then.
func (r *dbRig) register(t *testing.T, body map[string]any) DatabaseInfo {
	t.Helper()
	body["server_id"] = r.serverID
	resp := r.Post(t, "/api/v1/databases/external", r.Token, body)
	expectStatus(t, resp, http.StatusAccepted)
	var reg struct {
		Instance DatabaseInfo `json:"instance"`
		JobID    string       `json:"job_id"`
	}
	resp.JSON(t, &reg)
	if reg.Instance.State != "checking" || reg.JobID == "" {
		t.Fatalf("registration: %s", resp.Body)
	}
	r.wait(t, reg.Instance.ID, reg.JobID)
	return r.instance(t, reg.Instance.ID)
}

func (r *dbRig) instance(t *testing.T, id string) DatabaseInfo {
	t.Helper()
	resp := r.Get(t, "/api/v1/databases/"+id, r.Token)
	expectStatus(t, resp, http.StatusOK)
	var d DatabaseInfo
	resp.JSON(t, &d)
	return d
}

// wait reads a job of the instance with ?wait= until it is finished.
func (r *dbRig) wait(t *testing.T, id, jobID string) DatabaseJob {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp := r.Get(t, "/api/v1/databases/"+id+"/jobs/"+jobID+"?wait=20", r.Token)
		expectStatus(t, resp, http.StatusOK)
		var j DatabaseJob
		resp.JSON(t, &j)
		switch j.Status {
		case "succeeded", "failed", "cancelled":
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after 2 minutes\nagent log:\n%s", jobID, j.Status, r.agent.Logs())
		}
	}
}

// call queues a database call and waits for its job.
func (r *dbRig) call(t *testing.T, id, what string, body any) DatabaseJob {
	t.Helper()
	resp := r.Post(t, "/api/v1/databases/"+id+"/"+what, r.Token, body)
	expectStatus(t, resp, http.StatusAccepted)
	var a Accepted
	resp.JSON(t, &a)
	return r.wait(t, id, a.JobID)
}

func (j DatabaseJob) result(t *testing.T, v any) {
	t.Helper()
	if j.Status != "succeeded" {
		t.Fatalf("job %s: %s (%s): %s", j.JobID, j.Status, deref(j.Error), j.Data)
	}
	if err := json.Unmarshal(j.Data, v); err != nil {
		t.Fatalf("job %s data: %v: %s", j.JobID, err, j.Data)
	}
}

// postgresTarget returns how to reach a new database on the test
// PostgreSQL server: host, port, user, password and database name.
func postgresTarget(t *testing.T) (host string, port int, user, password, database string) {
	t.Helper()
	u, err := url.Parse(testlab.PostgresDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err = strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("port of %s: %v", u.Redacted(), err)
	}
	password, _ = u.User.Password()
	return u.Hostname(), port, u.User.Username(), password, strings.TrimPrefix(u.Path, "/")
}

// TestExternalPostgres registers the test PostgreSQL server through a
// real agent and uses the query console and explore on it: the engine
// enforces read-only, max_rows truncates, a wrong password leaves the
// instance unreachable with the engine's text, and the connection read is
// audited.
func TestExternalPostgres(t *testing.T) {
	r := newDBRig(t, store.SQLite)
	host, port, user, password, database := postgresTarget(t)
	pg := r.register(t, map[string]any{"name": "pg", "engine": "postgres", "host": host, "port": port, "username": user,
		"password": password, "database": database, "tls_mode": "disable"})
	if pg.State != "ready" || pg.ServerVersion == "" || pg.Version == "" || pg.Managed || pg.LastError != nil {
		t.Fatalf("instance after its test: %+v", pg)
	}

	type queryResult struct {
		Columns []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"columns"`
		Rows      [][]any `json:"rows"`
		RowCount  int     `json:"row_count"`
		Truncated bool    `json:"truncated"`
	}
	var q queryResult
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT 1 AS one, 'x'::text AS s, NULL::int AS n"}).result(t, &q)
	if len(q.Rows) != 1 || q.RowCount != 1 || len(q.Columns) != 3 || q.Columns[0].Name != "one" ||
		q.Rows[0][0] != float64(1) || q.Rows[0][1] != "x" || q.Rows[0][2] != nil {
		t.Fatalf("SELECT 1: %+v", q)
	}

	// Read-only is the engine's: with readonly false a statement writes;
	// by default a write fails with the engine's error, also one hidden in
	// a CTE that a reading of the SQL would take for a SELECT.
	var w struct {
		RowsAffected *int64 `json:"rows_affected"`
	}
	r.call(t, pg.ID, "query", map[string]any{"sql": "CREATE TABLE orders (id int PRIMARY KEY, item text)", "readonly": false}).result(t, &w)
	r.call(t, pg.ID, "query", map[string]any{"sql": "INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, 10) g",
		"readonly": false}).result(t, &w)
	if w.RowsAffected == nil || *w.RowsAffected != 10 {
		t.Fatalf("insert: rows_affected %v, want 10", w.RowsAffected)
	}
	for _, sql := range []string{"CREATE TABLE t (x int)", "WITH gone AS (DELETE FROM orders RETURNING id) SELECT count(*) FROM gone"} {
		j := r.call(t, pg.ID, "query", map[string]any{"sql": sql})
		if j.Status != "failed" || !strings.Contains(string(j.Data), "25006") || j.Error == nil || !strings.Contains(*j.Error, "read-only") {
			t.Fatalf("%s with readonly default: %s %s: %s", sql, j.Status, deref(j.Error), j.Data)
		}
	}
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT id FROM orders ORDER BY id", "max_rows": 3}).result(t, &q)
	if q.RowCount != 3 || !q.Truncated || len(q.Rows) != 3 {
		t.Fatalf("max_rows 3 of 10: row_count %d, truncated %v", q.RowCount, q.Truncated)
	}

	var ex struct {
		Tables []struct {
			Schema string `json:"schema"`
			Name   string `json:"name"`
		} `json:"tables"`
		Columns []struct {
			Name       string `json:"name"`
			PrimaryKey bool   `json:"primary_key"`
		} `json:"columns"`
	}
	r.call(t, pg.ID, "explore", map[string]any{"what": "tables"}).result(t, &ex)
	if len(ex.Tables) != 1 || ex.Tables[0].Name != "orders" {
		t.Fatalf("explore tables: %+v", ex.Tables)
	}
	r.call(t, pg.ID, "explore", map[string]any{"what": "columns", "table": "orders"}).result(t, &ex)
	if len(ex.Columns) != 2 || ex.Columns[0].Name != "id" || !ex.Columns[0].PrimaryKey {
		t.Fatalf("explore columns: %+v", ex.Columns)
	}
	// kv on a SQL engine is refused.
	expectProblem(t, r.Post(t, "/api/v1/databases/"+pg.ID+"/kv", r.Token, map[string]any{"action": "info"}),
		http.StatusUnprocessableEntity, "wrong-engine-kind")

	// A wrong password: unreachable, with the engine's text; the same
	// mode again tests again (and fails again).
	bad := r.register(t, map[string]any{"name": "pg-bad", "engine": "postgres", "host": host, "port": port, "username": user,
		"password": "not-the-password", "database": database, "tls_mode": "disable"})
	if bad.State != "unreachable" || bad.LastError == nil || !strings.Contains(*bad.LastError, "password authentication failed") {
		t.Fatalf("wrong password: state %s, last_error %v", bad.State, bad.LastError)
	}
	expectProblem(t, r.Post(t, "/api/v1/databases/"+bad.ID+"/query", r.Token, map[string]any{"sql": "SELECT 1"}),
		http.StatusConflict, "instance-not-ready")
	resp := r.Do(t, Req{Method: http.MethodPut, Path: "/api/v1/databases/" + bad.ID + "/tls", Token: r.Token,
		JSON: map[string]any{"tls_mode": "disable"}})
	expectStatus(t, resp, http.StatusAccepted)
	var re struct {
		JobID string `json:"job_id"`
	}
	resp.JSON(t, &re)
	if j := r.wait(t, bad.ID, re.JobID); j.Status != "failed" {
		t.Fatalf("retest with the wrong password: %s", j.Status)
	}
	if bad = r.instance(t, bad.ID); bad.State != "unreachable" {
		t.Fatalf("after the retest: %s", bad.State)
	}

	// The connection read is audited; the server cannot go while its
	// instances are registered.
	resp = r.Get(t, "/api/v1/databases/"+pg.ID+"/connection", r.Token)
	expectStatus(t, resp, http.StatusOK)
	if !strings.Contains(string(resp.Body), url.UserPassword(user, password).String()) {
		t.Fatalf("connection: no URL with the login: %s", resp.Body)
	}
	if e := auditEntries(t, r.ControlPlane, r.Token, "database.connection.read"); len(e) != 1 || e[0].Target.ID != pg.ID || e[0].IP == "" {
		t.Fatalf("connection read audit entries: %+v", e)
	}
	expectProblem(t, r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/servers/" + r.serverID, Token: r.Token}),
		http.StatusConflict, "server-has-databases")
	resp = r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/databases/" + bad.ID, Token: r.Token})
	expectStatus(t, resp, http.StatusOK)
	if !strings.Contains(string(resp.Body), "not touched") {
		t.Fatalf("delete: %s", resp.Body)
	}
}

// TestQueryConsoleRoundTrip measures the query console's round trip for
// SELECT 1 against the real agent and PostgreSQL: POST query, then GET
// the instance's job path with wait. It logs the figures; it asserts only
// that every call succeeded.
func TestQueryConsoleRoundTrip(t *testing.T) {
	r := newDBRig(t, store.SQLite)
	host, port, user, password, database := postgresTarget(t)
	pg := r.register(t, map[string]any{"name": "pg", "engine": "postgres", "host": host, "port": port, "username": user,
		"password": password, "database": database, "tls_mode": "disable"})
	if pg.State != "ready" {
		t.Fatalf("instance: %+v", pg)
	}
	const n = 200
	took := make([]time.Duration, 0, n)
	for i := range n + 10 {
		start := time.Now()
		resp := r.Post(t, "/api/v1/databases/"+pg.ID+"/query", r.Token, map[string]any{"sql": "SELECT 1"})
		expectStatus(t, resp, http.StatusAccepted)
		var a Accepted
		resp.JSON(t, &a)
		resp = r.Get(t, "/api/v1/databases/"+pg.ID+"/jobs/"+a.JobID+"?wait=30", r.Token)
		expectStatus(t, resp, http.StatusOK)
		var j DatabaseJob
		resp.JSON(t, &j)
		if j.Status != "succeeded" {
			t.Fatalf("call %d: %s %s", i, j.Status, resp.Body)
		}
		if i >= 10 { // the first calls warm up connections
			took = append(took, time.Since(start))
		}
	}
	slices.Sort(took)
	t.Logf("query console round trip for SELECT 1 over %d calls: p50 %s, p90 %s, p99 %s, max %s", n,
		took[n/2].Round(10*time.Microsecond), took[n*9/10].Round(10*time.Microsecond), took[n*99/100].Round(10*time.Microsecond),
		took[n-1].Round(10*time.Microsecond))
}
