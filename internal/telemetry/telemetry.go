// Package telemetry exposes the control plane's operational metrics in the
// Prometheus text format: request latencies by route pattern, agent calls by
// kind, jobs by type and state, the job queue, agents online, store
// latency, alert evaluation time, and the Go runtime and process. Labels
// are bounded sets (route patterns, call kinds, job types and states, store
// operations), never server or job ids. docs/metrics.md lists every name.
package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric of the control plane.
const Namespace = "capstan"

// JobCount is how many jobs of a type are in a state.
type JobCount struct {
	Type   string
	Status string
	Count  int64
}

// Fleet reads, at scrape time, the figures that live in the store.
type Fleet interface {
	// JobCounts counts the stored jobs by type and state.
	JobCounts(ctx context.Context) ([]JobCount, error)
	// JobQueue returns how many jobs are queued and when the oldest of
	// them was created (zero when none is).
	JobQueue(ctx context.Context) (depth int64, oldest time.Time, err error)
	// AgentsOnline counts the enrolled servers whose agent was seen since.
	AgentsOnline(ctx context.Context, since time.Time) (int64, error)
}

// Metrics holds the control plane's metrics. A nil *Metrics records
// nothing, so code can call it unconditionally.
type Metrics struct {
	reg *prometheus.Registry

	requests   *prometheus.HistogramVec
	agentCalls *prometheus.CounterVec
	store      *prometheus.HistogramVec
	evaluation prometheus.Histogram
}

// Buckets of request and store latencies, in seconds: 0.5 ms to 30 s (the
// claim long poll waits up to 30 s).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// New registers the metrics. fleet may be nil (no store-derived gauges);
// onlineWindow is how recently an agent must have been seen to count as
// online; now is the clock.
func New(fleet Fleet, onlineWindow time.Duration, now func() time.Time, log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.Default()
	}
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
		Help:    "Time to answer an HTTP request, by route pattern (e.g. POST /api/v1/servers/{id}/actions; unmatched for no route) and status class.",
		Buckets: latencyBuckets,
	}, []string{"route", "code"})
	m.agentCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "agent", Name: "calls_total",
		Help: "Agent protocol calls by kind (heartbeat, metrics, claim, …) and outcome (ok, client_error, server_error).",
	}, []string{"kind", "outcome"})
	m.store = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "store", Name: "operation_duration_seconds",
		Help:    "Time of store operations by kind: exec (a statement), query (until the first row), begin and commit (a transaction).",
		Buckets: latencyBuckets,
	}, []string{"op"})
	m.evaluation = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "alert", Name: "evaluation_duration_seconds",
		Help:    "Time of one alert evaluation cycle over the whole fleet.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	m.reg.MustRegister(m.requests, m.agentCalls, m.store, m.evaluation,
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC, collectors.MetricsMemory, collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if fleet != nil {
		m.reg.MustRegister(&fleetCollector{fleet: fleet, window: onlineWindow, now: now, log: log})
	}
	return m
}

// Register adds more collectors (e.g. database connection pool stats).
func (m *Metrics) Register(c ...prometheus.Collector) {
	if m != nil {
		m.reg.MustRegister(c...)
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 30 * time.Second})
}

// ObserveRequest records an answered HTTP request. pattern is the route
// pattern that matched ("" when none did).
func (m *Metrics) ObserveRequest(pattern string, status int, d time.Duration) {
	if m == nil {
		return
	}
	route := pattern
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, statusClass(status)).Observe(d.Seconds())
	if kind, ok := AgentCallKind(pattern); ok {
		outcome := "ok"
		switch {
		case status >= 500:
			outcome = "server_error"
		case status >= 400:
			outcome = "client_error"
		}
		m.agentCalls.WithLabelValues(kind, outcome).Inc()
	}
}

// ObserveStore records one store operation.
func (m *Metrics) ObserveStore(op string, d time.Duration) {
	if m != nil {
		m.store.WithLabelValues(op).Observe(d.Seconds())
	}
}

// ObserveEvaluation records one alert evaluation cycle.
func (m *Metrics) ObserveEvaluation(d time.Duration) {
	if m != nil {
		m.evaluation.Observe(d.Seconds())
	}
}

var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(code int) string {
	if code >= 100 && code < 600 {
		return statusClasses[code/100-1]
	}
	return strconv.Itoa(code)
}

// AgentCallKind names the agent protocol call of a route pattern such as
// "POST /agent/v1/jobs/{id}/complete": "jobs/complete". It reports false
// for routes outside the agent protocol.
func AgentCallKind(pattern string) (string, bool) {
	_, path, _ := strings.Cut(pattern, " ")
	rest, ok := strings.CutPrefix(path, "/agent/v1/")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, "/")
	kept := parts[:0]
	for _, p := range parts {
		if !strings.HasPrefix(p, "{") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "/"), true
}

// fleetCollector reads the store-derived gauges at scrape time.
type fleetCollector struct {
	fleet  Fleet
	window time.Duration
	now    func() time.Time
	log    *slog.Logger
}

var (
	jobsDesc       = prometheus.NewDesc(Namespace+"_jobs", "Stored jobs by type and state.", []string{"type", "state"}, nil)
	queueDepthDesc = prometheus.NewDesc(Namespace+"_job_queue_depth", "Jobs queued and not yet claimed by an agent.", nil, nil)
	queueAgeDesc   = prometheus.NewDesc(Namespace+"_job_queue_oldest_age_seconds",
		"Age of the oldest queued job (0 when the queue is empty).", nil, nil)
	agentsOnlineDesc = prometheus.NewDesc(Namespace+"_agents_online", "Enrolled servers whose agent was seen within the last three heartbeat intervals.", nil, nil)
	scrapeErrorDesc  = prometheus.NewDesc(Namespace+"_telemetry_store_read_errors", "1 when reading a store-derived metric failed in this scrape.", []string{"metric"}, nil)
)

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- queueDepthDesc
	ch <- queueAgeDesc
	ch <- agentsOnlineDesc
	ch <- scrapeErrorDesc
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	failed := func(metric string, err error) {
		c.log.Warn("reading a metric from the store", "metric", metric, "err", err.Error())
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 1, metric)
	}
	if counts, err := c.fleet.JobCounts(ctx); err != nil {
		failed("jobs", err)
	} else {
		for _, jc := range counts {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(jc.Count), jc.Type, jc.Status)
		}
	}
	now := c.now()
	if depth, oldest, err := c.fleet.JobQueue(ctx); err != nil {
		failed("job_queue", err)
	} else {
		age := 0.0
		if depth > 0 && !oldest.IsZero() {
			age = max(now.Sub(oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(depth))
		ch <- prometheus.MustNewConstMetric(queueAgeDesc, prometheus.GaugeValue, age)
	}
	if n, err := c.fleet.AgentsOnline(ctx, now.Add(-c.window)); err != nil {
		failed("agents_online", err)
	} else {
		ch <- prometheus.MustNewConstMetric(agentsOnlineDesc, prometheus.GaugeValue, float64(n))
	}
}
