package apps

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// dispatchGrace is how long a deployment may hold its application's slot
// without a job before a reconcile enqueues the job again (the process
// that dispatched it stopped between the two steps).
const dispatchGrace = 30 * time.Second

// idempotencyKey makes the deploy job of a deployment unique on its server.
func idempotencyKey(deploymentID string) string { return "deployment:" + deploymentID }

// reconcile settles an application's deployments: it applies the outcome
// of jobs that ended without their completion hook (a server revoked
// while its job ran, a control plane that stopped between the two),
// re-enqueues the job of a dispatch that was interrupted, settles an
// interrupted removal, and dispatches the next deployment when the slot is
// free.
func (s *Service) reconcile(ctx context.Context, appID string) error {
	a, err := s.store.App(ctx, appID)
	if err != nil {
		return err
	}
	if a.State == StateRemoving && a.RemoveJobID != "" {
		if j, _, err := s.jobs.Get(ctx, a.RemoveJobID); err == nil && j.Status.Finished() {
			if err := s.removeFinished(ctx, j); err != nil {
				return err
			}
			if j.Status == jobs.Succeeded {
				return nil
			}
		}
	}
	running, err := s.store.RunningDeployments(ctx, appID)
	if err != nil {
		return err
	}
	now := s.now()
	for _, d := range running {
		switch {
		case d.JobID != "" && jobs.Status(d.JobStatus).Finished():
			j, _, err := s.jobs.Get(ctx, d.JobID)
			if err != nil {
				return err
			}
			if err := s.deployFinished(ctx, j); err != nil {
				return err
			}
		case d.JobID == "" && d.DispatchedAt != nil && now.Sub(*d.DispatchedAt) > dispatchGrace:
			if err := s.startJob(ctx, d); err != nil {
				return err
			}
		}
	}
	return s.dispatch(ctx, appID)
}

// dispatch gives the application's free slot to its newest queued
// deployment (superseding older queued ones) and enqueues its job. A
// deployment that cannot start (its server was revoked) fails, and the
// next one is tried.
func (s *Service) dispatch(ctx context.Context, appID string) error {
	for range 100 {
		d, superseded, ok, err := s.store.ClaimDeployment(ctx, appID, s.now().UTC())
		if err != nil || !ok {
			return err
		}
		if len(superseded) > 0 {
			s.log.InfoContext(ctx, "deployments superseded", "app_id", appID, "by", d.ID, "superseded", superseded)
		}
		err = s.startJob(ctx, d)
		var cannot *cannotStart
		if !errors.As(err, &cannot) {
			return err
		}
		if _, err := s.store.FinishDeployment(ctx, d.ID, Finish{Status: Failed, Error: cannot.reason, At: s.now().UTC()}); err != nil {
			return err
		}
	}
	return nil
}

type cannotStart struct{ reason string }

func (c *cannotStart) Error() string { return c.reason }

// startJob enqueues the app.deploy job of a deployment that holds its
// application's slot and records it. The job's idempotency key is the
// deployment's, so a repeated start finds the job made before.
func (s *Service) startJob(ctx context.Context, d DeploymentRecord) error {
	srv, err := s.servers.Get(ctx, d.ServerID)
	if fault.Is(err, fault.NotFound) {
		return &cannotStart{reason: "the server no longer exists"}
	}
	if err != nil {
		return err
	}
	if !srv.HasAgent() {
		return &cannotStart{reason: "the server is " + srv.Status}
	}
	payload, secrets, err := s.deployPayload(ctx, d)
	if err != nil {
		return err
	}
	key := idempotencyKey(d.ID)
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: d.ServerID, AppID: d.AppID, Work: jobs.Of(agentproto.AppDeploy, payload),
		Secrets: secrets, IdempotencyKey: key, CreatedBy: d.CreatedBy})
	if fe := fault.As(err); fe != nil && fe.Code == "idempotency-key-reused" {
		// An interrupted dispatch made the job already, with the proxy
		// state of its time.
		j, err = s.store.JobByIdempotencyKey(ctx, d.ServerID, key)
	}
	if err != nil {
		return err
	}
	return s.store.SetDeploymentJob(ctx, d.ID, j.ID, s.now().UTC())
}

// deployPayload builds the job of a deployment: its frozen spec, the
// images to keep for rollbacks, the server's whole proxy state, and its
// environment as secrets.
func (s *Service) deployPayload(ctx context.Context, d DeploymentRecord) (agentproto.DeployPayload, map[string]string, error) {
	keep, err := s.store.SucceededImageIDs(ctx, d.AppID, KeepImages)
	if err != nil {
		return agentproto.DeployPayload{}, nil, err
	}
	if d.Spec.ImageID != "" && !contains(keep, d.Spec.ImageID) {
		keep = append(keep, d.Spec.ImageID)
	}
	if keep == nil {
		keep = []string{}
	}
	stale, err := s.store.PrunableImageIDs(ctx, d.AppID, KeepImages, PruneWindow)
	if err != nil {
		return agentproto.DeployPayload{}, nil, err
	}
	var prune []string
	for _, id := range stale {
		if !contains(keep, id) {
			prune = append(prune, id)
		}
	}
	if d.Spec.Compose != nil {
		// A compose release runs an image per service.
		if keep, prune, err = s.composeImages(ctx, d); err != nil {
			return agentproto.DeployPayload{}, nil, err
		}
	}
	proxy, err := s.ProxyConfig(ctx, d.ServerID)
	if err != nil {
		return agentproto.DeployPayload{}, nil, err
	}
	env, err := s.deploymentEnv(ctx, d.ID)
	if err != nil {
		return agentproto.DeployPayload{}, nil, err
	}
	secrets := make(map[string]string, len(env))
	keys := make([]string, 0, len(env))
	for _, e := range env {
		secrets[e.Key] = e.Value
		keys = append(keys, e.Key)
	}
	var build *agentproto.BuildSpec
	if d.Spec.Git != nil && d.Spec.ImageID == "" && (d.Spec.Service == nil || d.Spec.Service.Release == "") &&
		(d.Spec.Compose == nil || len(d.Spec.Compose.ImageIDs) == 0) {
		if build, err = s.buildPayload(ctx, d, secrets); err != nil {
			return agentproto.DeployPayload{}, nil, err
		}
	}
	p := agentproto.DeployPayload{
		AppID: d.AppID, AppName: d.Spec.AppName, DeploymentID: d.ID, Image: d.Spec.Image, ImageID: d.Spec.ImageID,
		ContainerPort: d.Spec.ContainerPort, HealthPath: d.Spec.HealthPath, EnvKeys: keys,
		MemoryLimitBytes: d.Spec.MemoryLimitBytes, HealthTimeoutSeconds: HealthTimeoutSeconds,
		KeepImageIDs: keep, PruneImageIDs: prune, Proxy: proxy, Build: build, Compose: composePayload(d.Spec.Compose),
	}
	if d.Spec.Service != nil {
		if err := s.servicePayload(ctx, d, &p); err != nil {
			return agentproto.DeployPayload{}, nil, err
		}
	}
	return p, secrets, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// deployFinished is the completion hook of app.deploy (and of its
// cancellation): it ends the deployment with the job's outcome, makes a
// succeeded one the application's current deployment, and dispatches the
// next. A failed deployment leaves the previous container serving (the
// agent guarantees it).
func (s *Service) deployFinished(ctx context.Context, j jobs.Job) error {
	// The hook runs on the agent's request; finish even if it hangs up.
	ctx = context.WithoutCancel(ctx)
	var p agentproto.DeployPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.DeploymentID == "" {
		return err
	}
	d, err := s.store.Deployment(ctx, p.DeploymentID)
	if fault.Is(err, fault.NotFound) {
		return nil // the application was deleted
	}
	if err != nil {
		return err
	}
	if d.JobID != "" && d.JobID != j.ID {
		return nil // not this deployment's job
	}
	f := Finish{At: s.now().UTC()}
	if j.FinishedAt != nil {
		f.At = *j.FinishedAt
	}
	switch j.Status {
	case jobs.Succeeded:
		var res agentproto.DeployResult
		if len(j.Data) > 0 {
			if err := json.Unmarshal(j.Data, &res); err != nil {
				s.log.WarnContext(ctx, "app.deploy result is not a DeployResult", "job_id", j.ID, "err", err.Error())
			}
		}
		f.Status, f.Result, f.ImageID = Succeeded, j.Data, res.ImageID
		if res.Services != nil {
			f.Release = &Release{Services: res.Services, Document: res.ComposeDocument}
		}
	case jobs.Cancelled:
		f.Status, f.Error = Cancelled, "cancelled"
		if j.Error != nil && *j.Error != "cancelled" {
			f.Error = "cancelled: " + *j.Error
		}
	default:
		f.Status, f.Error = Failed, "failed"
		if j.Error != nil {
			f.Error = *j.Error
		}
	}
	if d.JobID == "" {
		if err := s.store.SetDeploymentJob(ctx, d.ID, j.ID, f.At); err != nil {
			return err
		}
	}
	if _, err := s.store.FinishDeployment(ctx, d.ID, f); err != nil {
		return err
	}
	return s.dispatch(ctx, d.AppID)
}

// deployLateResult is the reconcile step of app.deploy: the agent reported
// that a deployment succeeded after its job had been failed with
// agent_lost (the control plane restarted, or the server was cut off,
// while the agent deployed). What runs on the server is the new release,
// so the deployment is recorded as succeeded and becomes current, unless a
// later deployment is current already. A late failure changes nothing:
// the deployment is failed already.
func (s *Service) deployLateResult(ctx context.Context, j jobs.Job) error {
	if j.LateResult == nil || j.LateResult.Status != jobs.Succeeded {
		return nil
	}
	var p agentproto.DeployPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.DeploymentID == "" {
		return err
	}
	d, err := s.store.Deployment(ctx, p.DeploymentID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if d.JobID != j.ID {
		return nil
	}
	f := Finish{Status: Succeeded, Result: j.LateResult.Data, At: j.LateResult.At}
	var res agentproto.DeployResult
	if len(j.LateResult.Data) > 0 && json.Unmarshal(j.LateResult.Data, &res) == nil {
		f.ImageID = res.ImageID
		if res.Services != nil {
			f.Release = &Release{Services: res.Services}
		}
	}
	ok, err := s.store.ReconcileDeployment(ctx, d.ID, f)
	if err != nil || !ok {
		return err
	}
	s.log.InfoContext(ctx, "deployment reconciled from a late result: it succeeded", "deployment_id", d.ID, "job_id", j.ID)
	return nil
}
