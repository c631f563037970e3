package apps

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Bounds of an application log read.
const (
	DefaultLogLines = 200
	MaxLogLines     = 1000
)

// AppLogs is the result of an app.logs job: the live container's log.
type AppLogs struct {
	JobID        string               `json:"job_id"`
	Status       jobs.Status          `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
	Error        *string              `json:"error" doc:"Why the read failed; for members the error class only"`
	Lines        []agentproto.LogLine `json:"lines" doc:"Oldest first; empty until the job succeeded, and for members"`
	State        string               `json:"state" doc:"The container's state (running, restarting, exited…); empty until the job succeeded"`
	StartedAt    *time.Time           `json:"started_at" doc:"When the container last started"`
	RestartCount int                  `json:"restart_count"`
	ContainerID  string               `json:"container_id,omitempty"`
	// Unit and Slots are a service application's.
	Unit  string                   `json:"unit,omitempty" doc:"Service applications: the live slot's systemd unit, whose journal the lines are from"`
	Slots []agentproto.ServiceSlot `json:"slots,omitempty" doc:"Service applications: every release slot on the server with its systemd state and whether the proxy sends requests to it"`
	// Redacted is true when the reader may not see the result.
	Redacted bool `json:"redacted" doc:"True when lines and container state were withheld: they are readable by administrators only"`
}

// QueueLogs queues a read of the application's live container log: lines
// 1 to 1000 (nil means 200; an explicit value outside the bounds, 0
// included, is refused); since, when set, an RFC 3339 time.
func (s *Service) QueueLogs(ctx context.Context, actorID, appID string, lines *int, since string) (jobs.Job, error) {
	return s.QueueServiceLogs(ctx, actorID, appID, "", lines, since)
}

// QueueServiceLogs is QueueLogs of one service of a compose application
// ("" is its web service, and the container of other applications).
func (s *Service) QueueServiceLogs(ctx context.Context, actorID, appID, service string, lines *int, since string) (jobs.Job, error) {
	var errs fault.Fields
	n := DefaultLogLines
	if lines != nil {
		n = *lines
		if n < 1 || n > MaxLogLines {
			errs.Add("lines", "must be an integer between 1 and %d", MaxLogLines)
		}
	}
	p := agentproto.AppLogsPayload{AppID: appID, Lines: n, Service: service}
	if since != "" {
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			errs.Add("since", "must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
		} else {
			t = t.UTC()
			p.Since = &t
		}
	}
	if err := errs.Err(); err != nil {
		return jobs.Job{}, err
	}
	a, err := s.store.App(ctx, appID)
	if err != nil {
		return jobs.Job{}, err
	}
	if err := s.serviceOf(ctx, a, service); err != nil {
		return jobs.Job{}, err
	}
	if _, err := s.enrolledServer(ctx, a.ServerID); err != nil {
		return jobs.Job{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: a.ServerID, AppID: a.ID, Work: jobs.Of(agentproto.AppLogs, p), CreatedBy: actorID})
	return j, err
}

// Logs returns the result of an app.logs job of the application as r may
// read it (members get its status and error class, not its lines); 404 if
// the job is not one.
func (s *Service) Logs(ctx context.Context, appID, jobID string, r jobs.Reader) (AppLogs, error) {
	whole, _, err := s.jobs.Get(ctx, jobID)
	if err != nil {
		return AppLogs{}, err
	}
	var p agentproto.AppLogsPayload
	if whole.Type != agentproto.JobAppLogs || json.Unmarshal(whole.Payload, &p) != nil || p.AppID != appID {
		return AppLogs{}, fault.NotFoundf("No log read of this application with this job id.")
	}
	j := whole.For(r)
	out := AppLogs{JobID: j.ID, Status: j.Status, Error: j.Error, Lines: []agentproto.LogLine{}, Redacted: j.Redacted}
	if j.Status == jobs.Succeeded && len(j.Data) > 0 {
		var r agentproto.AppLogsResult
		if err := json.Unmarshal(j.Data, &r); err != nil {
			return AppLogs{}, err
		}
		if r.Lines != nil {
			out.Lines = r.Lines
		}
		out.State, out.RestartCount, out.ContainerID = r.State, r.RestartCount, r.ContainerID
		out.Unit, out.Slots = r.Unit, r.Slots
		if !r.StartedAt.IsZero() {
			t := r.StartedAt
			out.StartedAt = &t
		}
	}
	return out, nil
}
