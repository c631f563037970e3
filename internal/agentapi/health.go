package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

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
