package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCLIData runs the database and backup commands of the command line
// as a pipeline with an operate and read:secrets token, against a real
// agent and a real PostgreSQL: db ls and db query (--json one document,
// and a table), a query the engine refuses exits 1 with its message; db
// export writes a real dump to a file, db import loads it into another
// database; backups run, ls, verify; restore without --yes exits 2 and
// queues nothing; unknown names exit 4.
func TestCLIData(t *testing.T) {
	t.Parallel()
	r := newRestoreRig(t)
	expectStatus(t, r.putSettings(t, r.storageSettings("")), http.StatusOK)
	pg, database := r.registerPostgres(t, "pg", "CREATE TABLE cli_items (id int PRIMARY KEY, name text)",
		"INSERT INTO cli_items VALUES (1, 'anchor'), (2, 'winch')")

	resp := r.Post(t, "/api/v1/tokens", r.Token, map[string]any{"name": "ops", "scopes": []string{"operate", "read:secrets"}})
	var tok struct {
		Token string `json:"token"`
	}
	expectJSON(t, resp, http.StatusCreated, &tok)
	cli := newClientCLI(t, r.URL)
	ops := cli.Token(tok.Token)
	fail := func(what string, res CLIResult) {
		t.Helper()
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, res.ExitCode, res.Stdout, res.Stderr)
	}

	// db ls: the instance, by name and id.
	var list struct {
		Databases []struct {
			ID     string `json:"id"`
			Name   string `json:"name"`
			Engine string `json:"engine"`
			State  string `json:"state"`
		} `json:"databases"`
	}
	oneJSON(t, cli.OK(ops, "db", "ls", "--json"), &list)
	if len(list.Databases) != 1 || list.Databases[0].ID != pg.ID || list.Databases[0].Name != "pg" ||
		list.Databases[0].Engine != "postgres" || list.Databases[0].State != "ready" {
		t.Fatalf("db ls --json: %+v", list.Databases)
	}
	if res := cli.OK(ops, "db", "ls"); !strings.Contains(res.Stdout, pg.ID) {
		fail("db ls", res)
	}

	// db query: --json is the API's answer, the rows the test inserted.
	type queryAnswer struct {
		Status string `json:"status"`
		Data   struct {
			Columns []struct {
				Name string `json:"name"`
			} `json:"columns"`
			Rows [][]any `json:"rows"`
		} `json:"data"`
	}
	rowsOf := func(db string) string {
		t.Helper()
		var q queryAnswer
		oneJSON(t, cli.OK(ops, "db", "query", "pg", "SELECT id, name FROM cli_items ORDER BY id", "--database", db, "--json"), &q)
		if q.Status != "succeeded" || len(q.Data.Columns) != 2 || q.Data.Columns[1].Name != "name" {
			t.Fatalf("db query --json in %s: %+v", db, q)
		}
		return jsonString(q.Data.Rows)
	}
	if got, want := rowsOf(database), `[[1,"anchor"],[2,"winch"]]`; got != want {
		t.Fatalf("db query rows: %s, want %s", got, want)
	}
	res := cli.OK(ops, "db", "query", pg.ID, "SELECT id, name FROM cli_items ORDER BY id")
	if lines := strings.Split(strings.TrimSpace(res.Stdout), "\n"); len(lines) != 3 || strings.Fields(lines[0])[1] != "NAME" ||
		strings.Join(strings.Fields(lines[2]), " ") != "2 winch" {
		fail("db query (table)", res)
	}
	// A statement the engine refuses: exit 1 with its message.
	res = cli.Run(ops, "", cliTimeout, "db", "query", "pg", "SELECT * FROM no_such_table")
	if res.ExitCode != 1 || !strings.Contains(res.Stderr, `relation "no_such_table" does not exist`) {
		fail("db query of a missing table", res)
	}
	// Read-only unless --write.
	res = cli.Run(ops, "", cliTimeout, "db", "query", "pg", "INSERT INTO cli_items VALUES (3, 'cleat')")
	if res.ExitCode != 1 || !strings.Contains(res.Stderr, "read-only") {
		fail("db query writing without --write", res)
	}

	// db export: a real dump in the file, and no temporary file beside it.
	dir := t.TempDir()
	dumpFile := filepath.Join(dir, "pg.sql.gz")
	if res := cli.Run(ops, "", cliTimeout, "db", "export", "pg", "--database", database, "-o", dumpFile); res.ExitCode != 0 ||
		!strings.Contains(res.Stderr, "Exported pg to "+dumpFile) {
		fail("db export", res)
	}
	gz, err := os.ReadFile(dumpFile)
	if err != nil {
		t.Fatal(err)
	}
	if dump := gunzip(t, gz); !strings.Contains(string(dump), "CREATE TABLE public.cli_items") || !strings.Contains(string(dump), "winch") {
		t.Fatalf("the exported file is not the database's dump:\n%.2000s", dump)
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Fatalf("files beside the export: %v", files)
	}

	// db import into another database: its rows are the source's.
	_, _, _, _, other := postgresTarget(t)
	if res := cli.Run(ops, "", cliTimeout, "db", "import", "pg", dumpFile, "--database", other); res.ExitCode != 0 ||
		!strings.Contains(res.Stderr, "succeeded") {
		fail("db import", res)
	}
	if got, want := rowsOf(other), `[[1,"anchor"],[2,"winch"]]`; got != want {
		t.Fatalf("rows after the import: %s, want %s", got, want)
	}

	// backups run: the backup's id, and it is listed; verify passes.
	var run BackupRun
	oneJSON(t, cli.OK(ops, "backups", "run", "pg", "--json"), &run)
	if run.Status != "succeeded" || run.InstanceID != pg.ID || run.Database != database {
		t.Fatalf("backups run --json: %+v", run)
	}
	var runs struct {
		Runs []BackupRun `json:"runs"`
	}
	oneJSON(t, cli.OK(ops, "backups", "ls", "--db", "pg", "--json"), &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != run.ID || runs.Runs[0].Status != "succeeded" {
		t.Fatalf("backups ls --json: %+v", runs.Runs)
	}
	if res := cli.OK(ops, "backups", "verify", run.ID); !strings.Contains(res.Stderr, "verified") {
		fail("backups verify", res)
	}
	if v := r.verified(t, run.ID); !v.OK {
		t.Fatalf("verified after backups verify: %+v", v)
	}
	if res := cli.OK(ops, "backups", "ls"); !strings.Contains(res.Stdout, run.ID) || !strings.Contains(res.Stdout, "ok ") {
		fail("backups ls", res)
	}

	// restore without --yes: exit 2, says what it would replace, and
	// queues nothing.
	res = cli.Run(ops, "", cliTimeout, "backups", "restore", run.ID)
	if res.ExitCode != 2 || !strings.Contains(res.Stderr, `replaces database "`+database+`" of instance pg`) ||
		!strings.Contains(res.Stderr, "--yes") {
		fail("backups restore without --yes", res)
	}
	var jobs struct {
		Jobs []JobInfo `json:"jobs"`
	}
	r.Get(t, "/api/v1/jobs?limit=100", r.Token).JSON(t, &jobs)
	if slices.ContainsFunc(jobs.Jobs, func(j JobInfo) bool { return j.Type == "backup.restore" }) {
		t.Fatalf("a restore was queued without --yes: %+v", jobs.Jobs)
	}

	// Unknown names: exit 4.
	for _, args := range [][]string{{"db", "query", "nothing", "SELECT 1"}, {"backups", "verify", "run_none"}, {"backups", "run", "nothing"}} {
		if res := cli.Run(ops, "", cliTimeout, args...); res.ExitCode != 4 {
			fail("capstan "+strings.Join(args, " "), res)
		}
	}
}
