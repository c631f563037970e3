package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// appEnv is an application's env as an administrator reads it.
func (r *dbRig) appEnv(t *testing.T, appID string) map[string]string {
	t.Helper()
	var a struct {
		Env []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"env"`
	}
	expectJSON(t, r.Get(t, "/api/v1/applications/"+appID, r.Token), http.StatusOK, &a)
	out := map[string]string{}
	for _, e := range a.Env {
		out[e.Key] = e.Value
	}
	return out
}

// createApp creates an application on the rig's server without deploying
// it.
func (r *dbRig) createApp(t *testing.T, name string, env []map[string]string) string {
	t.Helper()
	resp := r.Post(t, "/api/v1/applications", r.Token, map[string]any{"name": name, "server_id": r.serverID, "deploy": false,
		"source": map[string]any{"type": "image", "image": "ghcr.io/acme/" + name + ":1"}, "container_port": 8080, "env": env})
	var a struct {
		ID string `json:"id"`
	}
	expectJSON(t, resp, http.StatusCreated, &a)
	return a.ID
}

// TestDatabaseAttachPostgres attaches an application to an external
// PostgreSQL server through the API and a real agent: the application's
// env gets a URL whose login writes its database and cannot read another;
// a rotation updates the env and the old password fails; deleting the
// application drops the login on the engine. Bad input is refused with
// nothing changed, and a member gets 403.
func TestDatabaseAttachPostgres(t *testing.T) {
	forEachStore(t, testDatabaseAttachPostgres)
}

// newAttachRig is a database rig whose agent also drives a real Caddy
// and the Docker engine, so that deleting an application succeeds.
func newAttachRig(t *testing.T, d store.Dialect) *dbRig {
	t.Helper()
	testlab.Docker(t)
	testlab.CaddyBinary(t)
	f := newFleet(t, Options{Dialect: d})
	c := testlab.StartCaddy(t)
	e, config := f.enrollServer(t, "db-host")
	env := testlab.DockerEnv()
	args := []string{"--caddy-admin", c.AdminURL,
		"--proxy-http-port", strconv.Itoa(c.HTTPPort), "--proxy-https-port", strconv.Itoa(c.HTTPSPort),
		"--proxy-listen-host", "127.0.0.1", "--proxy-access-log", c.AccessLog, "--state-dir", filepath.Join(t.TempDir(), "state")}
	if c.UpstreamDir != "" {
		args = append(args, "--proxy-upstream-dir", c.UpstreamDir)
	}
	return &dbRig{Fleet: f, serverID: e.Server.ID, agent: startAgentWith(t, config, env, args...)}
}

func testDatabaseAttachPostgres(t *testing.T, d store.Dialect) {
	r := newAttachRig(t, d)
	pg, id := r.postgresServerWith(t, "shop", "other")
	var w struct{}
	r.call(t, id, "query", map[string]any{"sql": "CREATE TABLE secrets (id int)", "database": "other", "readonly": false}).result(t, &w)
	admin := testlab.OpenSQL(t, "pgx", pg.URL("postgres"))

	web := r.createApp(t, "web", []map[string]string{{"key": "MODE", "value": "prod"}})
	handSet := r.createApp(t, "hand", []map[string]string{{"key": "DATABASE_URL", "value": "postgres://elsewhere/db"}})
	path := "/api/v1/databases/" + id + "/attach"
	loginsBefore := len(r.instance(t, id).Logins)

	// Bad input: nothing is stored, queued or set.
	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
	}{
		{map[string]any{"application_id": web, "env_key": "1BAD"}, http.StatusUnprocessableEntity, ""},
		{map[string]any{"application_id": web, "env_key": ""}, http.StatusUnprocessableEntity, ""},
		{map[string]any{"application_id": web, "env_key": "DATABASE_URL", "database": `a"; DROP TABLE x; --`}, http.StatusUnprocessableEntity, ""},
		{map[string]any{"application_id": "app_none", "env_key": "DATABASE_URL"}, http.StatusNotFound, ""},
		{map[string]any{"application_id": handSet, "env_key": "DATABASE_URL"}, http.StatusConflict, "env-key-set"},
		{map[string]any{"application_id": web, "env_key": "MODE"}, http.StatusConflict, "env-key-set"},
	} {
		resp := r.Post(t, path, r.Token, c.body)
		if c.code != "" {
			expectProblem(t, resp, c.status, c.code)
		} else {
			expectStatus(t, resp, c.status)
		}
	}
	expectStatus(t, r.Post(t, "/api/v1/databases/db_none/attach", r.Token, map[string]any{"application_id": web, "env_key": "DATABASE_URL"}),
		http.StatusNotFound)
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	mt := signInUser(t, r.ControlPlane, member).AccessToken
	expectStatus(t, r.Post(t, path, mt, map[string]any{"application_id": web, "env_key": "DATABASE_URL"}), http.StatusForbidden)
	if got := len(r.instance(t, id).Logins); got != loginsBefore {
		t.Fatalf("logins after refused attaches: %d, want %d", got, loginsBefore)
	}
	if env := r.appEnv(t, handSet); env["DATABASE_URL"] != "postgres://elsewhere/db" || len(env) != 1 {
		t.Fatalf("hand-set env changed: %v", env)
	}

	// Attach: the login is made, and the env is set when its job succeeded.
	resp := r.Post(t, path, r.Token, map[string]any{"application_id": web, "env_key": "DATABASE_URL", "database": "shop"})
	var att struct {
		CredentialID string `json:"credential_id"`
		Username     string `json:"username"`
		Database     string `json:"database"`
		JobID        string `json:"job_id"`
	}
	expectJSON(t, resp, http.StatusAccepted, &att)
	if !strings.HasPrefix(att.Username, "app_") || att.Database != "shop" || strings.Contains(string(resp.Body), "postgres://") {
		t.Fatalf("attach reply: %s", resp.Body)
	}
	if j := r.wait(t, id, att.JobID); j.Status != "succeeded" {
		t.Fatalf("attach job: %s %s", deref(j.Error), j.Data)
	}
	var dsn string
	testlab.Eventually(t, 30*time.Second, "the env holds the login's URL", func() bool {
		dsn = r.appEnv(t, web)["DATABASE_URL"]
		return dsn != ""
	})
	u, err := url.Parse(dsn)
	if err != nil || u.User.Username() != att.Username || u.Port() != strconv.Itoa(pg.Port) || u.Path != "/shop" {
		t.Fatalf("env URL %q: %v", dsn, err)
	}
	if env := r.appEnv(t, web); env["MODE"] != "prod" {
		t.Fatalf("other env values: %v", env)
	}
	app := testlab.OpenSQL(t, "pgx", dsn)
	if err := execErr(app, "CREATE TABLE orders (id int); INSERT INTO orders VALUES (1)"); err != nil {
		t.Fatalf("attached login writes its database: %v", err)
	}
	otherURL := *u
	otherURL.Path = "/other"
	if err := execErr(testlab.OpenSQL(t, "pgx", otherURL.String()), "SELECT * FROM secrets"); err == nil {
		t.Fatal("attached login read another database")
	}
	// The app was not redeployed.
	resp = r.Get(t, "/api/v1/applications/"+web+"/deployments", r.Token)
	expectStatus(t, resp, http.StatusOK)
	if strings.Contains(string(resp.Body), `"id":"dep_`) {
		t.Fatalf("attaching deployed the application: %s", resp.Body)
	}

	// Attached already, or the key set by this attachment: 409.
	expectProblem(t, r.Post(t, path, r.Token, map[string]any{"application_id": web, "env_key": "OTHER_URL"}), http.StatusConflict,
		"already-attached")
	expectProblem(t, r.Post(t, path, r.Token, map[string]any{"application_id": web, "env_key": "DATABASE_URL"}), http.StatusConflict,
		"env-key-set")

	// The audit entry names the app and key, never the URL.
	entries := auditEntries(t, r.ControlPlane, r.Token, "database.attach")
	if len(entries) != 1 {
		t.Fatalf("attach audit entries: %d", len(entries))
	}
	b, _ := json.Marshal(entries[0])
	pw, _ := u.User.Password()
	if !strings.Contains(string(b), web) || !strings.Contains(string(b), "DATABASE_URL") || strings.Contains(string(b), pw) {
		t.Fatalf("attach audit entry: %s", b)
	}

	// Rotate: the env follows, the old password fails.
	if _, j := r.rotate(t, id, att.CredentialID); j.Status != "succeeded" {
		t.Fatalf("rotate: %s %s", deref(j.Error), j.Data)
	}
	var rotated string
	testlab.Eventually(t, 30*time.Second, "the env holds the rotated URL", func() bool {
		rotated = r.appEnv(t, web)["DATABASE_URL"]
		return rotated != dsn
	})
	if err := execErr(testlab.OpenSQL(t, "pgx", dsn), "SELECT 1"); err == nil {
		t.Fatal("the old password still works after rotation")
	}
	if err := execErr(testlab.OpenSQL(t, "pgx", rotated), "INSERT INTO orders VALUES (2)"); err != nil {
		t.Fatalf("rotated URL: %v", err)
	}

	// Deleting the application drops its login on the engine.
	resp = r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/applications/" + web, Token: r.Token})
	expectStatus(t, resp, http.StatusAccepted)
	testlab.Eventually(t, 60*time.Second, "the attached login is dropped", func() bool {
		var n int
		if err := admin.QueryRow("SELECT count(*) FROM pg_roles WHERE rolname = $1", att.Username).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	testlab.Eventually(t, 30*time.Second, "the login is forgotten", func() bool {
		for _, l := range r.instance(t, id).Logins {
			if l.Username == att.Username {
				return false
			}
		}
		return true
	})
}

// TestDatabaseAttachRedis attaches an application to an external Redis
// server through the API and a real agent: the application's env gets a
// redis:// URL of a dedicated ACL user that writes the keys of the
// application's name and is refused the others; a rotation updates the
// env and the old password fails; deleting the application drops the ACL
// user. A database name is refused, and a member gets 403.
func TestDatabaseAttachRedis(t *testing.T) {
	r := newAttachRig(t, store.SQLite)
	rds := testlab.StartRedis(t, nil)
	inst := r.register(t, map[string]any{"name": "cache", "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": rds.Password, "tls_mode": "disable"})
	if inst.State != "ready" {
		t.Fatalf("instance: %+v", inst)
	}
	id := inst.ID
	admin := rds.Client(t)
	ctx := t.Context()
	if err := admin.Set(ctx, "billing:secret", "s3cret", 0).Err(); err != nil {
		t.Fatal(err)
	}
	web := r.createApp(t, "web", nil)
	path := "/api/v1/databases/" + id + "/attach"

	p := expectProblem(t, r.Post(t, path, r.Token, map[string]any{"application_id": web, "env_key": "REDIS_URL", "database": "app"}),
		http.StatusUnprocessableEntity, "validation-failed")
	if len(p.Errors) != 1 || p.Errors[0].Field != "database" {
		t.Fatalf("database on a key-value instance: %+v", p.Errors)
	}
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	mt := signInUser(t, r.ControlPlane, member).AccessToken
	expectStatus(t, r.Post(t, path, mt, map[string]any{"application_id": web, "env_key": "REDIS_URL"}), http.StatusForbidden)
	if n := len(r.instance(t, id).Logins); n != 1 {
		t.Fatalf("logins after refused attaches: %d, want 1", n)
	}

	resp := r.Post(t, path, r.Token, map[string]any{"application_id": web, "env_key": "REDIS_URL"})
	var att struct {
		CredentialID string `json:"credential_id"`
		Username     string `json:"username"`
		Database     string `json:"database"`
		KeyPattern   string `json:"key_pattern"`
		JobID        string `json:"job_id"`
	}
	expectJSON(t, resp, http.StatusAccepted, &att)
	if !strings.HasPrefix(att.Username, "app_") || att.Database != "" || att.KeyPattern != "web:*" || strings.Contains(string(resp.Body), "redis://") {
		t.Fatalf("attach reply: %s", resp.Body)
	}
	if j := r.wait(t, id, att.JobID); j.Status != "succeeded" {
		t.Fatalf("attach job: %s %s", deref(j.Error), j.Data)
	}
	var dsn string
	testlab.Eventually(t, 30*time.Second, "the env holds the ACL user's URL", func() bool {
		dsn = r.appEnv(t, web)["REDIS_URL"]
		return dsn != ""
	})
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "redis" || u.User.Username() != att.Username || u.Port() != strconv.Itoa(rds.Port) || u.Path != "/0" {
		t.Fatalf("env URL %q: %v", dsn, err)
	}
	app := redisFromURL(t, dsn)
	if err := app.Set(ctx, "web:session", "1", 0).Err(); err != nil {
		t.Fatalf("the attached user writes its keys: %v", err)
	}
	if v, err := app.Get(ctx, "web:session").Result(); err != nil || v != "1" {
		t.Fatalf("the attached user reads its keys: %q %v", v, err)
	}
	if err := app.Get(ctx, "billing:secret").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("the attached user read another application's key: %v", err)
	}
	if err := app.Set(ctx, "billing:secret", "x", 0).Err(); err == nil {
		t.Fatal("the attached user wrote another application's key")
	}
	if err := app.FlushAll(ctx).Err(); err == nil {
		t.Fatal("the attached user ran FLUSHALL")
	}

	// Rotate: the env follows, the old password fails.
	var rot struct {
		JobID string `json:"job_id"`
	}
	expectJSON(t, r.Post(t, "/api/v1/databases/"+id+"/users/"+att.CredentialID+"/rotate", r.Token, nil), http.StatusAccepted, &rot)
	if j := r.wait(t, id, rot.JobID); j.Status != "succeeded" {
		t.Fatalf("rotate: %s %s", deref(j.Error), j.Data)
	}
	var rotated string
	testlab.Eventually(t, 30*time.Second, "the env holds the rotated URL", func() bool {
		rotated = r.appEnv(t, web)["REDIS_URL"]
		return rotated != dsn
	})
	if err := redisFromURL(t, dsn).Ping(ctx).Err(); err == nil {
		t.Fatal("the old password still works after rotation")
	}
	if err := redisFromURL(t, rotated).Set(ctx, "web:after", "2", 0).Err(); err != nil {
		t.Fatalf("rotated URL: %v", err)
	}

	// Deleting the application drops its ACL user.
	resp = r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/applications/" + web, Token: r.Token})
	expectStatus(t, resp, http.StatusAccepted)
	testlab.Eventually(t, 60*time.Second, "the ACL user is dropped", func() bool {
		users, err := admin.Do(ctx, "ACL", "USERS").StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		return !slices.Contains(users, att.Username)
	})
	testlab.Eventually(t, 30*time.Second, "the login is forgotten", func() bool {
		return len(r.instance(t, id).Logins) == 1
	})
}

// redisFromURL is a client of a redis:// URL, closed when the test ends.
func redisFromURL(t *testing.T, raw string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("URL %q: %v", raw, err)
	}
	opts.Protocol, opts.DisableIdentity, opts.MaxRetries = 2, true, -1
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}
