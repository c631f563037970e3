package e2e

import (
	"database/sql"
	"net/http"
	"strings"
	"sync"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// LoginSecret is the reply of creating or rotating a login.
type LoginSecret struct {
	Login struct {
		CredentialID string `json:"credential_id"`
		Username     string `json:"username"`
		State        string `json:"state"`
	} `json:"login"`
	Password string `json:"password"`
	URL      string `json:"url"`
	JobID    string `json:"job_id"`
}

// login creates a login and waits for its job.
func (r *dbRig) login(t *testing.T, id string, body map[string]any) (LoginSecret, DatabaseJob) {
	t.Helper()
	resp := r.Post(t, "/api/v1/databases/"+id+"/users", r.Token, body)
	var s LoginSecret
	expectJSON(t, resp, http.StatusAccepted, &s)
	if s.Password == "" || s.Login.State != "creating" || !strings.Contains(resp.Header.Get("Location"), "/jobs/"+s.JobID) {
		t.Fatalf("create login: %s", resp.Body)
	}
	return s, r.wait(t, id, s.JobID)
}

// rotate rotates a login and waits for its job.
func (r *dbRig) rotate(t *testing.T, id, credID string) (LoginSecret, DatabaseJob) {
	t.Helper()
	var s LoginSecret
	expectJSON(t, r.Post(t, "/api/v1/databases/"+id+"/users/"+credID+"/rotate", r.Token, nil), http.StatusAccepted, &s)
	return s, r.wait(t, id, s.JobID)
}

// del sends a DELETE and waits for its job.
func (r *dbRig) delJob(t *testing.T, id, path string) DatabaseJob {
	t.Helper()
	var a Accepted
	expectJSON(t, r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/databases/" + id + path, Token: r.Token}), http.StatusAccepted, &a)
	return r.wait(t, id, a.JobID)
}

// storedPasswords are the logins' passwords by user name, from the
// audited connection read.
func (r *dbRig) storedPasswords(t *testing.T, id string) map[string]string {
	t.Helper()
	var c DatabaseConnection
	expectJSON(t, r.Get(t, "/api/v1/databases/"+id+"/connection", r.Token), http.StatusOK, &c)
	out := map[string]string{}
	for _, l := range c.Logins {
		out[l.Username] = l.Password
	}
	return out
}

func execErr(db *sql.DB, stmt string) error {
	_, err := db.Exec(stmt)
	return err
}

// postgresServerWith starts a PostgreSQL server of the test's own,
// registers it as the instance pg and creates the databases on it
// through the API; it returns the server and the instance's id.
func (r *dbRig) postgresServerWith(t *testing.T, databases ...string) (*testlab.PostgresServer, string) {
	t.Helper()
	pg := testlab.StartPostgresServer(t, nil)
	inst := r.registerPostgresOn(t, "pg", pg, "postgres")
	if inst.State != "ready" {
		t.Fatalf("instance: %+v", inst)
	}
	for _, name := range databases {
		if j := r.call(t, inst.ID, "databases", map[string]any{"name": name}); j.Status != "succeeded" {
			t.Fatalf("create database %s: %s %s", name, deref(j.Error), j.Data)
		}
	}
	return pg, inst.ID
}

// TestDatabaseLoginsPostgres creates databases and logins on a
// PostgreSQL server through the API and a real agent, and checks them by
// connecting as each login: readonly reads its database only, readwrite
// writes its database only, rotate makes the old password fail (and a
// failed rotation keeps the stored one), drop removes login and
// database; bad input is 422 with nothing created; the admin login is
// not dropped; a member gets 403.
func TestDatabaseLoginsPostgres(t *testing.T) {
	forEachStore(t, testDatabaseLoginsPostgres)
}

func testDatabaseLoginsPostgres(t *testing.T, d store.Dialect) {
	r := newDBRig(t, d)
	pg, id := r.postgresServerWith(t, "shop", "other")
	admin := testlab.OpenSQL(t, "pgx", pg.URL("postgres"))
	var n int
	if err := admin.QueryRow("SELECT count(*) FROM pg_database WHERE datname IN ('shop', 'other')").Scan(&n); err != nil || n != 2 {
		t.Fatalf("databases made: %d (%v)", n, err)
	}
	var w struct{}
	r.call(t, id, "query", map[string]any{"sql": "CREATE TABLE items (id int PRIMARY KEY)", "database": "shop", "readonly": false}).result(t, &w)
	r.call(t, id, "query", map[string]any{"sql": "CREATE TABLE secrets (id int)", "database": "other", "readonly": false}).result(t, &w)

	as := func(user, pw, database string) *sql.DB {
		s := testlab.PostgresServer{Port: pg.Port, User: user, Password: pw}
		return testlab.OpenSQL(t, "pgx", s.URL(database))
	}
	ro, j := r.login(t, id, map[string]any{"username": "reader", "database": "shop", "access": "readonly"})
	if j.Status != "succeeded" {
		t.Fatalf("create reader: %s %s", deref(j.Error), j.Data)
	}
	rw, j := r.login(t, id, map[string]any{"username": "writer", "database": "shop", "access": "readwrite"})
	if j.Status != "succeeded" {
		t.Fatalf("create writer: %s %s", deref(j.Error), j.Data)
	}
	if !strings.HasPrefix(ro.URL, "postgres://reader:") || len(ro.Password) < 40 {
		t.Fatalf("reader reply: url %q, password of %d characters", ro.URL, len(ro.Password))
	}
	reader := as("reader", ro.Password, "shop")
	if err := reader.QueryRow("SELECT count(*) FROM items").Err(); err != nil {
		t.Errorf("readonly reads its database: %v", err)
	}
	if err := execErr(reader, "INSERT INTO items VALUES (1)"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("readonly writes: %v", err)
	}
	if err := as("reader", ro.Password, "other").Ping(); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("readonly connects to another database: %v", err)
	}
	writer := as("writer", rw.Password, "shop")
	if err := execErr(writer, "INSERT INTO items VALUES (2)"); err != nil {
		t.Errorf("readwrite writes its database: %v", err)
	}
	if err := as("writer", rw.Password, "other").Ping(); err == nil {
		t.Error("readwrite connects to another database")
	}
	if err := as("writer", rw.Password, "postgres").QueryRow("SELECT 1").Err(); err != nil {
		t.Logf("readwrite on the instance's initial database: %v", err)
	}
	info := r.instance(t, id)
	if len(info.Logins) != 3 {
		t.Fatalf("logins: %+v", info.Logins)
	}

	// Rotate: the old password fails, the new one works and is stored.
	nw, j := r.rotate(t, id, ro.Login.CredentialID)
	if j.Status != "succeeded" || nw.Password == "" || nw.Password == ro.Password {
		t.Fatalf("rotate: %s %s", j.Status, deref(j.Error))
	}
	if err := as("reader", ro.Password, "shop").Ping(); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("old password after rotate: %v", err)
	}
	if err := as("reader", nw.Password, "shop").Ping(); err != nil {
		t.Errorf("new password after rotate: %v", err)
	}
	if got := r.storedPasswords(t, id)["reader"]; got != nw.Password {
		t.Errorf("stored password after rotate is not the new one")
	}
	// A rotation whose job fails keeps the stored password: the role is
	// dropped behind Capstan's back, so ALTER ROLE cannot succeed.
	if err := execErr(as("writer", rw.Password, "shop"), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	before := r.storedPasswords(t, id)["writer"]
	if err := execErr(testlab.OpenSQL(t, "pgx", pg.URL("shop")), "DROP OWNED BY writer"); err != nil {
		t.Fatal(err)
	}
	if err := execErr(admin, "DROP OWNED BY writer; DROP ROLE writer"); err != nil {
		t.Fatal(err)
	}
	if _, j := r.rotate(t, id, rw.Login.CredentialID); j.Status != "failed" || !strings.Contains(deref(j.Error), "does not exist") {
		t.Fatalf("rotation of a vanished role: %s %s", j.Status, deref(j.Error))
	}
	if got := r.storedPasswords(t, id)["writer"]; got != before {
		t.Errorf("a failed rotation replaced the stored password")
	}

	// Bad input: 422 naming the field, nothing created.
	for _, c := range []struct {
		path, field string
		body        map[string]any
	}{
		{"users", "username", map[string]any{"username": `a"; DROP TABLE x; --`, "database": "shop", "access": "readonly"}},
		{"users", "username", map[string]any{"username": strings.Repeat("u", 64), "database": "shop", "access": "readonly"}},
		{"users", "username", map[string]any{"username": "pg_sneaky", "database": "shop", "access": "readonly"}},
		{"users", "username", map[string]any{"username": "public", "database": "shop", "access": "readonly"}},
		{"users", "database", map[string]any{"username": "fine", "database": `shop"; DROP DATABASE other; --`, "access": "readonly"}},
		{"users", "access", map[string]any{"username": "fine", "database": "shop", "access": "superuser"}},
		{"users", "key_pattern", map[string]any{"username": "fine", "database": "shop", "access": "readonly", "key_pattern": "app:*"}},
		{"databases", "name", map[string]any{"name": `a"; DROP TABLE x; --`}},
		{"databases", "name", map[string]any{"name": strings.Repeat("d", 64)}},
		{"databases", "name", map[string]any{"name": "template1"}},
	} {
		p := expectProblem(t, r.Post(t, "/api/v1/databases/"+id+"/"+c.path, r.Token, c.body), http.StatusUnprocessableEntity, "validation-failed")
		if len(p.Errors) == 0 || p.Errors[0].Field != c.field {
			t.Errorf("%v: errors %+v, want the field %s", c.body, p.Errors, c.field)
		}
	}
	if err := admin.QueryRow("SELECT count(*) FROM pg_roles WHERE rolname IN ('fine', 'pg_sneaky')").Scan(&n); err != nil || n != 0 {
		t.Errorf("roles after refused input: %d (%v)", n, err)
	}
	if got := len(r.instance(t, id).Logins); got != 3 {
		t.Errorf("logins after refused input: %d, want 3", got)
	}
	expectProblem(t, r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/databases/" + id + "/users/" + pg.User, Token: r.Token}),
		http.StatusConflict, "admin-login")

	// A login whose job fails (its database does not exist) is forgotten:
	// not listed, not in the connection read.
	if _, j := r.login(t, id, map[string]any{"username": "orphan", "database": "nowhere", "access": "readonly"}); j.Status != "failed" ||
		!strings.Contains(deref(j.Error), "does not exist") {
		t.Fatalf("login for a missing database: %s %s", j.Status, deref(j.Error))
	}
	if _, stored := r.storedPasswords(t, id)["orphan"]; stored {
		t.Error("a login whose job failed is in the connection read")
	}
	if got := len(r.instance(t, id).Logins); got != 3 {
		t.Errorf("logins after a failed create: %d, want 3", got)
	}

	// The same login asked for in parallel: one is created, the others
	// are 409.
	type reply struct {
		status int
		jobID  string
	}
	replies := make(chan reply, 6)
	var wg sync.WaitGroup
	for range cap(replies) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := r.Post(t, "/api/v1/databases/"+id+"/users", r.Token, map[string]any{"username": "twin", "database": "shop",
				"access": "readonly"})
			var s LoginSecret
			if resp.Status == http.StatusAccepted {
				resp.JSON(t, &s)
			}
			replies <- reply{resp.Status, s.JobID}
		}()
	}
	wg.Wait()
	close(replies)
	counts, twinJob := map[int]int{}, ""
	for rp := range replies {
		counts[rp.status]++
		if rp.jobID != "" {
			twinJob = rp.jobID
		}
	}
	if counts[http.StatusAccepted] != 1 || counts[http.StatusConflict] != cap(replies)-1 {
		t.Fatalf("parallel creates of one login: %v", counts)
	}
	if j := r.wait(t, id, twinJob); j.Status != "succeeded" {
		t.Fatalf("twin: %s %s", j.Status, deref(j.Error))
	}
	if j := r.delJob(t, id, "/users/twin"); j.Status != "succeeded" {
		t.Fatalf("drop twin: %s %s", j.Status, deref(j.Error))
	}
	expectProblem(t, r.Post(t, "/api/v1/databases/"+id+"/users", r.Token, map[string]any{"username": "reader", "database": "shop",
		"access": "readonly"}), http.StatusConflict, "login-exists")
	expectProblem(t, r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/databases/" + id + "/databases/shop", Token: r.Token}),
		http.StatusConflict, "database-has-logins")

	// A member gets 403 on every call here.
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	mt := signInUser(t, r.ControlPlane, member).AccessToken
	for _, c := range []Req{
		{Method: http.MethodPost, Path: "/api/v1/databases/" + id + "/users", JSON: map[string]any{"username": "m", "database": "shop", "access": "admin"}},
		{Method: http.MethodPost, Path: "/api/v1/databases/" + id + "/users/" + ro.Login.CredentialID + "/rotate"},
		{Method: http.MethodDelete, Path: "/api/v1/databases/" + id + "/users/reader"},
		{Method: http.MethodPost, Path: "/api/v1/databases/" + id + "/databases", JSON: map[string]any{"name": "m"}},
		{Method: http.MethodDelete, Path: "/api/v1/databases/" + id + "/databases/other"},
	} {
		c.Token = mt
		expectStatus(t, r.Do(t, c), http.StatusForbidden)
	}

	// Drop the logins, then the database.
	for _, u := range []string{"reader", "writer"} {
		if j := r.delJob(t, id, "/users/"+u); j.Status != "succeeded" {
			t.Fatalf("drop %s: %s %s", u, deref(j.Error), j.Data)
		}
	}
	if err := admin.QueryRow("SELECT count(*) FROM pg_roles WHERE rolname IN ('reader', 'writer')").Scan(&n); err != nil || n != 0 {
		t.Errorf("roles after drop: %d (%v)", n, err)
	}
	if got := r.instance(t, id).Logins; len(got) != 1 || got[0].Username != pg.User {
		t.Errorf("logins after drop: %+v", got)
	}
	if j := r.delJob(t, id, "/databases/shop"); j.Status != "succeeded" {
		t.Fatalf("drop shop: %s %s", deref(j.Error), j.Data)
	}
	if err := admin.QueryRow("SELECT count(*) FROM pg_database WHERE datname = 'shop'").Scan(&n); err != nil || n != 0 {
		t.Errorf("shop after drop: %d (%v)", n, err)
	}
	for _, action := range []string{"database.login.create", "database.login.rotate", "database.login.drop", "database.database.create"} {
		if e := auditEntries(t, r.ControlPlane, r.Token, action); len(e) == 0 {
			t.Errorf("no audit entry %s", action)
		}
	}
}

// TestDatabaseLoginsMariaDBAndRedis: MariaDB logins with grants on
// `db`.* and a rotation; a Redis ACL login limited to its key pattern and
// the read-only command set; database calls and SQL fields on Redis are
// 422.
func TestDatabaseLoginsMariaDBAndRedis(t *testing.T) {
	r := newDBRig(t, store.SQLite)
	maria, rds := testlab.StartMariaDB(t, nil), testlab.StartRedis(t, nil)
	base := maria.Database(t)
	m := r.register(t, map[string]any{"name": "maria", "engine": "mariadb", "host": "127.0.0.1", "port": maria.Port,
		"username": maria.User, "password": maria.Password, "database": base, "tls_mode": "disable"})
	if m.State != "ready" {
		t.Fatalf("mariadb: %+v", m)
	}
	for _, name := range []string{"app_db", "appXdb"} {
		if j := r.call(t, m.ID, "databases", map[string]any{"name": name}); j.Status != "succeeded" {
			t.Fatalf("create %s: %s", name, deref(j.Error))
		}
	}
	var w struct{}
	for _, db := range []string{"app_db", "appXdb"} {
		r.call(t, m.ID, "query", map[string]any{"sql": "CREATE TABLE items (id INT PRIMARY KEY)", "database": db, "readonly": false}).result(t, &w)
	}
	as := func(user, pw, database string) *sql.DB {
		a := testlab.MariaDB{Port: maria.Port, User: user, Password: pw}
		return testlab.OpenSQL(t, "mysql", a.DSN(database))
	}
	ro, j := r.login(t, m.ID, map[string]any{"username": "reader", "database": "app_db", "access": "readonly"})
	if j.Status != "succeeded" {
		t.Fatalf("reader: %s", deref(j.Error))
	}
	rw, j := r.login(t, m.ID, map[string]any{"username": "writer", "database": "app_db", "access": "readwrite"})
	if j.Status != "succeeded" {
		t.Fatalf("writer: %s", deref(j.Error))
	}
	if err := as("reader", ro.Password, "app_db").QueryRow("SELECT COUNT(*) FROM items").Err(); err != nil {
		t.Errorf("readonly reads: %v", err)
	}
	if err := execErr(as("reader", ro.Password, "app_db"), "INSERT INTO items VALUES (1)"); err == nil || !strings.Contains(err.Error(), "1142") {
		t.Errorf("readonly writes: %v", err)
	}
	if err := as("reader", ro.Password, "appXdb").Ping(); err == nil {
		t.Error("readonly reaches another database")
	}
	if err := execErr(as("writer", rw.Password, "app_db"), "INSERT INTO items VALUES (1)"); err != nil {
		t.Errorf("readwrite writes: %v", err)
	}
	if err := execErr(as("writer", rw.Password, "app_db"), "INSERT INTO appXdb.items VALUES (1)"); err == nil {
		t.Error("readwrite writes another database (app_db's '_' taken as a wildcard)")
	}
	nw, j := r.rotate(t, m.ID, ro.Login.CredentialID)
	if j.Status != "succeeded" {
		t.Fatalf("rotate: %s", deref(j.Error))
	}
	if err := as("reader", ro.Password, "app_db").Ping(); err == nil || !strings.Contains(err.Error(), "1045") {
		t.Errorf("old password after rotate: %v", err)
	}
	if err := as("reader", nw.Password, "app_db").Ping(); err != nil {
		t.Errorf("new password after rotate: %v", err)
	}
	for _, c := range []struct {
		field string
		body  map[string]any
	}{
		{"username", map[string]any{"username": "a`; DROP DATABASE app_db; --", "database": "app_db", "access": "readonly"}},
		{"username", map[string]any{"username": strings.Repeat("u", 81), "database": "app_db", "access": "readonly"}},
		{"database", map[string]any{"username": "fine", "database": "mysql", "access": "readonly"}},
	} {
		p := expectProblem(t, r.Post(t, "/api/v1/databases/"+m.ID+"/users", r.Token, c.body), http.StatusUnprocessableEntity, "validation-failed")
		if len(p.Errors) == 0 || p.Errors[0].Field != c.field {
			t.Errorf("%v: %+v, want the field %s", c.body, p.Errors, c.field)
		}
	}
	if j := r.delJob(t, m.ID, "/users/writer"); j.Status != "succeeded" {
		t.Fatalf("drop writer: %s", deref(j.Error))
	}
	if err := as("writer", rw.Password, "app_db").Ping(); err == nil {
		t.Error("writer connects after its drop")
	}

	k := r.register(t, map[string]any{"name": "cache", "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": rds.Password, "tls_mode": "disable"})
	if k.State != "ready" {
		t.Fatalf("redis: %+v", k)
	}
	c := rds.Client(t)
	ctx := t.Context()
	if err := c.MSet(ctx, "app:1", "one", "secret:1", "s").Err(); err != nil {
		t.Fatal(err)
	}
	kr, j := r.login(t, k.ID, map[string]any{"username": "app_reader", "key_pattern": "app:*", "access": "readonly"})
	if j.Status != "succeeded" || !strings.HasPrefix(kr.URL, "redis://app_reader:") {
		t.Fatalf("redis login: %s %s", deref(j.Error), kr.URL)
	}
	u := redis.NewClient(&redis.Options{Addr: c.Options().Addr, Username: "app_reader", Password: kr.Password, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { u.Close() })
	if v, err := u.Get(ctx, "app:1").Result(); err != nil || v != "one" {
		t.Errorf("GET app:1 = %q, %v", v, err)
	}
	if err := u.Get(ctx, "secret:1").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("GET outside the pattern: %v", err)
	}
	if err := u.Set(ctx, "app:2", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("SET as readonly: %v", err)
	}
	for _, c := range []struct {
		path, field string
		body        map[string]any
	}{
		{"users", "database", map[string]any{"username": "x", "database": "app", "key_pattern": "app:*", "access": "readonly"}},
		{"users", "key_pattern", map[string]any{"username": "x", "access": "readonly"}},
		{"users", "access", map[string]any{"username": "x", "key_pattern": "app:*", "access": "admin"}},
		{"users", "username", map[string]any{"username": "default", "key_pattern": "app:*", "access": "readonly"}},
	} {
		p := expectProblem(t, r.Post(t, "/api/v1/databases/"+k.ID+"/"+c.path, r.Token, c.body), http.StatusUnprocessableEntity, "validation-failed")
		if len(p.Errors) == 0 || p.Errors[0].Field != c.field {
			t.Errorf("%v: %+v, want the field %s", c.body, p.Errors, c.field)
		}
	}
	expectProblem(t, r.Post(t, "/api/v1/databases/"+k.ID+"/databases", r.Token, map[string]any{"name": "x"}),
		http.StatusUnprocessableEntity, "wrong-engine-kind")
	if j := r.delJob(t, k.ID, "/users/app_reader"); j.Status != "succeeded" {
		t.Fatalf("drop app_reader: %s", deref(j.Error))
	}
	if err := u.Ping(ctx).Err(); err == nil {
		// The open connection may survive ACL DELUSER on older servers;
		// a new one must not.
		nu := redis.NewClient(&redis.Options{Addr: c.Options().Addr, Username: "app_reader", Password: kr.Password, Protocol: 2, DisableIdentity: true})
		defer nu.Close()
		if err := nu.Ping(ctx).Err(); err == nil {
			t.Error("a dropped ACL user connects")
		}
	}
}
