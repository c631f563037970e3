package traffic

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// t0 is a minute start; test lines fall at t0 + whole seconds + 0.5 s.
var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// accessLine formats a line as Caddy 2.6 writes it.
func logLine(at time.Time, host string, status int, size int64, dur time.Duration) string {
	return fmt.Sprintf(`{"level":"info","ts":%.6f,"logger":"http.log.access.capstan_https","msg":"handled request",`+
		`"request":{"remote_ip":"127.0.0.1","remote_port":"5555","proto":"HTTP/1.1","method":"GET","host":%q,"uri":"/","headers":{}},`+
		`"user_id":"","duration":%.9f,"size":%d,"status":%d,"resp_headers":{}}`+"\n",
		float64(at.UnixNano())/1e9, host, dur.Seconds(), size, status)
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

func TestSketchQuantiles(t *testing.T) {
	var s sketch
	for i := 1; i <= 1000; i++ {
		s.add(float64(i))
	}
	alpha := (gamma - 1) / (gamma + 1)
	if p50, p95 := s.quantile(0.5), s.quantile(0.95); !near(p50, 500, alpha) || !near(p95, 950, alpha) {
		t.Errorf("p50 %v, p95 %v; want 500 and 950 within %.1f%%", p50, p95, alpha*100)
	}
	if q := (sketch{}).quantile(0.5); q != 0 {
		t.Errorf("empty sketch: %v", q)
	}
	var one sketch
	one.add(42)
	if q := one.quantile(0.95); !near(q, 42, alpha) {
		t.Errorf("one value: %v", q)
	}

	// Bounded: values over 18 orders of magnitude (clamped to 10), the
	// lowest buckets merged; the upper quantiles stay exact.
	var wide sketch
	for e := -6.0; e <= 12; e += 0.001 {
		wide.add(math.Pow(10, e))
	}
	for range 100000 {
		wide.add(200)
	}
	if len(wide) > maxBuckets {
		t.Errorf("%d buckets, want at most %d", len(wide), maxBuckets)
	}
	if q := wide.quantile(0.5); !near(q, 200, alpha) {
		t.Errorf("wide p50 %v, want 200", q)
	}
	if q := wide.quantile(1); !near(q, maxMs, alpha) {
		t.Errorf("max %v, want %v (clamped)", q, maxMs)
	}
}

func TestAggregate(t *testing.T) {
	a := newAggregator()
	add := func(s string) { a.addLine([]byte(s[:len(s)-1])) }
	at := t0.Add(1500 * time.Millisecond)
	for i := range 100 {
		add(logLine(at.Add(time.Duration(i)*100*time.Millisecond), "App.Test:8443", 200, 1000, time.Duration(i+1)*time.Millisecond))
	}
	add(logLine(at, "app.test", 301, 0, time.Millisecond))
	add(logLine(at, "app.test", 404, 10, time.Millisecond))
	add(logLine(at, "app.test", 502, 20, time.Millisecond))
	add(logLine(at, "app.test", 101, 0, time.Millisecond)) // counted, no class
	add(logLine(at, "[::1]:443", 200, 5, time.Millisecond))
	add(logLine(at.Add(time.Minute), "app.test", 200, 7, time.Millisecond))
	add(logLine(at, "", 200, 7, time.Millisecond)) // no host: the other bucket
	a.addLine([]byte(`{"level":"info","ts":1795346421.4,"logger":"http","msg":"server running"}`))
	a.addLine([]byte(`not json`))

	if a.malformed != 1 {
		t.Errorf("malformed %d, want 1", a.malformed)
	}
	m := a.minutes[key{"app.test", t0.Unix()}]
	if m == nil {
		t.Fatalf("no minute for app.test; have %v", a.minutes)
	}
	r := m.report()
	if r.Count != 104 || r.Status2xx != 100 || r.Status3xx != 1 || r.Status4xx != 1 || r.Status5xx != 1 || r.BytesOut != 100030 {
		t.Errorf("app.test minute: %+v", r)
	}
	if !r.Minute.Equal(t0) {
		t.Errorf("minute %v, want %v", r.Minute, t0)
	}
	// Durations 1…100 ms and four of 1 ms: ranks 52 and 99 of 104.
	if !near(r.P50Ms, 48, 0.025) || !near(r.P95Ms, 95, 0.025) {
		t.Errorf("p50 %v, p95 %v; want ≈48 and ≈95", r.P50Ms, r.P95Ms)
	}
	if m := a.minutes[key{"::1", t0.Unix()}]; m == nil || m.count != 1 {
		t.Errorf("IPv6 host: %+v", a.minutes)
	}
	if m := a.minutes[key{"app.test", t0.Add(time.Minute).Unix()}]; m == nil || m.count != 1 {
		t.Error("second minute missing")
	}
	if m := a.minutes[key{otherHost, t0.Unix()}]; m == nil || m.count != 1 {
		t.Errorf("no host: %+v", a.minutes)
	}
	if len(a.minutes) != 4 {
		t.Errorf("%d minutes, want 4", len(a.minutes))
	}
	if d := a.dirty(); len(d) != 4 || d[0].host != otherHost || d[1].host != "::1" || d[3].start != t0.Add(time.Minute) {
		t.Errorf("dirty order: %v", d)
	}
}

func TestAggregateClosesAndForgets(t *testing.T) {
	a := newAggregator()
	add := func(at time.Time, host string) {
		s := logLine(at, host, 200, 1, time.Millisecond)
		a.addLine([]byte(s[:len(s)-1]))
	}
	add(t0.Add(time.Second), "a.test")
	add(t0.Add(3*time.Minute+time.Second), "a.test") // t0 is now closed
	for _, m := range a.dirty() {
		m.dirty = false
	}
	a.forget()
	if _, ok := a.minutes[key{"a.test", t0.Unix()}]; ok {
		t.Error("closed, accepted minute kept")
	}
	// A straggler for a forgotten minute would replace its totals: dropped.
	add(t0.Add(2*time.Second), "a.test")
	if a.late != 1 || len(a.minutes) != 1 {
		t.Errorf("late %d, minutes %d", a.late, len(a.minutes))
	}
	// One still held (not accepted) takes it.
	add(t0.Add(2*time.Minute), "b.test")
	add(t0.Add(3*time.Minute+2*time.Second), "b.test")
	if m := a.minutes[key{"b.test", t0.Add(2 * time.Minute).Unix()}]; m == nil || m.count != 1 {
		t.Error("open minute missing")
	}
}

func TestAggregateBounded(t *testing.T) {
	a := newAggregator()
	a.maxMinutes = 10
	add := func(at time.Time, host string) {
		s := logLine(at, host, 200, 1, time.Millisecond)
		a.addLine([]byte(s[:len(s)-1]))
	}
	// Ten hosts in minute 0, none accepted (control plane away).
	for i := range 10 {
		add(t0.Add(time.Second), fmt.Sprintf("h%d.test", i))
	}
	// Minute 0 is open: an eleventh host is refused, not an open minute
	// dropped.
	add(t0.Add(2*time.Second), "h10.test")
	if a.overflow != 1 || len(a.minutes) != 10 {
		t.Errorf("overflow %d, minutes %d", a.overflow, len(a.minutes))
	}
	// Minute 0 closes: new minutes push out its oldest aggregates.
	add(t0.Add(5*time.Minute), "new.test")
	if a.evicted != 1 || len(a.minutes) != 10 {
		t.Errorf("evicted %d, minutes %d", a.evicted, len(a.minutes))
	}
	if _, ok := a.minutes[key{"h0.test", t0.Unix()}]; ok {
		t.Error("the oldest closed minute was not the one dropped")
	}
}
