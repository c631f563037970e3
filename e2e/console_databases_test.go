package e2e

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/moby/moby/client"
)

// TestConsoleDatabases drives the databases screens (web/e2e/databases.mjs)
// against a real control plane and agent, a real PostgreSQL and a real
// Redis: register both through the form and see them become ready live;
// a write refused while read-only is on (the engine's error shown), an
// error's position marked, a write that succeeds with read-only off (the
// table and rows checked in PostgreSQL itself), the result grid with its
// column types, a long statement ended by its timeout, the explorer, a
// login whose password is shown once and then a new one (each the same
// as the stored one), a database created and dropped (checked in
// PostgreSQL), the audited connection details, an export downloaded and a
// file imported (checked in PostgreSQL), an application attached (its env
// checked), the key browser finding keys by pattern, showing a hash and
// deleting a key (checked in Redis), a managed Redis created, stopped and
// started (its container checked), the instance's charts, and a member
// who reads instances and logins' names with no controls and no secrets.
// axe-core runs on every screen and state.
func TestConsoleDatabases(t *testing.T) {
	t.Parallel()
	// Samples every second, so that the instance's charts have points.
	r := newManagedRigWith(t, store.SQLite, "--database-metrics-interval", "1s")
	// A PostgreSQL server of this test's own: the login the console
	// creates is the server's, not one database's.
	server := testlab.StartPostgresServer(t, nil)
	pg, err := sql.Open("pgx", server.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	if _, err := pg.Exec("CREATE DATABASE shop"); err != nil {
		t.Fatal(err)
	}
	pg.Close()
	if pg, err = sql.Open("pgx", server.URL("shop")); err != nil {
		t.Fatal(err)
	}
	login := "console_" + r.run

	rds := testlab.StartRedis(t, nil)
	kv := rds.Client(t)
	ctx := context.Background()
	for _, err := range []error{
		kv.Set(ctx, "shop:greeting", "hello", time.Hour).Err(),
		kv.HSet(ctx, "shop:cart:1", "item", "apple", "qty", "2").Err(),
		kv.RPush(ctx, "shop:queue", "a", "b", "c").Err(),
		kv.SAdd(ctx, "shop:tags", "red", "green").Err(),
		kv.Set(ctx, "other:key", "x", 0).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	appID := r.createApp(t, "shopweb", nil)
	managed := "sessions-" + r.run
	memberUser := createUser(t, r.ControlPlane, "member-databases@example.com", testPassword, false)
	env := []string{
		"CAPSTAN_MEMBER_EMAIL=" + memberUser.Email, "CAPSTAN_MEMBER_PASSWORD=" + memberUser.Password,
		"CAPSTAN_MEMBER_TOTP_SECRET=" + memberUser.TOTPSecret,
		"CAPSTAN_PG_PORT=" + strconv.Itoa(server.Port), "CAPSTAN_PG_USER=" + server.User, "CAPSTAN_PG_PASSWORD=" + server.Password,
		"CAPSTAN_PG_DATABASE=shop",
		"CAPSTAN_REDIS_PORT=" + strconv.Itoa(rds.Port), "CAPSTAN_REDIS_PASSWORD=" + rds.Password, "CAPSTAN_LOGIN=" + login,
		"CAPSTAN_MANAGED_NAME=" + managed,
	}
	var pgID, managedID string
	steps := runConsoleScript(t, r.Fleet, "databases.mjs", env, func(line string, fields []string) {
		switch fields[0] {
		case "pg-ready":
			pgID = fields[1]
			if d := r.instance(t, pgID); d.State != "ready" || d.Engine != "postgres" || d.Managed {
				t.Errorf("the instance the console registered: %+v", d)
			}
		case "write-refused":
			// Nothing was created while read-only was on.
			var n int
			if err := pg.QueryRow(`SELECT count(*) FROM pg_tables WHERE tablename = 'console_orders'`).Scan(&n); err != nil || n != 0 {
				t.Errorf("after the refused write: %d tables named console_orders (%v)", n, err)
			}
		case "write-ok":
			var n int
			if err := pg.QueryRow(`SELECT count(*) FROM console_orders`).Scan(&n); err != nil || n != 2 {
				t.Errorf("after the writes with read-only off: %d rows in console_orders (%v)", n, err)
			}
		case "login-created", "login-rotated":
			// The password shown once is the one stored (compared by hash,
			// so that it is not in the test's log).
			var conn DatabaseConnection
			expectJSON(t, r.Get(t, "/api/v1/databases/"+pgID+"/connection", r.Token), http.StatusOK, &conn)
			found := false
			for _, l := range conn.Logins {
				if l.Username == fields[1] {
					found = true
					sum := sha256.Sum256([]byte(l.Password))
					if hex.EncodeToString(sum[:]) != fields[2] {
						t.Errorf("the password the console showed for %s is not the stored one", l.Username)
					}
				}
			}
			if !found {
				t.Errorf("login %s not among the instance's logins: %+v", fields[1], conn.Logins)
			}
		case "connection-shown":
			entries := auditEntries(t, r.ControlPlane, r.Token, "database.connection.read")
			browser := 0
			for _, e := range entries {
				if e.Target.ID == pgID && e.Actor.Email != "" && strings.HasPrefix(e.Actor.Email, "browser-") {
					browser++
				}
			}
			if browser != 1 {
				t.Errorf("connection reads by the console's user in the audit log: %d, want 1 (%+v)", browser, entries)
			}
		case "imported":
			var n int
			if err := pg.QueryRow(`SELECT count(*) FROM imported_items`).Scan(&n); err != nil || n != 3 {
				t.Errorf("after the import: %d rows in imported_items (%v)", n, err)
			}
		case "database-created", "database-dropped":
			var n int
			if err := pg.QueryRow(`SELECT count(*) FROM pg_database WHERE datname = $1`, fields[1]).Scan(&n); err != nil ||
				n != map[string]int{"database-created": 1, "database-dropped": 0}[fields[0]] {
				t.Errorf("%s: %d databases named %s (%v)", fields[0], n, fields[1], err)
			}
		case "attached":
			if u := r.appEnv(t, appID)["DATABASE_URL"]; !strings.HasPrefix(u, "postgres://app_") || !strings.Contains(u, "/shop") {
				t.Errorf("the application's DATABASE_URL after the console attached it: %q", u)
			}
		case "managed-ready", "managed-stopped", "managed-started":
			if fields[0] == "managed-ready" {
				managedID = fields[1]
			}
			d := r.instance(t, managedID)
			want := map[string]string{"managed-ready": "ready", "managed-stopped": "stopped", "managed-started": "ready"}[fields[0]]
			if !d.Managed || d.State != want {
				t.Errorf("%s: the managed instance is %+v", fields[0], d)
			}
			insp, err := r.docker.ContainerInspect(ctx, "capstan-db-"+managed, client.ContainerInspectOptions{})
			if err != nil {
				t.Errorf("%s: container capstan-db-%s: %v", fields[0], managed, err)
			} else if running := insp.Container.State != nil && insp.Container.State.Running; running != (want == "ready") {
				t.Errorf("%s: container capstan-db-%s running %v", fields[0], managed, running)
			}
		case "key-deleted":
			if n, err := kv.Exists(ctx, fields[1]).Result(); err != nil || n != 0 {
				t.Errorf("%s after the console deleted it: exists %d (%v)", fields[1], n, err)
			}
			if n, err := kv.Exists(ctx, "shop:cart:1").Result(); err != nil || n != 1 {
				t.Errorf("shop:cart:1 went too: exists %d (%v)", n, err)
			}
		}
	}, func() string { return "agent log:\n" + r.agent.Logs() })
	want := "pg-ready write-refused error-marked write-ok grid long-query explored login-created login-rotated database-created database-dropped connection-shown exported imported attached redis-ready kv-browsed key-deleted managed-ready managed-stopped managed-started member-read-only done"
	if got := strings.Join(steps, " "); got != want {
		t.Fatalf("databases.mjs steps:\n%s\nwant\n%s", got, want)
	}
}
