package databases_test

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// rig is the control plane's database side on a real SQLite store, with
// one enrolled server whose agent the test plays.
type rig struct {
	t        *testing.T
	ctx      context.Context
	st       *store.Store
	jobs     *jobs.Service
	dbs      *databases.Service
	audit    *audit.Log
	serverID string
	admin    audit.Caller
	clock    *testlab.Clock
	key      *secrets.Key
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWith(t, nil)
}

// newRigWith is newRig with the database service's deps changed by tune.
func newRigWith(t *testing.T, tune func(*databases.Deps)) *rig {
	t.Helper()
	p := planetest.New(t, storetest.Open(t, store.SQLite), planetest.Options{})
	d := databases.Deps{Store: p.Store, Jobs: p.Jobs, Servers: p.Servers, Audit: p.Audit, Key: p.Key, Now: p.Clock.Now, Log: p.Log}
	if tune != nil {
		tune(&d)
	}
	r := &rig{t: t, ctx: p.Ctx, st: p.Store, jobs: p.Jobs, audit: p.Audit, clock: p.Clock, key: p.Key, dbs: databases.NewService(d), admin: p.Admin}
	r.serverID = p.Enroll("db-host", agentproto.Facts{})
	return r
}

const password = "p@ss:w/rd?#% secret"

func (r *rig) external(name, engine string, mut ...func(*databases.NewExternal)) (databases.NewExternal, databases.Registration, error) {
	n := databases.NewExternal{Name: name, ServerID: r.serverID, Engine: engine, Host: "127.0.0.1", Username: "app",
		Password: password, Database: "app", TLSMode: agentproto.DBTLSDisable}
	if agentproto.EngineKind(engine) == agentproto.EngineKindKV {
		n.Database, n.Username = "", ""
	}
	for _, m := range mut {
		m(&n)
	}
	reg, err := r.dbs.RegisterExternal(r.ctx, r.admin, n)
	return n, reg, err
}

func (r *rig) mustExternal(name, engine string) databases.Registration {
	r.t.Helper()
	_, reg, err := r.external(name, engine)
	if err != nil {
		r.t.Fatalf("register %s: %v", name, err)
	}
	return reg
}

func (r *rig) claim(typ string) jobs.Job {
	r.t.Helper()
	j, ok, err := r.jobs.Claim(r.ctx, r.serverID, 0)
	if err != nil || !ok {
		r.t.Fatalf("claim: %v (queued: %v), want a %s job", err, ok, typ)
	}
	if j.Type != typ {
		r.t.Fatalf("claimed a %s job, want %s", j.Type, typ)
	}
	return j
}

func (r *rig) noJob() {
	r.t.Helper()
	if j, ok, err := r.jobs.Claim(r.ctx, r.serverID, 0); err != nil || ok {
		r.t.Fatalf("claimed %s %s (err %v), want no queued job", j.Type, j.ID, err)
	}
}

func (r *rig) complete(j jobs.Job, status string, data any, errText string) {
	r.t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.jobs.Complete(r.ctx, r.serverID, j.ID, agentproto.CompleteRequest{Status: status, Data: b, Error: errText}); err != nil {
		r.t.Fatalf("complete %s: %v", j.ID, err)
	}
}

// ready registers an instance and lets its connection test succeed.
func (r *rig) ready(name, engine, serverVersion string) databases.Detail {
	r.t.Helper()
	reg := r.mustExternal(name, engine)
	r.complete(r.claim(agentproto.JobDBConnect), agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: serverVersion}, "")
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil {
		r.t.Fatal(err)
	}
	if d.State != databases.StateReady {
		r.t.Fatalf("state after a successful test: %s, want ready", d.State)
	}
	return d
}

func (r *rig) auditActions(action string) []audit.Entry {
	r.t.Helper()
	list, _, err := r.audit.List(r.ctx, 100, "", action)
	if err != nil {
		r.t.Fatal(err)
	}
	return list
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Invalid {
		t.Fatalf("got %v, want invalid %s", err, field)
	}
	for _, f := range fe.Fields {
		if f.Field == field {
			return
		}
	}
	t.Fatalf("invalid fields %+v do not name %s", fe.Fields, field)
}

func wantConflict(t *testing.T, err error, code string) {
	t.Helper()
	if fe := fault.As(err); fe == nil || fe.Kind != fault.Conflict || fe.Code != code {
		t.Fatalf("got %v, want a %s conflict", err, code)
	}
}

func TestRegisterExternalReady(t *testing.T) {
	r := newRig(t)
	reg := r.mustExternal("main", agentproto.EnginePostgres)
	if got, want := reg.Instance.State, databases.StateChecking; got != want {
		t.Fatalf("state: got %s, want %s", got, want)
	}
	if got, want := reg.Instance.Port, 5432; got != want {
		t.Fatalf("port when absent: got %d, want the engine's default %d", got, want)
	}
	if reg.JobID == "" || reg.Instance.CheckJobID != reg.JobID {
		t.Fatalf("check job: instance says %q, reply says %q", reg.Instance.CheckJobID, reg.JobID)
	}

	// Nothing works until the test passed.
	_, err := r.dbs.Query(r.ctx, r.admin, reg.Instance.ID, databases.QueryRequest{SQL: "SELECT 1"})
	wantConflict(t, err, "instance-not-ready")

	j := r.claim(agentproto.JobDBConnect)
	if strings.Contains(string(j.Payload), password) {
		t.Fatalf("the password is in the payload: %s", j.Payload)
	}
	var p agentproto.DBConnectPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if want := (agentproto.DBTarget{InstanceID: reg.Instance.ID, Engine: "postgres", Host: "127.0.0.1", Port: 5432, Username: "app",
		Database: "app", TLSMode: "disable"}); p.Target != want {
		t.Fatalf("target: got %+v, want %+v", p.Target, want)
	}
	sec, err := r.jobs.Secrets(r.ctx, r.serverID, j.ID)
	if err != nil || sec[agentproto.SecretDBPassword] != password {
		t.Fatalf("secrets: %v, %v; want the password under %s", sec, err, agentproto.SecretDBPassword)
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "16.4 (Debian 16.4-1)"}, "")
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != databases.StateReady || d.Version != "16" || d.ServerVersion != "16.4 (Debian 16.4-1)" || d.LastError != nil {
		t.Fatalf("after the test: %+v", d)
	}
	if len(d.Logins) != 1 || d.Logins[0].Username != "app" || d.Logins[0].Access != databases.AccessAdmin {
		t.Fatalf("logins: %+v", d.Logins)
	}
	if b, _ := json.Marshal(d); strings.Contains(string(b), password) {
		t.Fatalf("the detail shows the password: %s", b)
	}

	// A query takes the defaults and sends the password only as a secret.
	qj, err := r.dbs.Query(r.ctx, r.admin, d.ID, databases.QueryRequest{SQL: "SELECT 1"})
	if err != nil {
		t.Fatal(err)
	}
	var qp agentproto.DBQueryPayload
	if err := json.Unmarshal(qj.Payload, &qp); err != nil {
		t.Fatal(err)
	}
	if !qp.ReadOnly || qp.MaxRows != 100 || qp.TimeoutMS != 30000 || qp.SQL != "SELECT 1" || qp.Target.InstanceID != d.ID {
		t.Fatalf("query payload: %+v", qp)
	}
	if strings.Contains(string(qj.Payload), password) {
		t.Fatalf("the password is in the query payload: %s", qj.Payload)
	}
	if got, want := qj.TimeoutSeconds, 360; got != want {
		t.Fatalf("query job timeout: got %d s, want %d", got, want)
	}
	entries := r.auditActions(databases.ActionQueryQueued)
	if len(entries) != 1 || strings.Contains(mustJSON(t, entries), "SELECT 1") {
		t.Fatalf("query audit entries (one, without the statement): %+v", entries)
	}
	for _, e := range r.auditActions("database.*") {
		if strings.Contains(mustJSON(t, e), password) {
			t.Fatalf("an audit entry holds the password: %+v", e)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnreachableAndRetest(t *testing.T) {
	r := newRig(t)
	reg := r.mustExternal("main", agentproto.EngineMariaDB)
	first := r.claim(agentproto.JobDBConnect)
	const engineText = "Error 1045 (28000): Access denied for user 'app'@'localhost' (using password: YES)"
	r.complete(first, agentproto.StatusFailed, agentproto.DBFailure{Error: agentproto.DBError{Code: "1045", Message: engineText}}, engineText)
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != databases.StateUnreachable || d.LastError == nil || *d.LastError != engineText {
		t.Fatalf("after a failed test: state %s, last_error %v; want unreachable with the engine's text", d.State, d.LastError)
	}
	// A member sees the state, not the engine's text.
	if m, _ := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.MemberReader); m.LastError != nil || !m.Redacted || m.State != databases.StateUnreachable {
		t.Fatalf("member view: %+v", m)
	}
	_, err = r.dbs.Explore(r.ctx, r.admin.Actor.ID, d.ID, databases.ExploreRequest{What: "databases"})
	wantConflict(t, err, "instance-not-ready")

	// Test again with the same mode, then again: the first retest's late
	// end changes nothing.
	re1, err := r.dbs.UpdateTLS(r.ctx, r.admin, d.ID, agentproto.DBTLSDisable, "")
	if err != nil {
		t.Fatal(err)
	}
	if re1.Instance.State != databases.StateChecking || re1.Instance.LastError != nil {
		t.Fatalf("after retest: %+v", re1.Instance)
	}
	j1 := r.claim(agentproto.JobDBConnect)
	re2, err := r.dbs.UpdateTLS(r.ctx, r.admin, d.ID, agentproto.DBTLSRequire, "")
	if err != nil {
		t.Fatal(err)
	}
	j2 := r.claim(agentproto.JobDBConnect)
	if j2.ID != re2.JobID || j1.ID != re1.JobID {
		t.Fatal("claimed jobs are not the retests'")
	}
	r.complete(j1, agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "10.11.6-MariaDB-0+deb12u1"}, "")
	if d, _ = r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); d.State != databases.StateChecking || d.TLSMode != agentproto.DBTLSRequire {
		t.Fatalf("after the superseded test ended: state %s, tls %s; want checking, require", d.State, d.TLSMode)
	}
	r.complete(j2, agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "10.11.6-MariaDB-0+deb12u1", TLS: true}, "")
	if d, _ = r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); d.State != databases.StateReady || d.Version != "10.11" {
		t.Fatalf("after the latest test: state %s, version %s; want ready, 10.11", d.State, d.Version)
	}
	if n := len(r.auditActions(databases.ActionTLSUpdated)); n != 2 {
		t.Fatalf("tls audit entries: %d, want 2", n)
	}
}

// TestCheckEndedWithServer: a test whose job the control plane ended (the
// server was revoked, so no hook ran) leaves the instance unreachable, not
// checking forever.
func TestCheckEndedWithServer(t *testing.T) {
	r := newRig(t)
	reg := r.mustExternal("main", agentproto.EngineRedis)
	if err := r.jobs.EndServerJobs(r.ctx, r.serverID); err != nil {
		t.Fatal(err)
	}
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != databases.StateUnreachable || d.LastError == nil || !strings.Contains(*d.LastError, "cancelled") {
		t.Fatalf("after the server's jobs ended: state %s, last_error %v", d.State, d.LastError)
	}
}

// TestRefusals: every bad input is a 422 (or 409) naming the field, and
// changes nothing: no instance, no job, no audit entry.
func TestRefusals(t *testing.T) {
	r := newRig(t)
	sql := r.ready("sql", agentproto.EnginePostgres, "16.4")
	kv := r.ready("cache", agentproto.EngineRedis, "7.0.15")
	auditBefore := len(r.auditActions("database.*"))
	ptr := func(v int) *int { return &v }

	for _, c := range []struct {
		name  string
		mut   func(*databases.NewExternal)
		field string
	}{
		{"unknown engine", func(n *databases.NewExternal) { n.Engine = "oracle" }, "engine"},
		{"bad tls mode", func(n *databases.NewExternal) { n.TLSMode = "prefer" }, "tls_mode"},
		{"no tls mode", func(n *databases.NewExternal) { n.TLSMode = "" }, "tls_mode"},
		{"ca without verify", func(n *databases.NewExternal) { n.CA = "x" }, "ca"},
		{"ca not PEM", func(n *databases.NewExternal) { n.TLSMode, n.CA = agentproto.DBTLSVerifyCA, "not a certificate" }, "ca"},
		{"bad name", func(n *databases.NewExternal) { n.Name = "Main DB" }, "name"},
		{"host with port", func(n *databases.NewExternal) { n.Host = "db.example.com:5432" }, "host"},
		{"port 0", func(n *databases.NewExternal) { n.Port = ptr(0) }, "port"},
		{"port 65536", func(n *databases.NewExternal) { n.Port = ptr(65536) }, "port"},
		{"no database", func(n *databases.NewExternal) { n.Database = "" }, "database"},
		{"no username", func(n *databases.NewExternal) { n.Username = "" }, "username"},
		{"control in username", func(n *databases.NewExternal) { n.Username = "a\nb" }, "username"},
		{"unknown server", func(n *databases.NewExternal) { n.ServerID = "srv_none" }, "server_id"},
		{"kv with database", func(n *databases.NewExternal) { n.Engine = agentproto.EngineValkey }, "database"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := r.external("new", agentproto.EnginePostgres, c.mut)
			wantInvalid(t, err, c.field)
		})
	}
	_, _, err := r.external("sql", agentproto.EnginePostgres)
	wantConflict(t, err, "name-taken")

	for _, c := range []struct {
		name  string
		q     databases.QueryRequest
		field string
	}{
		{"max_rows 0", databases.QueryRequest{SQL: "SELECT 1", MaxRows: ptr(0)}, "max_rows"},
		{"max_rows 1001", databases.QueryRequest{SQL: "SELECT 1", MaxRows: ptr(1001)}, "max_rows"},
		{"timeout 0", databases.QueryRequest{SQL: "SELECT 1", TimeoutSeconds: ptr(0)}, "timeout_seconds"},
		{"timeout 301", databases.QueryRequest{SQL: "SELECT 1", TimeoutSeconds: ptr(301)}, "timeout_seconds"},
		{"no sql", databases.QueryRequest{SQL: "  "}, "sql"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.dbs.Query(r.ctx, r.admin, sql.ID, c.q)
			wantInvalid(t, err, c.field)
		})
	}
	t.Run("query on kv", func(t *testing.T) {
		_, err := r.dbs.Query(r.ctx, r.admin, kv.ID, databases.QueryRequest{SQL: "SELECT 1"})
		wantInvalid(t, err, "id")
	})
	t.Run("explore on kv", func(t *testing.T) {
		_, err := r.dbs.Explore(r.ctx, r.admin.Actor.ID, kv.ID, databases.ExploreRequest{What: "tables"})
		wantInvalid(t, err, "id")
	})
	t.Run("kv on sql", func(t *testing.T) {
		_, err := r.dbs.KV(r.ctx, r.admin, sql.ID, databases.KVRequest{Action: "info"})
		wantInvalid(t, err, "id")
	})
	t.Run("explore columns without table", func(t *testing.T) {
		_, err := r.dbs.Explore(r.ctx, r.admin.Actor.ID, sql.ID, databases.ExploreRequest{What: "columns"})
		wantInvalid(t, err, "table")
	})
	t.Run("explore unknown what", func(t *testing.T) {
		_, err := r.dbs.Explore(r.ctx, r.admin.Actor.ID, sql.ID, databases.ExploreRequest{What: "indexes"})
		wantInvalid(t, err, "what")
	})
	for _, c := range []struct {
		name  string
		q     databases.KVRequest
		field string
	}{
		{"unknown action", databases.KVRequest{Action: "flushall"}, "action"},
		{"delete without keys", databases.KVRequest{Action: "delete"}, "keys"},
		{"get without key", databases.KVRequest{Action: "get"}, "key"},
		{"scan count 0", databases.KVRequest{Action: "scan", Count: ptr(0)}, "count"},
		{"scan bad cursor", databases.KVRequest{Action: "scan", Cursor: "abc"}, "cursor"},
		{"db 16", databases.KVRequest{Action: "info", DB: ptr(16)}, "db"},
		{"keys with get", databases.KVRequest{Action: "get", Key: "a", Keys: []string{"b"}}, "keys"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.dbs.KV(r.ctx, r.admin, kv.ID, c.q)
			wantInvalid(t, err, c.field)
		})
	}
	_, err = r.dbs.UpdateTLS(r.ctx, r.admin, sql.ID, "allow", "")
	wantInvalid(t, err, "tls_mode")

	list, err := r.dbs.List(r.ctx, jobs.AdminReader)
	if err != nil || len(list) != 2 {
		t.Fatalf("instances after refusals: %d (%v), want 2", len(list), err)
	}
	for _, d := range list {
		if d.State != databases.StateReady || d.TLSMode != agentproto.DBTLSDisable {
			t.Fatalf("an instance changed: %+v", d)
		}
	}
	r.noJob()
	if n := len(r.auditActions("database.*")); n != auditBefore {
		t.Fatalf("audit entries: %d after refusals, want %d", n, auditBefore)
	}
}

func TestKVAndExplorePayloads(t *testing.T) {
	r := newRig(t)
	sql := r.ready("main", agentproto.EngineMySQL, "8.4.2")
	kv := r.ready("cache", agentproto.EngineValkey, "8.0.1")
	if kv.Version != "8" || kv.Logins[0].Username != "default" {
		t.Fatalf("valkey instance: version %q, login %q; want 8, default", kv.Version, kv.Logins[0].Username)
	}
	j, err := r.dbs.KV(r.ctx, r.admin, kv.ID, databases.KVRequest{Action: "scan", Match: "user:*"})
	if err != nil {
		t.Fatal(err)
	}
	var p agentproto.DBKVPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Action != "scan" || p.Count != 100 || p.Match != "user:*" || p.Target.Username != "default" {
		t.Fatalf("scan payload: %+v", p)
	}
	j, err = r.dbs.KV(r.ctx, r.admin, kv.ID, databases.KVRequest{Action: "delete", Keys: []string{"secret-key-name"}})
	if err != nil {
		t.Fatal(err)
	}
	if e := r.auditActions(databases.ActionKVQueued); len(e) != 2 || strings.Contains(mustJSON(t, e), "secret-key-name") {
		t.Fatalf("kv audit entries (two, without keys): %+v", e)
	}
	if sql.Version != "8.4" {
		t.Fatalf("mysql version: %q, want 8.4", sql.Version)
	}
	if _, err := r.dbs.Explore(r.ctx, r.admin.Actor.ID, sql.ID, databases.ExploreRequest{What: "tables", Schema: "public"}); err == nil {
		t.Fatal("schema on MySQL was accepted")
	} else {
		wantInvalid(t, err, "schema")
	}
	j, err = r.dbs.Explore(r.ctx, r.admin.Actor.ID, sql.ID, databases.ExploreRequest{What: "columns", Database: "shop", Table: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	var ep agentproto.DBExplorePayload
	if err := json.Unmarshal(j.Payload, &ep); err != nil {
		t.Fatal(err)
	}
	if ep.What != "columns" || ep.Database != "shop" || ep.Table != "orders" || ep.Target.Engine != "mysql" {
		t.Fatalf("explore payload: %+v", ep)
	}
}

func TestConnectionAudited(t *testing.T) {
	r := newRig(t)
	d := r.ready("main", agentproto.EnginePostgres, "16.4")
	conn, err := r.dbs.Connection(r.ctx, r.admin, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(conn.Logins) != 1 || conn.Logins[0].Password != password {
		t.Fatalf("logins: %+v", conn.Logins)
	}
	u, err := url.Parse(conn.Logins[0].URL)
	if err != nil {
		t.Fatalf("url %q: %v", conn.Logins[0].URL, err)
	}
	if pw, _ := u.User.Password(); pw != password || u.User.Username() != "app" || u.Path != "/app" || u.Host != "127.0.0.1:5432" ||
		u.Scheme != "postgres" || u.Query().Get("sslmode") != "disable" {
		t.Fatalf("url %q parses to user %v, host %s, path %s", conn.Logins[0].URL, u.User, u.Host, u.Path)
	}
	entries := r.auditActions(databases.ActionConnectionRead)
	if len(entries) != 1 {
		t.Fatalf("connection read entries: %d, want 1", len(entries))
	}
	e := entries[0]
	if e.Actor.ID != r.admin.Actor.ID || e.IP != r.admin.IP || e.UserAgent != r.admin.UserAgent || e.Target.ID != d.ID {
		t.Fatalf("audit entry: %+v", e)
	}
	if strings.Contains(mustJSON(t, e), password) {
		t.Fatalf("the audit entry holds the password: %+v", e)
	}
}

func TestConnectionURL(t *testing.T) {
	for _, c := range []struct {
		inst     databases.Instance
		user, pw string
		db, want string
	}{
		{databases.Instance{Engine: "postgres", Host: "db.example.com", Port: 5432, TLSMode: "verify-full"}, "app", "a b/c@d", "my db",
			"postgres://app:a%20b%2Fc%40d@db.example.com:5432/my%20db?sslmode=verify-full"},
		{databases.Instance{Engine: "mariadb", Host: "::1", Port: 3306, TLSMode: "require"}, "root", "p:w", "shop",
			"mysql://root:p%3Aw@[::1]:3306/shop?ssl-mode=REQUIRED"},
		{databases.Instance{Engine: "redis", Host: "127.0.0.1", Port: 6379, TLSMode: "disable"}, "default", "x#y", "",
			"redis://default:x%23y@127.0.0.1:6379/0"},
		{databases.Instance{Engine: "valkey", Host: "127.0.0.1", Port: 6380, TLSMode: "verify-ca"}, "default", "pw", "",
			"rediss://default:pw@127.0.0.1:6380/0"},
	} {
		if got := databases.ConnectionURL(c.inst, c.user, c.pw, c.db); got != c.want {
			t.Errorf("%s: got %s, want %s", c.inst.Engine, got, c.want)
		}
	}
}

func TestJobOfInstance(t *testing.T) {
	r := newRig(t)
	a := r.ready("a", agentproto.EnginePostgres, "16.4")
	b := r.ready("b", agentproto.EnginePostgres, "15.8")
	qa, err := r.dbs.Query(r.ctx, r.admin, a.ID, databases.QueryRequest{SQL: "SELECT 1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.dbs.Job(r.ctx, b.ID, qa.ID, 0, jobs.AdminReader); !fault.Is(err, fault.NotFound) {
		t.Fatalf("another instance's job: got %v, want not found", err)
	}
	if _, err := r.dbs.Job(r.ctx, a.ID, "job_none", 0, jobs.AdminReader); !fault.Is(err, fault.NotFound) {
		t.Fatalf("an unknown job: got %v, want not found", err)
	}

	// Waiting on a queued job that nobody runs ends at the deadline with
	// its state then.
	start := time.Now()
	res, err := r.dbs.Job(r.ctx, a.ID, qa.ID, time.Second, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.Queued || time.Since(start) < time.Second {
		t.Fatalf("wait on a queued job: status %s after %s; want queued after at least 1s", res.Status, time.Since(start))
	}

	// Waiting with a long deadline answers as soon as the job ends.
	j := r.claim(agentproto.JobDBQuery)
	type answer struct {
		res     databases.JobResult
		err     error
		elapsed time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		start := time.Now()
		res, err := r.dbs.Job(r.ctx, a.ID, j.ID, 30*time.Second, jobs.AdminReader)
		done <- answer{res, err, time.Since(start)}
	}()
	rows := agentproto.DBQueryResult{Columns: []agentproto.DBColumn{{Name: "?column?", Type: "int4"}}, Rows: [][]any{{1}}, RowCount: 1, Notices: []string{}}
	r.complete(j, agentproto.StatusSucceeded, rows, "")
	var got answer
	select {
	case got = <-done:
	case <-time.After(25 * time.Second):
		t.Fatal("the wait did not answer when the job ended")
	}
	if got.err != nil || got.res.Status != jobs.Succeeded || !strings.Contains(string(got.res.Data), `"row_count":1`) {
		t.Fatalf("wait: %+v, %v", got.res, got.err)
	}
	t.Logf("the wait answered %s after it began", got.elapsed)

	// A member gets the status, not the rows.
	m, err := r.dbs.Job(r.ctx, a.ID, j.ID, 0, jobs.MemberReader)
	if err != nil || m.Data != nil || !m.Redacted || m.Status != jobs.Succeeded {
		t.Fatalf("member view: %+v, %v", m, err)
	}
}

func TestDeleteExternal(t *testing.T) {
	r := newRig(t)
	d := r.ready("main", agentproto.EnginePostgres, "16.4")
	del, err := r.dbs.Delete(r.ctx, r.admin, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if del.ID != d.ID || !slices.Contains(del.Forgotten, "registration") || !strings.Contains(del.Detail, "not touched") {
		t.Fatalf("deletion: %+v", del)
	}
	if _, err := r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); !fault.Is(err, fault.NotFound) {
		t.Fatalf("after delete: %v, want not found", err)
	}
	if _, err := r.dbs.Delete(r.ctx, r.admin, d.ID); !fault.Is(err, fault.NotFound) {
		t.Fatalf("delete twice: %v, want not found", err)
	}
	// The name is free again.
	r.mustExternal("main", agentproto.EnginePostgres)
}

func TestEnginesAndImages(t *testing.T) {
	c := databases.DefaultCatalog()
	engines := c.Engines()
	var names []string
	for _, e := range engines {
		names = append(names, e.Name)
		defaults := 0
		for _, v := range e.Versions {
			if v.Default {
				defaults++
			}
			if v.Image == "" {
				t.Errorf("%s %s has no image", e.Name, v.Version)
			}
		}
		if defaults != 1 || !e.Versions[0].Default {
			t.Errorf("%s: %d defaults, the first (newest) must be the one", e.Name, defaults)
		}
	}
	if got, want := strings.Join(names, ","), "postgres,mysql,mariadb,redis,valkey"; got != want {
		t.Fatalf("engines: got %s, want %s", got, want)
	}

	custom, err := databases.ParseImages([]byte(`{"postgres": {"16": "registry.example.com/pg:16-local"}}`))
	if err != nil {
		t.Fatal(err)
	}
	pg, _ := custom.Engine("postgres")
	for _, v := range pg.Versions {
		want := "postgres:" + v.Version
		if v.Version == "16" {
			want = "registry.example.com/pg:16-local"
		}
		if v.Image != want {
			t.Errorf("postgres %s: image %s, want %s", v.Version, v.Image, want)
		}
	}
	if def, _ := databases.DefaultCatalog().Engine("postgres"); def.Versions[1].Image != "postgres:16" {
		t.Fatal("an image file changed the defaults")
	}
	for _, c := range []struct{ name, file, want string }{
		{"unknown engine", `{"oracle": {"19": "oracle:19"}}`, `unknown engine "oracle"`},
		{"unknown version", `{"redis": {"6": "redis:6"}}`, `unknown version "6"`},
		{"bad image", `{"redis": {"7.4": "Not An Image"}}`, `image "Not An Image"`},
		{"not an object", `["postgres"]`, "not a JSON object"},
		{"two values", `{} {}`, "more than one JSON value"},
	} {
		if _, err := databases.ParseImages([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestConcurrentRetests fires TLS changes at once: each is queued or
// refused as superseded, and only the test the instance names at the end
// decides its state.
func TestConcurrentRetests(t *testing.T) {
	r := newRig(t)
	d := r.ready("main", agentproto.EnginePostgres, "16.4")
	const n = 8
	regs := make([]databases.Registration, n)
	errs := make([]error, n)
	testlab.InParallel(n, func(i int) {
		regs[i], errs[i] = r.dbs.UpdateTLS(r.ctx, r.admin, d.ID, agentproto.DBTLSRequire, "")
	})
	queued := map[string]bool{}
	for i, err := range errs {
		if fe := fault.As(err); err != nil && (fe == nil || fe.Code != "check-superseded") {
			t.Fatalf("retest %d: %v", i, err)
		}
		if err == nil {
			queued[regs[i].JobID] = true
		}
	}
	inst, err := r.dbs.Get(r.ctx, d.ID, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if !queued[inst.CheckJobID] {
		t.Fatalf("the instance's check %s is not one of the queued retests %v", inst.CheckJobID, queued)
	}
	var latest jobs.Job
	for range queued {
		j := r.claim(agentproto.JobDBConnect)
		if j.ID == inst.CheckJobID {
			latest = j
			continue
		}
		r.complete(j, agentproto.StatusFailed, agentproto.DBFailure{Error: agentproto.DBError{Message: "stale"}}, "stale")
	}
	r.noJob()
	if inst, _ = r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); inst.State != databases.StateChecking {
		t.Fatalf("after the superseded tests ended: %s, want checking", inst.State)
	}
	r.complete(latest, agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "16.5"}, "")
	if inst, _ = r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); inst.State != databases.StateReady || inst.ServerVersion != "16.5" {
		t.Fatalf("after the latest test: %+v", inst)
	}
}
