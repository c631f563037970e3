// Package storetest opens fresh, migrated stores for tests: a SQLite file in
// a temporary directory, and a new database on the PostgreSQL server named by
// CAPSTAN_TEST_POSTGRES_URL (make test starts one). Without that variable the
// PostgreSQL half is skipped, except under CI=true, where it fails.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
)

// PostgresURLEnv names the variable holding the test server's URL.
const PostgresURLEnv = "CAPSTAN_TEST_POSTGRES_URL"

// RunWithStores runs fn once per dialect, each in its own subtest with its
// own empty, migrated store.
func RunWithStores(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	t.Helper()
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			fn(t, Open(t, d))
		})
	}
}

// Open returns an empty, migrated store of the given dialect, closed when
// the test ends.
func Open(t testing.TB, d store.Dialect) *store.Store {
	t.Helper()
	url := DatabaseURL(t, d)
	s, err := store.Open(context.Background(), url, t.TempDir())
	if err != nil {
		t.Fatalf("open %s store: %v", d, err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate %s store: %v", d, err)
	}
	return s
}

// DatabaseURL returns a --database-url for a new, empty database of the
// given dialect: "" (SQLite in the caller's data dir) or a fresh PostgreSQL
// database that is dropped when the test ends.
func DatabaseURL(t testing.TB, d store.Dialect) string {
	t.Helper()
	if d == store.SQLite {
		return ""
	}
	base := PostgresURL(t)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := "capstan_test_" + strings.TrimPrefix(ids.New("db"), "db_")
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		admin, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer admin.Close()
		admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") //nolint:errcheck // best effort
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", PostgresURLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

// PostgresURL returns the test server's URL or skips (fails under CI).
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(PostgresURLEnv)
	if u == "" {
		Require(t, fmt.Sprintf("PostgreSQL (%s is not set; run the tests with make test)", PostgresURLEnv))
	}
	return u
}

// Require skips the test because a component is missing, or fails it when
// CI=true: CI must run every test.
func Require(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing test component: %s", what)
	}
	t.Skipf("missing test component: %s", what)
}
