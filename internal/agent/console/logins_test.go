package console_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// adminJob runs a database or login job with the admin password and, for
// logins, the new password.
func adminJob(t *testing.T, jobType string, payload any, adminPW, newPW string) agenttest.Outcome {
	t.Helper()
	return runJobSecrets(t, jobType, payload, map[string]string{agentproto.SecretDBPassword: adminPW, agentproto.SecretDBNewPassword: newPW})
}

// sqlOK says whether stmt succeeds on db.
func sqlErr(db *sql.DB, stmt string) error {
	_, err := db.Exec(stmt)
	return err
}

// TestPostgresLogins: a database made here is closed to other logins;
// readonly reads its database only, readwrite writes it and makes
// tables, future tables of the owner are covered; rotate replaces the
// password; drop removes the login and the database; a name that is not
// an identifier is refused before anything reaches the engine.
func TestPostgresLogins(t *testing.T) {
	pg := testlab.StartPostgresServer(t, nil)
	target := agentproto.DBTarget{InstanceID: "db_test", Engine: agentproto.EnginePostgres, Host: "127.0.0.1", Port: pg.Port,
		Username: pg.User, Database: "postgres"}
	admin := testlab.OpenSQL(t, "pgx", pg.URL("postgres"))
	var created agentproto.DBAdminResult
	for _, name := range []string{"shop", "other"} {
		adminJob(t, agentproto.JobDBDatabaseCreate, agentproto.DBDatabasePayload{Target: target, Name: name}, pg.Password, "").OK(t, &created)
	}
	shop := testlab.OpenSQL(t, "pgx", pg.URL("shop"))
	if err := sqlErr(shop, "CREATE TABLE items (id serial PRIMARY KEY, name text); INSERT INTO items (name) VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	as := func(user, pw, database string) *sql.DB {
		s := testlab.PostgresServer{Port: pg.Port, User: user, Password: pw}
		return testlab.OpenSQL(t, "pgx", s.URL(database))
	}
	for _, l := range []struct{ user, access string }{{"reader", "readonly"}, {"writer", "readwrite"}, {"owner_x", "admin"}} {
		adminJob(t, agentproto.JobDBUserCreate, agentproto.DBUserPayload{Target: target, Username: l.user, Database: "shop",
			Access: l.access}, pg.Password, "pw-"+l.user).OK(t, &created)
		for _, s := range created.Statements {
			if strings.Contains(s, "pw-"+l.user) {
				t.Fatalf("a statement in the result holds the password: %s", s)
			}
		}
	}
	reader, writer := as("reader", "pw-reader", "shop"), as("writer", "pw-writer", "shop")
	if err := reader.QueryRow("SELECT count(*) FROM items").Err(); err != nil {
		t.Errorf("readonly reads: %v", err)
	}
	if err := sqlErr(reader, "INSERT INTO items (name) VALUES ('r')"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("readonly writes: %v, want permission denied", err)
	}
	if err := as("reader", "pw-reader", "other").Ping(); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("readonly connects to another database: %v, want permission denied", err)
	}
	if err := sqlErr(writer, "INSERT INTO items (name) VALUES ('w')"); err != nil {
		t.Errorf("readwrite writes: %v", err)
	}
	if err := sqlErr(writer, "CREATE TABLE notes (n text)"); err != nil {
		t.Errorf("readwrite creates a table: %v", err)
	}
	if err := as("writer", "pw-writer", "other").Ping(); err == nil {
		t.Error("readwrite connects to another database")
	}
	// A table the owner makes later is readable by readonly.
	if err := sqlErr(shop, "CREATE TABLE later (x int); INSERT INTO later VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := reader.QueryRow("SELECT x FROM later").Err(); err != nil {
		t.Errorf("readonly on a table made after the grant: %v", err)
	}
	if err := sqlErr(as("owner_x", "pw-owner_x", "shop"), "TRUNCATE later; CREATE TABLE mine (x int); DROP TABLE mine"); err != nil {
		t.Errorf("admin truncates and makes and drops its own table: %v", err)
	}

	// Rotate: the old password fails, the new one works.
	adminJob(t, agentproto.JobDBUserRotate, agentproto.DBUserPayload{Target: target, Username: "reader"}, pg.Password, "pw-new").OK(t, &created)
	if err := as("reader", "pw-reader", "shop").Ping(); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("old password after rotate: %v", err)
	}
	if err := as("reader", "pw-new", "shop").Ping(); err != nil {
		t.Errorf("new password after rotate: %v", err)
	}
	if e := adminJob(t, agentproto.JobDBUserRotate, agentproto.DBUserPayload{Target: target, Username: "ghost"}, pg.Password, "x").Failure(t); !strings.Contains(e.Message, "does not exist") {
		t.Errorf("rotate of a missing role: %+v", e)
	}

	// Injection and reserved names never reach the engine.
	for _, p := range []agentproto.DBUserPayload{
		{Target: target, Username: `a"; DROP TABLE items; --`, Database: "shop", Access: "readonly"},
		{Target: target, Username: "pg_evil", Database: "shop", Access: "readonly"},
		{Target: target, Username: strings.Repeat("u", 64), Database: "shop", Access: "readonly"},
		{Target: target, Username: "fine", Database: `shop"; DROP DATABASE other; --`, Access: "readonly"},
		{Target: target, Username: "fine", Database: "shop", Access: "superuser"},
	} {
		if e := adminJob(t, agentproto.JobDBUserCreate, p, pg.Password, "x").Failure(t); !strings.HasPrefix(e.Message, "invalid ") {
			t.Errorf("%+v: %+v, want invalid", p, e)
		}
	}
	var n int
	if err := admin.QueryRow("SELECT count(*) FROM pg_roles WHERE rolname IN ('fine', 'pg_evil')").Scan(&n); err != nil || n != 0 {
		t.Errorf("roles after refused creates: %d (%v)", n, err)
	}

	// Drop: the login with what it owns, then the database.
	var dropped agentproto.DBAdminResult
	adminJob(t, agentproto.JobDBUserDrop, agentproto.DBUserPayload{Target: target, Username: "writer", Database: "shop"}, pg.Password, "").OK(t, &dropped)
	if dropped.Existed == nil || !*dropped.Existed {
		t.Errorf("drop writer: %+v", dropped)
	}
	if err := admin.QueryRow("SELECT count(*) FROM pg_roles WHERE rolname = 'writer'").Scan(&n); err != nil || n != 0 {
		t.Errorf("writer after drop: %d (%v)", n, err)
	}
	adminJob(t, agentproto.JobDBUserDrop, agentproto.DBUserPayload{Target: target, Username: "writer", Database: "shop"}, pg.Password, "").OK(t, &dropped)
	if dropped.Existed == nil || *dropped.Existed {
		t.Errorf("second drop of writer: %+v", dropped)
	}
	shop.Close()
	adminJob(t, agentproto.JobDBDatabaseDrop, agentproto.DBDatabasePayload{Target: target, Name: "shop"}, pg.Password, "").OK(t, &dropped)
	if err := admin.QueryRow("SELECT count(*) FROM pg_database WHERE datname = 'shop'").Scan(&n); err != nil || n != 0 || !*dropped.Existed {
		t.Errorf("shop after drop: %d (%v), %+v", n, err, dropped)
	}
}

// TestMariaDBLogins: grants on `db`.* per access level, rotate, drop,
// and a database name with '_' granted literally, not as a wildcard.
func TestMariaDBLogins(t *testing.T) {
	m := testlab.StartMariaDB(t, nil)
	target := agentproto.DBTarget{InstanceID: "db_test", Engine: agentproto.EngineMariaDB, Host: "127.0.0.1", Port: m.Port, Username: m.User}
	var res agentproto.DBAdminResult
	for _, name := range []string{"my_shop", "myXshop"} {
		adminJob(t, agentproto.JobDBDatabaseCreate, agentproto.DBDatabasePayload{Target: target, Name: name}, m.Password, "").OK(t, &res)
	}
	admin := testlab.OpenSQL(t, "mysql", m.DSN("my_shop"))
	if err := sqlErr(admin, "CREATE TABLE items (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if err := sqlErr(testlab.OpenSQL(t, "mysql", m.DSN("myXshop")), "CREATE TABLE items (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	as := func(user, pw, database string) *sql.DB {
		a := testlab.MariaDB{Port: m.Port, User: user, Password: pw}
		return testlab.OpenSQL(t, "mysql", a.DSN(database))
	}
	for _, l := range []struct{ user, access string }{{"reader", "readonly"}, {"writer", "readwrite"}} {
		// A password with quotes and backslashes reaches the engine intact.
		adminJob(t, agentproto.JobDBUserCreate, agentproto.DBUserPayload{Target: target, Username: l.user, Database: "my_shop",
			Access: l.access}, m.Password, `p'w\"`+l.user).OK(t, &res)
	}
	reader, writer := as("reader", `p'w\"reader`, "my_shop"), as("writer", `p'w\"writer`, "my_shop")
	if err := reader.QueryRow("SELECT COUNT(*) FROM items").Err(); err != nil {
		t.Errorf("readonly reads: %v", err)
	}
	if err := sqlErr(reader, "INSERT INTO items VALUES (1)"); err == nil || !strings.Contains(err.Error(), "1142") {
		t.Errorf("readonly writes: %v, want 1142 command denied", err)
	}
	if err := sqlErr(writer, "INSERT INTO items VALUES (2)"); err != nil {
		t.Errorf("readwrite writes: %v", err)
	}
	if err := sqlErr(writer, "INSERT INTO myXshop.items VALUES (3)"); err == nil {
		t.Error("readwrite writes to myXshop: the '_' of my_shop was a wildcard")
	}
	if err := reader.QueryRow("SELECT COUNT(*) FROM myXshop.items").Err(); err == nil {
		t.Error("readonly reads another database")
	}
	adminJob(t, agentproto.JobDBUserRotate, agentproto.DBUserPayload{Target: target, Username: "reader"}, m.Password, "pw-new").OK(t, &res)
	if err := as("reader", `p'w\"reader`, "my_shop").Ping(); err == nil || !strings.Contains(err.Error(), "1045") {
		t.Errorf("old password after rotate: %v", err)
	}
	if err := as("reader", "pw-new", "my_shop").Ping(); err != nil {
		t.Errorf("new password after rotate: %v", err)
	}
	if e := adminJob(t, agentproto.JobDBDatabaseCreate, agentproto.DBDatabasePayload{Target: target, Name: "a`; DROP DATABASE my_shop; --"},
		m.Password, "").Failure(t); !strings.HasPrefix(e.Message, "invalid name") {
		t.Errorf("injection: %+v", e)
	}
	adminJob(t, agentproto.JobDBUserDrop, agentproto.DBUserPayload{Target: target, Username: "reader"}, m.Password, "").OK(t, &res)
	if res.Existed == nil || !*res.Existed {
		t.Errorf("drop reader: %+v", res)
	}
	if err := as("reader", "pw-new", "my_shop").Ping(); err == nil {
		t.Error("reader connects after drop")
	}
	adminJob(t, agentproto.JobDBDatabaseDrop, agentproto.DBDatabasePayload{Target: target, Name: "myXshop"}, m.Password, "").OK(t, &res)
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'myXshop'").Scan(&n); err != nil || n != 0 {
		t.Errorf("myXshop after drop: %d (%v)", n, err)
	}
}

// TestRedisLogins: an ACL user reaches only its key pattern; readonly
// cannot write; rotate; drop.
func TestRedisLogins(t *testing.T) {
	r := testlab.StartRedis(t, nil)
	target := agentproto.DBTarget{InstanceID: "db_test", Engine: agentproto.EngineRedis, Host: "127.0.0.1", Port: r.Port, Username: "default"}
	c := r.Client(t)
	ctx := context.Background()
	if err := c.MSet(ctx, "app:1", "one", "secret:1", "s").Err(); err != nil {
		t.Fatal(err)
	}
	var res agentproto.DBAdminResult
	adminJob(t, agentproto.JobDBUserCreate, agentproto.DBUserPayload{Target: target, Username: "app_ro", KeyPattern: "app:*", Access: "readonly"},
		r.Password, "pw-ro").OK(t, &res)
	adminJob(t, agentproto.JobDBUserCreate, agentproto.DBUserPayload{Target: target, Username: "app_rw", KeyPattern: "app:*", Access: "readwrite"},
		r.Password, "pw-rw").OK(t, &res)
	as := func(user, pw string) *redis.Client {
		u := redis.NewClient(&redis.Options{Addr: c.Options().Addr, Username: user, Password: pw, Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { u.Close() })
		return u
	}
	ro, rw := as("app_ro", "pw-ro"), as("app_rw", "pw-rw")
	if v, err := ro.Get(ctx, "app:1").Result(); err != nil || v != "one" {
		t.Errorf("readonly GET app:1 = %q, %v", v, err)
	}
	if err := ro.Set(ctx, "app:2", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("readonly SET: %v, want NOPERM", err)
	}
	if err := ro.Get(ctx, "secret:1").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("readonly GET outside its pattern: %v, want NOPERM", err)
	}
	if err := rw.Set(ctx, "app:2", "x", 0).Err(); err != nil {
		t.Errorf("readwrite SET: %v", err)
	}
	if err := rw.Set(ctx, "secret:2", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("readwrite SET outside its pattern: %v, want NOPERM", err)
	}
	if err := rw.FlushAll(ctx).Err(); err == nil {
		t.Error("readwrite runs FLUSHALL")
	}
	if e := adminJob(t, agentproto.JobDBUserCreate, agentproto.DBUserPayload{Target: target, Username: "app_ro", KeyPattern: "*", Access: "readwrite"},
		r.Password, "x").Failure(t); !strings.Contains(e.Message, "exists") {
		t.Errorf("create over an existing user: %+v", e)
	}
	adminJob(t, agentproto.JobDBUserRotate, agentproto.DBUserPayload{Target: target, Username: "app_ro"}, r.Password, "pw-ro2").OK(t, &res)
	if err := as("app_ro", "pw-ro").Ping(ctx).Err(); err == nil {
		t.Error("old password after rotate works")
	}
	if err := as("app_ro", "pw-ro2").Ping(ctx).Err(); err != nil {
		t.Errorf("new password after rotate: %v", err)
	}
	adminJob(t, agentproto.JobDBUserDrop, agentproto.DBUserPayload{Target: target, Username: "app_ro"}, r.Password, "").OK(t, &res)
	if res.Existed == nil || !*res.Existed {
		t.Errorf("drop: %+v", res)
	}
	if err := as("app_ro", "pw-ro2").Ping(ctx).Err(); err == nil {
		t.Error("dropped user connects")
	}
	if e := adminJob(t, agentproto.JobDBDatabaseCreate, agentproto.DBDatabasePayload{Target: target, Name: "x"}, r.Password, "").Failure(t); !strings.Contains(e.Message, "numbered") {
		t.Errorf("database create on redis: %+v", e)
	}
}
