package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/jobs"
)

type jobListInput struct {
	ServerID string `query:"server_id" maxLength:"64" doc:"Only this server's jobs (srv_…)"`
	AppID    string `query:"app_id" maxLength:"64" doc:"Only the jobs of this application (app_…): its deploys, removal, logs and domain checks"`
	Type     string `query:"type" maxLength:"64" doc:"Only jobs of this type, e.g. app.deploy, logs.read, backup.run"`
	Status   string `query:"status" maxLength:"16" doc:"Only jobs in this state: queued, running, succeeded, failed or cancelled"`
	Actor    string `query:"actor" maxLength:"254" doc:"Only jobs queued by this actor: a user id (usr_…), a user's e-mail address, or system (queued by the control plane on its own)"`
	Limit    int    `query:"limit" minimum:"1" maximum:"100" default:"30" doc:"How many jobs: 1 to 100; default 30 when absent"`
}

type jobListOutput struct {
	Body struct {
		Jobs []jobs.Job `json:"jobs" doc:"Newest first"`
	}
}

type jobIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type jobGetInput struct {
	ID   string `path:"id" maxLength:"64"`
	Wait int    `query:"wait" minimum:"0" maximum:"30" doc:"Seconds to wait for the job to end, 0 to 30: the call answers as soon as the job is finished, or after this long with its state then. 0 (the default) answers at once"`
}

type jobDetail struct {
	jobs.Job
	Events []jobs.Event `json:"events"`
}

func (s *Server) registerJobs() {
	tags := []string{"Jobs"}
	op(s, huma.Operation{
		OperationID: "list-jobs", Method: http.MethodGet, Path: "/api/v1/jobs", Tags: tags,
		Summary: "Recent jobs, newest first",
		Description: "Filters combine: server_id, app_id, type, status and actor each keep only the jobs that match; a value " +
			"that cannot match anything (an unknown type or state, an id of the wrong kind) is a 422 problem naming the field. " +
			"Each job carries the names of what its ids point at, so that a list needs no further requests: server_name, " +
			"app_name (for an application's jobs) and actor (who queued it: a user with their e-mail, or system). " +
			"Administrators get each job whole. Members get metadata only: id, type, server, status, times and the " +
			"error class (error_class; error holds the class too), with payload, data and output null and redacted true.",
		Errors: []int{http.StatusUnprocessableEntity},
	}, SignedIn, func(ctx context.Context, in *jobListInput) (*jobListOutput, error) {
		list, err := s.deps.Jobs.List(ctx, jobs.ListFilter{ServerID: in.ServerID, AppID: in.AppID, Type: in.Type,
			Status: jobs.Status(in.Status), Actor: in.Actor}, in.Limit, reader(ctx))
		if err == nil {
			list, err = narrowList(ctx, s, list, func(j jobs.Job) target { return target{app: j.AppID, server: j.ServerID} })
		}
		if err != nil {
			return nil, err
		}
		out := &jobListOutput{}
		out.Body.Jobs = list
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "get-job", Method: http.MethodGet, Path: "/api/v1/jobs/{id}", Tags: tags,
		Summary: "A job with its events and output", Errors: []int{http.StatusNotFound},
		Description: "Events, data, output and the error text are a job's output (log lines, command output) and are shown to " +
			"administrators only. Members get the job's metadata and error class, an empty events list, and redacted true. " +
			"With wait, the call answers as soon as the job is finished (succeeded, failed or cancelled), or after wait seconds " +
			"with its state then. Like the list, the job carries server_name, app_name and actor.",
	}, SignedIn, func(ctx context.Context, in *jobGetInput) (*bodyOutput[jobDetail], error) {
		j, ev, err := s.deps.Jobs.Wait(ctx, in.ID, time.Duration(in.Wait)*time.Second, reader(ctx))
		if err != nil {
			return nil, err
		}
		if j, err = s.deps.Jobs.Named(ctx, j); err != nil {
			return nil, err
		}
		return &bodyOutput[jobDetail]{Body: jobDetail{Job: j, Events: ev}}, nil
	})
	op(s, huma.Operation{
		OperationID: "cancel-job", Method: http.MethodPost, Path: "/api/v1/jobs/{id}/cancel", Tags: tags,
		Summary: "Cancel a queued job", Description: "409 when the job is not queued.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *jobIDInput) (*bodyOutput[jobDetail], error) {
		j, err := s.deps.Jobs.Cancel(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		j, ev, err := s.deps.Jobs.Read(ctx, j.ID, reader(ctx))
		if err != nil {
			return nil, err
		}
		return &bodyOutput[jobDetail]{Body: jobDetail{Job: j, Events: ev}}, nil
	})
}
