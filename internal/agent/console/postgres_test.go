package console_test

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// pgFixture makes a database on the test server with a table t of typed
// values, a table x nothing may drop, and a function that writes.
func pgFixture(t *testing.T) (agentproto.DBTarget, string, *sql.DB) {
	t.Helper()
	u := testlab.PostgresDatabase(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, s := range []string{
		`CREATE TABLE parent (id int PRIMARY KEY)`,
		`INSERT INTO parent VALUES (7)`,
		`CREATE TABLE t (id serial PRIMARY KEY, n numeric(6,2), b bool, s text DEFAULT 'x', ts timestamptz, bin bytea, f float8, nothing int, p int REFERENCES parent(id))`,
		`CREATE INDEX t_s ON t (s)`,
		`INSERT INTO t (n, b, s, ts, bin, f, p) VALUES (12.50, true, 'héllo', '2024-01-02 03:04:05.5+00', '\x00ff', 'NaN', 7)`,
		`CREATE TABLE x (v int)`,
		`INSERT INTO x VALUES (1)`,
		`CREATE FUNCTION write_x() RETURNS int LANGUAGE sql AS 'INSERT INTO x VALUES (2) RETURNING 1'`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	target, pw := postgresTarget(t, u)
	return target, pw, db
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestPostgresQueryTypedValues(t *testing.T) {
	target, pw, _ := pgFixture(t)
	var res agentproto.DBQueryResult
	query(t, target, pw, "SELECT id, n, b, s, ts, bin, f, nothing, now()::timestamp(0) IS NOT NULL AS fresh FROM t", true, 10, 5000).OK(t, &res)
	if got, want := rowsJSON(t, res), `[[1,12.50,true,"héllo","2024-01-02T03:04:05.5Z",{"$base64":"AP8="},"NaN",null,true]]`; got != want {
		t.Errorf("rows = %s, want %s", got, want)
	}
	var types []string
	for _, c := range res.Columns {
		types = append(types, c.Name+":"+c.Type)
	}
	if got, want := strings.Join(types, " "), "id:int4 n:numeric b:bool s:text ts:timestamptz bin:bytea f:float8 nothing:int4 fresh:bool"; got != want {
		t.Errorf("columns = %s, want %s", got, want)
	}
	if res.RowCount != 1 || res.Truncated || res.RowsAffected != nil || res.Notices == nil {
		t.Errorf("row_count %d truncated %t rows_affected %v notices %v; want 1, false, nil, []", res.RowCount, res.Truncated, res.RowsAffected, res.Notices)
	}
}

func TestPostgresReadOnlyIsEnforcedByTheEngine(t *testing.T) {
	target, pw, db := pgFixture(t)
	for _, stmt := range []string{
		"WITH w AS (INSERT INTO x VALUES (3) RETURNING 1) SELECT * FROM w",
		"SELECT write_x()",
		// The transaction took its snapshot: it cannot be made writable.
		"DO $$ BEGIN SET TRANSACTION READ WRITE; INSERT INTO x VALUES (4); END $$",
		"COMMIT; INSERT INTO x VALUES (5)",
	} {
		e := query(t, target, pw, stmt, true, 10, 5000).Failure(t)
		if stmt[0] == 'C' {
			if e.Code != "42601" { // one statement only: the transaction cannot be left
				t.Errorf("%s: code %q (%s), want 42601", stmt, e.Code, e.Message)
			}
			continue
		}
		if e.Code != "25006" && e.Code != "25001" {
			t.Errorf("%s: code %q (%s), want 25006 read_only_sql_transaction", stmt, e.Code, e.Message)
		}
	}
	if got := count(t, db, "SELECT count(*) FROM x"); got != 1 {
		t.Errorf("x has %d rows after read-only writes, want 1", got)
	}
	// The same write without readonly is committed and counted.
	var res agentproto.DBQueryResult
	query(t, target, pw, "INSERT INTO x VALUES (8), (9)", false, 10, 5000).OK(t, &res)
	if res.RowsAffected == nil || *res.RowsAffected != 2 {
		t.Errorf("rows_affected = %v, want 2", res.RowsAffected)
	}
	if got := count(t, db, "SELECT count(*) FROM x"); got != 3 {
		t.Errorf("x has %d rows after a write, want 3", got)
	}
}

func TestPostgresMaxRowsStopsFetching(t *testing.T) {
	target, pw, _ := pgFixture(t)
	// The fourth row divides by zero: computing it would fail the
	// statement. Two rows are returned and a third tells of more.
	var res agentproto.DBQueryResult
	query(t, target, pw, "SELECT g, 10 / (4 - g) AS q FROM generate_series(1, 100000) g", true, 2, 5000).OK(t, &res)
	if got, want := rowsJSON(t, res), `[[1,3],[2,5]]`; got != want || !res.Truncated || res.RowCount != 2 {
		t.Errorf("rows %s truncated %t row_count %d; want %s, true, 2", got, res.Truncated, res.RowCount, want)
	}
	query(t, target, pw, "SELECT g FROM generate_series(1, 3) g", true, 3, 5000).OK(t, &res)
	if res.Truncated || res.RowCount != 3 {
		t.Errorf("exactly max_rows rows: truncated %t row_count %d; want false, 3", res.Truncated, res.RowCount)
	}
}

func TestPostgresTimeoutErrorsAndNotices(t *testing.T) {
	target, pw, _ := pgFixture(t)
	if e := query(t, target, pw, "SELECT pg_sleep(60)", true, 10, 300).Failure(t); e.Code != "57014" {
		t.Errorf("sleep over the timeout: %+v, want 57014 query_canceled", e)
	}
	e := query(t, target, pw, "SELECT * FROM nope", true, 10, 5000).Failure(t)
	if e.Code != "42P01" || e.Position != 15 || !strings.Contains(e.Message, `"nope"`) {
		t.Errorf("missing table: %+v, want 42P01 at 15", e)
	}
	var res agentproto.DBQueryResult
	query(t, target, pw, "DO $$ BEGIN RAISE NOTICE 'hello %', 1; RAISE WARNING 'careful'; END $$", true, 10, 5000).OK(t, &res)
	if got, want := strings.Join(res.Notices, "|"), "NOTICE: hello 1|WARNING: careful"; got != want {
		t.Errorf("notices = %q, want %q", got, want)
	}
	if e := query(t, target, pw, "SELECT 1", true, 1001, 5000).Failure(t); !strings.Contains(e.Message, "max_rows") {
		t.Errorf("max_rows 1001: %+v", e)
	}
}

func TestPostgresExplore(t *testing.T) {
	target, pw, db := pgFixture(t)
	explore := func(what, database, schema, table string) (agentproto.DBExploreResult, agenttest.Outcome) {
		var res agentproto.DBExploreResult
		o := runJob(t, agentproto.JobDBExplore, agentproto.DBExplorePayload{Target: target, What: what, Database: database, Schema: schema, Table: table}, pw)
		if o.Err == nil {
			o.OK(t, &res)
		}
		return res, o
	}
	res, _ := explore(agentproto.ExploreDatabases, "", "", "")
	i := slices.IndexFunc(res.Databases, func(d agentproto.DBDatabaseInfo) bool { return d.Name == target.Database })
	if i < 0 || res.Databases[i].SizeBytes <= 0 || res.Databases[i].Owner == "" {
		t.Errorf("databases %+v: want %s with a size and owner", res.Databases, target.Database)
	}
	if _, err := db.Exec(`CREATE ROLE capstan_reader_` + target.Database[len(target.Database)-8:] + ` LOGIN; GRANT SELECT ON x TO capstan_reader_` + target.Database[len(target.Database)-8:]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP OWNED BY capstan_reader_` + target.Database[len(target.Database)-8:] + `; DROP ROLE capstan_reader_` + target.Database[len(target.Database)-8:])
	})
	res, _ = explore(agentproto.ExploreUsers, "", "", "")
	i = slices.IndexFunc(res.Users, func(u agentproto.DBUserInfo) bool {
		return u.Name == "capstan_reader_"+target.Database[len(target.Database)-8:]
	})
	if i < 0 || res.Users[i].Superuser || !res.Users[i].CanLogin || !slices.Contains(res.Users[i].Grants, "SELECT ON TABLE public.x") {
		t.Errorf("users: %+v; want the reader with SELECT ON TABLE public.x", res.Users)
	}
	res, _ = explore(agentproto.ExploreStats, "", "", "")
	if s := res.Stats; s == nil || s.Version == "" || s.MaxConnections <= 0 || s.Connections < 1 || s.Role != "primary" || s.CacheHitRatio == nil {
		t.Errorf("stats = %+v", res.Stats)
	}
	res, _ = explore(agentproto.ExploreTables, "", "public", "")
	var names []string
	for _, tb := range res.Tables {
		names = append(names, tb.Schema+"."+tb.Name)
		if tb.Name == "t" && (tb.TotalBytes <= 0 || tb.IndexBytes <= 0) {
			t.Errorf("table t: %+v, want sizes", tb)
		}
	}
	if got, want := strings.Join(names, " "), "public.parent public.t public.x"; got != want {
		t.Errorf("tables = %s, want %s", got, want)
	}
	res, _ = explore(agentproto.ExploreColumns, "", "", "t")
	cols := map[string]agentproto.DBColumnInfo{}
	for _, c := range res.Columns {
		cols[c.Name] = c
	}
	if c := cols["id"]; !c.PrimaryKey || c.Nullable || c.Type != "integer" || c.Default == nil || !slices.Contains(c.Indexes, "t_pkey") {
		t.Errorf("column id = %+v", c)
	}
	if c := cols["s"]; c.Default == nil || *c.Default != "'x'::text" || !c.Nullable || !slices.Equal(c.Indexes, []string{"t_s"}) {
		t.Errorf("column s = %+v", c)
	}
	if c := cols["p"]; c.References != "public.parent(id)" {
		t.Errorf("column p references %q, want public.parent(id)", c.References)
	}

	// Hostile names are parameters: they name nothing, and change nothing.
	const hostile = `a"; DROP TABLE x; --`
	if res, _ := explore(agentproto.ExploreTables, "", hostile, ""); len(res.Tables) != 0 {
		t.Errorf("tables of a hostile schema: %+v", res.Tables)
	}
	if _, o := explore(agentproto.ExploreColumns, "", hostile, hostile); !strings.Contains(o.Failure(t).Message, "no such table") {
		t.Errorf("columns of a hostile table: %s", o.Data)
	}
	if _, o := explore(agentproto.ExploreTables, hostile, "", ""); o.Failure(t).Code != "3D000" {
		t.Errorf("a hostile database: %s, want 3D000", o.Data)
	}
	if got := count(t, db, "SELECT count(*) FROM x"); got != 1 {
		t.Errorf("x has %d rows, want 1", got)
	}
	// A key-value action on a SQL engine is refused.
	o := runJob(t, agentproto.JobDBKV, agentproto.DBKVPayload{Target: target, Action: agentproto.KVInfo}, pw)
	if e := o.Failure(t); !strings.Contains(e.Message, "not a key-value engine") {
		t.Errorf("kv on postgres: %+v", e)
	}
}
