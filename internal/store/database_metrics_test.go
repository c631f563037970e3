package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }
func dbSample(id string, at time.Time, conns, size int64, ops float64) agentproto.DBMetricSample {
	return agentproto.DBMetricSample{InstanceID: id, At: at, Connections: i64(conns), MaxConnections: i64(100), SizeBytes: i64(size),
		OpsPerSecond: f64(ops), Databases: []agentproto.DBSize{{Name: "app", SizeBytes: size}}}
}

// TestStoreDatabaseMetrics: samples are stored once each (also when the
// same report arrives twice at once), served raw and in buckets; hours
// older than the raw retention are served from their rollups, averaged,
// after their raw samples were pruned; the newest sample is the last
// metrics, error samples included.
func TestStoreDatabaseMetrics(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst := mustInsertInstance(t, s, srv, "main")
		now := t0.Truncate(time.Hour).Add(30 * time.Minute)
		old := now.Add(-72 * time.Hour).Truncate(time.Hour) // beyond the raw retention
		report := []agentproto.DBMetricSample{
			dbSample(inst.ID, old.Add(10*time.Minute), 2, 1000, 10),
			dbSample(inst.ID, old.Add(20*time.Minute), 4, 3000, 30),
			{InstanceID: inst.ID, At: old.Add(30 * time.Minute), Error: "connection refused"},
			dbSample(inst.ID, now.Add(-2*time.Minute), 5, 5000, 50),
			{InstanceID: inst.ID, At: now.Add(-time.Minute), Error: "connection refused"},
		}
		// The same report three times at once: each sample stored once.
		var wg sync.WaitGroup
		counts := make([]int, 3)
		errs := make([]error, 3)
		for i := range counts {
			wg.Go(func() { counts[i], errs[i] = s.InsertDatabaseMetricSamples(ctx, report, now) })
		}
		wg.Wait()
		total := 0
		for i, err := range errs {
			if err != nil {
				t.Fatalf("insert %d: %v", i, err)
			}
			total += counts[i]
		}
		if total != len(report) {
			t.Fatalf("stored %d samples over three identical reports, want %d", total, len(report))
		}
		if n, err := s.CountDatabaseMetricSamples(ctx, inst.ID, old, now.Add(time.Hour)); err != nil || n != len(report) {
			t.Fatalf("count: %d (%v), want %d", n, err, len(report))
		}

		raw, err := s.DatabaseMetricPoints(ctx, inst.ID, now.Add(-time.Hour), now.Add(time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) != 2 || raw[0].Connections == nil || *raw[0].Connections != 5 || *raw[0].SizeBytes != 5000 || raw[0].Errors != 0 {
			t.Fatalf("raw points: %+v", raw)
		}
		if raw[1].Errors != 1 || raw[1].Error == nil || *raw[1].Error != "connection refused" || raw[1].Connections != nil {
			t.Fatalf("error sample: %+v", raw[1])
		}
		bucketed, err := s.DatabaseMetricPoints(ctx, inst.ID, old, old.Add(time.Hour), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(bucketed) != 1 || bucketed[0].Samples != 3 || bucketed[0].Errors != 1 || *bucketed[0].Connections != 3 ||
			*bucketed[0].ConnectionsMax != 4 || *bucketed[0].SizeBytes != 2000 || *bucketed[0].OpsPerSecondMax != 30 {
			t.Fatalf("bucket average: %+v", bucketed)
		}

		latest, err := s.LatestDatabaseMetrics(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if l := latest[inst.ID]; !l.Failed || l.Error == nil || !l.At.Equal(now.Add(-time.Minute)) || len(latest) != 1 {
			t.Fatalf("latest: %+v", latest)
		}

		// Roll up, then prune: the old hour is served from its rollup.
		if n, err := s.RollupDatabaseMetrics(ctx, 50, now); err != nil || n != 2 {
			t.Fatalf("rollup: %d hours (%v), want 2", n, err)
		}
		if n, err := s.RollupDatabaseMetrics(ctx, 50, now); err != nil || n != 0 {
			t.Fatalf("second rollup: %d hours (%v), want 0", n, err)
		}
		pruned, err := s.PruneDatabaseMetrics(ctx, now.Add(-databases.MetricsRawRetention).Truncate(time.Hour),
			now.Add(-databases.MetricsRollupRetention), 1000)
		if err != nil || pruned != 3 {
			t.Fatalf("prune: %d rows (%v), want the 3 old samples", pruned, err)
		}
		if n, _ := s.CountDatabaseMetricSamples(ctx, inst.ID, old, now.Add(-time.Hour)); n != 0 {
			t.Fatalf("old raw samples left: %d", n)
		}
		hours, err := s.DatabaseMetricHours(ctx, inst.ID, old.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(hours) != 2 {
			t.Fatalf("hourly points: %+v", hours)
		}
		h := hours[0]
		if !h.T.Equal(old) || h.Samples != 3 || h.Errors != 1 || *h.Connections != 3 || *h.ConnectionsMax != 4 ||
			*h.MaxConnections != 100 || *h.SizeBytes != 2000 || *h.OpsPerSecond != 20 || *h.OpsPerSecondMax != 30 ||
			h.Keys != nil || h.MemoryBytes != nil {
			t.Fatalf("old hour's rollup: %+v", h)
		}

		// Retention of the rollups.
		if n, err := s.PruneDatabaseMetrics(ctx, old, now, 1000); err != nil || n != 2 {
			t.Fatalf("prune rollups: %d (%v), want 2", n, err)
		}
	})
}

// TestStoreDatabaseMetricsRollupRace: samples stored while the rollup
// runs are rolled up too, by a later run: an hour is unmarked only if no
// report marked it again meanwhile.
func TestStoreDatabaseMetricsRollupRace(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst := mustInsertInstance(t, s, srv, "main")
		hour := t0.Truncate(time.Hour)
		const n = 60
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range n {
				if _, err := s.InsertDatabaseMetricSamples(ctx, []agentproto.DBMetricSample{
					dbSample(inst.ID, hour.Add(time.Duration(i)*time.Second), 1, 1, 1)}, t0); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			for range n {
				if _, err := s.RollupDatabaseMetrics(ctx, 50, t0); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Wait()
		if _, err := s.RollupDatabaseMetrics(ctx, 50, t0); err != nil {
			t.Fatal(err)
		}
		hours, err := s.DatabaseMetricHours(ctx, inst.ID, hour, hour.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(hours) != 1 || hours[0].Samples != n {
			t.Fatalf("rollup after racing inserts: %+v, want one hour of %d samples", hours, n)
		}
	})
}
