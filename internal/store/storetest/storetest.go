// Package storetest opens fresh, migrated stores for tests: a SQLite file in
// a temporary directory, and a new database on the test lab's PostgreSQL
// server (testlab.PostgresDatabase; make test starts one). Without that
// server the PostgreSQL half is skipped, except under CI=true, where it
// fails.
package storetest

import (
	"context"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

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
// database (testlab.PostgresDatabase) that is dropped when the test ends.
func DatabaseURL(t testing.TB, d store.Dialect) string {
	t.Helper()
	if d == store.SQLite {
		return ""
	}
	return testlab.PostgresDatabase(t)
}
