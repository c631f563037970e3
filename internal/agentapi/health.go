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

func registerHealth(s *httpapi.Server, limits *limiter) {
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-health", Method: http.MethodPost, Path: "/agent/v1/health", Tags: []string{"Agent protocol"},
		Summary: "Report the applications' health probes",
		Description: "The results of probing every application container's health path on its loopback port (every 30 s). " +
			"Probes of applications that are not on this server are ignored. At most 1,000 probes (422 beyond); rate limited " +
			"per server (429 with Retry-After).",
		DefaultStatus: http.StatusNoContent,
		MaxBodyBytes:  maxHealthBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *healthInput) (*struct{}, error) {
		m := s.Monitoring()
		if m == nil {
			return nil, errors.New("agentapi: no monitoring service")
		}
		srv := httpapi.AgentServer(ctx)
		if err := limits.take(srv.ID, ReportHealth, 1); err != nil {
			return nil, err
		}
		return &struct{}{}, m.RecordHealth(ctx, srv.ID, in.Body)
	})
}
