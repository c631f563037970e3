package httpapi

import (
	"context"
	"math"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/metrics"
)

// ServerColumns is the server list in columns: entry i of every array
// belongs to the same server. It carries only what a list of the whole
// fleet shows, without repeating field names per server, so that 10,000
// servers load in one small answer.
type ServerColumns struct {
	Count    int        `json:"count" doc:"Number of servers; every array has this many entries"`
	ID       []string   `json:"id"`
	Name     []string   `json:"name"`
	Status   []string   `json:"status" doc:"pending, online, offline or revoked"`
	Tags     [][]string `json:"tags"`
	Hostname []string   `json:"hostname" doc:"The host name the agent reported; empty until it enrolled"`
	OS       []string   `json:"os" doc:"Operating system id and version, e.g. \"debian 12\"; empty until the agent enrolled"`
	LastSeen []*int64   `json:"last_seen" doc:"Unix seconds of the last heartbeat; null when never heard from"`
	CPU      []*float64 `json:"cpu" doc:"CPU use of the newest sample, 0 to 100, one decimal; null without a sample"`
	Memory   []*float64 `json:"memory" doc:"Memory use of the newest sample, one decimal; null when unknown"`
	Disk     []*float64 `json:"disk" doc:"Use of the fullest filesystem in the newest sample, one decimal; null when unknown"`
}

type sparklinesInput struct {
	IDs string `query:"ids" required:"true" maxLength:"8000" doc:"Comma-separated server ids, 1 to 100"`
}

type sparklinesOutput struct {
	Body struct {
		SlotSeconds int                 `json:"slot_seconds" doc:"Width of each slot; the last slot ends now"`
		Servers     []metrics.Sparkline `json:"servers" doc:"In the order asked; ids that name no server are left out"`
	}
}

func oneDecimal(v *float64) *float64 {
	if v == nil {
		return nil
	}
	r := math.Round(*v*10) / 10
	return &r
}

func (s *Server) registerFleetList() {
	tags := []string{"Servers"}
	op(s, huma.Operation{
		OperationID: "list-servers-compact", Method: http.MethodGet, Path: "/api/v1/servers/compact", Tags: tags,
		Summary: "Every server in a compact, column-wise form",
		Description: "What a list of the whole fleet shows (name, status, tags, host name, OS, last heartbeat, and CPU, memory " +
			"and disk use of the newest sample) as one array per field, entry i of each belonging to the same server. For " +
			"10,000 servers it is about a sixth of GET /api/v1/servers, before compression.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*bodyOutput[ServerColumns], error) {
		list, err := s.deps.Servers.List(ctx)
		if err != nil {
			return nil, err
		}
		var latest map[string]metrics.LatestMetrics
		if s.deps.Metrics != nil {
			if latest, err = s.deps.Metrics.LatestAll(ctx); err != nil {
				return nil, err
			}
		}
		n := len(list)
		c := ServerColumns{Count: n, ID: make([]string, n), Name: make([]string, n), Status: make([]string, n),
			Tags: make([][]string, n), Hostname: make([]string, n), OS: make([]string, n), LastSeen: make([]*int64, n),
			CPU: make([]*float64, n), Memory: make([]*float64, n), Disk: make([]*float64, n)}
		for i, srv := range list {
			c.ID[i], c.Name[i], c.Status[i], c.Tags[i] = srv.ID, srv.Name, srv.Status, srv.Tags
			if c.Tags[i] == nil {
				c.Tags[i] = []string{}
			}
			if srv.Facts != nil {
				c.Hostname[i] = srv.Facts.Hostname
				c.OS[i] = strings.TrimSpace(srv.Facts.OS + " " + srv.Facts.OSVersion)
			}
			if srv.LastSeenAt != nil {
				sec := srv.LastSeenAt.Unix()
				c.LastSeen[i] = &sec
			}
			if l, ok := latest[srv.ID]; ok {
				cpu := l.CPUPercent
				c.CPU[i], c.Memory[i], c.Disk[i] = oneDecimal(&cpu), oneDecimal(l.MemoryUsedPercent), oneDecimal(l.DiskUsedPercent)
			}
		}
		return &bodyOutput[ServerColumns]{Body: c}, nil
	})
	op(s, huma.Operation{
		OperationID: "get-server-sparklines", Method: http.MethodGet, Path: "/api/v1/servers/sparklines", Tags: tags,
		Summary: "CPU and memory of the last hour of some servers, for sparklines",
		Description: "For each server named in ids (1 to 100), its CPU and memory use over the last hour in 30 two-minute " +
			"slots, oldest first, as whole percentages (null for a slot without samples): one small request for the rows a " +
			"list shows, instead of each server's full series.",
	}, SignedIn, needs(s.hasMetrics, func(ctx context.Context, in *sparklinesInput) (*sparklinesOutput, error) {
		var ids []string
		for id := range strings.SplitSeq(in.IDs, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 || len(ids) > metrics.SparkMaxServers {
			return nil, fault.Invalidf("ids", "must name 1 to %d servers", metrics.SparkMaxServers)
		}
		list, err := s.deps.Metrics.Sparklines(ctx, ids)
		if err != nil {
			return nil, err
		}
		out := &sparklinesOutput{}
		out.Body.SlotSeconds = int(3600 / metrics.SparkPoints)
		out.Body.Servers = list
		return out, nil
	}))
}
