package testlab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// Passwords with characters that break naive quoting in shell, SQL and
// configuration files.
const (
	enginePassword = `s3cret 'quoted' "double" \back $HOME ;`
	wrongPassword  = "not-the-password"
)

// TestEngineImagePostgres: the official postgres image's contract, seen
// from the host through the published port.
func TestEngineImagePostgres(t *testing.T) {
	t.Parallel()
	c := testlab.StartEngine(t, "postgres", testlab.EngineOptions{Env: []string{
		"POSTGRES_PASSWORD=" + enginePassword, "POSTGRES_USER=capstan", "POSTGRES_DB=appdb",
	}})
	ctx := context.Background()
	connect := func(password, database string) (*pgx.Conn, error) {
		u := url.URL{Scheme: "postgres", User: url.UserPassword("capstan", password), Host: c.Addr(t),
			Path: "/" + database, RawQuery: "sslmode=disable&connect_timeout=30"}
		return pgx.Connect(ctx, u.String())
	}
	mustConnect := func() *pgx.Conn {
		t.Helper()
		conn, err := connect(enginePassword, "appdb")
		if err != nil {
			t.Fatalf("connecting as capstan to appdb with the password: %v\n%s", err, c.Logs(t))
		}
		t.Cleanup(func() { conn.Close(ctx) })
		return conn
	}

	conn := mustConnect()
	var user, database, listen, dataDir, method, osUser string
	var super bool
	if err := conn.QueryRow(ctx, `SELECT current_user, current_database(), current_setting('listen_addresses'),
		current_setting('data_directory'), rolsuper, left(rolpassword, 14)
		FROM pg_authid WHERE rolname = current_user`).Scan(&user, &database, &listen, &dataDir, &super, &method); err != nil {
		t.Fatal(err)
	}
	if user != "capstan" || database != "appdb" || !super {
		t.Errorf("connected as %q (superuser %v) to %q, want the superuser capstan to appdb", user, super, database)
	}
	if listen != "*" || dataDir != "/var/lib/postgresql/data" {
		t.Errorf("listen_addresses %q, data_directory %q; want *, /var/lib/postgresql/data", listen, dataDir)
	}
	if method != "SCRAM-SHA-256$" {
		t.Errorf("password stored as %q…, want SCRAM-SHA-256", method)
	}
	// The server's own user, asked of the server.
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE whoami (name text); COPY whoami FROM PROGRAM 'id -un'`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT name FROM whoami`).Scan(&osUser); err != nil || osUser != "postgres" {
		t.Errorf("the server runs as %q (%v), want postgres", osUser, err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the restart')`); err != nil {
		t.Fatal(err)
	}

	_, err := connect(wrongPassword, "appdb")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("connecting with a wrong password: %v, want SQLSTATE 28P01 (invalid_password)", err)
	}

	conn.Close(ctx)
	c.Restart(t)
	conn = mustConnect()
	var v string
	if err := conn.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v); err != nil || v != "before the restart" {
		t.Errorf("after the restart the row reads %q (%v), want %q", v, err, "before the restart")
	}
	if n := strings.Count(c.Logs(t), "PostgreSQL init process complete"); n != 1 {
		t.Errorf("the cluster was initialised %d times, want once:\n%s", n, c.Logs(t))
	}
	checkDataOwner(t, c, "postgres")
}

// TestEngineImageMariaDB: the official mariadb image's contract with the
// MARIADB_ names and an application user.
func TestEngineImageMariaDB(t *testing.T) {
	t.Parallel()
	mariadb := requireTool(t, "mariadb", "mariadb-client")
	c := testlab.StartEngine(t, "mariadb", testlab.EngineOptions{Env: []string{
		"MARIADB_ROOT_PASSWORD=" + enginePassword, "MARIADB_DATABASE=appdb",
		"MARIADB_USER=app", "MARIADB_PASSWORD=app " + enginePassword,
	}})
	sql := func(user, password, database, query string) testlab.ExecResult {
		t.Helper()
		return mariadbQuery(t, mariadb, c.Addr(t), user, password, database, query)
	}
	mustSQL := func(user, password, database, query string) string {
		t.Helper()
		res := sql(user, password, database, query)
		if res.ExitCode != 0 {
			t.Fatalf("as %s: %s: exit %d: %s\n%s", user, query, res.ExitCode, res.Stderr, c.Logs(t))
		}
		return res.Stdout
	}

	if got := mustSQL("root", enginePassword, "", "SELECT CURRENT_USER(), @@port, @@datadir"); got != "root@%\t3306\t/var/lib/mysql/\n" {
		t.Errorf("root over TCP: got %q, want root@%%, port 3306, /var/lib/mysql/", got)
	}
	if got := mustSQL("root", enginePassword, "", "SHOW DATABASES LIKE 'appdb'"); got != "appdb\n" {
		t.Errorf("databases named appdb: %q", got)
	}
	if got := mustSQL("app", "app "+enginePassword, "appdb", "SELECT CURRENT_USER(), DATABASE()"); got != "app@%\tappdb\n" {
		t.Errorf("the application user: got %q, want app@%% in appdb", got)
	}
	mustSQL("app", "app "+enginePassword, "appdb", "CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('before the restart')")
	if res := sql("app", "app "+enginePassword, "", "CREATE DATABASE other"); res.ExitCode == 0 {
		t.Error("the application user created a database; its grants are on appdb only")
	}

	for _, user := range []string{"root", "app"} {
		res := sql(user, wrongPassword, "", "SELECT 1")
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Access denied") {
			t.Errorf("%s with a wrong password: exit %d, %q; want access denied", user, res.ExitCode, res.Stderr)
		}
	}

	c.Restart(t)
	if got := mustSQL("app", "app "+enginePassword, "appdb", "SELECT v FROM kept"); got != "before the restart\n" {
		t.Errorf("after the restart the row reads %q", got)
	}
	if n := strings.Count(c.Logs(t), "MariaDB init process complete"); n != 1 {
		t.Errorf("the data directory was initialised %d times, want once:\n%s", n, c.Logs(t))
	}
	checkDataOwner(t, c, "mariadbd")
}

// TestEngineImageMariaDBMySQLNames: the MYSQL_ names work where the
// MARIADB_ ones are not set.
func TestEngineImageMariaDBMySQLNames(t *testing.T) {
	t.Parallel()
	mariadb := requireTool(t, "mariadb", "mariadb-client")
	c := testlab.StartEngine(t, "mariadb", testlab.EngineOptions{Env: []string{
		"MYSQL_ROOT_PASSWORD=" + enginePassword, "MYSQL_DATABASE=legacy",
	}})
	res := mariadbQuery(t, mariadb, c.Addr(t), "root", enginePassword, "legacy", "SELECT CURRENT_USER(), DATABASE()")
	if res.ExitCode != 0 || res.Stdout != "root@%\tlegacy\n" {
		t.Errorf("root in legacy: exit %d, %q, %s; want root@%% in legacy", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = mariadbQuery(t, mariadb, c.Addr(t), "root", wrongPassword, "", "SELECT 1")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Access denied") {
		t.Errorf("root with a wrong password: exit %d, %q; want access denied", res.ExitCode, res.Stderr)
	}
}

func mariadbQuery(t *testing.T, mariadb, addr, user, password, database, query string) testlab.ExecResult {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"--protocol=tcp", "-h", host, "-P", port, "-u", user, "--batch", "--skip-column-names",
		"--connect-timeout=30", "-e", query}
	if database != "" {
		args = append(args, database)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mariadb, args...)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+password)
	return testlab.RunCommand(t, ctx, cmd, "mariadb "+strings.Join(args, " "))
}

// TestEngineImageRedis: a password from the command, from REDIS_PASSWORD,
// and users from an ACL file; data in /data across a restart.
func TestEngineImageRedis(t *testing.T) {
	t.Parallel()
	redisCLI := requireTool(t, "redis-cli", "redis-tools")
	aclDir := t.TempDir()
	acl := filepath.Join(aclDir, "users.acl")
	if err := os.WriteFile(acl, []byte("user default off\nuser app on >app-secret ~app:* &* +@all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		opts           testlab.EngineOptions
		user, password string
	}{
		{"requirepass", testlab.EngineOptions{Cmd: []string{"redis-server", "--requirepass", enginePassword}}, "", enginePassword},
		{"env", testlab.EngineOptions{Env: []string{"REDIS_PASSWORD=" + enginePassword}}, "", enginePassword},
		{"aclfile", testlab.EngineOptions{Cmd: []string{"redis-server", "--aclfile", "/etc/redis/users.acl"},
			Binds: []string{acl + ":/etc/redis/users.acl:ro"}}, "app", "app-secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testlab.StartEngine(t, "redis", tc.opts)
			cli := func(user, password string, args ...string) string {
				t.Helper()
				host, port, _ := net.SplitHostPort(c.Addr(t))
				all := []string{"-h", host, "-p", port, "--no-auth-warning"}
				if user != "" {
					all = append(all, "--user", user)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, redisCLI, append(all, args...)...)
				cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
				res := testlab.RunCommand(t, ctx, cmd, "redis-cli "+strings.Join(args, " "))
				return strings.TrimSpace(res.Stdout + res.Stderr)
			}
			if got := cli(tc.user, tc.password, "SET", "app:kept", "before the restart"); got != "OK" {
				t.Fatalf("SET with the password: %q\n%s", got, c.Logs(t))
			}
			if got := cli(tc.user, tc.password, "CONFIG", "GET", "dir"); !strings.HasSuffix(got, "\n/data") {
				t.Errorf("CONFIG GET dir: %q, want /data", got)
			}
			if got := cli(tc.user, wrongPassword, "GET", "app:kept"); !strings.Contains(got, "WRONGPASS") {
				t.Errorf("GET with a wrong password: %q, want WRONGPASS", got)
			}
			if got := cli("", "", "GET", "app:kept"); !strings.Contains(got, "NOAUTH") {
				t.Errorf("GET without a password: %q, want NOAUTH", got)
			}
			if tc.user != "" {
				if got := cli(tc.user, tc.password, "SET", "other:key", "x"); !strings.Contains(got, "NOPERM") {
					t.Errorf("SET outside the ACL's key pattern: %q, want NOPERM", got)
				}
			}

			c.Restart(t)
			if got := cli(tc.user, tc.password, "GET", "app:kept"); got != "before the restart" {
				t.Errorf("after the restart GET reads %q", got)
			}
			checkDataOwner(t, c, "redis-server")
		})
	}
}

// TestEngineImagesCached: once built, EngineImage returns every image at
// once, without building, and each carries its recipe.
func TestEngineImagesCached(t *testing.T) {
	t.Parallel()
	cli := testlab.Docker(t)
	refs := map[string]string{}
	for _, e := range testlab.Engines() {
		refs[e] = testlab.EngineImage(t, e)
	}
	ids := map[string]string{}
	for e, ref := range refs {
		insp, err := cli.ImageInspect(context.Background(), ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		ids[e] = insp.ID
		if insp.Config == nil || insp.Config.Labels["dev.capstan.test.recipe"] == "" {
			t.Errorf("%s has no recipe label", ref)
		}
	}
	start := time.Now()
	var again []string
	for _, e := range testlab.Engines() {
		again = append(again, testlab.EngineImage(t, e))
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("asking for the built images again took %s", d)
	}
	for i, e := range testlab.Engines() {
		insp, err := cli.ImageInspect(context.Background(), again[i])
		if err != nil || insp.ID != ids[e] {
			t.Errorf("%s: image %s (%v) the second time, %s the first", e, insp.ID, err, ids[e])
		}
	}
	if want := []string{"mariadb", "postgres", "redis"}; !slices.Equal(testlab.Engines(), want) {
		t.Errorf("engines %v, want %v", testlab.Engines(), want)
	}
}

// checkDataOwner checks that the engine's process (command comm) is not
// root and owns the data in the container's volume.
func checkDataOwner(t *testing.T, c *testlab.EngineContainer, comm string) {
	t.Helper()
	cli := testlab.Docker(t)
	ctx := context.Background()
	top, err := cli.ContainerTop(ctx, c.Name, client.ContainerTopOptions{Arguments: []string{"-o", "pid,uid,comm"}})
	if err != nil {
		t.Fatalf("top of %s: %v", c.Name, err)
	}
	uid := -1
	for _, p := range top.Processes {
		if len(p) == 3 && p[2] == comm {
			uid, _ = strconv.Atoi(p[1])
		}
	}
	if uid <= 0 {
		t.Fatalf("%s in %s runs as uid %d, want an unprivileged user: %v", comm, c.Name, uid, top.Processes)
	}
	vol, err := cli.VolumeInspect(ctx, c.Volume, client.VolumeInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(vol.Volume.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatalf("volume %s is empty", c.Volume)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
			t.Errorf("%s in volume %s belongs to uid %d, not to the engine's %d", e.Name(), c.Volume, st.Uid, uid)
		}
	}
}

// requireTool returns the path of a client program, skipping the test
// (failing it when CI=true) if it is missing.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testlab.Require(t, fmt.Sprintf("%s (scripts/testenv.sh up installs %s)", name, pkg))
	}
	return p
}
