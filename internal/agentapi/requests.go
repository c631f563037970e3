package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

// maxRequestsBody bounds a request report: 10,000 minutes of about 250
// bytes each.
const maxRequestsBody = 4 << 20

type requestsInput struct {
	Body agentproto.RequestsReport
}

func registerRequests(s *httpapi.Server, limits *limiter) {
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-requests", Method: http.MethodPost, Path: "/agent/v1/requests", Tags: []string{"Agent protocol"},
		Summary: "Report request traffic per host and minute",
		Description: "Aggregates from the proxy's access log. Each (host, minute) replaces what was stored for it: a minute's " +
			"counts are cumulative, so reporting it again as it grows (or retrying a report) is idempotent. At most 10,000 " +
			"minutes; hosts must be valid hostnames; counts must not be negative and the status classes must not add up to more " +
			"than count; minutes must be whole minutes, at most 7 days old and not in the future (2 minutes of clock skew are " +
			"allowed). Otherwise 422 naming each bad field (minutes[i].field), and nothing is stored. Bodies over 4 MiB get 413. " +
			"Rate limited per server: 20,000 minutes at once, then 100 a second; beyond that 429 with Retry-After, and nothing is stored.",
		DefaultStatus: http.StatusNoContent,
		MaxBodyBytes:  maxRequestsBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *requestsInput) (*struct{}, error) {
		d := s.Domains()
		if d == nil {
			return nil, errors.New("agentapi: no domain service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportRequests, len(in.Body.Minutes)); err != nil {
			return nil, err
		}
		return &struct{}{}, d.IngestRequests(ctx, httpapi.AgentServer(ctx).ID, in.Body)
	})
}
