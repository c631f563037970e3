package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

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
