package agent

import (
	"context"
	"net/http"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// DatabaseMonitors fetches the database instances on the agent's server
// that it samples, with the logins to sample them as. A control plane
// without database metrics answers 404 (StatusOf).
func (c *Client) DatabaseMonitors(ctx context.Context) (agentproto.DBMonitorResponse, error) {
	var resp agentproto.DBMonitorResponse
	_, err := c.do(ctx, RequestTimeout, http.MethodGet, "/databases", true, nil, &resp)
	return resp, err
}

// PostDatabaseMetrics delivers database metric samples, oldest first;
// each is stored at its own time.
func (c *Client) PostDatabaseMetrics(ctx context.Context, samples []agentproto.DBMetricSample) (agentproto.DBMetricsResult, error) {
	var res agentproto.DBMetricsResult
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/databases/metrics", true, agentproto.DBMetricsRequest{Samples: samples}, &res)
	return res, err
}
