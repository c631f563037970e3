package metrics

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/servers"
)

func TestParseRange(t *testing.T) {
	for name, hourly := range map[string]bool{"1h": false, "24h": false, "7d": true, "30d": true, "90d": true} {
		r, err := ParseRange(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Hourly != hourly {
			t.Fatalf("%s: hourly %v, want %v", name, r.Hourly, hourly)
		}
	}
	for _, bad := range []string{"", "2h", "1H", "7 d", "1d", "365d"} {
		_, err := ParseRange(bad)
		if f := fields(t, err); !slices.Equal(f, []string{"range"}) {
			t.Fatalf("%q: fields %v, want [range]", bad, f)
		}
	}
}

func TestBucketForBoundsPoints(t *testing.T) {
	for _, c := range []struct {
		span   time.Duration
		points int
	}{
		{24*time.Hour + MaxSampleAhead, MaxSeriesPoints},
		{time.Hour + MaxSampleAhead, MaxSeriesPoints},
		{time.Hour + MaxSampleAhead, MaxFleetPoints},
		{24*time.Hour + MaxSampleAhead, MaxFleetPoints},
	} {
		w := bucketFor(c.span, c.points)
		if w%time.Second != 0 || w <= 0 {
			t.Fatalf("span %s: width %s is not whole seconds", c.span, w)
		}
		// However the span falls on the aligned buckets, it touches at
		// most span/w + 1 of them.
		if n := int(c.span/w) + 1; n > c.points {
			t.Fatalf("span %s, width %s: up to %d buckets, want at most %d", c.span, w, n, c.points)
		}
	}
}

func f64(v float64) *float64 { return &v }

func TestSummarize(t *testing.T) {
	list := []servers.Server{
		{ID: "a", Status: servers.Online}, {ID: "b", Status: servers.Online}, {ID: "c", Status: servers.Offline},
		{ID: "d", Status: servers.Pending}, {ID: "e", Status: servers.Revoked},
	}
	latest := map[string]LatestMetrics{
		"a":    {CPUPercent: 10, MemoryUsedPercent: f64(50), DiskUsedPercent: f64(70)},
		"b":    {CPUPercent: 30, MemoryUsedPercent: f64(20)},
		"c":    {CPUPercent: 80},
		"gone": {CPUPercent: 100}, // a deleted server
	}
	s := summarize(list, latest)
	if s.ServersTotal != 5 || s.Online != 2 || s.Offline != 1 || s.Pending != 1 || s.Revoked != 1 || s.WithMetrics != 3 {
		t.Fatalf("counts: %+v", s)
	}
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Fatalf("%s: got %v, want %v", name, got, want)
		}
	}
	check("cpu avg", s.CPUPercentAvg, 40)
	check("cpu max", s.CPUPercentMax, 80)
	check("memory avg", s.MemoryUsedPercentAvg, 35)
	check("memory max", s.MemoryUsedPercentMax, 50)
	check("disk avg", s.DiskUsedPercentAvg, 70)
	check("disk max", s.DiskUsedPercentMax, 70)

	empty := summarize(list[3:4], nil)
	if empty.CPUPercentAvg != nil || empty.CPUPercentMax != nil || empty.DiskUsedPercentAvg != nil {
		t.Fatalf("without samples: %+v, want null averages", empty)
	}
}

// fakeStore records how the series were asked for.
type fakeStore struct {
	Store
	count    int
	bucket   time.Duration
	from, to time.Time
	last     string
}

func (f *fakeStore) CountMetricSamples(_ context.Context, _ string, _, _ time.Time) (int, error) {
	return f.count, nil
}

func (f *fakeStore) MetricPoints(_ context.Context, id string, from, to time.Time, bucket time.Duration) (map[string][]SeriesPoint, error) {
	f.last, f.from, f.to, f.bucket = "raw", from, to, bucket
	return map[string][]SeriesPoint{id: {{T: from, Samples: 1}}}, nil
}

func (f *fakeStore) HourlyPoints(_ context.Context, id string, from, to time.Time) (map[string][]SeriesPoint, error) {
	f.last, f.from, f.to = "hourly", from, to
	return nil, nil
}

type fakeServers []servers.Server

func (f fakeServers) Get(_ context.Context, id string) (servers.Server, error) {
	for _, s := range f {
		if s.ID == id {
			return s, nil
		}
	}
	return servers.Server{}, fault.NotFoundf("No such server.")
}

func (f fakeServers) List(context.Context) ([]servers.Server, error) { return f, nil }

func TestSeriesResolution(t *testing.T) {
	st := &fakeStore{}
	svc := NewService(st, fakeServers{{ID: "srv_1"}}, func() time.Time { return now }, nil)
	ctx := context.Background()

	st.count = MaxSeriesPoints
	s, err := svc.Series(ctx, "srv_1", "24h")
	if err != nil {
		t.Fatal(err)
	}
	if s.Resolution != "raw" || s.BucketSeconds != 0 || st.bucket != 0 || len(s.Points) != 1 {
		t.Fatalf("1500 samples: %+v (bucket %s), want raw points", s, st.bucket)
	}
	if !st.from.Equal(now.Add(-24*time.Hour)) || !st.to.Equal(now.Add(MaxSampleAhead)) {
		t.Fatalf("24h window: %s to %s", st.from, st.to)
	}

	st.count = MaxSeriesPoints + 1
	s, err = svc.Series(ctx, "srv_1", "24h")
	if err != nil {
		t.Fatal(err)
	}
	if s.Resolution != "raw" || st.bucket == 0 || s.BucketSeconds != int(st.bucket/time.Second) {
		t.Fatalf("1501 samples: %+v (bucket %s), want buckets", s, st.bucket)
	}

	for _, r := range []string{"7d", "30d", "90d"} {
		s, err = svc.Series(ctx, "srv_1", r)
		if err != nil {
			t.Fatal(err)
		}
		if s.Resolution != "1h" || st.last != "hourly" || s.BucketSeconds != 3600 || s.Points == nil {
			t.Fatalf("%s: %+v from %s, want hourly points", r, s, st.last)
		}
		if st.from.Truncate(time.Hour) != st.from || st.to.Truncate(time.Hour) != st.to || st.to.Before(now) {
			t.Fatalf("%s: window %s to %s is not whole hours up to now", r, st.from, st.to)
		}
	}

	if _, err := svc.Series(ctx, "srv_1", "2h"); !slices.Equal(fields(t, err), []string{"range"}) {
		t.Fatalf("range 2h: %v", err)
	}
	if _, err := svc.Series(ctx, "srv_nope", "1h"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("unknown server: got %v, want NotFound", err)
	}
}
