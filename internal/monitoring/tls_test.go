package monitoring

import (
	"testing"
	"time"
)

// A certificate is judged against its lifetime: the threshold is capped
// at a third of it.
func TestTLSExpiringJudgedByLifetime(t *testing.T) {
	w := newWorld(rule(TLSExpiring, 14, 0))
	cert := func(life, left time.Duration) {
		exp := w.f.now.Add(left)
		from := exp.Add(-life)
		w.f.domains = []DomainCertificate{{DomainID: "dom_1", Hostname: "a.example", ServerID: "srv_1", TLSMode: "internal",
			NotAfter: &exp, NotBefore: &from}}
	}
	const day = 24 * time.Hour

	// Caddy's local CA: 12 hours of life.
	cert(12*time.Hour, 11*time.Hour)
	want(t, "12-hour certificate, 11 hours left", w.step(0))
	cert(12*time.Hour, 4*time.Hour+time.Minute)
	want(t, "12-hour certificate, just over a third left", w.step(0))
	cert(12*time.Hour, 3*time.Hour)
	want(t, "12-hour certificate, a quarter left (not renewed)", w.step(0), "+dom_1")
	cert(12*time.Hour, 4*time.Hour+30*time.Minute)
	want(t, "within a tenth of the lifetime past the window", w.step(0))
	cert(12*time.Hour, 12*time.Hour)
	want(t, "renewed: a fresh 12-hour certificate", w.step(0), "-dom_1")
	if a := w.open; len(a) != 0 {
		t.Fatalf("open after renewal: %+v", a)
	}

	// A 90-day certificate: a third is 30 days, past the threshold.
	cert(90*day, 20*day)
	want(t, "90-day certificate, 20 days left", w.step(0))
	cert(90*day, 13*day)
	want(t, "90-day certificate, 13 days left", w.step(0), "+dom_1")
	cert(90*day, 14*day+12*time.Hour)
	want(t, "90-day certificate, within the hysteresis", w.step(0))
	cert(90*day, 89*day)
	want(t, "90-day certificate renewed", w.step(0), "-dom_1")

	// A 6-day certificate: a third is 2 days.
	cert(6*day, 3*day)
	want(t, "6-day certificate, half left", w.step(0))
	cert(6*day, 47*time.Hour)
	want(t, "6-day certificate, under a third left", w.step(0), "+dom_1")
	cert(6*day, 6*day)
	want(t, "6-day certificate renewed", w.step(0), "-dom_1")

	// An expired short-lived certificate is always firing.
	cert(12*time.Hour, -time.Minute)
	want(t, "expired", w.step(0), "+dom_1")
	if a := w.open[[2]string{"rul_tls_expiring", "dom_1"}]; a.Value != -0.1 {
		t.Fatalf("value of an expired certificate: %v days, want -0.1", a.Value)
	}
}

// Without not_before (a check by an older agent) the threshold alone
// decides, as it always did.
func TestTLSExpiringWithoutLifetime(t *testing.T) {
	w := newWorld(rule(TLSExpiring, 1, 0))
	exp := w.f.now.Add(11 * time.Hour)
	w.f.domains = []DomainCertificate{{DomainID: "dom_1", Hostname: "a.example", ServerID: "srv_1", TLSMode: "internal", NotAfter: &exp}}
	want(t, "11 hours left, lifetime unknown", w.step(0), "+dom_1")
}
