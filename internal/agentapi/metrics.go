package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

// Body limits of the reports. A full metrics report (720 samples with a
// few filesystems each) is about 1.5 MB.
const (
	maxMetricsBody   = 4 << 20
	maxInventoryBody = 8 << 20
)

type metricsInput struct {
	Body agentproto.MetricsRequest
}

// InventoryReport is agentproto.InventoryRequest. Its schema lets a
// container's labels be null, as a nil map marshals.
type InventoryReport agentproto.InventoryRequest

// TransformSchema makes ContainerInfo.labels nullable.
func (InventoryReport) TransformSchema(r huma.Registry, s *huma.Schema) *huma.Schema {
	if c := r.SchemaFromRef("#/components/schemas/ContainerInfo"); c != nil {
		if l := c.Properties["labels"]; l != nil {
			l.Nullable = true
		}
	}
	return s
}

type inventoryInput struct {
	Body InventoryReport
}

func registerMetrics(s *httpapi.Server, d Deps, limits *limiter) {
	tags := []string{"Agent protocol"}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-metrics", Method: http.MethodPost, Path: "/agent/v1/metrics", Tags: tags,
		Summary: "Report metric samples",
		Description: "Each sample is stored at its own time, so a batch buffered while the control plane was unreachable lands " +
			"where it belongs. Samples more than 7 days old or more than 5 minutes ahead of the control plane's clock are " +
			"refused, as are out-of-range values (percentages outside 0–100, used above total, negative rates or loads); the " +
			"422 problem names each bad field (samples[i].field) and nothing of the report is stored. At most 720 samples of at " +
			"most 64 filesystems each; bodies over 4 MiB get 413. A sample stored already (same server and time, to the " +
			"millisecond) is ignored, so a retried report counts once. Rate limited per server: 1,440 samples at once (two hours " +
			"of 5 s samples buffered during an outage), then one a second; beyond that 429 with Retry-After, and nothing is stored.",
		DefaultStatus: http.StatusNoContent,
		MaxBodyBytes:  maxMetricsBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *metricsInput) (*struct{}, error) {
		m := d.Metrics
		if m == nil {
			return nil, errors.New("agentapi: no metrics service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportMetrics, len(in.Body.Samples)); err != nil {
			return nil, err
		}
		_, err := m.Ingest(ctx, httpapi.AgentServer(ctx).ID, in.Body)
		return &struct{}{}, err
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-inventory", Method: http.MethodPost, Path: "/agent/v1/inventory", Tags: tags,
		Summary: "Report the host's services, containers and listening ports",
		Description: "Replaces the server's previous inventory. A null list means the agent could not read that part; an empty " +
			"list means there is none. At most 5,000 services, 2,000 containers and 10,000 ports; bodies over 8 MiB get 413. " +
			"Rate limited per server: 10 reports at once, then one every 10 s; beyond that 429 with Retry-After, and nothing is stored.",
		DefaultStatus: http.StatusNoContent,
		MaxBodyBytes:  maxInventoryBody,
		Errors:        []int{http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *inventoryInput) (*struct{}, error) {
		m := d.Metrics
		if m == nil {
			return nil, errors.New("agentapi: no metrics service")
		}
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportInventory, 1); err != nil {
			return nil, err
		}
		return &struct{}{}, m.PutInventory(ctx, httpapi.AgentServer(ctx).ID, agentproto.InventoryRequest(in.Body))
	})
}
