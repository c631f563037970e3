package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// LastMetrics is an instance's newest metric sample as the API shows it.
type LastMetrics struct {
	At             time.Time `json:"at"`
	Error          *string   `json:"error"`
	Failed         bool      `json:"failed"`
	Connections    *int64    `json:"connections"`
	MaxConnections *int64    `json:"max_connections"`
	SizeBytes      *int64    `json:"size_bytes"`
	MemoryBytes    *int64    `json:"memory_bytes"`
	Keys           *int64    `json:"keys"`
	OpsPerSecond   *float64  `json:"ops_per_second"`
	Databases      []struct {
		Name      string `json:"name"`
		SizeBytes int64  `json:"size_bytes"`
	} `json:"databases"`
}

// MetricSeries is an instance's metric history as the API shows it.
type MetricSeries struct {
	Hours         int    `json:"hours"`
	Resolution    string `json:"resolution"`
	BucketSeconds int    `json:"bucket_seconds"`
	Redacted      bool   `json:"redacted"`
	Series        []struct {
		T            time.Time `json:"t"`
		Samples      int       `json:"samples"`
		Errors       int       `json:"errors"`
		Error        *string   `json:"error"`
		Connections  *float64  `json:"connections"`
		SizeBytes    *int64    `json:"size_bytes"`
		Keys         *int64    `json:"keys"`
		OpsPerSecond *float64  `json:"ops_per_second"`
	} `json:"series"`
}

// loadClients is how many clients load a database for its operations a
// second.
const loadClients = 8

// lastMetrics reads an instance's last_metrics as token's user; nil if
// it has none.
func (r *dbRig) lastMetrics(t *testing.T, id, token string) *LastMetrics {
	t.Helper()
	var d struct {
		LastMetrics *LastMetrics `json:"last_metrics"`
	}
	expectJSON(t, r.Get(t, "/api/v1/databases/"+id, token), http.StatusOK, &d)
	return d.LastMetrics
}

func (r *dbRig) metrics(t *testing.T, id, query, token string) MetricSeries {
	t.Helper()
	var s MetricSeries
	expectJSON(t, r.Get(t, "/api/v1/databases/"+id+"/metrics"+query, token), http.StatusOK, &s)
	return s
}

// awaitMetrics waits until the instance's newest sample satisfies cond.
func (r *dbRig) awaitMetrics(t *testing.T, id, what string, cond func(l *LastMetrics) bool) *LastMetrics {
	t.Helper()
	var last *LastMetrics
	testlab.EventuallyReport(t, 90*time.Second, what, func() (bool, string) {
		last = r.lastMetrics(t, id, r.Token)
		if last == nil {
			return false, "no sample yet"
		}
		b, _ := json.Marshal(last)
		return cond(last), "last sample " + string(b)
	})
	return last
}

// newMetricsRig is a database rig whose agent samples every second and
// whose control plane rolls metrics up every second.
func newMetricsRig(t *testing.T, d store.Dialect) *dbRig {
	t.Helper()
	f := newFleet(t, Options{Dialect: d, Args: []string{"--metrics-rollup-interval", "1s"}})
	e, config := f.enrollServer(t, "db-host")
	return &dbRig{Fleet: f, serverID: e.Server.ID, agent: startAgentWith(t, config, nil, "--database-metrics-interval", "1s")}
}

// TestDatabaseMetrics: a real agent samples real PostgreSQL, MariaDB and
// Redis servers: connections held open are counted, a new database's
// size and new keys show, operations a second follow the load; an
// instance that cannot be sampled yields samples with the engine's error
// (withheld from members); the series is raw up to 48 hours and hourly
// beyond; bad hours are refused; members read metrics; the logins'
// passwords never reach the agent's log.
func TestDatabaseMetrics(t *testing.T) {
	forEachStore(t, testDatabaseMetrics)
}

func testDatabaseMetrics(t *testing.T, d store.Dialect) {
	r := newMetricsRig(t, d)
	pg, maria, rds := testlab.StartPostgresServer(t, nil), testlab.StartMariaDB(t, nil), testlab.StartRedis(t, nil)
	shop := maria.Database(t)
	p := r.registerPostgresOn(t, "pg", pg, "postgres")
	m := r.register(t, map[string]any{"name": "maria", "engine": "mariadb", "host": "127.0.0.1", "port": maria.Port,
		"username": maria.User, "password": maria.Password, "database": shop, "tls_mode": "disable"})
	k := r.register(t, map[string]any{"name": "cache", "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": rds.Password, "tls_mode": "disable"})
	for _, inst := range []DatabaseInfo{p, m, k} {
		if inst.State != "ready" {
			t.Fatalf("%s: %s (%s)", inst.Name, inst.State, deref(inst.LastError))
		}
	}

	// PostgreSQL: connections held open are counted.
	first := r.awaitMetrics(t, p.ID, "a PostgreSQL sample", func(l *LastMetrics) bool { return l.Connections != nil })
	if l := first; l.Failed || l.MaxConnections == nil || *l.MaxConnections < 10 || l.SizeBytes == nil || *l.SizeBytes <= 0 ||
		l.Keys != nil || len(l.Databases) == 0 {
		t.Fatalf("first PostgreSQL sample: %+v", *l)
	}
	pgAdmin := testlab.OpenSQL(t, "pgx", pg.URL("postgres"))
	const held = 6
	pgAdmin.SetMaxIdleConns(held)
	holdConns(t, pgAdmin, held)
	r.awaitMetrics(t, p.ID, "the held PostgreSQL connections are counted", func(l *LastMetrics) bool {
		return l.Connections != nil && *l.Connections >= *first.Connections+held
	})

	// A new database with data: its size shows, and the total grows.
	if _, err := pgAdmin.Exec("CREATE DATABASE metricsdb"); err != nil {
		t.Fatal(err)
	}
	mdb := testlab.OpenSQL(t, "pgx", pg.URL("metricsdb"))
	if _, err := mdb.Exec("CREATE TABLE filler AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 40000) g"); err != nil {
		t.Fatal(err)
	}
	grown := r.awaitMetrics(t, p.ID, "the new database's size shows", func(l *LastMetrics) bool {
		return sizeOf(l, "metricsdb") > 8<<20
	})
	if *grown.SizeBytes < *first.SizeBytes+8<<20 || grown.Databases[0].Name != "metricsdb" {
		t.Fatalf("total size %d after adding ~9 MB (before %d); databases %+v", *grown.SizeBytes, *first.SizeBytes, grown.Databases)
	}

	// Operations a second follow the load: several clients, so that a
	// machine busy with other work still makes well over the threshold.
	// The rate without the load is the agent's own sampling and little
	// else; with it, a busy machine measured 29 a second where a quiet
	// one measures thousands, so the load must show as at least 20 a
	// second and three times the rate before it.
	idle := 0.0
	if grown.OpsPerSecond != nil {
		idle = *grown.OpsPerSecond
	}
	ctx, stop := context.WithCancel(t.Context())
	var load sync.WaitGroup
	mdb.SetMaxOpenConns(loadClients)
	for range loadClients {
		load.Go(func() {
			for ctx.Err() == nil {
				mdb.ExecContext(ctx, "SELECT 1") //nolint:errcheck // load only; ends with ctx
			}
		})
	}
	r.awaitMetrics(t, p.ID, "PostgreSQL operations a second show the load", func(l *LastMetrics) bool {
		return l.OpsPerSecond != nil && *l.OpsPerSecond >= max(20, 3*idle)
	})
	stop()
	load.Wait()

	// MariaDB: sizes of its databases, connections, statements a second.
	mariaFirst := r.awaitMetrics(t, m.ID, "a MariaDB sample", func(l *LastMetrics) bool { return l.Connections != nil })
	mariaAdmin := testlab.OpenSQL(t, "mysql", maria.DSN(shop))
	if _, err := mariaAdmin.Exec("CREATE TABLE filler (id INT PRIMARY KEY, pad VARCHAR(200))"); err != nil {
		t.Fatal(err)
	}
	tx, err := mariaAdmin.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		if _, err := tx.Exec("INSERT INTO filler VALUES (?, ?)", i, strings.Repeat("y", 200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r.awaitMetrics(t, m.ID, "the MariaDB database's size grows", func(l *LastMetrics) bool {
		return sizeOf(l, shop) > sizeOf(mariaFirst, shop)+2<<20 && l.MaxConnections != nil && *l.MaxConnections > 0
	})
	r.awaitMetrics(t, m.ID, "MariaDB statements a second", func(l *LastMetrics) bool {
		return l.OpsPerSecond != nil && *l.OpsPerSecond > 0
	})

	// Redis: keys and memory.
	c := rds.Client(t)
	for i := range 150 {
		if err := c.Set(t.Context(), "metrics:"+strconv.Itoa(i), strings.Repeat("z", 100), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	kv := r.awaitMetrics(t, k.ID, "the Redis keys are counted", func(l *LastMetrics) bool { return l.Keys != nil && *l.Keys == 150 })
	if kv.MemoryBytes == nil || *kv.MemoryBytes <= 0 || kv.Connections == nil || *kv.Connections < 1 || kv.SizeBytes != nil ||
		kv.Databases != nil || kv.MaxConnections == nil {
		t.Fatalf("Redis sample: %+v", *kv)
	}

	// An instance that cannot be sampled: its samples carry the engine's
	// error, for administrators only.
	if err := c.ConfigSet(t.Context(), "requirepass", "changed-"+rds.Password).Err(); err != nil {
		t.Fatal(err)
	}
	failed := r.awaitMetrics(t, k.ID, "a failed Redis sample", func(l *LastMetrics) bool { return l.Failed })
	if failed.Error == nil || !strings.Contains(*failed.Error, "WRONGPASS") || failed.Keys != nil {
		t.Fatalf("failed sample: %+v (error %q)", *failed, deref(failed.Error))
	}
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	mt := signInUser(t, r.ControlPlane, member).AccessToken
	if l := r.lastMetrics(t, k.ID, mt); l == nil || !l.Failed || l.Error != nil {
		t.Fatalf("member's last metrics: %+v", l)
	}
	series := r.metrics(t, k.ID, "?hours=1", r.Token)
	errSeen := false
	for _, pt := range series.Series {
		if pt.Errors == 1 && pt.Error != nil && strings.Contains(*pt.Error, "WRONGPASS") {
			errSeen = true
		}
	}
	if !errSeen || series.Resolution != "raw" || series.Hours != 1 || series.Redacted {
		t.Fatalf("admin's series: resolution %s, hours %d, error sample seen %t", series.Resolution, series.Hours, errSeen)
	}
	ms := r.metrics(t, k.ID, "?hours=1", mt)
	if !ms.Redacted || len(ms.Series) == 0 {
		t.Fatalf("member's series: %+v", ms)
	}
	for _, pt := range ms.Series {
		if pt.Error != nil {
			t.Fatalf("a member got a sample's error: %q", *pt.Error)
		}
	}

	// The default span is 24 hours of raw samples; over 48 hours the
	// series is hourly, from the rollups.
	if s := r.metrics(t, p.ID, "", mt); s.Hours != 24 || s.Resolution != "raw" || len(s.Series) < 3 || s.Series[0].Samples != 1 {
		t.Fatalf("default series: hours %d, resolution %s, %d points", s.Hours, s.Resolution, len(s.Series))
	}
	testlab.EventuallyReport(t, 60*time.Second, "an hourly point", func() (bool, string) {
		s := r.metrics(t, p.ID, "?hours=72", r.Token)
		ok := s.Resolution == "1h" && s.BucketSeconds == 3600 && len(s.Series) > 0 && s.Series[len(s.Series)-1].Samples >= 3 &&
			s.Series[len(s.Series)-1].SizeBytes != nil
		return ok, fmt.Sprintf("%+v", s)
	})

	// Bad hours: 422; an unknown instance: 404.
	for _, q := range []string{"?hours=0", "?hours=2161", "?hours=-1", "?hours=day"} {
		expectStatus(t, r.Get(t, "/api/v1/databases/"+p.ID+"/metrics"+q, r.Token), http.StatusUnprocessableEntity)
	}
	expectStatus(t, r.Get(t, "/api/v1/databases/db_none/metrics", r.Token), http.StatusNotFound)
	expectStatus(t, r.Get(t, "/api/v1/databases/"+p.ID+"/metrics?hours=2160", mt), http.StatusOK)

	// The passwords the agent logs in with never reach its log.
	logs := r.agent.Logs()
	for _, pw := range []string{pg.Password, maria.Password, rds.Password} {
		if strings.Contains(logs, pw) {
			t.Fatal("a database password is in the agent's log")
		}
	}
}

// holdConns opens n connections of db and keeps them open until the
// test ends.
func holdConns(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	for range n {
		c, err := db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PingContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

func sizeOf(l *LastMetrics, database string) int64 {
	for _, d := range l.Databases {
		if d.Name == database {
			return d.SizeBytes
		}
	}
	return 0
}

// TestManagedDatabaseMetrics: a managed PostgreSQL instance is sampled as
// soon as it is ready, with its container's memory; once stopped it is no
// longer sampled.
func TestManagedDatabaseMetrics(t *testing.T) {
	t.Parallel()
	r := newManagedRigWith(t, store.SQLite, "--database-metrics-interval", "2s")
	inst, j := r.create(t, map[string]any{"name": "pgm-" + r.run, "engine": "postgres", "version": "15", "database": "app"})
	if j.Status != "succeeded" || inst.State != "ready" {
		t.Fatalf("create: %s %s, instance %s", j.Status, deref(j.Error), inst.State)
	}
	l := r.awaitMetrics(t, inst.ID, "a sample of the managed instance with its container's memory", func(l *LastMetrics) bool {
		return l.MemoryBytes != nil
	})
	if *l.MemoryBytes < 1<<20 || l.Connections == nil || l.SizeBytes == nil || sizeOf(l, "app") <= 0 {
		t.Fatalf("managed sample: %+v", *l)
	}
	r.control(t, inst.ID, "stop")
	if s := r.settled(t, inst.ID); s.State != "stopped" {
		t.Fatalf("after stop: %s", s.State)
	}
	// An instance registered after the stop is sampled from a list the
	// agent fetched after the stop: the stopped instance is not on it.
	rds := testlab.StartRedis(t, nil)
	k := r.register(t, map[string]any{"name": "cache-" + r.run, "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": rds.Password, "tls_mode": "disable"})
	first := r.awaitMetrics(t, k.ID, "a sample of the instance registered after the stop", func(l *LastMetrics) bool { return l.Keys != nil })
	r.awaitMetrics(t, k.ID, "a later sample of it", func(l *LastMetrics) bool { return l.At.After(first.At) })
	if last := r.lastMetrics(t, inst.ID, r.Token); !last.At.Before(first.At) {
		t.Fatalf("the stopped instance was sampled at %s, after the list without it was taken (%s)", last.At, first.At)
	}
}
