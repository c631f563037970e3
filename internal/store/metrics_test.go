package store_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// h0 is the start of an hour.
var h0 = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)

func mustCreateServer(t testing.TB, s *store.Store, name string) string {
	t.Helper()
	srv := servers.Server{ID: ids.New(ids.Server), Name: name, Tags: []string{}, Status: servers.Pending, CreatedAt: t0, UpdatedAt: t0}
	if err := s.CreateServer(context.Background(), srv, ids.Hash(ids.New("ept")), t0.Add(time.Hour)); err != nil {
		t.Fatalf("create server: %v", err)
	}
	return srv.ID
}

// sample is a sample with cpu% and memory used% both pct, and, when disk
// is not negative, one filesystem that is disk% full.
func sample(at time.Time, pct, disk float64) metrics.Sample {
	m := agentproto.MetricSample{At: at, CPUPercent: pct, Load1: pct / 10, Load5: 1, Load15: 2,
		MemoryTotal: 1000, MemoryUsed: uint64(pct * 10), MemoryAvailable: 1000 - uint64(pct*10),
		NetRxBytesPerS: 2 * pct, NetTxBytesPerS: 3 * pct, UptimeSeconds: uint64(at.Unix())}
	if disk >= 0 {
		m.Filesystems = []agentproto.FilesystemSample{{Mount: "/", Device: "/dev/sda1", FSType: "ext4", BytesTotal: 1000, BytesUsed: uint64(disk * 10)}}
	}
	return metrics.Derive(m)
}

func insert(t testing.TB, s *store.Store, serverID string, samples ...metrics.Sample) int {
	t.Helper()
	n, err := s.InsertMetricSamples(context.Background(), serverID, samples, h0)
	if err != nil {
		t.Fatalf("insert samples: %v", err)
	}
	return n
}

func points(t *testing.T, s *store.Store, serverID string, from, to time.Time, bucket time.Duration) []metrics.SeriesPoint {
	t.Helper()
	got, err := s.MetricPoints(context.Background(), serverID, from, to, bucket)
	if err != nil {
		t.Fatalf("metric points: %v", err)
	}
	return got[serverID]
}

func hourly(t *testing.T, s *store.Store, serverID string, from, to time.Time) []metrics.SeriesPoint {
	t.Helper()
	got, err := s.HourlyPoints(context.Background(), serverID, from, to)
	if err != nil {
		t.Fatalf("hourly points: %v", err)
	}
	return got[serverID]
}

// mark marks an hour of a server for a recompute, as older versions did
// at ingest.
func mark(t *testing.T, s *store.Store, serverID string, hour time.Time) {
	t.Helper()
	if err := s.MarkMetricHour(context.Background(), serverID, hour.UnixMilli()); err != nil {
		t.Fatalf("mark hour: %v", err)
	}
}

func rollup(t *testing.T, s *store.Store, limit int) int {
	t.Helper()
	n, err := s.RollupMetrics(context.Background(), limit, h0)
	if err != nil {
		t.Fatalf("rollup: %v", err)
	}
	return n
}

func count(t *testing.T, s *store.Store, serverID string, from, to time.Time) int {
	t.Helper()
	n, err := s.CountMetricSamples(context.Background(), serverID, from, to)
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func wantFloat(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil || !near(*got, want) {
		t.Fatalf("%s: got %v, want %v", what, deref(got), want)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// wantHour checks a rollup point's sample count and cpu average and maximum
// (memory used% follows cpu in these samples).
func wantHour(t *testing.T, p metrics.SeriesPoint, hour time.Time, samples int, avg, max float64) {
	t.Helper()
	if !p.T.Equal(hour) || p.Samples != samples || !near(p.CPUPercent, avg) || !near(p.CPUPercentMax, max) {
		t.Fatalf("hour %s: got t=%s samples=%d cpu avg=%v max=%v, want %d samples, avg %v, max %v",
			hour, p.T, p.Samples, p.CPUPercent, p.CPUPercentMax, samples, avg, max)
	}
	wantFloat(t, "memory used% avg of "+hour.String(), p.MemoryUsedPercent, avg)
	wantFloat(t, "memory used% max of "+hour.String(), p.MemoryUsedPercentMax, max)
}

func TestMetricSamplesInsertAndRange(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := mustCreateServer(t, s, "a"), mustCreateServer(t, s, "b")
		batch := []metrics.Sample{sample(h0.Add(time.Minute), 10, 40), sample(h0.Add(2*time.Minute), 20, -1), sample(h0.Add(3*time.Minute), 30, 60)}
		if n := insert(t, s, a, batch...); n != 3 {
			t.Fatalf("insert: %d new, want 3", n)
		}
		// A retried batch counts once; a batch overlapping an earlier one
		// adds only what is new.
		if n := insert(t, s, a, batch...); n != 0 {
			t.Fatalf("retried batch: %d new, want 0", n)
		}
		if n := insert(t, s, a, batch[2], sample(h0.Add(4*time.Minute), 40, 50)); n != 1 {
			t.Fatalf("overlapping batch: %d new, want 1", n)
		}
		// Within a batch, two samples of the same millisecond are one.
		if n := insert(t, s, b, sample(h0.Add(time.Minute), 70, 10), sample(h0.Add(time.Minute+100*time.Microsecond), 71, 10)); n != 1 {
			t.Fatalf("same-millisecond samples: %d new, want 1", n)
		}

		if got := count(t, s, a, h0, h0.Add(time.Hour)); got != 4 {
			t.Fatalf("count: %d, want 4", got)
		}
		if got := count(t, s, a, h0.Add(2*time.Minute), h0.Add(4*time.Minute)); got != 2 {
			t.Fatalf("count of [2m, 4m): %d, want 2", got)
		}
		got := points(t, s, a, h0, h0.Add(time.Hour), 0)
		if len(got) != 4 {
			t.Fatalf("raw points: %d, want 4", len(got))
		}
		for i, p := range got {
			if want := h0.Add(time.Duration(i+1) * time.Minute); !p.T.Equal(want) || p.Samples != 1 || p.CPUPercent != float64(10*(i+1)) {
				t.Fatalf("point %d: %+v, want t=%s cpu=%d", i, p, want, 10*(i+1))
			}
		}
		p := got[0]
		wantFloat(t, "memory used%", p.MemoryUsedPercent, 10)
		wantFloat(t, "disk used%", p.DiskUsedPercent, 40)
		if p.MemoryUsed != 100 || p.MemoryTotal != 1000 || p.Load1 != 1 || p.NetRxBytesPerS != 20 || p.NetTxBytesPerS != 30 || p.SwapUsedPercent != nil {
			t.Fatalf("point 0: %+v", p)
		}
		if got[1].DiskUsedPercent != nil {
			t.Fatalf("a sample without filesystems has disk used%% %v, want null", *got[1].DiskUsedPercent)
		}
		if got := points(t, s, a, h0.Add(2*time.Minute), h0.Add(3*time.Minute), 0); len(got) != 1 || got[0].CPUPercent != 20 {
			t.Fatalf("range [2m, 3m): %+v", got)
		}
		all, err := s.MetricPoints(ctx, "", h0, h0.Add(time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 || len(all[a]) != 4 || len(all[b]) != 1 || all[b][0].CPUPercent != 70 {
			t.Fatalf("every server: %+v", all)
		}

		// The latest sample moves only forward.
		insert(t, s, a, sample(h0.Add(30*time.Second), 99, 99))
		l, err := s.LatestMetric(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if l == nil || !l.At.Equal(h0.Add(4*time.Minute)) || l.CPUPercent != 40 || l.Load1 != 4 || l.UptimeSeconds != h0.Add(4*time.Minute).Unix() {
			t.Fatalf("latest of a: %+v", l)
		}
		wantFloat(t, "latest memory used%", l.MemoryUsedPercent, 40)
		wantFloat(t, "latest disk used%", l.DiskUsedPercent, 50)
		latest, err := s.LatestMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(latest) != 2 || latest[a].CPUPercent != 40 || latest[b].CPUPercent != 70 {
			t.Fatalf("latest of every server: %+v", latest)
		}
		if l, err := s.LatestMetric(ctx, "srv_nope"); err != nil || l != nil {
			t.Fatalf("latest of an unknown server: %v, %v", l, err)
		}
	})
}

func TestMetricRollups(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		a := mustCreateServer(t, s, "a")
		hA, hB := h0, h0.Add(time.Hour)
		insert(t, s, a, sample(hA.Add(time.Minute), 10, -1), sample(hA.Add(20*time.Minute), 20, 60), sample(hA.Add(59*time.Minute), 30, 80),
			sample(hB, 50, 10))
		// The rollups are current at once: nothing is left to recompute.
		if n := rollup(t, s, 100); n != 0 {
			t.Fatalf("rollup: %d hours, want 0", n)
		}
		got := hourly(t, s, a, hA, hB.Add(time.Hour))
		if len(got) != 2 {
			t.Fatalf("hourly points: %+v", got)
		}
		wantHour(t, got[0], hA, 3, 20, 30)
		wantHour(t, got[1], hB, 1, 50, 50)
		wantFloat(t, "disk used% avg of A (two samples report it)", got[0].DiskUsedPercent, 70)
		wantFloat(t, "disk used% max of A", got[0].DiskUsedPercentMax, 80)
		if !near(got[0].Load1, 2) || !near(got[0].NetRxBytesPerS, 40) || got[0].MemoryUsed != 200 || got[0].MemoryTotal != 1000 {
			t.Fatalf("hour A: %+v", got[0])
		}

		// A late sample is added to its hour, and only that hour.
		if n := insert(t, s, a, sample(hA.Add(30*time.Minute), 60, -1)); n != 1 {
			t.Fatalf("late sample: %d new", n)
		}
		got = hourly(t, s, a, hA, hB.Add(time.Hour))
		wantHour(t, got[0], hA, 4, 30, 60)
		wantHour(t, got[1], hB, 1, 50, 50)

		// Retried, it changes nothing.
		if n := insert(t, s, a, sample(hA.Add(30*time.Minute), 60, -1)); n != 0 {
			t.Fatalf("retried late sample: %d new", n)
		}
		wantHour(t, hourly(t, s, a, hA, hA.Add(time.Hour))[0], hA, 4, 30, 60)

		// Hours marked by older versions are recomputed from their raw
		// samples, in batches, to the same rollups.
		for i := range 5 {
			insert(t, s, a, sample(h0.Add(time.Duration(10+i)*time.Hour), 1, 1))
		}
		before := hourly(t, s, a, h0, h0.Add(24*time.Hour))
		if len(before) != 7 {
			t.Fatalf("hourly points: %d, want 7", len(before))
		}
		mark(t, s, a, hA)
		for i := range 4 {
			mark(t, s, a, h0.Add(time.Duration(10+i)*time.Hour))
		}
		for _, want := range []int{2, 2, 1, 0} {
			if n := rollup(t, s, 2); n != want {
				t.Fatalf("batched rollup: %d hours, want %d", n, want)
			}
		}
		after := hourly(t, s, a, h0, h0.Add(24*time.Hour))
		if len(after) != len(before) {
			t.Fatalf("hourly points after the recompute: %d, want %d", len(after), len(before))
		}
		for i := range after {
			b, r := before[i], after[i]
			if !b.T.Equal(r.T) || b.Samples != r.Samples || !near(b.CPUPercent, r.CPUPercent) || b.CPUPercentMax != r.CPUPercentMax ||
				(b.DiskUsedPercent == nil) != (r.DiskUsedPercent == nil) || (b.DiskUsedPercent != nil && !near(*b.DiskUsedPercent, *r.DiskUsedPercent)) ||
				!near(b.NetRxBytesPerS, r.NetRxBytesPerS) {
				t.Fatalf("hour %s: merged at ingest %+v, recomputed %+v", b.T, b, r)
			}
		}
	})
}

// fleet is a fixed list of servers.
type fleet []servers.Server

func (f fleet) Get(_ context.Context, id string) (servers.Server, error) {
	for _, s := range f {
		if s.ID == id {
			return s, nil
		}
	}
	return servers.Server{}, fault.NotFoundf("No such server.")
}

func (f fleet) List(context.Context) ([]servers.Server, error) { return f, nil }

func TestMetricSeriesRanges(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateServer(t, s, "a")
		now := h0.Add(30 * time.Minute)
		clock := func() time.Time { return now }
		svc := metrics.NewService(s, fleet{{ID: a, Name: "a", Status: servers.Online}}, clock, nil)
		// Three samples in each of these hours, cpu avg+-10: avg avg, max avg+10.
		hours := []struct {
			start time.Time
			avg   float64
		}{
			{h0.Add(-80 * 24 * time.Hour), 15},
			{h0.Add(-20 * 24 * time.Hour), 25},
			{h0.Add(-5 * 24 * time.Hour), 35},
			{h0.Add(-47 * time.Hour), 42}, // just inside the raw horizon
			{h0.Add(-3 * time.Hour), 45},
			{h0, 55},
		}
		for _, h := range hours {
			insert(t, s, a, sample(h.start.Add(5*time.Minute), h.avg-10, 10), sample(h.start.Add(15*time.Minute), h.avg, 20),
				sample(h.start.Add(25*time.Minute), h.avg+10, 30))
		}
		st, err := svc.Maintain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.HoursRolledUp != 0 {
			t.Fatalf("maintenance rolled up %d hours, want 0 (every sample was merged on insert)", st.HoursRolledUp)
		}
		// The raw samples of the three oldest hours were pruned.
		if st.RowsPruned != 9 {
			t.Fatalf("maintenance pruned %d rows, want 9", st.RowsPruned)
		}

		check := func(rangeName string, want ...int) {
			t.Helper()
			series, err := svc.Series(ctx, a, rangeName)
			if err != nil {
				t.Fatal(err)
			}
			if series.Resolution != "1h" || series.BucketSeconds != 3600 || series.Range != rangeName || series.ServerID != a {
				t.Fatalf("%s: %+v", rangeName, series)
			}
			if len(series.Points) != len(want) {
				t.Fatalf("%s: %d points, want %d: %+v", rangeName, len(series.Points), len(want), series.Points)
			}
			for i, w := range want {
				wantHour(t, series.Points[i], hours[w].start, 3, hours[w].avg, hours[w].avg+10)
				wantFloat(t, rangeName+" disk avg", series.Points[i].DiskUsedPercent, 20)
				wantFloat(t, rangeName+" disk max", series.Points[i].DiskUsedPercentMax, 30)
			}
		}
		check("7d", 2, 3, 4, 5)
		check("30d", 1, 2, 3, 4, 5)
		check("90d", 0, 1, 2, 3, 4, 5)

		// A sample arriving after its hour's raw samples were pruned is
		// merged into the rollup; retried before the next prune, it
		// counts once.
		late := sample(hours[2].start.Add(50*time.Minute), 75, 90)
		for range 2 {
			if _, err := s.InsertMetricSamples(ctx, a, []metrics.Sample{late}, now); err != nil {
				t.Fatal(err)
			}
		}
		series, err := svc.Series(ctx, a, "7d")
		if err != nil {
			t.Fatal(err)
		}
		wantHour(t, series.Points[0], hours[2].start, 4, 45, 75)
		wantFloat(t, "merged disk max", series.Points[0].DiskUsedPercentMax, 90)
		wantFloat(t, "merged disk avg", series.Points[0].DiskUsedPercent, 37.5)
		if _, err := svc.Maintain(ctx); err != nil {
			t.Fatal(err)
		}
		series, err = svc.Series(ctx, a, "7d")
		if err != nil {
			t.Fatal(err)
		}
		wantHour(t, series.Points[0], hours[2].start, 4, 45, 75)

		// The raw ranges serve the samples themselves.
		raw, err := svc.Series(ctx, a, "1h")
		if err != nil {
			t.Fatal(err)
		}
		if raw.Resolution != "raw" || raw.BucketSeconds != 0 || len(raw.Points) != 3 || !raw.Points[0].T.Equal(h0.Add(5*time.Minute)) {
			t.Fatalf("1h: %+v", raw)
		}
		day, err := svc.Series(ctx, a, "24h")
		if err != nil {
			t.Fatal(err)
		}
		if len(day.Points) != 6 {
			t.Fatalf("24h: %d points, want 6", len(day.Points))
		}
	})
}

func TestMetricRetention(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, gone := mustCreateServer(t, s, "a"), mustCreateServer(t, s, "gone")
		rawBefore := h0
		rollupBefore := h0.Add(-24 * time.Hour)
		insert(t, s, a,
			sample(h0.Add(-26*time.Hour), 1, 1),               // raw pruned, rollup pruned
			sample(h0.Add(-25*time.Hour+time.Minute), 2, 2),   // raw pruned, rollup pruned
			sample(h0.Add(-24*time.Hour), 3, 3),               // raw pruned, rollup kept
			sample(h0.Add(-2*time.Hour+10*time.Minute), 4, 4), // hour marked again below: kept
			sample(h0.Add(-time.Hour+5*time.Minute), 5, 5),    // raw pruned
			sample(h0.Add(-time.Millisecond), 6, 6),           // raw pruned
			sample(h0, 7, 7),                                  // kept
			sample(h0.Add(time.Hour), 8, 8),                   // kept
		)
		insert(t, s, gone, sample(h0.Add(time.Minute), 9, 9))
		if err := s.PutInventory(ctx, gone, metrics.Inventory{CollectedAt: h0, ReceivedAt: h0}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutInventory(ctx, a, metrics.Inventory{CollectedAt: h0, ReceivedAt: h0}); err != nil {
			t.Fatal(err)
		}
		// A late sample in an hour an older version marked: its raw
		// samples stay until the recompute.
		insert(t, s, a, sample(h0.Add(-2*time.Hour+20*time.Minute), 10, 10))
		mark(t, s, a, h0.Add(-2*time.Hour))
		if err := s.DeleteServer(ctx, gone, h0); err != nil {
			t.Fatal(err)
		}

		// In batches of two: raw samples first, then rollups, then (in
		// the last batch, unbounded) the records of deleted servers.
		var total int
		for _, want := range []int{2, 2, 2, 3} {
			n, err := s.PruneMetrics(ctx, rawBefore, rollupBefore, 2)
			if err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Fatalf("prune batch: %d rows, want %d", n, want)
			}
			total += n
		}
		if total != 9 { // 5 raw samples, 2 rollups, the latest sample and the inventory of the deleted server
			t.Fatalf("pruned %d rows, want 9", total)
		}
		if n, err := s.PruneMetrics(ctx, rawBefore, rollupBefore, 2); err != nil || n != 0 {
			t.Fatalf("prune again: %d, %v", n, err)
		}

		raw := points(t, s, a, h0.Add(-30*time.Hour), h0.Add(2*time.Hour), 0)
		var left []float64
		for _, p := range raw {
			left = append(left, p.CPUPercent)
		}
		if len(left) != 4 || left[0] != 4 || left[1] != 10 || left[2] != 7 || left[3] != 8 {
			t.Fatalf("raw samples left: cpu %v, want [4 10 7 8]", left)
		}
		hrs := hourly(t, s, a, h0.Add(-30*time.Hour), h0.Add(2*time.Hour))
		var hoursLeft []time.Time
		for _, p := range hrs {
			hoursLeft = append(hoursLeft, p.T)
		}
		if len(hrs) != 5 || !hrs[0].T.Equal(h0.Add(-24*time.Hour)) {
			t.Fatalf("rollups left: %v, want the 5 hours from %s", hoursLeft, h0.Add(-24*time.Hour))
		}
		// The marked hour's rollup is still computed from all its samples.
		rollup(t, s, 100)
		marked := hourly(t, s, a, h0.Add(-2*time.Hour), h0.Add(-time.Hour))
		if len(marked) != 1 || marked[0].Samples != 2 || !near(marked[0].CPUPercent, 7) {
			t.Fatalf("marked hour after prune: %+v", marked)
		}

		if l, err := s.LatestMetric(ctx, gone); err != nil || l != nil {
			t.Fatalf("latest sample of a deleted server: %+v, %v", l, err)
		}
		if inv, err := s.ServerInventory(ctx, gone); err != nil || inv != nil {
			t.Fatalf("inventory of a deleted server: %+v, %v", inv, err)
		}
		if l, err := s.LatestMetric(ctx, a); err != nil || l == nil {
			t.Fatalf("latest sample of a: %+v, %v", l, err)
		}
		if inv, err := s.ServerInventory(ctx, a); err != nil || inv == nil {
			t.Fatalf("inventory of a: %+v, %v", inv, err)
		}
	})
}

func TestMetricDownsampling(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := mustCreateServer(t, s, "a"), mustCreateServer(t, s, "b")
		now := h0.Add(17 * time.Minute)
		svc := metrics.NewService(s, fleet{{ID: a, Name: "a", Status: servers.Online}, {ID: b, Name: "b", Status: servers.Pending}},
			func() time.Time { return now }, nil)
		// 3,000 samples over the last 24 hours, irregular values.
		const n = 3000
		step := 24 * time.Hour / n
		var sum, diskSum float64
		batch := make([]metrics.Sample, 0, 500)
		for i := range n {
			cpu := float64((i*37)%101) * 0.99
			disk := float64((i*13)%100) + 0.5
			sum += cpu
			diskSum += disk
			batch = append(batch, sample(now.Add(-24*time.Hour+time.Duration(i)*step+time.Second), cpu, disk))
			if len(batch) == cap(batch) {
				insert(t, s, a, batch...)
				batch = batch[:0]
			}
		}
		series, err := svc.Series(ctx, a, "24h")
		if err != nil {
			t.Fatal(err)
		}
		if series.Resolution != "raw" || series.BucketSeconds <= 0 {
			t.Fatalf("24h of %d samples: resolution %s, bucket %d s; want raw buckets", n, series.Resolution, series.BucketSeconds)
		}
		if len(series.Points) > metrics.MaxSeriesPoints || len(series.Points) < metrics.MaxSeriesPoints/2 {
			t.Fatalf("24h of %d samples: %d points, want at most %d", n, len(series.Points), metrics.MaxSeriesPoints)
		}
		var samples int
		var wsum, wdisk, max float64
		bucket := time.Duration(series.BucketSeconds) * time.Second
		for i, p := range series.Points {
			if p.T.UnixMilli()%bucket.Milliseconds() != 0 || (i > 0 && !p.T.After(series.Points[i-1].T)) {
				t.Fatalf("point %d at %s: not aligned to %s buckets or not in order", i, p.T, bucket)
			}
			samples += p.Samples
			wsum += p.CPUPercent * float64(p.Samples)
			wdisk += *p.DiskUsedPercent * float64(p.Samples)
			max = math.Max(max, p.CPUPercentMax)
		}
		if samples != n {
			t.Fatalf("points average %d samples, want %d", samples, n)
		}
		if got, want := wsum/float64(samples), sum/n; math.Abs(got-want) > 1e-9 {
			t.Fatalf("overall cpu average: got %v from the points, want %v", got, want)
		}
		if got, want := wdisk/float64(samples), diskSum/n; math.Abs(got-want) > 1e-9 {
			t.Fatalf("overall disk average: got %v from the points, want %v", got, want)
		}
		if max != 99 {
			t.Fatalf("largest cpu: %v, want 99", max)
		}

		// The fleet view buckets coarser, and keeps every server.
		fl, err := svc.Fleet(ctx, "24h")
		if err != nil {
			t.Fatal(err)
		}
		if len(fl.Servers) != 2 || fl.Servers[0].ServerID != a || len(fl.Servers[1].Series) != 0 || fl.Servers[1].Series == nil {
			t.Fatalf("fleet servers: %+v", fl.Servers)
		}
		pts := fl.Servers[0].Series
		if len(pts) > metrics.MaxFleetPoints || len(pts) < metrics.MaxFleetPoints/2 {
			t.Fatalf("fleet points: %d, want at most %d", len(pts), metrics.MaxFleetPoints)
		}
		samples, wsum = 0, 0
		for _, p := range pts {
			samples += p.Samples
			wsum += p.CPUPercent * float64(p.Samples)
		}
		if samples != n || math.Abs(wsum/float64(samples)-sum/n) > 1e-9 {
			t.Fatalf("fleet points: %d samples, average %v; want %d, %v", samples, wsum/float64(samples), n, sum/n)
		}
		if fl.Summary.ServersTotal != 2 || fl.Summary.Online != 1 || fl.Summary.Pending != 1 || fl.Summary.WithMetrics != 1 {
			t.Fatalf("fleet summary: %+v", fl.Summary)
		}
	})
}

func TestMetricConcurrentIngestAndRollup(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateServer(t, s, "a")
		// Ingest merges into the rollups while recomputes of hours that
		// are marked (as older versions did) run.
		const writers, reports = 4, 25
		errs := make(chan error, writers+1)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				for h := range 4 {
					if err := s.MarkMetricHour(ctx, a, h0.Add(time.Duration(h)*time.Hour).UnixMilli()); err != nil {
						errs <- err
						return
					}
				}
				if _, err := s.RollupMetrics(ctx, 3, h0); err != nil {
					errs <- err
					return
				}
			}
		}()
		for w := range writers {
			go func() {
				for r := range reports {
					var batch []metrics.Sample
					for h := range 4 {
						at := h0.Add(time.Duration(h)*time.Hour + time.Duration(w*reports+r)*time.Second)
						batch = append(batch, sample(at, float64(h*10+w), -1))
					}
					if _, err := s.InsertMetricSamples(ctx, a, batch, h0); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range writers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		close(done)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		for rollup(t, s, 100) > 0 {
		}
		got := hourly(t, s, a, h0, h0.Add(4*time.Hour))
		if len(got) != 4 {
			t.Fatalf("hours: %d, want 4", len(got))
		}
		for h, p := range got {
			// Writer w reports cpu h*10+w: the average is h*10 + 1.5.
			if p.Samples != writers*reports || !near(p.CPUPercent, float64(h*10)+1.5) || p.CPUPercentMax != float64(h*10+writers-1) {
				t.Fatalf("hour %d: %d samples, cpu avg %v max %v; want %d, %v, %d", h, p.Samples, p.CPUPercent, p.CPUPercentMax,
					writers*reports, float64(h*10)+1.5, h*10+writers-1)
			}
		}
	})
}

func TestInventoryRoundTrip(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateServer(t, s, "a")
		if inv, err := s.ServerInventory(ctx, a); err != nil || inv != nil {
			t.Fatalf("no inventory yet: %+v, %v", inv, err)
		}
		first := metrics.Inventory{CollectedAt: t0, ReceivedAt: t0.Add(time.Second),
			Services:   []agentproto.ServiceInfo{{Name: "nginx.service", ActiveState: "active"}},
			Containers: nil, // not readable
			Ports:      []agentproto.ListeningPort{},
		}
		if err := s.PutInventory(ctx, a, first); err != nil {
			t.Fatal(err)
		}
		got, err := s.ServerInventory(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if !got.CollectedAt.Equal(t0) || !got.ReceivedAt.Equal(t0.Add(time.Second)) || len(got.Services) != 1 ||
			got.Services[0].Name != "nginx.service" || got.Containers != nil || got.Ports == nil {
			t.Fatalf("inventory: %+v", got)
		}
		second := metrics.Inventory{CollectedAt: t0.Add(time.Minute), ReceivedAt: t0.Add(time.Minute),
			Containers: []agentproto.ContainerInfo{{ID: "c1", Labels: map[string]string{"a": "b"}}}}
		if err := s.PutInventory(ctx, a, second); err != nil {
			t.Fatal(err)
		}
		got, err = s.ServerInventory(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if !got.CollectedAt.Equal(t0.Add(time.Minute)) || got.Services != nil || len(got.Containers) != 1 || got.Containers[0].Labels["a"] != "b" {
			t.Fatalf("replaced inventory: %+v", got)
		}
	})
}

// BenchmarkMetricsIngest stores reports of 60 samples (a 15 s agent that
// was offline for 15 minutes) with three filesystems each, on SQLite.
func BenchmarkMetricsIngest(b *testing.B) {
	s := storetest.Open(b, store.SQLite)
	ctx := context.Background()
	const servers, perReport = 20, 60
	ids := make([]string, servers)
	for i := range ids {
		ids[i] = mustCreateServer(b, s, "bench-"+string(rune('a'+i)))
	}
	start := time.Now().Add(-24 * time.Hour).Truncate(time.Hour)
	batch := make([]metrics.Sample, perReport)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at := start.Add(time.Duration(i/servers) * perReport * 15 * time.Second)
		for j := range batch {
			m := sample(at.Add(time.Duration(j)*15*time.Second), float64(j%100), 40)
			m.Filesystems = append(m.Filesystems,
				agentproto.FilesystemSample{Mount: "/var", Device: "/dev/sdb1", FSType: "xfs", BytesTotal: 1 << 40, BytesUsed: 1 << 39, InodesTotal: 1 << 20, InodesUsed: 1 << 10},
				agentproto.FilesystemSample{Mount: "/boot", Device: "/dev/sda2", FSType: "ext4", BytesTotal: 1 << 30, BytesUsed: 1 << 28, InodesTotal: 1 << 16, InodesUsed: 1 << 8})
			batch[j] = m
		}
		if _, err := s.InsertMetricSamples(ctx, ids[i%servers], batch, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*perReport)/b.Elapsed().Seconds(), "samples/s")
}

// reportConcurrently has writers report samples of every server of ids,
// each writer in its own order of the servers, reports times, and returns
// the first error. Writer w reports cpu w, at times of its own in hours h0
// and h0+1h.
func reportConcurrently(stores []*store.Store, ids []string, writers, reports int) error {
	errs := make(chan error, writers)
	for w := range writers {
		s := stores[w%len(stores)]
		go func() {
			order := slices.Clone(ids)
			rand.New(rand.NewPCG(uint64(w), 1)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for r := range reports {
				for _, id := range order {
					at := time.Duration(w*reports+r) * time.Second
					batch := []metrics.Sample{sample(h0.Add(at), float64(w), -1), sample(h0.Add(time.Hour+at), float64(w), -1)}
					n, err := s.InsertMetricSamples(context.Background(), id, batch, h0)
					if err == nil && n != 2 {
						err = fmt.Errorf("report of %s: %d new samples, want 2", id, n)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range writers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// wantReported checks that every server has exactly the samples and
// rollups reportConcurrently stored.
func wantReported(t *testing.T, s *store.Store, ids []string, writers, reports int) {
	t.Helper()
	for _, id := range ids {
		if n := count(t, s, id, h0, h0.Add(2*time.Hour)); n != 2*writers*reports {
			t.Fatalf("server %s: %d samples stored, want %d", id, n, 2*writers*reports)
		}
		got := hourly(t, s, id, h0, h0.Add(2*time.Hour))
		if len(got) != 2 {
			t.Fatalf("server %s: %d hourly rollups, want 2", id, len(got))
		}
		for h, p := range got {
			wantHour(t, p, h0.Add(time.Duration(h)*time.Hour), writers*reports, float64(writers-1)/2, float64(writers-1))
		}
	}
}

// Many servers' reports, in parallel and in different orders, are stored
// exactly, samples and rollups, however they are grouped into
// transactions.
func TestMetricConcurrentReportsOfManyServers(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		var ids []string
		for i := range 12 {
			ids = append(ids, mustCreateServer(t, s, fmt.Sprintf("s%d", i)))
		}
		const writers, reports = 8, 5
		if err := reportConcurrently([]*store.Store{s}, ids, writers, reports); err != nil {
			t.Fatal(err)
		}
		wantReported(t, s, ids, writers, reports)
		if n := s.FailedGroups(); n != 0 {
			t.Errorf("%d write batches failed and ran again unit by unit, want none", n)
		}
	})
}

// Two control planes on one PostgreSQL database report the same servers
// at once, each in its own orders: no request fails, no batch loses a
// deadlock, and every sample and rollup is stored exactly.
func TestMetricReportsFromTwoStoresOnOnePostgres(t *testing.T) {
	a, b := openTwice(t, store.Postgres)
	stores := []*store.Store{a, b}
	var ids []string
	for i := range 16 {
		ids = append(ids, mustCreateServer(t, stores[0], fmt.Sprintf("s%d", i)))
	}
	const writers, reports = 12, 5
	if err := reportConcurrently(stores, ids, writers, reports); err != nil {
		t.Fatal(err)
	}
	wantReported(t, stores[1], ids, writers, reports)
	for i, s := range stores {
		if n := s.FailedGroups(); n != 0 {
			t.Errorf("store %d: %d write batches failed (deadlocks) and ran again unit by unit, want none", i, n)
		}
	}
}

// TestLatestContainerMetrics: the containers of a server's newest sample
// are kept with it; an older sample does not replace them, a newer one
// without containers clears them.
func TestLatestContainerMetrics(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := mustCreateServer(t, s, "a")
		if got, err := s.LatestContainerMetrics(ctx, a); err != nil || got != nil {
			t.Fatalf("before any sample: %+v, %v", got, err)
		}
		web := agentproto.ContainerSample{ID: "c1", Name: "web", CPUPercent: 12.5, MemoryUsed: 64 << 20, MemoryLimit: 1 << 30,
			NetRxBytesPerS: 100, NetTxBytesPerS: 50}
		older, newest := sample(h0.Add(time.Minute), 10, 40), sample(h0.Add(2*time.Minute), 20, 40)
		newest.Containers = []agentproto.ContainerSample{web}
		insert(t, s, a, older, newest)
		got, err := s.LatestContainerMetrics(ctx, a)
		if err != nil || got == nil || !got.At.Equal(newest.At) || len(got.Containers) != 1 || got.Containers[0] != web {
			t.Fatalf("after the report: %+v, %v", got, err)
		}
		stale := sample(h0.Add(90*time.Second), 10, 40)
		stale.Containers = []agentproto.ContainerSample{}
		insert(t, s, a, stale)
		if got, _ := s.LatestContainerMetrics(ctx, a); got == nil || len(got.Containers) != 1 {
			t.Fatalf("an older sample replaced the containers: %+v", got)
		}
		none := sample(h0.Add(3*time.Minute), 10, 40)
		none.Containers = []agentproto.ContainerSample{}
		insert(t, s, a, none)
		if got, _ := s.LatestContainerMetrics(ctx, a); got == nil || len(got.Containers) != 0 || !got.At.Equal(none.At) {
			t.Fatalf("after a sample of no containers: %+v", got)
		}
		insert(t, s, a, sample(h0.Add(4*time.Minute), 10, 40))
		if got, _ := s.LatestContainerMetrics(ctx, a); got != nil {
			t.Fatalf("after a sample without container figures: %+v", got)
		}
	})
}
