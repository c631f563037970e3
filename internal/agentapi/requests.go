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
