package testlab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PostgresURLEnv names the variable holding the URL of the test's
// PostgreSQL server, a superuser's (scripts/testenv.sh starts one).
const PostgresURLEnv = "CAPSTAN_TEST_POSTGRES_URL"

// PostgresURL returns the test server's URL. Without one the test is
// skipped, or fails when CI=true.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(PostgresURLEnv)
	if u == "" {
		Require(t, "PostgreSQL ("+PostgresURLEnv+" is not set; run the tests with make test)")
	}
	return u
}

// PostgresDatabase creates a new, empty database on the test server and
// returns its URL; the database is dropped when the test ends.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	base := PostgresURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", PostgresURLEnv, err)
	}
	var b [8]byte
	rand.Read(b[:])
	name := "capstan_test_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating test database %s: %v", name, err)
	}
	DropPostgresDatabaseAtCleanup(t, name)
	u.Path = "/" + name
	return u.String()
}

// DropPostgresDatabaseAtCleanup drops the database name of the test
// server when the test ends: one the code under test made there (a
// restore's new database, say).
func DropPostgresDatabaseAtCleanup(t testing.TB, name string) {
	t.Helper()
	base := PostgresURL(t)
	t.Cleanup(func() {
		admin, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+strings.ReplaceAll(name, `"`, `""`)+`" WITH (FORCE)`); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
}
