package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/logs"
)

type logSourcesInput struct {
	ServerID string `query:"server_id" required:"true" maxLength:"64"`
}

type logReadInput struct {
	Body struct {
		ServerID  string `json:"server_id" maxLength:"64"`
		Source    string `json:"source" doc:"journal or container"`
		Unit      string `json:"unit,omitempty" doc:"systemd unit ending in .service (source journal)"`
		Container string `json:"container,omitempty" doc:"Docker container name or id (source container)"`
		Lines     *int   `json:"lines,omitempty" minimum:"1" maximum:"1000" doc:"How many lines: 1 to 1000; default 200 when absent or null (0 is refused)"`
		Priority  *int   `json:"priority,omitempty" minimum:"0" maximum:"7" doc:"journal only: 0 to 7 (0 emergency, 7 debug); lines of this priority or more urgent. Every priority when absent or null"`
		Cursor    string `json:"cursor,omitempty" maxLength:"512" doc:"The cursor of a previous read (at most 512 characters): continue after its last line"`
	}
}

type logResultInput struct {
	JobID string `path:"job_id" maxLength:"64"`
	Wait  int    `query:"wait" minimum:"0" maximum:"30" doc:"Seconds to wait for the read to end, 0 to 30: the call answers as soon as the read is finished, or after this long with its state then. 0 (the default) answers at once"`
}

func (s *Server) registerLogs() {
	tags := []string{"Logs"}
	op(s, huma.Operation{
		OperationID: "list-log-sources", Method: http.MethodGet, Path: "/api/v1/logs/sources", Tags: tags,
		Summary: "Units and containers readable on a server (from its latest inventory)", Errors: []int{http.StatusNotFound},
	}, SignedIn, func(ctx context.Context, in *logSourcesInput) (*bodyOutput[logs.Sources], error) {
		return reply(s.deps.Logs.Sources(ctx, in.ServerID))
	})
	op(s, huma.Operation{
		OperationID: "read-logs", Method: http.MethodPost, Path: "/api/v1/logs", Tags: tags,
		Summary:       "Read a journal unit or a container log",
		Description:   "Queues a logs.read job (202). Get the lines and a cursor from GET /api/v1/logs/{job_id} (with wait, in one request once the read is done); pass the cursor to the next read to continue with no duplicates and no gaps.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusConflict},
	}, Admin, func(ctx context.Context, in *logReadInput) (*acceptedOutput, error) {
		b := in.Body
		j, err := s.deps.Logs.Queue(ctx, logs.Read{ServerID: b.ServerID, Source: b.Source, Unit: b.Unit, Container: b.Container,
			Lines: b.Lines, Priority: b.Priority, Cursor: b.Cursor, Actor: principal(ctx).User.ID})
		if err != nil {
			return nil, err
		}
		out := accepted(j, true)
		out.Location = "/api/v1/logs/" + j.ID
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "get-log-read", Method: http.MethodGet, Path: "/api/v1/logs/{job_id}", Tags: tags,
		Summary: "Lines and cursor of a log read", Errors: []int{http.StatusNotFound},
		Description: "Log lines can carry secrets: administrators get the lines and cursor; members get the read's status and " +
			"error class only, with no lines and redacted true. With wait (seconds, at most 30), the call answers as soon as " +
			"the read is finished (succeeded, failed or cancelled), or after wait seconds with its state then (queued or " +
			"running, no lines yet): one request gets the lines of a read that ends in time, without polling.",
	}, SignedIn, func(ctx context.Context, in *logResultInput) (*bodyOutput[logs.Result], error) {
		return reply(s.deps.Logs.Get(ctx, in.JobID, time.Duration(in.Wait)*time.Second, reader(ctx)))
	})
}
