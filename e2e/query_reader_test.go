package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// queryRanAs is what a query's result says of the login it ran as.
type queryRanAs struct {
	Rows    [][]any  `json:"rows"`
	RanAs   string   `json:"ran_as"`
	Notices []string `json:"notices"`
}

// TestReadOnlyQueriesRunAsReader: the query console's read-only
// statements run as a read-only login the agent makes, not as the
// instance's superuser, so the engine refuses what a read-only
// transaction lets a superuser do: COPY … TO PROGRAM on PostgreSQL,
// SET GLOBAL on MariaDB. Writing statements still run as the
// instance's login.
func TestReadOnlyQueriesRunAsReader(t *testing.T) {
	r := newDBRig(t, store.SQLite)
	pg, _ := r.registerPostgres(t, "pg")

	var q queryRanAs
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT current_user::text"}).result(t, &q)
	if q.RanAs != "capstan_console_ro" || len(q.Rows) != 1 || q.Rows[0][0] != "capstan_console_ro" {
		t.Fatalf("a read-only query ran as %q (rows %v, notices %v), want capstan_console_ro", q.RanAs, q.Rows, q.Notices)
	}
	var w queryRanAs
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT current_user::text", "readonly": false}).result(t, &w)
	if w.RanAs == "capstan_console_ro" || len(w.Rows) != 1 || w.Rows[0][0] != w.RanAs {
		t.Fatalf("a writing query ran as %q (rows %v)", w.RanAs, w.Rows)
	}

	// The server's postgres account must be able to write the marker
	// for the refusal to mean anything.
	dir, err := os.MkdirTemp("", "capstan-copy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	j := r.call(t, pg.ID, "query", map[string]any{"sql": "COPY (SELECT 1) TO PROGRAM 'touch " + marker + "'"})
	if j.Status != "failed" {
		t.Fatalf("COPY TO PROGRAM in a read-only query: %s %s", j.Status, j.Data)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("COPY TO PROGRAM ran a program from a read-only query")
	}

	maria := testlab.StartMariaDB(t, nil)
	m := r.register(t, map[string]any{"name": "maria", "engine": "mariadb", "host": "127.0.0.1", "port": maria.Port,
		"username": maria.User, "password": maria.Password, "database": maria.Database(t), "tls_mode": "disable"})
	var mq queryRanAs
	r.call(t, m.ID, "query", map[string]any{"sql": "SELECT CURRENT_USER()"}).result(t, &mq)
	if mq.RanAs != "capstan_console_ro" || len(mq.Rows) != 1 || !strings.HasPrefix(mq.Rows[0][0].(string), "capstan_console_ro@") {
		t.Fatalf("a read-only MariaDB query ran as %q (rows %v, notices %v)", mq.RanAs, mq.Rows, mq.Notices)
	}
	if j := r.call(t, m.ID, "query", map[string]any{"sql": "SET GLOBAL max_connections = 77"}); j.Status != "failed" {
		t.Fatalf("SET GLOBAL in a read-only query: %s %s", j.Status, j.Data)
	}
	var mc queryRanAs
	r.call(t, m.ID, "query", map[string]any{"sql": "SELECT @@GLOBAL.max_connections"}).result(t, &mc)
	if len(mc.Rows) != 1 || mc.Rows[0][0] == float64(77) || mc.Rows[0][0] == "77" {
		t.Fatalf("max_connections after a refused SET GLOBAL: %v", mc.Rows)
	}
}
