package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/servers"
)

type enrollmentInput struct {
	Body struct {
		Name string   `json:"name" doc:"1 to 63 letters, digits, '.', '-' or '_'; unique"`
		Tags []string `json:"tags,omitempty" doc:"At most 20 tags of 1 to 40 characters"`
	}
}

type serverIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type serverListOutput struct {
	Body struct {
		Servers []ServerSummary `json:"servers"`
	}
}

type actionInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Type           string          `json:"type" doc:"service.start|stop|restart|logs, container.start|stop|restart|logs|inspect, docker.prune, or agent.ping"`
		Payload        json.RawMessage `json:"payload,omitempty" doc:"Depends on type: {unit}, {unit, lines?}, {container}, {container, lines?}, {dry_run?, image_ids?, network_ids?}, {message?}. lines (service.logs, container.logs): 1 to 500; default 200 when absent or null, 0 is refused. docker.prune: dry_run true lists what would be removed; without it, image_ids and network_ids (full ids, at most 1000 each, as a dry run listed them) are removed if nothing uses or keeps them by then. message (agent.ping): at most 256 characters"`
		IdempotencyKey string          `json:"idempotency_key,omitempty" maxLength:"255" doc:"Repeating a key with the same request returns the first job (200); with a different request it is refused (422). Kept at least 24 h, per server."`
	}
}

// acceptedOutput is the reply of every endpoint that queues a job.
type acceptedOutput struct {
	Status   int    `json:"-"`
	Location string `header:"Location" doc:"The job's URL"`
	Body     acceptedBody
}

type acceptedBody struct {
	JobID  string      `json:"job_id"`
	Status jobs.Status `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
	Job    jobs.Job    `json:"job"`
}

func accepted(j jobs.Job, created bool) *acceptedOutput {
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
	}
	return &acceptedOutput{Status: status, Location: "/api/v1/jobs/" + j.ID, Body: acceptedBody{JobID: j.ID, Status: j.Status, Job: j}}
}

// caller is who makes the request: the signed-in user or token, the
// client's address and user agent, and the session.
func caller(ctx context.Context) audit.Caller {
	p, c := principal(ctx), clientOf(ctx)
	c.Actor, c.SessionID = auth.TokenActor(p), p.SessionID
	return c
}

func (s *Server) registerServers() {
	tags := []string{"Servers"}
	op(s, huma.Operation{
		OperationID: "create-enrollment", Method: http.MethodPost, Path: "/api/v1/servers/enrollments", Tags: tags,
		Summary:       "Enroll a new server",
		Description:   "Creates a pending server and a one-time enrollment token (valid 1 hour by default) with the shell command that installs the agent.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict},
	}, Admin, func(ctx context.Context, in *enrollmentInput) (*bodyOutput[servers.Enrollment], error) {
		return reply(s.deps.Servers.CreateEnrollment(ctx, caller(ctx), in.Body.Name, in.Body.Tags))
	})
	op(s, huma.Operation{
		OperationID: "reissue-enrollment", Method: http.MethodPost, Path: "/api/v1/servers/{id}/enrollments", Tags: tags,
		Summary:       "New enrollment token for a server that has not enrolled",
		Description:   "Invalidates the previous token. 409 for a server that already enrolled.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *serverIDInput) (*bodyOutput[servers.Enrollment], error) {
		return reply(s.deps.Servers.ReissueEnrollment(ctx, caller(ctx), in.ID))
	})
	op(s, huma.Operation{
		OperationID: "list-servers", Method: http.MethodGet, Path: "/api/v1/servers", Tags: tags,
		Summary: "Servers with status, facts and latest metrics",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*serverListOutput, error) {
		list, err := s.deps.Servers.List(ctx)
		if err == nil {
			list, err = narrowList(ctx, s, list, func(v servers.Server) target { return target{server: v.ID} })
		}
		if err != nil {
			return nil, err
		}
		out := &serverListOutput{}
		out.Body.Servers, err = s.serverSummaries(ctx, list)
		return out, err
	})
	op(s, huma.Operation{
		OperationID: "get-server", Method: http.MethodGet, Path: "/api/v1/servers/{id}", Tags: tags,
		Summary: "Server detail with latest metrics and inventory", Errors: []int{http.StatusNotFound},
	}, SignedIn, func(ctx context.Context, in *serverIDInput) (*bodyOutput[ServerDetail], error) {
		srv, err := s.deps.Servers.Get(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		return reply(s.serverDetail(ctx, srv))
	})
	op(s, huma.Operation{
		OperationID: "revoke-server", Method: http.MethodPost, Path: "/api/v1/servers/{id}/revoke", Tags: tags,
		Summary:     "Revoke the server's agent credential",
		Description: "The agent token stops working at once and the agent exits with status 78. Queued jobs are cancelled and running jobs failed.",
		Errors:      []int{http.StatusNotFound},
	}, Admin, func(ctx context.Context, in *serverIDInput) (*bodyOutput[servers.Server], error) {
		return reply(s.deps.Servers.Revoke(ctx, caller(ctx), in.ID))
	})
	op(s, huma.Operation{
		OperationID: "delete-server", Method: http.MethodDelete, Path: "/api/v1/servers/{id}", Tags: tags,
		Summary: "Revoke and delete a server", Description: "Its jobs stay readable. 409 (server-has-databases) while database " +
			"instances are registered on it: delete them first; the server is then left as it was.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *serverIDInput) (*struct{}, error) {
		return &struct{}{}, s.deps.Servers.Delete(ctx, caller(ctx), in.ID)
	})
	op(s, huma.Operation{
		OperationID: "queue-server-action", Method: http.MethodPost, Path: "/api/v1/servers/{id}/actions", Tags: tags,
		Summary:       "Queue an action on a server",
		Description:   "Returns 202 with the queued job (Location: the job). With an idempotency key seen before: 200 and the first job.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *actionInput) (*acceptedOutput, error) {
		j, created, err := s.deps.Servers.QueueAction(ctx, caller(ctx), in.ID, in.Body.Type, in.Body.Payload, in.Body.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		return accepted(j, created), nil
	})
}
