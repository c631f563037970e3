// Package logs reads journal units and container logs on servers: it lists
// what is readable (from the server's inventory), validates a read, queues
// it as a logs.read job, and presents the finished job's lines and cursor.
// A cursor returned by one read continues the next one with no duplicates
// and no gaps.
package logs

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Bounds of a read.
const (
	DefaultLines = 200
	MaxLines     = 1000
	MaxCursorLen = 512
)

// Unit is a readable journal unit.
type Unit struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	ActiveState string `json:"active_state"`
}

// Container is a readable container log.
type Container struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	Image string `json:"image"`
	State string `json:"state"`
}

// Sources lists what can be read on a server.
type Sources struct {
	ServerID    string      `json:"server_id"`
	Sources     []string    `json:"sources" doc:"Log sources: journal, container"`
	Units       []Unit      `json:"units"`
	Containers  []Container `json:"containers"`
	CollectedAt *time.Time  `json:"collected_at" doc:"When the inventory these come from was collected; null if the agent has not reported one"`
}

// Read is a request to read logs.
type Read struct {
	ServerID  string
	Source    string
	Unit      string
	Container string
	// Lines is 1 to 1000; nil means the default (200). An explicit value
	// outside the bounds, 0 included, is refused.
	Lines *int
	// Priority, journal only, 0 to 7; nil means all.
	Priority *int
	Cursor   string
	Actor    string
}

// Result is a finished (or unfinished) read.
type Result struct {
	JobID  string               `json:"job_id"`
	Status jobs.Status          `json:"status"`
	Error  *string              `json:"error" doc:"Why the read failed; for members the error class only"`
	Lines  []agentproto.LogLine `json:"lines" doc:"Oldest first; empty until the job succeeded, and for members"`
	Cursor string               `json:"cursor,omitempty" doc:"Pass it to the next read to continue after the last line"`
	// Redacted is true when the reader may not see the lines.
	Redacted bool `json:"redacted" doc:"True when the lines were withheld: log lines are readable by administrators only"`
}

// Service queues and presents log reads.
type Service struct {
	jobs    *jobs.Service
	servers *servers.Service
	metrics *metrics.Service
}

// NewService returns a logs service and registers logs.read with the job
// service.
func NewService(j *jobs.Service, s *servers.Service, m *metrics.Service) *Service {
	j.Register(agentproto.LogsRead, jobs.Spec{Timeout: time.Minute})
	return &Service{jobs: j, servers: s, metrics: m}
}

// Sources lists the units and containers readable on a server.
func (s *Service) Sources(ctx context.Context, serverID string) (Sources, error) {
	if _, err := s.servers.Get(ctx, serverID); err != nil {
		return Sources{}, err
	}
	out := Sources{ServerID: serverID, Sources: []string{agentproto.LogSourceJournal, agentproto.LogSourceContainer},
		Units: []Unit{}, Containers: []Container{}}
	inv, err := s.metrics.Inventory(ctx, serverID)
	if err != nil || inv == nil {
		return out, err
	}
	t := inv.CollectedAt
	out.CollectedAt = &t
	for _, u := range inv.Services {
		if servers.ValidUnit(u.Name) {
			out.Units = append(out.Units, Unit{Name: u.Name, Description: u.Description, ActiveState: u.ActiveState})
		}
	}
	for _, c := range inv.Containers {
		if servers.ValidContainer(c.Name) {
			out.Containers = append(out.Containers, Container{Name: c.Name, ID: c.ID, Image: c.Image, State: c.State})
		}
	}
	sort.Slice(out.Units, func(i, j int) bool { return out.Units[i].Name < out.Units[j].Name })
	sort.Slice(out.Containers, func(i, j int) bool { return out.Containers[i].Name < out.Containers[j].Name })
	return out, nil
}

// Validate checks a read and returns the job payload.
func Validate(r Read) (agentproto.LogsReadPayload, error) {
	var errs fault.Fields
	p := agentproto.LogsReadPayload{Source: r.Source, Lines: DefaultLines, Cursor: r.Cursor}
	if r.Lines != nil {
		p.Lines = *r.Lines
		if p.Lines < 1 || p.Lines > MaxLines {
			errs.Add("lines", "must be an integer between 1 and %d", MaxLines)
		}
	}
	if len(r.Cursor) > MaxCursorLen {
		errs.Add("cursor", "at most %d characters", MaxCursorLen)
	}
	switch r.Source {
	case agentproto.LogSourceJournal:
		if !servers.ValidUnit(r.Unit) {
			errs.Add("unit", "must be a systemd unit name ending in .service")
		}
		if r.Container != "" {
			errs.Add("container", "only with source container")
		}
		if r.Priority != nil && (*r.Priority < 0 || *r.Priority > 7) {
			errs.Add("priority", "must be between 0 (emergency) and 7 (debug)")
		}
		p.Unit, p.Priority = r.Unit, r.Priority
	case agentproto.LogSourceContainer:
		if !servers.ValidContainer(r.Container) {
			errs.Add("container", "must be a Docker container name or id")
		}
		if r.Unit != "" {
			errs.Add("unit", "only with source journal")
		}
		if r.Priority != nil {
			errs.Add("priority", "only with source journal")
		}
		p.Container = r.Container
	default:
		errs.Add("source", "must be journal or container")
	}
	return p, errs.Err()
}

// Queue validates a read and queues it on the server.
func (s *Service) Queue(ctx context.Context, r Read) (jobs.Job, error) {
	p, err := Validate(r)
	if err != nil {
		return jobs.Job{}, err
	}
	if _, err := servers.RequireAgent(ctx, s.servers, "server_id", r.ServerID, "read logs"); err != nil {
		return jobs.Job{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: r.ServerID, Work: jobs.Of(agentproto.LogsRead, p), CreatedBy: r.Actor})
	return j, err
}

// Get returns the result of a read job as r may read it: members get its
// status and error class, not its lines. With wait, it answers once the
// job is finished or wait (at most jobs.MaxWait) passed, as jobs.Wait.
func (s *Service) Get(ctx context.Context, jobID string, wait time.Duration, r jobs.Reader) (Result, error) {
	j, _, err := s.jobs.Wait(ctx, jobID, wait, r)
	if err != nil {
		return Result{}, err
	}
	if j.Type != agentproto.JobLogsRead {
		return Result{}, fault.NotFoundf("No log read with this job id.")
	}
	res := Result{JobID: j.ID, Status: j.Status, Error: j.Error, Lines: []agentproto.LogLine{}, Redacted: j.Redacted}
	if j.Status == jobs.Succeeded && len(j.Data) > 0 {
		var data agentproto.LogsResult
		if err := json.Unmarshal(j.Data, &data); err != nil {
			return Result{}, err
		}
		if data.Lines != nil {
			res.Lines = data.Lines
		}
		res.Cursor = data.Cursor
	} else {
		// Until the read finished, the cursor to continue from is the
		// one it started at.
		var p agentproto.LogsReadPayload
		if json.Unmarshal(j.Payload, &p) == nil {
			res.Cursor = p.Cursor
		}
	}
	return res, nil
}
