package apps

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Deployment is a deployment as the API shows it.
type Deployment struct {
	ID            string                   `json:"id"`
	ApplicationID string                   `json:"application_id"`
	ServerID      string                   `json:"server_id"`
	Status        string                   `json:"status" enum:"queued,running,succeeded,failed,cancelled,superseded" doc:"queued until the agent takes its job (it waits for the application's previous deployment first), then running; superseded when a newer deployment was queued behind it"`
	Spec          Spec                     `json:"spec" doc:"What it deploys, frozen when it was created"`
	Ref           string                   `json:"ref,omitempty" doc:"The ref given for this deployment: an image reference overriding the application's, or for a git source the branch, tag or commit deployed"`
	RollbackOf    *string                  `json:"rollback_of" doc:"The deployment this one rolls back to"`
	JobID         *string                  `json:"job_id" doc:"Its app.deploy job; null while it waits for the application's previous deployment"`
	ImageID       string                   `json:"image_id" doc:"The local image id the agent ran (from its result); empty until it succeeded"`
	Result        *agentproto.DeployResult `json:"result" doc:"The agent's result; null until it succeeded, and for members"`
	Error         *string                  `json:"error" doc:"Why it failed or was cancelled; for members the error class only (failed, cancelled, superseded, agent_lost, timed_out, server_revoked)"`
	CreatedBy     string                   `json:"created_by,omitempty"`
	CreatedAt     time.Time                `json:"created_at"`
	StartedAt     *time.Time               `json:"started_at" doc:"When the agent took its job"`
	FinishedAt    *time.Time               `json:"finished_at"`
}

// DeploymentDetail is a deployment with its job's events and output.
type DeploymentDetail struct {
	Deployment
	Job    *jobs.Job    `json:"job" doc:"Its app.deploy job (with output for administrators); null while it waits"`
	Events []jobs.Event `json:"events" doc:"The job's progress events (they carry the container's log tail of a failed release); administrators only, empty for members"`
}

// status is what the API shows: a deployment holding the slot is queued
// until the agent takes its job.
func (d DeploymentRecord) status() string {
	if d.Status != Running {
		return d.Status
	}
	switch jobs.Status(d.JobStatus) {
	case jobs.Running:
		return Running
	case jobs.Succeeded:
		return Succeeded
	case jobs.Failed:
		return Failed
	case jobs.Cancelled:
		return Cancelled
	default:
		return Queued
	}
}

// view is the deployment as r may read it: a member gets neither the
// agent's result nor its error text, only the error's class. Unless
// reveal (for administrators only), the compose document is masked and
// a service's commands are hidden.
func (d DeploymentRecord) view(r jobs.Reader, reveal bool) Deployment {
	v := Deployment{ID: d.ID, ApplicationID: d.AppID, ServerID: d.ServerID, Status: d.status(), Spec: d.Spec, Ref: d.Ref,
		RollbackOf: strp(d.RollbackOf), JobID: strp(d.JobID), ImageID: d.ImageID, Error: strp(d.Error),
		CreatedBy: d.CreatedBy, CreatedAt: d.CreatedAt, StartedAt: d.JobStartedAt, FinishedAt: d.FinishedAt}
	if v.Spec.EnvKeys == nil {
		v.Spec.EnvKeys = []string{}
	}
	if !reveal || r != jobs.AdminReader {
		v.Spec = v.Spec.masked()
	}
	if r != jobs.AdminReader {
		if v.Error != nil {
			c := jobs.ErrorClass(*v.Error)
			if d.Status == Superseded {
				c = Superseded
			}
			v.Error = &c
		}
		return v
	}
	if d.Status == Succeeded && len(d.Result) > 0 {
		var res agentproto.DeployResult
		if json.Unmarshal(d.Result, &res) == nil {
			v.Result = &res
		}
	}
	return v
}

// masked is the spec as shown without its secrets: the compose document
// masked, a service's commands hidden. The stored spec is not changed.
func (sp Spec) masked() Spec {
	if sp.Compose != nil && sp.Compose.Document != "" {
		c := *sp.Compose
		c.Document, c.Masked = MaskCompose(c.Document), true
		sp.Compose = &c
	}
	if sp.Service != nil {
		sv := *sp.Service
		sv.ServiceSettings = sv.hidden()
		sp.Service = &sv
	}
	return sp
}

// GetDeployment returns a deployment with its job, events and output, as
// r may read them.
func (s *Service) GetDeployment(ctx context.Context, id string, r jobs.Reader) (DeploymentDetail, error) {
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return DeploymentDetail{}, err
	}
	if d.Status == Running || d.Status == Queued {
		if err := s.reconcile(ctx, d.AppID); err != nil {
			s.log.WarnContext(ctx, "settling deployments", "app_id", d.AppID, "err", err.Error())
		}
	}
	return s.deploymentDetail(ctx, id, r)
}

func (s *Service) deploymentDetail(ctx context.Context, id string, r jobs.Reader) (DeploymentDetail, error) {
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return DeploymentDetail{}, err
	}
	out := DeploymentDetail{Deployment: d.view(r, true), Events: []jobs.Event{}}
	if d.JobID != "" {
		j, ev, err := s.jobs.Read(ctx, d.JobID, r)
		if err != nil && !fault.Is(err, fault.NotFound) {
			return DeploymentDetail{}, err
		}
		if err == nil {
			out.Job = &j
			if ev != nil {
				out.Events = ev
			}
		}
	}
	return out, nil
}

// ListDeployments returns deployments newest first, as r may read them: of
// one application, or of all when appID is "". limit is 1 to 100; 0 means 30.
func (s *Service) ListDeployments(ctx context.Context, appID string, limit int, r jobs.Reader) ([]Deployment, error) {
	if limit == 0 {
		limit = DefaultDeploymentLimit
	}
	if limit < 1 || limit > MaxDeploymentLimit {
		return nil, fault.Invalidf("limit", "must be between 1 and %d", MaxDeploymentLimit)
	}
	if appID != "" {
		if _, err := s.store.App(ctx, appID); err != nil {
			return nil, err
		}
	}
	list, err := s.store.ListDeployments(ctx, appID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Deployment, len(list))
	for i, d := range list {
		out[i] = d.view(r, false)
	}
	return out, nil
}

// CancelDeployment cancels a queued deployment: one that waits for the
// application's previous deployment, or whose job the agent has not taken
// yet (the job is cancelled with it). 409 otherwise.
func (s *Service) CancelDeployment(ctx context.Context, c audit.Caller, id string) (DeploymentDetail, error) {
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return DeploymentDetail{}, err
	}
	notQueued := func(status string) error {
		return fault.Conflictf("deployment-not-queued", "Only a queued deployment can be cancelled; this one is %s.", status)
	}
	switch {
	case d.Status == Queued:
		done, err := s.store.CancelQueuedDeployments(ctx, d.AppID, d.ID, s.now().UTC())
		if err != nil {
			return DeploymentDetail{}, err
		}
		if len(done) == 0 {
			cur, err := s.store.Deployment(ctx, id)
			if err != nil {
				return DeploymentDetail{}, err
			}
			return DeploymentDetail{}, notQueued(cur.status())
		}
	case d.Status == Running && d.JobID != "" && jobs.Status(d.JobStatus) == jobs.Queued:
		// The job's completion hook cancels the deployment and starts
		// the next one.
		if _, err := s.jobs.Cancel(ctx, d.JobID); err != nil {
			if fault.Is(err, fault.Conflict) {
				return DeploymentDetail{}, notQueued(Running)
			}
			return DeploymentDetail{}, err
		}
	default:
		return DeploymentDetail{}, notQueued(d.status())
	}
	if err := s.audit.Record(ctx, c, ActionDeploymentCancelled, audit.Target{Type: "application", ID: d.AppID}, map[string]any{"deployment_id": d.ID}); err != nil {
		return DeploymentDetail{}, err
	}
	return s.deploymentDetail(ctx, id, jobs.AdminReader)
}
