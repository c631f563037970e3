package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/servers"
)

var errNoMetrics = errors.New("httpapi: Deps.Metrics is not set")

// ServerSummary is a server as listed, with its newest sample.
type ServerSummary struct {
	servers.Server
	LatestMetrics *metrics.LatestMetrics `json:"latest_metrics" doc:"The newest sample the agent reported; null if none"`
}

// ServerDetail is a server with its newest sample and inventory.
type ServerDetail struct {
	servers.Server
	LatestMetrics    *metrics.LatestMetrics    `json:"latest_metrics" doc:"The newest sample the agent reported; null if none"`
	Inventory        *metrics.Inventory        `json:"inventory" doc:"The latest inventory the agent reported; null if none"`
	ContainerMetrics *metrics.ContainerMetrics `json:"container_metrics" doc:"CPU, memory and network of each running container at the newest sample; null if the agent reported none (no Docker, or an older agent)"`
}

// serverSummaries adds the newest samples to servers, with one query for
// all of them.
func (s *Server) serverSummaries(ctx context.Context, list []servers.Server) ([]ServerSummary, error) {
	var latest map[string]metrics.LatestMetrics
	if s.deps.Metrics != nil {
		var err error
		if latest, err = s.deps.Metrics.LatestAll(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]ServerSummary, len(list))
	for i, srv := range list {
		out[i] = ServerSummary{Server: srv}
		if l, ok := latest[srv.ID]; ok {
			out[i].LatestMetrics = &l
		}
	}
	return out, nil
}

// serverDetail adds the newest sample and the inventory to a server.
func (s *Server) serverDetail(ctx context.Context, srv servers.Server) (ServerDetail, error) {
	d := ServerDetail{Server: srv}
	if s.deps.Metrics == nil {
		return d, nil
	}
	var err error
	if d.LatestMetrics, err = s.deps.Metrics.Latest(ctx, srv.ID); err != nil {
		return d, err
	}
	if d.Inventory, err = s.deps.Metrics.Inventory(ctx, srv.ID); err != nil {
		return d, err
	}
	d.ContainerMetrics, err = s.deps.Metrics.Containers(ctx, srv.ID)
	return d, err
}

type seriesInput struct {
	ID    string `path:"id" maxLength:"64"`
	Range string `query:"range" default:"1h" enum:"1h,24h,7d,30d,90d" doc:"Time range up to now: 1h, 24h, 7d, 30d or 90d; default 1h when absent"`
}

type fleetInput struct {
	Range string `query:"range" default:"1h" enum:"1h,24h,7d,30d,90d" doc:"Time range up to now: 1h, 24h, 7d, 30d or 90d; default 1h when absent"`
}

func (s *Server) registerMetrics() {
	op(s, huma.Operation{
		OperationID: "get-server-metrics", Method: http.MethodGet, Path: "/api/v1/servers/{id}/metrics", Tags: []string{"Servers"},
		Summary: "Metric history of a server",
		Description: "Points are oldest first, at the samples' own times. For range 1h and 24h (resolution raw) the points are the " +
			"raw samples, or, when there are more than 1,500, the averages of at most 1,500 equal time buckets (bucket_seconds wide, " +
			"aligned to multiples of their width; `samples` says how many samples each averages). For 7d, 30d and 90d (resolution 1h) " +
			"they are hourly averages and maxima from the rollups, which are brought up to date every few minutes. " +
			"Raw samples are kept 48 hours, hourly rollups 100 days.",
		Errors: []int{http.StatusNotFound},
	}, SignedIn, needs(s.hasMetrics, func(ctx context.Context, in *seriesInput) (*bodyOutput[metrics.ServerSeries], error) {
		return reply(s.deps.Metrics.Series(ctx, in.ID, in.Range))
	}))
	op(s, huma.Operation{
		OperationID: "get-fleet-monitoring", Method: http.MethodGet, Path: "/api/v1/monitoring/fleet", Tags: []string{"Monitoring"},
		Summary: "Monitoring overview of every server",
		Description: "The summary counts servers by status and averages the newest sample of each server that has one. " +
			"Each server's series covers the range: for 1h and 24h (resolution raw) as averages of at most 300 time buckets per " +
			"server (bucket_seconds wide), coarser than a single server's series to keep the reply bounded; for 7d, 30d and 90d " +
			"(resolution 1h) as hourly averages from the rollups.",
	}, SignedIn, needs(s.hasMetrics, func(ctx context.Context, in *fleetInput) (*bodyOutput[metrics.Fleet], error) {
		return reply(s.deps.Metrics.Fleet(ctx, in.Range))
	}))
}
