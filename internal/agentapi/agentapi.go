// Package agentapi serves the agent protocol under /agent/v1 and the
// installer (/agent/install.sh) and agent package (/agent/package.tar.gz)
// that put an agent on a server. Wire types come from agentproto.
package agentapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/httpapi"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Deps are what the agent protocol needs.
type Deps struct {
	Servers *servers.Service
	Jobs    *jobs.Service
	// The capabilities agents report to; a nil one's endpoints answer
	// that it is not configured.
	Metrics    *metrics.Service
	Domains    *domains.Service
	Monitoring *monitoring.Service
	Databases  *databases.Service
	Backups    *backups.Service
	// PublicURL is filled into install.sh.
	PublicURL string
	// AgentDir holds the agent binaries served by /agent/package.tar.gz.
	AgentDir string
	// Version is the control plane's version.
	Version string
	// AllowInsecureAgents serves the installer even when PublicURL is
	// plain http:// to an address other than loopback.
	AllowInsecureAgents bool
}

type enrollInput struct {
	Body agentproto.EnrollRequest
}

type enrollOutput struct {
	Body agentproto.EnrollResponse
}

type heartbeatInput struct {
	Body agentproto.HeartbeatRequest
}

type heartbeatOutput struct {
	Body agentproto.HeartbeatResponse
}

type claimInput struct {
	Body agentproto.ClaimRequest
}

// huma names schemas by Go type name, and jobs.Job and jobs.Event (the API's
// job resources) already take "Job" and "Event": registering
// agentproto.ClaimResponse or agentproto.EventsRequest as is panics at
// startup with a duplicate schema name. These types have the same wire
// form under names of their own.
type (
	// AgentJob is agentproto.Job.
	AgentJob agentproto.Job
	// AgentClaimResponse is agentproto.ClaimResponse.
	AgentClaimResponse struct {
		Job AgentJob `json:"job"`
	}
	// AgentEvent is agentproto.Event.
	AgentEvent agentproto.Event
	// AgentEventsRequest is agentproto.EventsRequest.
	AgentEventsRequest struct {
		Events []AgentEvent `json:"events"`
	}
)

type claimOutput struct {
	Status int `json:"-"`
	Body   *AgentClaimResponse
}

type jobIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type secretsOutput struct {
	Body agentproto.SecretsResponse
}

type eventsInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body AgentEventsRequest
}

type completeInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body agentproto.CompleteRequest
}

type completeOutput struct {
	Body struct {
		Status jobs.Status `json:"status"`
	}
}

// Mount returns a function that registers the agent protocol on s.
func Mount(d Deps) func(*httpapi.Server) {
	return func(s *httpapi.Server) { register(s, d) }
}

func register(s *httpapi.Server, d Deps) {
	tags := []string{"Agent protocol"}
	claims := newClaimSlots()
	parked := newParker(d.Jobs, claims)
	limits := newLimiter(DefaultLimits, nil)
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-enroll", Method: http.MethodPost, Path: "/agent/v1/enroll", Tags: tags,
		Summary:          "Redeem an enrollment token for an agent token",
		Description:      "The token is one-time; a used, expired or unknown token gets 401 (…/invalid-enrollment-token).",
		Errors:           []int{http.StatusUnauthorized},
		SkipValidateBody: true, // agents of any version enroll
	}, httpapi.Public, func(ctx context.Context, in *enrollInput) (*enrollOutput, error) {
		res, err := d.Servers.Enroll(ctx, httpapi.Client(ctx), in.Body)
		if err != nil {
			return nil, err
		}
		return &enrollOutput{Body: res}, nil
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-heartbeat", Method: http.MethodPost, Path: "/agent/v1/heartbeat", Tags: tags,
		Summary: "Liveness; extends the leases of the running jobs named; the reply carries the agent's configuration",
	}, httpapi.Agent, func(ctx context.Context, in *heartbeatInput) (*heartbeatOutput, error) {
		res, err := d.Servers.Heartbeat(ctx, httpapi.AgentServer(ctx), in.Body)
		if err != nil {
			return nil, err
		}
		if dbs := d.Databases; dbs != nil {
			// Tells the agent when the instances it samples changed.
			if res.DatabasesRevision, err = dbs.MonitorRevision(ctx, httpapi.AgentServer(ctx).ID); err != nil {
				return nil, err
			}
		}
		return &heartbeatOutput{Body: res}, nil
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-claim", Method: http.MethodPost, Path: "/agent/v1/jobs/claim", Tags: tags,
		Summary: "Claim the next queued job (long poll)",
		Description: "Waits up to wait_seconds (at most 30) for a job; 200 with the job, or 204 when none came. Queuing a job wakes the wait at once. " +
			"A server holds at most 2 claims at once (per control-plane process): a third ends the oldest waiting one at once with 204.",
	}, httpapi.Agent, func(ctx context.Context, in *claimInput) (*claimOutput, error) {
		wait := in.Body.WaitSeconds
		if wait < 0 || wait > agentproto.MaxClaimWaitSeconds {
			return nil, invalidWait()
		}
		srv := httpapi.AgentServer(ctx)
		if wait > 0 && httpapi.CanDetach(ctx) {
			// Wait without this request's goroutine and buffers: look
			// once, and when there is nothing, hand the connection to
			// the parker, which answers it when a job comes or the wait
			// ends.
			c := parked.park(srv.ID, time.Duration(wait)*time.Second)
			j, ok, err := d.Jobs.ClaimNow(ctx, srv.ID)
			if err != nil || ok {
				c.cancel()
				if err != nil {
					return nil, err
				}
				return &claimOutput{Status: http.StatusOK, Body: claimResponse(j)}, nil
			}
			if !httpapi.Detach(ctx, c.attach) {
				c.cancel()
				return &claimOutput{Status: http.StatusNoContent}, nil
			}
			return &claimOutput{Status: http.StatusNoContent}, nil // not written: the parker answers
		}
		cctx, release := claims.hold(ctx, srv.ID)
		defer release()
		j, ok, err := d.Jobs.Claim(cctx, srv.ID, time.Duration(wait)*time.Second)
		if err != nil && cctx.Err() != nil && ctx.Err() == nil {
			// Pushed out by a newer claim while the store was asked:
			// whatever the store did was rolled back.
			err, ok = nil, false
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return &claimOutput{Status: http.StatusNoContent}, nil
		}
		return &claimOutput{Status: http.StatusOK, Body: claimResponse(j)}, nil
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-job-secrets", Method: http.MethodGet, Path: "/agent/v1/jobs/{id}/secrets", Tags: tags,
		Summary: "Secrets of a running job, for the agent that holds it",
		Description: "The agent fetches every job's secrets (an empty set for a job without) before it runs it: the answer confirms " +
			"that the job is still its own, and acknowledges it. A job that is not running (queued again after its lease lapsed, or " +
			"failed) answers 403 job-not-running, and the agent drops it.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound},
	}, httpapi.Agent, func(ctx context.Context, in *jobIDInput) (*secretsOutput, error) {
		sec, err := d.Jobs.Secrets(ctx, httpapi.AgentServer(ctx).ID, in.ID)
		if err != nil {
			return nil, err
		}
		return &secretsOutput{Body: agentproto.SecretsResponse{Secrets: sec}}, nil
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-job-events", Method: http.MethodPost, Path: "/agent/v1/jobs/{id}/events", Tags: tags,
		Summary: "Progress events of a running job; extends its lease", DefaultStatus: http.StatusNoContent,
		Description: "A job finished less than 10 minutes ago still takes its agent's events (the clean-up it left for after its result, " +
			"such as a release removing the old container); later, and before the job started, 409. " +
			"Rate limited per server: 2,000 events at once, then 50 a second; beyond that 429 with Retry-After, and nothing is stored.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusTooManyRequests},
	}, httpapi.Agent, func(ctx context.Context, in *eventsInput) (*struct{}, error) {
		if err := limits.take(httpapi.AgentServer(ctx).ID, ReportEvents, len(in.Body.Events)); err != nil {
			return nil, err
		}
		events := make([]agentproto.Event, len(in.Body.Events))
		for i, e := range in.Body.Events {
			events[i] = agentproto.Event(e)
		}
		return &struct{}{}, d.Jobs.AddEvents(ctx, httpapi.AgentServer(ctx).ID, in.ID, events)
	})

	httpapi.Register(s, huma.Operation{
		OperationID: "agent-job-complete", Method: http.MethodPost, Path: "/agent/v1/jobs/{id}/complete", Tags: tags,
		Summary:      "The result of a job",
		Description:  "Completing a job twice is idempotent; completing another server's job is 403.",
		Errors:       []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict},
		MaxBodyBytes: 4 << 20,
	}, httpapi.Agent, func(ctx context.Context, in *completeInput) (*completeOutput, error) {
		j, err := d.Jobs.Complete(ctx, httpapi.AgentServer(ctx).ID, in.ID, in.Body)
		if err != nil {
			return nil, err
		}
		out := &completeOutput{}
		out.Body.Status = j.Status
		return out, nil
	})

	registerMetrics(s, d, limits)
	registerRequests(s, d, limits)
	registerHealth(s, d, limits)
	registerProxy(s, d, limits)
	registerDatabases(s, d, limits)
	registerArtifacts(s, d)
	registerStorage(s, d)
	registerInstall(s, d)
}
