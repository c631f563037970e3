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
	var out struct {
		Engines []EngineInfo `json:"engines"`
	}
	expectJSON(t, f.Get(t, "/api/v1/databases/engines", f.Token), http.StatusOK, &out)
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

// DatabaseConnection is GET /api/v1/databases/{id}/connection, the parts
// the tests read.
type DatabaseConnection struct {
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Logins []struct {
		Username string `json:"username"`
		Password string `json:"password"`
	} `json:"logins"`
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
	e, config := f.enrollServer(t, "db-host")
	return &dbRig{Fleet: f, serverID: e.Server.ID, agent: startAgent(t, config)}
}

// registerPostgres registers a fresh database of the test PostgreSQL
// server as the external instance name and runs sql in it; it returns the
// instance and the database's name.
func (r *dbRig) registerPostgres(t *testing.T, name string, sql ...string) (DatabaseInfo, string) {
	t.Helper()
	host, port, user, password, database := postgresTarget(t)
	pg := r.register(t, map[string]any{"name": name, "engine": "postgres", "host": host, "port": port, "username": user,
		"password": password, "database": database, "tls_mode": "disable"})
	var w struct{}
	for _, q := range sql {
		r.call(t, pg.ID, "query", map[string]any{"readonly": false, "sql": q}).result(t, &w)
	}
	return pg, database
}

// registerPostgresOn registers database on pg, a PostgreSQL server of
// the test's own, as the external instance name (superuser login, no
// TLS) and waits for its connection test.
func (r *dbRig) registerPostgresOn(t testing.TB, name string, pg *testlab.PostgresServer, database string) DatabaseInfo {
	t.Helper()
	return r.register(t, map[string]any{"name": name, "engine": "postgres", "host": "127.0.0.1", "port": pg.Port, "username": pg.User,
		"password": pg.Password, "database": database, "tls_mode": "disable"})
}

// register registers an external instance and waits for its connection
// test; it returns the instance as it is then.
func (r *dbRig) register(t testing.TB, body map[string]any) DatabaseInfo {
	t.Helper()
	body["server_id"] = r.serverID
	resp := r.Post(t, "/api/v1/databases/external", r.Token, body)
	var reg struct {
		Instance DatabaseInfo `json:"instance"`
		JobID    string       `json:"job_id"`
	}
	expectJSON(t, resp, http.StatusAccepted, &reg)
	if reg.Instance.State != "checking" || reg.JobID == "" {
		t.Fatalf("registration: %s", resp.Body)
	}
	r.wait(t, reg.Instance.ID, reg.JobID)
	return r.instance(t, reg.Instance.ID)
}

func (r *dbRig) instance(t testing.TB, id string) DatabaseInfo {
	t.Helper()
	var d DatabaseInfo
	expectJSON(t, r.Get(t, "/api/v1/databases/"+id, r.Token), http.StatusOK, &d)
	return d
}

// wait reads a job of the instance with ?wait= until it is finished.
func (r *dbRig) wait(t testing.TB, id, jobID string) DatabaseJob {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var j DatabaseJob
		expectJSON(t, r.Get(t, "/api/v1/databases/"+id+"/jobs/"+jobID+"?wait=20", r.Token), http.StatusOK, &j)
		switch j.Status {
		case "succeeded", "failed", "cancelled":
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after 2 minutes\nagent log:\n%s", jobID, j.Status, r.agent.Logs())
		}
	}
}

// retest sends PUT …/tls and waits for the connection test.
func (r *dbRig) retest(t *testing.T, id string, body map[string]any) DatabaseJob {
	t.Helper()
	resp := r.Do(t, Req{Method: http.MethodPut, Path: "/api/v1/databases/" + id + "/tls", Token: r.Token, JSON: body})
	var re struct {
		JobID string `json:"job_id"`
	}
	expectJSON(t, resp, http.StatusAccepted, &re)
	return r.wait(t, id, re.JobID)
}

// call queues a database call and waits for its job.
func (r *dbRig) call(t testing.TB, id, what string, body any) DatabaseJob {
	t.Helper()
	var a Accepted
	expectJSON(t, r.Post(t, "/api/v1/databases/"+id+"/"+what, r.Token, body), http.StatusAccepted, &a)
	return r.wait(t, id, a.JobID)
}

func (j DatabaseJob) result(t testing.TB, v any) {
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
	forEachStore(t, testExternalPostgres)
}

func testExternalPostgres(t *testing.T, d store.Dialect) {
	r := newDBRig(t, d)
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
	r.call(t, pg.ID, "query", map[string]any{"sql": "CREATE SEQUENCE orders_seq", "readonly": false}).result(t, &w)
	r.call(t, pg.ID, "query", map[string]any{"sql": "INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, 10) g",
		"readonly": false}).result(t, &w)
	if w.RowsAffected == nil || *w.RowsAffected != 10 {
		t.Fatalf("insert: rows_affected %v, want 10", w.RowsAffected)
	}
	// Refused by the read-only transaction (25006), or, for a function
	// that writes, by the read-only login's privileges first (42501).
	for sql, want := range map[string]string{"CREATE TABLE t (x int)": "25006 read-only",
		"WITH gone AS (DELETE FROM orders RETURNING id) SELECT count(*) FROM gone": "25006 read-only",
		"SELECT nextval('orders_seq')":                                             "42501 permission denied"} {
		code, text, _ := strings.Cut(want, " ")
		j := r.call(t, pg.ID, "query", map[string]any{"sql": sql})
		if j.Status != "failed" || !strings.Contains(string(j.Data), code) || j.Error == nil || !strings.Contains(*j.Error, text) {
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

	// On a server with password authentication and a certificate from
	// a CA the test made: a wrong password is unreachable with the
	// engine's text; a CA-checked mode without the CA is unreachable
	// too, and PUT …/tls with the CA tests again and makes it ready.
	ca := testlab.NewTestCA(t)
	tlsPG := testlab.StartPostgresServer(t, testlab.ServerTLS(t, ca))
	bad := r.register(t, map[string]any{"name": "pg-bad", "engine": "postgres", "host": "127.0.0.1", "port": tlsPG.Port,
		"username": tlsPG.User, "password": "not-the-password", "database": "postgres", "tls_mode": "disable"})
	if bad.State != "unreachable" || bad.LastError == nil || !strings.Contains(*bad.LastError, "password authentication failed") {
		t.Fatalf("wrong password: state %s, last_error %v", bad.State, deref(bad.LastError))
	}
	expectProblem(t, r.Post(t, "/api/v1/databases/"+bad.ID+"/query", r.Token, map[string]any{"sql": "SELECT 1"}),
		http.StatusConflict, "instance-not-ready")
	if j := r.retest(t, bad.ID, map[string]any{"tls_mode": "disable"}); j.Status != "failed" {
		t.Fatalf("retest with the wrong password: %s", j.Status)
	}
	if bad = r.instance(t, bad.ID); bad.State != "unreachable" {
		t.Fatalf("after the retest: %s", bad.State)
	}
	secure := r.register(t, map[string]any{"name": "pg-tls", "engine": "postgres", "host": "127.0.0.1", "port": tlsPG.Port,
		"username": tlsPG.User, "password": tlsPG.Password, "database": "postgres", "tls_mode": "verify-full"})
	if secure.State != "unreachable" || secure.LastError == nil {
		t.Fatalf("verify-full without the CA: state %s, last_error %v", secure.State, deref(secure.LastError))
	}
	t.Logf("verify-full without the CA: %s", *secure.LastError)
	if j := r.retest(t, secure.ID, map[string]any{"tls_mode": "verify-full", "ca": ca.PEM}); j.Status != "succeeded" {
		t.Fatalf("retest with the CA: %s %s", j.Status, deref(j.Error))
	}
	if secure = r.instance(t, secure.ID); secure.State != "ready" || secure.LastError != nil {
		t.Fatalf("after the retest with the CA: %+v", secure)
	}

	// The connection read is audited; the server cannot go while its
	// instances are registered.
	resp := r.Get(t, "/api/v1/databases/"+pg.ID+"/connection", r.Token)
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
	pg, _ := r.registerPostgres(t, "pg")
	if pg.State != "ready" {
		t.Fatalf("instance: %+v", pg)
	}
	const n = 200
	took := make([]time.Duration, 0, n)
	for i := range n + 10 {
		start := time.Now()
		resp := r.Post(t, "/api/v1/databases/"+pg.ID+"/query", r.Token, map[string]any{"sql": "SELECT 1"})
		var a Accepted
		expectJSON(t, resp, http.StatusAccepted, &a)
		resp = r.Get(t, "/api/v1/databases/"+pg.ID+"/jobs/"+a.JobID+"?wait=30", r.Token)
		var j DatabaseJob
		expectJSON(t, resp, http.StatusOK, &j)
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

// TestExternalMariaDBAndRedis registers a MariaDB and a Redis server
// through a real agent: the query console, explore and every key-value
// action, a wrong password each, and the calls of the other kind refused.
func TestExternalMariaDBAndRedis(t *testing.T) {
	r := newDBRig(t, store.SQLite)
	maria, rds := testlab.StartMariaDB(t, nil), testlab.StartRedis(t, nil)
	shop := maria.Database(t)

	m := r.register(t, map[string]any{"name": "maria", "engine": "mariadb", "host": "127.0.0.1", "port": maria.Port,
		"username": maria.User, "password": maria.Password, "database": shop, "tls_mode": "disable"})
	if m.State != "ready" || !strings.Contains(m.ServerVersion, "MariaDB") || m.Version == "" {
		t.Fatalf("mariadb after its test: %+v (%s)", m, deref(m.LastError))
	}
	var w struct {
		RowsAffected *int64 `json:"rows_affected"`
	}
	r.call(t, m.ID, "query", map[string]any{"sql": "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))", "readonly": false}).result(t, &w)
	r.call(t, m.ID, "query", map[string]any{"sql": "INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')", "readonly": false}).result(t, &w)
	if w.RowsAffected == nil || *w.RowsAffected != 3 {
		t.Fatalf("insert: rows_affected %v", w.RowsAffected)
	}
	var q struct {
		Rows      [][]any `json:"rows"`
		RowCount  int     `json:"row_count"`
		Truncated bool    `json:"truncated"`
	}
	r.call(t, m.ID, "query", map[string]any{"sql": "SELECT id, name FROM items ORDER BY id", "max_rows": 2}).result(t, &q)
	if q.RowCount != 2 || !q.Truncated || q.Rows[0][0] != float64(1) || q.Rows[0][1] != "a" {
		t.Fatalf("select with max_rows 2: %+v", q)
	}
	// Refused by the read-only login's privileges (1142), before the
	// read-only transaction would (1792).
	if j := r.call(t, m.ID, "query", map[string]any{"sql": "DELETE FROM items"}); j.Status != "failed" || !strings.Contains(string(j.Data), "1142") {
		t.Fatalf("a write with readonly default: %s %s: %s", j.Status, deref(j.Error), j.Data)
	}
	var ex struct {
		Tables []struct {
			Name string `json:"name"`
		} `json:"tables"`
	}
	r.call(t, m.ID, "explore", map[string]any{"what": "tables"}).result(t, &ex)
	if len(ex.Tables) != 1 || ex.Tables[0].Name != "items" {
		t.Fatalf("explore tables: %+v", ex.Tables)
	}
	badM := r.register(t, map[string]any{"name": "maria-bad", "engine": "mariadb", "host": "127.0.0.1", "port": maria.Port,
		"username": maria.User, "password": "wrong", "database": shop, "tls_mode": "disable"})
	if badM.State != "unreachable" || badM.LastError == nil || !strings.Contains(*badM.LastError, "Access denied") {
		t.Fatalf("mariadb wrong password: %s %s", badM.State, deref(badM.LastError))
	}
	expectProblem(t, r.Post(t, "/api/v1/databases/"+m.ID+"/kv", r.Token, map[string]any{"action": "info"}),
		http.StatusUnprocessableEntity, "wrong-engine-kind")

	k := r.register(t, map[string]any{"name": "cache", "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": rds.Password, "tls_mode": "disable"})
	if k.State != "ready" || k.ServerVersion == "" || len(k.Logins) != 1 || k.Logins[0].Username != "default" {
		t.Fatalf("redis after its test: %+v (%s)", k, deref(k.LastError))
	}
	c := rds.Client(t)
	ctx := t.Context()
	for i := range 5 {
		if err := c.Set(ctx, "user:"+strconv.Itoa(i), "v"+strconv.Itoa(i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(ctx, "profile", "name", "ada", "lang", "go").Err(); err != nil {
		t.Fatal(err)
	}
	var info struct {
		Info map[string]map[string]string `json:"info"`
	}
	r.call(t, k.ID, "kv", map[string]any{"action": "info"}).result(t, &info)
	if info.Info["server"]["redis_version"] == "" {
		t.Fatalf("info: no server.redis_version: %v", info.Info)
	}
	seen := map[string]bool{}
	cursor := ""
	for range 100 {
		var scan struct {
			Cursor string `json:"cursor"`
			Keys   []struct {
				Key string `json:"key"`
			} `json:"keys"`
		}
		r.call(t, k.ID, "kv", map[string]any{"action": "scan", "match": "user:*", "cursor": cursor, "count": 2}).result(t, &scan)
		for _, key := range scan.Keys {
			seen[key.Key] = true
		}
		if cursor = scan.Cursor; cursor == "0" || cursor == "" {
			break
		}
	}
	if len(seen) != 5 || seen["profile"] {
		t.Fatalf("scan user:* found %v, want the 5 user keys", seen)
	}
	var got struct {
		Value struct {
			Type string            `json:"type"`
			Hash map[string]string `json:"hash"`
		} `json:"value"`
	}
	r.call(t, k.ID, "kv", map[string]any{"action": "get", "key": "profile"}).result(t, &got)
	if got.Value.Type != "hash" || got.Value.Hash["name"] != "ada" {
		t.Fatalf("get profile: %+v", got.Value)
	}
	var del struct {
		Deleted *int64 `json:"deleted"`
	}
	r.call(t, k.ID, "kv", map[string]any{"action": "delete", "keys": []string{"user:0", "user:1", "absent"}}).result(t, &del)
	if del.Deleted == nil || *del.Deleted != 2 {
		t.Fatalf("delete: deleted %v, want 2", del.Deleted)
	}
	if n, err := c.Exists(ctx, "user:0", "user:1", "user:2").Result(); err != nil || n != 1 {
		t.Fatalf("keys left: %d (%v), want 1", n, err)
	}
	var acl struct {
		ACLUsers []struct {
			Name string `json:"name"`
		} `json:"acl_users"`
	}
	r.call(t, k.ID, "kv", map[string]any{"action": "acl_list"}).result(t, &acl)
	if len(acl.ACLUsers) == 0 || acl.ACLUsers[0].Name != "default" {
		t.Fatalf("acl_list: %+v", acl.ACLUsers)
	}
	for what, body := range map[string]any{"query": map[string]any{"sql": "SELECT 1"}, "explore": map[string]any{"what": "tables"}} {
		expectProblem(t, r.Post(t, "/api/v1/databases/"+k.ID+"/"+what, r.Token, body), http.StatusUnprocessableEntity, "wrong-engine-kind")
	}
	badK := r.register(t, map[string]any{"name": "cache-bad", "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": "wrong", "tls_mode": "disable"})
	if badK.State != "unreachable" || badK.LastError == nil || !strings.Contains(strings.ToLower(*badK.LastError), "wrongpass") &&
		!strings.Contains(strings.ToLower(*badK.LastError), "invalid") {
		t.Fatalf("redis wrong password: %s %s", badK.State, deref(badK.LastError))
	}
}
