package e2e

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestPrometheusMetrics starts a control plane with --metrics-listen, makes
// API and agent calls and queues a job, and reads /metrics on the separate
// listener: every documented metric is there, with route patterns (not raw
// paths) and agent call kinds as labels and no server id anywhere; the API
// listener itself serves no /metrics. Both stores.
func TestPrometheusMetrics(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		port := testlab.FreePort(t)
		metricsURL := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
		cp := startControlPlane(t, Options{Dialect: d, Args: []string{"--metrics-listen", "127.0.0.1:" + strconv.Itoa(port)}})
		s := signInUser(t, cp, newAdmin(t, cp, "metrics@example.com"))
		serverID, agentToken := mxEnroll(t, cp, s.AccessToken, "prom-1")
		expectStatus(t, cp.Post(t, "/agent/v1/heartbeat", agentToken, agentproto.HeartbeatRequest{AgentVersion: buildVersion}), http.StatusOK)
		expectStatus(t, cp.Post(t, "/agent/v1/metrics", agentToken, agentproto.MetricsRequest{
			Samples: []agentproto.MetricSample{mxSample(time.Now().UTC().Truncate(time.Millisecond), 12)}}), http.StatusNoContent)
		expectStatus(t, cp.Get(t, "/api/v1/servers/"+serverID, s.AccessToken), http.StatusOK)
		expectStatus(t, cp.Post(t, "/api/v1/servers/"+serverID+"/actions", s.AccessToken,
			map[string]any{"type": "agent.ping", "payload": map[string]string{"message": "hi"}}), http.StatusAccepted)
		expectStatus(t, cp.Post(t, "/api/v1/monitoring/evaluate", s.AccessToken, nil), http.StatusOK)

		var body string
		// The request metrics are recorded after each response is written:
		// wait until the last call is counted.
		testlab.Eventually(t, 30*time.Second, "the evaluate request and the online agent are counted in /metrics", func() bool {
			body = scrape(t, metricsURL)
			return strings.Contains(body, `capstan_http_request_duration_seconds_count{code="2xx",route="POST /api/v1/monitoring/evaluate"} 1`) &&
				strings.Contains(body, "capstan_agents_online 1\n")
		})

		for _, want := range []string{
			`capstan_http_request_duration_seconds_bucket{code="2xx",route="GET /api/v1/servers/{id}",le="`,
			`capstan_agent_calls_total{kind="heartbeat",outcome="ok"} 1`,
			`capstan_agent_calls_total{kind="metrics",outcome="ok"} 1`,
			`capstan_agent_calls_total{kind="enroll",outcome="ok"} 1`,
			`capstan_jobs{state="queued",type="agent.ping"} 1`,
			`capstan_job_queue_depth 1`,
			`capstan_job_queue_oldest_age_seconds `,
			`capstan_agents_online 1`,
			`capstan_store_operation_duration_seconds_count{op="query"} `,
			`capstan_store_operation_duration_seconds_count{op="exec"} `,
			`capstan_store_operation_duration_seconds_count{op="commit"} `,
			`capstan_alert_evaluation_duration_seconds_count `,
			`go_goroutines `,
			`go_memstats_heap_inuse_bytes `,
			`process_resident_memory_bytes `,
			`go_sql_open_connections{db_name="`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if strings.Contains(body, serverID) {
			t.Error("/metrics names a server id: label values must be bounded sets")
		}
		if regexp.MustCompile(`route="[^"]*srv_`).MatchString(body) {
			t.Error("a route label holds a raw path")
		}
		// Every capstan_ metric served is documented.
		doc, err := os.ReadFile("../docs/metrics.md")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`(?m)^# TYPE (capstan_\w+) `).FindAllStringSubmatch(body, -1) {
			if !strings.Contains(string(doc), "`"+name[1]+"`") {
				t.Errorf("docs/metrics.md does not document %s", name[1])
			}
		}
		// The API listener does not serve the metrics.
		if r := cp.Get(t, "/metrics", ""); strings.Contains(string(r.Body), "capstan_http_request_duration_seconds") {
			t.Error("the API listener serves the metrics")
		}
	})
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}
