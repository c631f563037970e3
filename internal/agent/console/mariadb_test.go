package console_test

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestMariaDB runs the query console and the explorer against a MariaDB
// server, a fresh database for each part.
func TestMariaDB(t *testing.T) {
	m := testlab.StartMariaDB(t, nil)
	fixture := func(t *testing.T) (agentproto.DBTarget, *sql.DB) {
		name := m.Database(t)
		db, err := sql.Open("mysql", m.DSN(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		for _, s := range []string{
			"CREATE TABLE parent (id INT PRIMARY KEY)",
			"INSERT INTO parent VALUES (7)",
			"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, n DECIMAL(6,2), b TINYINT(1), s VARCHAR(20) DEFAULT 'x', dt DATETIME(1), ts TIMESTAMP NULL, bin VARBINARY(4), f DOUBLE, nothing INT, p INT, INDEX t_s (s), FOREIGN KEY (p) REFERENCES parent(id))",
			"INSERT INTO t (n, b, s, dt, ts, bin, f, p) VALUES (12.50, 1, 'héllo', '2024-01-02 03:04:05.5', '2024-01-02 03:04:05', x'00ff', 1.5, 7)",
			"CREATE TABLE x (v INT)",
			"INSERT INTO x VALUES (1)",
			"CREATE FUNCTION write_x() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO x VALUES (2); RETURN 1; END",
			"CREATE FUNCTION fail_over(v INT) RETURNS INT DETERMINISTIC NO SQL BEGIN IF v > 3 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'computed a row past the limit'; END IF; RETURN v; END",
		} {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		return agentproto.DBTarget{InstanceID: "db_test", Engine: agentproto.EngineMariaDB, Host: "127.0.0.1", Port: m.Port,
			Username: m.User, Database: name}, db
	}

	t.Run("connect", func(t *testing.T) {
		target, _ := fixture(t)
		var res agentproto.DBConnectResult
		runJob(t, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: target}, m.Password).OK(t, &res)
		if !strings.Contains(res.ServerVersion, "MariaDB") || res.TLS {
			t.Errorf("connect = %+v, want a MariaDB version without TLS", res)
		}
		e := runJob(t, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: target}, "wrong").Failure(t)
		if e.Code != "1045" || !strings.Contains(e.Message, "Access denied") {
			t.Errorf("wrong password: %+v, want the engine's 1045 Access denied", e)
		}
	})

	t.Run("typed values", func(t *testing.T) {
		target, _ := fixture(t)
		var res agentproto.DBQueryResult
		query(t, target, m.Password, "SELECT id, n, b, s, dt, ts, bin, f, nothing FROM t", true, 10, 5000).OK(t, &res)
		if got, want := rowsJSON(t, res), `[[1,12.50,1,"héllo","2024-01-02T03:04:05.5","2024-01-02T03:04:05Z",{"$base64":"AP8="},1.5,null]]`; got != want {
			t.Errorf("rows = %s, want %s", got, want)
		}
		var types []string
		for _, c := range res.Columns {
			types = append(types, c.Type)
		}
		if got, want := strings.Join(types, " "), "INT DECIMAL TINYINT VARCHAR DATETIME TIMESTAMP VARBINARY DOUBLE INT"; got != want {
			t.Errorf("column types = %s, want %s", got, want)
		}
		query(t, target, m.Password, "SELECT 1 / 0 AS d", true, 10, 5000).OK(t, &res)
		if len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "1365") {
			t.Errorf("notices = %q, want the division by zero warning", res.Notices)
		}
	})

	t.Run("read-only by the engine", func(t *testing.T) {
		target, db := fixture(t)
		for _, stmt := range []string{"SELECT write_x()", "INSERT INTO x VALUES (3)", "CREATE TABLE y (v INT)"} {
			if e := query(t, target, m.Password, stmt, true, 10, 5000).Failure(t); e.Code != "1792" {
				t.Errorf("%s: %+v, want 1792 (read-only transaction)", stmt, e)
			}
		}
		if e := query(t, target, m.Password, "COMMIT; INSERT INTO x VALUES (4)", true, 10, 5000).Failure(t); e.Code != "1064" {
			t.Errorf("two statements: %+v, want 1064 (one statement only)", e)
		}
		if got := count(t, db, "SELECT COUNT(*) FROM x"); got != 1 {
			t.Errorf("x has %d rows after read-only writes, want 1", got)
		}
		var res agentproto.DBQueryResult
		query(t, target, m.Password, "INSERT INTO x VALUES (8), (9)", false, 10, 5000).OK(t, &res)
		if res.RowsAffected == nil || *res.RowsAffected != 2 {
			t.Errorf("rows_affected = %v, want 2", res.RowsAffected)
		}
		if got := count(t, db, "SELECT COUNT(*) FROM x"); got != 3 {
			t.Errorf("x has %d rows after a write, want 3", got)
		}
	})

	t.Run("max rows and timeout", func(t *testing.T) {
		target, _ := fixture(t)
		// fail_over signals from the fourth row on: the server computes
		// no row past max_rows+1.
		var res agentproto.DBQueryResult
		query(t, target, m.Password, "SELECT fail_over(seq) AS v FROM seq_1_to_100000", true, 2, 5000).OK(t, &res)
		if got := rowsJSON(t, res); got != `[[1],[2]]` || !res.Truncated || res.RowCount != 2 {
			t.Errorf("rows %s truncated %t row_count %d; want [[1],[2]], true, 2", got, res.Truncated, res.RowCount)
		}
		query(t, target, m.Password, "SELECT seq FROM seq_1_to_3", true, 3, 5000).OK(t, &res)
		if res.Truncated || res.RowCount != 3 {
			t.Errorf("exactly max_rows rows: truncated %t row_count %d", res.Truncated, res.RowCount)
		}
		if e := query(t, target, m.Password, "SELECT SLEEP(60)", true, 10, 300).Failure(t); e.Code != "1969" {
			t.Errorf("sleep over the timeout: %+v, want 1969 (max_statement_time exceeded)", e)
		}
		if e := query(t, target, m.Password, "SELECT * FROM nope", true, 10, 5000).Failure(t); e.Code != "1146" {
			t.Errorf("missing table: %+v, want 1146", e)
		}
	})

	t.Run("explore", func(t *testing.T) {
		target, db := fixture(t)
		explore := func(what, database, table string) (agentproto.DBExploreResult, agenttest.Outcome) {
			var res agentproto.DBExploreResult
			o := runJob(t, agentproto.JobDBExplore, agentproto.DBExplorePayload{Target: target, What: what, Database: database, Table: table}, m.Password)
			if o.Err == nil {
				o.OK(t, &res)
			}
			return res, o
		}
		res, _ := explore(agentproto.ExploreDatabases, "", "")
		if i := slices.IndexFunc(res.Databases, func(d agentproto.DBDatabaseInfo) bool { return d.Name == target.Database }); i < 0 || res.Databases[i].SizeBytes <= 0 {
			t.Errorf("databases = %+v, want %s with a size", res.Databases, target.Database)
		}
		res, _ = explore(agentproto.ExploreUsers, "", "")
		if i := slices.IndexFunc(res.Users, func(u agentproto.DBUserInfo) bool { return u.Name == m.User+"@%" }); i < 0 ||
			!res.Users[i].Superuser || len(res.Users[i].Grants) == 0 || !strings.HasPrefix(res.Users[i].Grants[0], "GRANT ALL PRIVILEGES ON *.*") {
			t.Errorf("users = %+v", res.Users)
		}
		res, _ = explore(agentproto.ExploreStats, "", "")
		if s := res.Stats; s == nil || !strings.Contains(s.Version, "MariaDB") || s.UptimeSeconds < 0 || s.Connections < 1 || s.MaxConnections <= 0 || s.Role != "primary" {
			t.Errorf("stats = %+v", res.Stats)
		}
		res, _ = explore(agentproto.ExploreTables, "", "")
		var names []string
		for _, tb := range res.Tables {
			names = append(names, tb.Name)
		}
		if got := strings.Join(names, " "); got != "parent t x" {
			t.Errorf("tables = %s, want parent t x", got)
		}
		res, _ = explore(agentproto.ExploreColumns, "", "t")
		cols := map[string]agentproto.DBColumnInfo{}
		for _, c := range res.Columns {
			cols[c.Name] = c
		}
		if c := cols["id"]; !c.PrimaryKey || c.Nullable || c.Type != "int(11)" || !slices.Contains(c.Indexes, "PRIMARY") {
			t.Errorf("column id = %+v", c)
		}
		if c := cols["s"]; c.Default == nil || *c.Default != "'x'" || !c.Nullable || !slices.Equal(c.Indexes, []string{"t_s"}) {
			t.Errorf("column s = %+v", c)
		}
		if c := cols["nothing"]; c.Default != nil {
			t.Errorf("column nothing default = %q, want none", *c.Default)
		}
		if c := cols["p"]; c.References != "parent(id)" {
			t.Errorf("column p references %q, want parent(id)", c.References)
		}
		const hostile = "a`; DROP TABLE x; --"
		if _, o := explore(agentproto.ExploreColumns, "", hostile); !strings.Contains(o.Failure(t).Message, "no such table") {
			t.Errorf("columns of a hostile table: %s", o.Data)
		}
		if _, o := explore(agentproto.ExploreTables, hostile, ""); o.Failure(t).Code != "1044" && o.Failure(t).Code != "1049" {
			t.Errorf("a hostile database: %s, want unknown database", o.Data)
		}
		if got := count(t, db, "SELECT COUNT(*) FROM x"); got != 1 {
			t.Errorf("x has %d rows, want 1", got)
		}
	})
}
