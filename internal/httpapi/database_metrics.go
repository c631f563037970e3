package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/databases"
)

type databaseMetricsInput struct {
	ID    string `path:"id" maxLength:"64"`
	Hours int    `query:"hours" default:"24" minimum:"1" maximum:"2160" doc:"The span up to now, 1 to 2160 hours (90 days); 24 when absent. Up to 48: raw samples; over 48: hourly averages"`
}

func (s *Server) registerDatabaseMetrics() {
	op(s, huma.Operation{
		OperationID: "get-database-metrics", Method: http.MethodGet, Path: "/api/v1/databases/{id}/metrics", Tags: []string{"Databases"},
		Summary: "Metric history of a database instance",
		Description: "The samples the agent on the instance's server takes of it, every minute by default: client connections and " +
			"the engine's limit, the databases' total size (SQL engines), memory in use, keys (Redis/Valkey) and operations a " +
			"second. Points are oldest first, at the samples' own times. For hours up to 48 (resolution raw) the points are the " +
			"raw samples, or, when there are more than 1,500, the averages of at most 1,500 equal time buckets (bucket_seconds " +
			"wide). For more hours (resolution 1h) they are hourly averages and maxima from the rollups, which are brought up to " +
			"date every few minutes. A sample the agent could not take (the instance did not answer) counts in errors, with no " +
			"figures; administrators also get its error text. Raw samples are kept 48 hours, hourly rollups 100 days.",
		Errors: []int{http.StatusNotFound},
	}, SignedIn, needs(s.hasDatabases, func(ctx context.Context, in *databaseMetricsInput) (*bodyOutput[databases.MetricSeries], error) {
		return reply(s.deps.Databases.Metrics(ctx, in.ID, in.Hours, reader(ctx)))
	}))
}
