package telemetry

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAgentCallKind(t *testing.T) {
	for pattern, want := range map[string]string{
		"POST /agent/v1/heartbeat":          "heartbeat",
		"POST /agent/v1/jobs/{id}/complete": "jobs/complete",
		"GET /agent/v1/jobs/{id}/secrets":   "jobs/secrets",
		"POST /agent/v1/jobs/claim":         "jobs/claim",
		"GET /api/v1/servers/{id}":          "",
		"":                                  "",
		"GET /agent/install.sh":             "",
	} {
		got, ok := AgentCallKind(pattern)
		if got != want || ok != (want != "") {
			t.Errorf("AgentCallKind(%q) = %q, %v; want %q", pattern, got, ok, want)
		}
	}
}

func TestRequestsAreLabelledByPatternAndClass(t *testing.T) {
	m := New(nil, 30*time.Second, time.Now, nil)
	m.ObserveRequest("POST /agent/v1/jobs/{id}/events", 204, time.Millisecond)
	m.ObserveRequest("POST /agent/v1/jobs/{id}/events", 429, time.Millisecond)
	m.ObserveRequest("", 404, time.Millisecond)
	m.ObserveStore("exec", time.Millisecond)
	var nilMetrics *Metrics
	nilMetrics.ObserveRequest("GET /x", 200, time.Second) // records nothing, does not panic
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`capstan_agent_calls_total{kind="jobs/events",outcome="ok"} 1`,
		`capstan_agent_calls_total{kind="jobs/events",outcome="client_error"} 1`,
		`capstan_http_request_duration_seconds_count{code="4xx",route="unmatched"} 1`,
		`capstan_http_request_duration_seconds_count{code="2xx",route="POST /agent/v1/jobs/{id}/events"} 1`,
		`capstan_store_operation_duration_seconds_count{op="exec"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
