package domains

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

func TestHostnameProblem(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	for _, tc := range []struct {
		host string
		ok   bool
		want string
	}{
		{"example.com", true, ""},
		{"www.example.com", true, ""},
		{"a.b.c.example.co.uk", true, ""},
		{"xn--bcher-kva.example", true, ""},
		{"my-app.example.com", true, ""},
		{"1password.com", true, ""},
		{long63 + ".com", true, ""},
		{strings.Repeat(long63+".", 3) + strings.Repeat("a", 61), true, ""}, // 253
		{"", false, "required"},
		{"localhost", false, "two labels"},
		{"Example.com", false, "lowercase"},
		{"EXAMPLE.COM", false, "lowercase"},
		{"*.example.com", false, "wildcard"},
		{"192.168.1.10", false, "IP address"},
		{"::1", false, "IP address"},
		{"[2001:db8::1]", false, "IP address"},
		{"1.2.3.4.5", false, "all digits"},
		{"example.com.", false, "end with"},
		{"example..com", false, "empty labels"},
		{".example.com", false, "empty labels"},
		{"-a.example.com", false, "start or end"},
		{"a-.example.com", false, "start or end"},
		{"ex_ample.com", false, "only letters"},
		{"bücher.example", false, "xn--"},
		{"example.com:8080", false, "port"},
		{"https://example.com", false, "scheme"},
		{"exa mple.com", false, "spaces"},
		{strings.Repeat("a", 64) + ".com", false, "63"},
		{strings.Repeat(long63+".", 3) + strings.Repeat("a", 62), false, "253"},
	} {
		p := HostnameProblem(tc.host)
		if (p == "") != tc.ok {
			t.Errorf("HostnameProblem(%q) = %q, want ok=%v", tc.host, p, tc.ok)
			continue
		}
		if !tc.ok && !strings.Contains(p, tc.want) {
			t.Errorf("HostnameProblem(%q) = %q, want a message with %q", tc.host, p, tc.want)
		}
	}
}

func TestTLSModeProblem(t *testing.T) {
	for _, m := range []string{"auto", "internal", "off"} {
		if p := TLSModeProblem(m); p != "" {
			t.Errorf("%s: %s", m, p)
		}
	}
	for _, m := range []string{"", "on", "AUTO", "acme"} {
		if TLSModeProblem(m) == "" {
			t.Errorf("%q accepted", m)
		}
	}
}

func TestNames(t *testing.T) {
	if got := names("example.com", true); len(got) != 2 || got[1] != "www.example.com" {
		t.Fatalf("redirect_www names: %v", got)
	}
	if got := names("example.com", false); len(got) != 1 {
		t.Fatalf("names: %v", got)
	}
}

func TestValidateRequests(t *testing.T) {
	now := time.Date(2030, 5, 1, 12, 30, 20, 0, time.UTC)
	m0 := now.Truncate(time.Minute)
	good := agentproto.RequestMinute{Host: "example.com", Minute: m0.Add(-time.Minute), Count: 10, Status2xx: 7, Status3xx: 1,
		Status4xx: 1, Status5xx: 1, BytesOut: 1000, P50Ms: 12, P95Ms: 80}
	valid, skipped, err := ValidateRequests(agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{good, {Host: "www.example.com", Minute: m0}}}, now)
	if err != nil || len(valid) != 2 || len(skipped) != 0 {
		t.Fatalf("valid report: %d valid, skipped %v, %v", len(valid), skipped, err)
	}
	if valid, skipped, err := ValidateRequests(agentproto.RequestsReport{}, now); err != nil || len(valid)+len(skipped) != 0 {
		t.Fatalf("empty report: %v %v %v", valid, skipped, err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(m *agentproto.RequestMinute)
		field string
	}{
		{"bad host", func(m *agentproto.RequestMinute) { m.Host = "Example.com" }, "minutes[1].host"},
		{"ip host", func(m *agentproto.RequestMinute) { m.Host = "10.0.0.1" }, "minutes[1].host"},
		{"scanner ip", func(m *agentproto.RequestMinute) { m.Host = "203.0.113.9" }, "minutes[1].host"},
		{"no minute", func(m *agentproto.RequestMinute) { m.Minute = time.Time{} }, "minutes[1].minute"},
		{"not aligned", func(m *agentproto.RequestMinute) { m.Minute = m0.Add(-30 * time.Second) }, "minutes[1].minute"},
		{"too old", func(m *agentproto.RequestMinute) { m.Minute = m0.Add(-8 * 24 * time.Hour) }, "minutes[1].minute"},
		{"future", func(m *agentproto.RequestMinute) { m.Minute = m0.Add(10 * time.Minute) }, "minutes[1].minute"},
		{"negative count", func(m *agentproto.RequestMinute) {
			m.Count, m.Status2xx, m.Status3xx, m.Status4xx, m.Status5xx = -1, 0, 0, 0, 0
		}, "minutes[1].count"},
		{"negative class", func(m *agentproto.RequestMinute) { m.Status4xx = -1 }, "minutes[1].status_4xx"},
		{"negative bytes", func(m *agentproto.RequestMinute) { m.BytesOut = -1 }, "minutes[1].bytes_out"},
		{"classes above count", func(m *agentproto.RequestMinute) { m.Status5xx = 5 }, "minutes[1].count"},
		{"NaN p95", func(m *agentproto.RequestMinute) { m.P95Ms = math.NaN() }, "minutes[1].p95_ms"},
		{"negative p50", func(m *agentproto.RequestMinute) { m.P50Ms = -1 }, "minutes[1].p50_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			bad.Host = "api.example.com"
			tc.edit(&bad)
			// The bad entry sits between two good ones: it is skipped,
			// named, and the others are kept.
			after := good
			after.Host = "b.example.com"
			valid, skipped, err := ValidateRequests(agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{good, bad, after}}, now)
			if err != nil {
				t.Fatalf("got %v, want the report accepted", err)
			}
			if len(valid) != 2 || valid[0] != good || valid[1] != after {
				t.Errorf("valid: got %+v, want the two good entries", valid)
			}
			if len(skipped) != 1 || skipped[0].Field != tc.field || skipped[0].Reason == "" {
				t.Fatalf("skipped %+v, want [%s]", skipped, tc.field)
			}
		})
	}
	valid, skipped, err = ValidateRequests(agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{good, good}}, now)
	if err != nil || len(valid) != 1 || len(skipped) != 1 || skipped[0].Field != "minutes[1].minute" {
		t.Fatalf("duplicate host and minute: %v %v %v", valid, skipped, err)
	}

	// The other bucket: stored under OtherHost whatever host it carries;
	// its minutes are checked like the others.
	o := good
	o.Host = "ignored"
	late := good
	late.Minute = m0.Add(time.Hour)
	valid, skipped, err = ValidateRequests(agentproto.RequestsReport{Other: []agentproto.RequestMinute{o, late}}, now)
	if err != nil || len(valid) != 1 || valid[0].Host != OtherHost || valid[0].Count != 10 || len(skipped) != 1 || skipped[0].Field != "other[1].minute" {
		t.Fatalf("other: %+v %+v %v", valid, skipped, err)
	}

	many := make([]agentproto.RequestMinute, MaxReportMinutes+1)
	for i := range many {
		many[i] = agentproto.RequestMinute{Host: fmt.Sprintf("h%d.example.com", i), Minute: m0}
	}
	if _, _, err := ValidateRequests(agentproto.RequestsReport{Minutes: many}, now); fault.As(err) == nil || fault.As(err).Fields[0].Field != "minutes" {
		t.Fatalf("10,001 minutes accepted")
	}
	if _, _, err := ValidateRequests(agentproto.RequestsReport{Minutes: many[:MaxReportMinutes-1], Other: many[:2]}, now); fault.As(err) == nil {
		t.Fatalf("10,001 entries with other accepted")
	}
	if valid, _, err := ValidateRequests(agentproto.RequestsReport{Minutes: many[:MaxReportMinutes]}, now); err != nil || len(valid) != MaxReportMinutes {
		t.Fatalf("10,000 minutes: %v", err)
	}
}
