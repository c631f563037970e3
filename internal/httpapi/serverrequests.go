package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/domains"
)

// registerServerRequests registers the read of a server's "other" request
// bucket.
func (s *Server) registerServerRequests() {
	op(s, huma.Operation{
		OperationID: "get-server-other-requests", Method: http.MethodGet, Path: "/api/v1/servers/{id}/requests/other",
		Tags:    []string{"Servers"},
		Summary: "Requests to hosts that are not configured sites",
		Description: "The server's proxy answers every Host header it receives; the agent counts per host only the configured " +
			"sites (the domains of the server's applications and their www. names) and sums every other host (scanners, IP " +
			"literals, names whose DNS still points here) into this one bucket, without their names. Bucketed as an " +
			"application's request traffic: 1h per minute, 24h in 5-minute buckets, 7d hourly.",
		Errors: []int{http.StatusNotFound},
	}, SignedIn, needs(s.hasDomains, func(ctx context.Context, in *trafficInput) (*bodyOutput[domains.OtherTraffic], error) {
		return reply(s.deps.Domains.ServerOtherTraffic(ctx, in.ID, in.Range))
	}))
}
