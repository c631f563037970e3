package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

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
