package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
)

// TestJobOutputEncryptedAtRest runs a query whose rows hold a marker on a
// real PostgreSQL through a real agent: the API returns the rows, and
// neither the jobs nor their events hold the marker as stored, on either
// store.
func TestJobOutputEncryptedAtRest(t *testing.T) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			r := newDBRig(t, d)
			pg, _ := r.registerPostgres(t, "pg")
			marker := randomMarker(t)
			j := r.call(t, pg.ID, "query", map[string]any{"readonly": true, "sql": "SELECT '" + marker + "' || 'x' AS v"})
			if j.Status != "succeeded" || !strings.Contains(string(j.Data), marker+"x") {
				t.Fatalf("query: %s %s", j.Status, j.Data)
			}
			db := openStoreDB(t, r.ControlPlane)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, q := range []string{
				`SELECT COALESCE(data, '') || COALESCE(output, '') || COALESCE(late_data, '') FROM jobs`,
				`SELECT message || COALESCE(data, '') FROM job_events`,
			} {
				rows, err := db.QueryContext(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				seen := 0
				for rows.Next() {
					var v string
					if err := rows.Scan(&v); err != nil {
						t.Fatal(err)
					}
					seen++
					if strings.Contains(v, marker+"x") {
						t.Errorf("%s: a stored row holds the query's result in plain text", q)
					}
				}
				rows.Close()
				if seen == 0 {
					t.Fatalf("%s: no rows", q)
				}
			}
		})
	}
}
