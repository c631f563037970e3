package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/capstan-dev/capstan/internal/httpapi"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/telemetry"
)

// newTelemetry creates the control plane's Prometheus metrics and connects
// the store and the alert evaluation to them.
func newTelemetry(a *app, log *slog.Logger) *telemetry.Metrics {
	tel := telemetry.New(a.store, 3*jobs.HeartbeatInterval, time.Now, log)
	a.store.ObserveQueries(tel.ObserveStore)
	for role, db := range a.store.DBs() {
		tel.Register(collectors.NewDBStatsCollector(db, role))
	}
	a.monitor.OnEvaluated(tel.ObserveEvaluation)
	return tel
}

// requestObserver is tel as the API's request observer; nil when metrics
// are off.
func requestObserver(tel *telemetry.Metrics) httpapi.RequestObserver {
	if tel == nil {
		return nil
	}
	return tel
}

// serveMetrics serves /metrics on its own listener, apart from the API.
func serveMetrics(ln net.Listener, tel *telemetry.Metrics) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	return srv.Serve(ln)
}
