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
	if err := ValidateRequests(agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{good, {Host: "www.example.com", Minute: m0}}}, now); err != nil {
		t.Fatalf("valid report: %v", err)
	}
	if err := ValidateRequests(agentproto.RequestsReport{}, now); err != nil {
		t.Fatalf("empty report: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(m *agentproto.RequestMinute)
		field string
	}{
		{"bad host", func(m *agentproto.RequestMinute) { m.Host = "Example.com" }, "minutes[0].host"},
		{"ip host", func(m *agentproto.RequestMinute) { m.Host = "10.0.0.1" }, "minutes[0].host"},
		{"no minute", func(m *agentproto.RequestMinute) { m.Minute = time.Time{} }, "minutes[0].minute"},
		{"not aligned", func(m *agentproto.RequestMinute) { m.Minute = m0.Add(-30 * time.Second) }, "minutes[0].minute"},
		{"too old", func(m *agentproto.RequestMinute) { m.Minute = m0.Add(-8 * 24 * time.Hour) }, "minutes[0].minute"},
		{"future", func(m *agentproto.RequestMinute) { m.Minute = m0.Add(10 * time.Minute) }, "minutes[0].minute"},
		{"negative count", func(m *agentproto.RequestMinute) {
			m.Count, m.Status2xx, m.Status3xx, m.Status4xx, m.Status5xx = -1, 0, 0, 0, 0
		}, "minutes[0].count"},
		{"negative class", func(m *agentproto.RequestMinute) { m.Status4xx = -1 }, "minutes[0].status_4xx"},
		{"negative bytes", func(m *agentproto.RequestMinute) { m.BytesOut = -1 }, "minutes[0].bytes_out"},
		{"classes above count", func(m *agentproto.RequestMinute) { m.Status5xx = 5 }, "minutes[0].count"},
		{"NaN p95", func(m *agentproto.RequestMinute) { m.P95Ms = math.NaN() }, "minutes[0].p95_ms"},
		{"negative p50", func(m *agentproto.RequestMinute) { m.P50Ms = -1 }, "minutes[0].p50_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			tc.edit(&m)
			err := ValidateRequests(agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{m}}, now)
			fe := fault.As(err)
			if fe == nil || fe.Kind != fault.Invalid {
				t.Fatalf("got %v, want invalid", err)
			}
			if len(fe.Fields) != 1 || fe.Fields[0].Field != tc.field {
				t.Fatalf("fields %v, want [%s]", fe.Fields, tc.field)
			}
		})
	}
	dup := ValidateRequests(agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{good, good}}, now)
	if fe := fault.As(dup); fe == nil || len(fe.Fields) != 1 || fe.Fields[0].Field != "minutes[1].minute" {
		t.Fatalf("duplicate host and minute: %v", dup)
	}
	many := make([]agentproto.RequestMinute, MaxReportMinutes+1)
	for i := range many {
		many[i] = agentproto.RequestMinute{Host: fmt.Sprintf("h%d.example.com", i), Minute: m0}
	}
	if fe := fault.As(ValidateRequests(agentproto.RequestsReport{Minutes: many}, now)); fe == nil || fe.Fields[0].Field != "minutes" {
		t.Fatalf("10,001 minutes accepted")
	}
	if err := ValidateRequests(agentproto.RequestsReport{Minutes: many[:MaxReportMinutes]}, now); err != nil {
		t.Fatalf("10,000 minutes: %v", err)
	}
}
