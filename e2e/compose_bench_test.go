package e2e

import (
	"net/http"
	"testing"
	"time"
)

// BenchmarkComposeRedeployUnderLoad redeploys a compose application (web,
// worker, cache with a named volume) 20 times, its web service switching
// between two versions, under load through Caddy on kept-alive
// connections. It reports the failed requests (target 0) and the median
// redeploy time, from the POST to the deployment seen succeeded.
func BenchmarkComposeRedeployUnderLoad(b *testing.B) {
	const redeploys = 20
	s := newComposeStack(b)
	app, url := s.createStackApp(b, "bench", "bench.test", s.document("v1"))
	hc := s.Client(b)
	s.waitSite(b, hc, url, "v1 hello", 30*time.Second)
	valid := func(body string) bool { return body == "v1 hello" || body == "v2 hello" }
	var (
		total     loadCounts
		durations []time.Duration
		elapsed   time.Duration
	)
	for b.Loop() {
		load := startLoad(b, hc, url, 4, 2*time.Millisecond, valid)
		start := time.Now()
		for i := range redeploys {
			doc := s.document([]string{"v2", "v1"}[i%2])
			resp := s.Do(b, Req{Method: http.MethodPatch, Path: "/api/v1/applications/" + app.ID, Token: s.Token, JSON: map[string]any{"compose": doc}})
			expectStatus(b, resp, http.StatusOK)
			posted := time.Now()
			_, seen := s.waitDeployment(b, s.deploy(b, app.ID, nil), "succeeded", benchPoll, deployTimeout)
			durations = append(durations, seen.Sub(posted))
		}
		elapsed += time.Since(start)
		load.Stop()
		total.add(load.Take())
	}
	b.ReportMetric(float64(total.Failures), "failed-requests")
	b.ReportMetric(float64(total.Requests()), "requests")
	b.ReportMetric(ms(median(durations)), "ms/redeploy")
	b.Logf("%d redeploys (median %s) in %s under %.0f requests/s: %s", len(durations), median(durations),
		elapsed.Round(time.Millisecond), float64(total.Requests())/elapsed.Seconds(), total)
	if total.Failures != 0 {
		b.Errorf("%d requests failed", total.Failures)
	}
}
