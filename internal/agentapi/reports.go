// What agents report of their server (host metrics, request traffic,
// application health, database metrics) and what they read back of it
// (the proxy state to serve, the database instances to sample).

package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

// Body limits of the reports. A full metrics report (720 samples with a
// few filesystems each) is about 1.5 MB.
const (
	maxMetricsBody   = 4 << 20
	maxInventoryBody = 8 << 20
)

type metricsInput struct {
	Body agentproto.MetricsRequest
}

// InventoryReport is agentproto.InventoryRequest. Its schema lets a
// container's labels be null, as a nil map marshals.
type InventoryReport agentproto.InventoryRequest

// TransformSchema makes ContainerInfo.labels nullable.
func (InventoryReport) TransformSchema(r huma.Registry, s *huma.Schema) *huma.Schema {
	if c := r.SchemaFromRef("#/components/schemas/ContainerInfo"); c != nil {
		if l := c.Properties["labels"]; l != nil {
			l.Nullable = true
		}
	}
	return s
}

type inventoryInput struct {
	Body InventoryReport
}

func registerMetrics(s *httpapi.Server, d Deps, limits *limiter) {
	tags := []string{"Agent protocol"}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-metrics", Method: http.MethodPost, Path: "/agent/v1/metrics", Tags: tags,
		Summary: "Report metric samples",
		Description: "Each sample is stored at its own time, so a batch buffered while the control plane was unreachable lands " +
			"where it belongs. Samples more than 7 days old or more than 5 minutes ahead of the control plane's clock are " +
			"refused, as are out-of-range values (percentages outside 0–100, used above total, negative rates or loads); the " +
			"422 problem names each bad field (samples[i].field) and nothing of the report is stored. At most 720 samples of at " +
			"most 64 filesystems each; bodies over 4 MiB get 413. A sample stored already (same server and time, to the " +
			"millisecond) is ignored, so a retried report counts once. Rate limited per server: 1,440 samples at once (two hours " +
			"of 5 s samples buffered during an outage), then one a second; beyond that 429 with Retry-After, and nothing is stored.",
		DefaultStatus: http.StatusNoContent,
		MaxBodyBytes:  maxMetricsBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *metricsInput) (*struct{}, error) {
		m := d.Metrics
		if m == nil {
			return nil, errors.New("agentapi: no metrics service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportMetrics, len(in.Body.Samples)); err != nil {
			return nil, err
		}
		_, err := m.Ingest(ctx, httpapi.AgentServer(ctx).ID, in.Body)
		return &struct{}{}, err
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-inventory", Method: http.MethodPost, Path: "/agent/v1/inventory", Tags: tags,
		Summary: "Report the host's services, containers and listening ports",
		Description: "Replaces the server's previous inventory. A null list means the agent could not read that part; an empty " +
			"list means there is none. At most 5,000 services, 2,000 containers and 10,000 ports; bodies over 8 MiB get 413. " +
			"Rate limited per server: 10 reports at once, then one every 10 s; beyond that 429 with Retry-After, and nothing is stored.",
		DefaultStatus: http.StatusNoContent,
		MaxBodyBytes:  maxInventoryBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *inventoryInput) (*struct{}, error) {
		m := d.Metrics
		if m == nil {
			return nil, errors.New("agentapi: no metrics service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportInventory, 1); err != nil {
			return nil, err
		}
		return &struct{}{}, m.PutInventory(ctx, httpapi.AgentServer(ctx).ID, agentproto.InventoryRequest(in.Body))
	})
}

// maxRequestsBody bounds a request report: 10,000 minutes of about 250
// bytes each.
const maxRequestsBody = 4 << 20

type requestsInput struct {
	Body agentproto.RequestsReport
}

type requestsOutput struct {
	Body agentproto.RequestsResult
}

func registerRequests(s *httpapi.Server, deps Deps, limits *limiter) {
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-requests", Method: http.MethodPost, Path: "/agent/v1/requests", Tags: []string{"Agent protocol"},
		Summary: "Report request traffic per host and minute",
		Description: "Aggregates from the proxy's access log: minutes of the configured sites, and other, the server's one " +
			"bucket of requests to every other host (stored without names). Each (host, minute) replaces what was stored for " +
			"it: a minute's counts are cumulative, so reporting it again as it grows (or retrying a report) is idempotent. An " +
			"entry is valid when its host is a valid hostname (minutes only), its counts are not negative and its status classes " +
			"add up to at most count, and its minute is a whole minute at most 7 days old and not in the future (2 minutes of " +
			"clock skew are allowed). Invalid entries are skipped, not stored, and named in the reply (skipped[i].field, e.g. " +
			"minutes[3].host); the valid ones are stored. More than 10,000 entries in all: 422 and nothing is stored; bodies " +
			"over 4 MiB get 413. Rate limited per server: 20,000 entries at once, then 100 a second; beyond that 429 with " +
			"Retry-After, and nothing is stored.",
		DefaultStatus: http.StatusOK,
		MaxBodyBytes:  maxRequestsBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *requestsInput) (*requestsOutput, error) {
		d := deps.Domains
		if d == nil {
			return nil, errors.New("agentapi: no domain service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportRequests, len(in.Body.Minutes)+len(in.Body.Other)); err != nil {
			return nil, err
		}
		res, err := d.IngestRequests(ctx, httpapi.AgentServer(ctx).ID, in.Body)
		if err != nil {
			return nil, err
		}
		if res.Skipped == nil {
			res.Skipped = []agentproto.SkippedMinute{}
		}
		return &requestsOutput{Body: res}, nil
	})
}

// maxHealthBody bounds a health report: 1,000 probes of about 300 bytes.
const maxHealthBody = 1 << 20

type healthInput struct {
	Body agentproto.HealthReport
}

// healthOutput is 204, or 200 with the targets an agent asked for.
type healthOutput struct {
	Status int `json:"-"`
	Body   *agentproto.HealthTargets
}

func registerHealth(s *httpapi.Server, d Deps, limits *limiter) {
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-health", Method: http.MethodPost, Path: "/agent/v1/health", Tags: []string{"Agent protocol"},
		Summary: "Report the applications' health probes",
		Description: "The results of probing every application's health path on its loopback port (every 30 s): a container " +
			"application's live container, a compose application's web service, a service application's live slot. " +
			"Probes of applications that are not on this server are ignored. At most 1,000 probes (422 beyond); rate limited " +
			"per server (429 with Retry-After). Answers 204, or with want_targets 200 and the applications of the server " +
			"with a live release, each with its kind, live deployment, health path and container port: the ones to probe.",
		DefaultStatus: http.StatusOK,
		MaxBodyBytes:  maxHealthBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *healthInput) (*healthOutput, error) {
		m := d.Monitoring
		if m == nil {
			return nil, errors.New("agentapi: no monitoring service")
		}
		srv := httpapi.AgentServer(ctx)
		if err := limits.take(srv.ID, ReportHealth, 1); err != nil {
			return nil, err
		}
		if err := m.RecordHealth(ctx, srv.ID, in.Body); err != nil {
			return nil, err
		}
		if !in.Body.WantTargets {
			return &healthOutput{Status: http.StatusNoContent}, nil
		}
		targets, err := m.HealthTargets(ctx, srv.ID)
		if err != nil {
			return nil, err
		}
		return &healthOutput{Status: http.StatusOK, Body: &targets}, nil
	})
}

type proxyStateOutput struct {
	Body agentproto.ProxyStateResponse
}

func registerProxy(s *httpapi.Server, deps Deps, limits *limiter) {
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-proxy", Method: http.MethodGet, Path: "/agent/v1/proxy", Tags: []string{"Agent protocol"},
		Summary: "The server's current desired proxy state, with its revision",
		Description: "Every site of every application on the calling agent's server that is not being removed, and the " +
			"revision of that state. The revision rises with every change to what the proxy serves (a domain created, " +
			"changed or deleted, an application removed, a deployment succeeding); proxy.apply, app.deploy and app.remove " +
			"jobs carry the revision they were made with. An agent never applies a revision lower than one it applied, " +
			"and fetches this route when an app.deploy switches the proxy to the new container and when an app.remove " +
			"applies the state without the application, so that a change made while the job ran is not undone. " +
			"Revision 0 means the server's proxy state was never changed. Rate limited per server: 60 reads at once, then " +
			"one a second; beyond that 429 with Retry-After.",
		Errors: []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, _ *struct{}) (*proxyStateOutput, error) {
		d := deps.Domains
		if d == nil {
			return nil, errors.New("agentapi: no domain service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportProxyReads, 1); err != nil {
			return nil, err
		}
		cfg, err := d.DesiredProxy(ctx, httpapi.AgentServer(ctx).ID)
		if err != nil {
			return nil, err
		}
		return &proxyStateOutput{Body: agentproto.ProxyStateResponse{Proxy: cfg}}, nil
	})
}

// maxDatabaseMetricsBody bounds a database metrics report: 1,000 samples
// with a few databases each.
const maxDatabaseMetricsBody = 4 << 20

type dbMonitorOutput struct {
	Body agentproto.DBMonitorResponse
}

type dbMetricsInput struct {
	Body agentproto.DBMetricsRequest
}

type dbMetricsOutput struct {
	Body agentproto.DBMetricsResult
}

var errNoDatabases = errors.New("agentapi: no database service")

func registerDatabases(s *httpapi.Server, deps Deps, limits *limiter) {
	tags := []string{"Agent protocol"}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-databases", Method: http.MethodGet, Path: "/agent/v1/databases", Tags: tags,
		Summary: "The database instances the agent samples, with the login to sample them as",
		Description: "Every ready instance on the calling agent's server, with how to reach it and its admin login's password, " +
			"and the revision of the list. The heartbeat reply's databases_revision names the current list: the agent reads this " +
			"route when it differs from the revision it holds. The passwords stay in the agent's memory. Rate limited per " +
			"server: 30 reads at once, then one every 5 s; beyond that 429 with Retry-After.",
		Errors: []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, _ *struct{}) (*dbMonitorOutput, error) {
		d := deps.Databases
		if d == nil {
			return nil, errNoDatabases
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportDatabaseReads, 1); err != nil {
			return nil, err
		}
		list, err := d.MonitorList(ctx, httpapi.AgentServer(ctx).ID)
		if err != nil {
			return nil, err
		}
		return &dbMonitorOutput{Body: list}, nil
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-database-metrics", Method: http.MethodPost, Path: "/agent/v1/databases/metrics", Tags: tags,
		Summary: "Report metric samples of database instances",
		Description: "Each sample is stored at its own time. Samples more than 24 hours old or more than 5 minutes ahead of the " +
			"control plane's clock are refused, as are negative figures; the 422 problem names each bad field (samples[i].field) " +
			"and nothing of the report is stored. Samples of instances that are not on the agent's server are skipped (the reply " +
			"counts them). At most 1,000 samples; bodies over 4 MiB get 413. A sample stored already (same instance and time, " +
			"to the millisecond) is ignored. Rate limited per server: 2,000 samples at once, then two a second; beyond that 429 " +
			"with Retry-After, and nothing is stored.",
		MaxBodyBytes: maxDatabaseMetricsBody,
		Errors:       []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *dbMetricsInput) (*dbMetricsOutput, error) {
		d := deps.Databases
		if d == nil {
			return nil, errNoDatabases
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportDatabaseMetrics, len(in.Body.Samples)); err != nil {
			return nil, err
		}
		res, err := d.IngestMetrics(ctx, httpapi.AgentServer(ctx).ID, in.Body)
		if err != nil {
			return nil, err
		}
		return &dbMetricsOutput{Body: res}, nil
	})
}
