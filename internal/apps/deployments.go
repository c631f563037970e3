package apps

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// dispatchGrace is how long a deployment may hold its application's slot
// without a job before a reconcile enqueues the job again (the process
// that dispatched it stopped between the two steps).
const dispatchGrace = 30 * time.Second

// idempotencyKey makes the deploy job of a deployment unique on its server.
func idempotencyKey(deploymentID string) string { return "deployment:" + deploymentID }

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

func specOf(a App, ref string) (Spec, error) {
	mem, p := ParseMemory(a.MemoryLimit)
	if p != "" {
		return Spec{}, fault.Conflictf("invalid-settings", "The application's memory limit %s", p)
	}
	image := a.Source.Image
	if ref != "" {
		image = ref
	}
	if a.Source.Type != SourceImage {
		return Spec{}, fault.Conflictf("invalid-settings", "The application's source is %s, not an image.", a.Source.Type)
	}
	return Spec{AppName: a.Name, Image: image, ContainerPort: a.ContainerPort, HealthPath: a.HealthPath,
		EnvKeys: a.EnvKeys, MemoryLimit: a.MemoryLimit, MemoryLimitBytes: mem}, nil
}

// Deploy queues a deployment of the application's current settings; ref,
// when set, overrides the image reference for this deployment only. The
// deployment's job is enqueued at once unless another deployment of the
// application holds its slot.
func (s *Service) Deploy(ctx context.Context, c audit.Caller, appID, ref string) (DeploymentDetail, error) {
	return s.deploy(ctx, c, appID, ref, nil)
}

// errDeploymentsChanged is deploy's answer when its condition failed:
// another deployment of the application was queued meanwhile.
var errDeploymentsChanged = errors.New("another deployment of the application was queued meanwhile")

// deploy is Deploy; after, when set, queues the deployment only if the
// application's newest deployment is still *after ("": it has none), and
// is errDeploymentsChanged otherwise.
func (s *Service) deploy(ctx context.Context, c audit.Caller, appID, ref string, after *string) (DeploymentDetail, error) {
	a, err := s.store.App(ctx, appID)
	if err != nil {
		return DeploymentDetail{}, err
	}
	k := kindOf(a)
	if err := k.refProblem(a, ref); err != nil {
		return DeploymentDetail{}, err
	}
	if ref != "" && a.Source.Type != SourceGit {
		if p := ImageProblem(ref); p != "" {
			return DeploymentDetail{}, fault.Invalidf("ref", "%s", p)
		}
	}
	if a.State == StateRemoving {
		return DeploymentDetail{}, errRemoving()
	}
	if _, err := s.enrolledServer(ctx, a.ServerID); err != nil {
		return DeploymentDetail{}, err
	}
	spec, err := k.spec(ctx, s, a, ref)
	if err != nil {
		return DeploymentDetail{}, err
	}
	var build buildValues
	if build.args, err = s.openBuildArgs("applications", appID, a.SealedBuildArgs); err != nil {
		return DeploymentDetail{}, err
	}
	if build.secrets, err = s.openBuildSecrets("applications", appID, a.SealedBuildSecrets); err != nil {
		return DeploymentDetail{}, err
	}
	sealed, err := s.store.AppEnv(ctx, appID)
	if err != nil {
		return DeploymentDetail{}, err
	}
	env, err := s.openEnv("applications", appID, sealed)
	if err != nil {
		return DeploymentDetail{}, err
	}
	d, err := s.queue(ctx, a, spec, env, build, ref, "", c.Actor.ID, after)
	if err != nil {
		return DeploymentDetail{}, err
	}
	details := map[string]any{"deployment_id": d.ID, "image": spec.Image}
	if spec.Git != nil {
		details["commit"] = spec.Git.CommitSHA
	}
	if err := s.audit.Record(ctx, c, ActionDeploymentCreated, audit.Target{Type: "application", ID: appID}, details); err != nil {
		return DeploymentDetail{}, err
	}
	return s.settleAndGet(ctx, d)
}

// Rollback queues a new deployment with the frozen specification and
// environment of an earlier one that succeeded, pinned to the exact image
// the agent ran then. When the server's latest inventory, collected after
// that deployment, no longer lists the image (it was pruned or removed),
// the rollback is a fault.Conflict "image-gone" and nothing is queued; if
// the image goes after the inventory was collected, the agent fails the
// job, and so the deployment, saying so.
func (s *Service) Rollback(ctx context.Context, c audit.Caller, deploymentID string) (DeploymentDetail, error) {
	old, err := s.store.Deployment(ctx, deploymentID)
	if err != nil {
		return DeploymentDetail{}, err
	}
	if old.Status != Succeeded || old.ImageID == "" && old.Spec.Service == nil {
		return DeploymentDetail{}, fault.Conflictf("deployment-not-succeeded",
			"Only a deployment that succeeded (and so has an image id) can be rolled back to; this one is %s.", old.status())
	}
	a, err := s.store.App(ctx, old.AppID)
	if err != nil {
		return DeploymentDetail{}, err
	}
	if a.State == StateRemoving {
		return DeploymentDetail{}, errRemoving()
	}
	if _, err := s.enrolledServer(ctx, a.ServerID); err != nil {
		return DeploymentDetail{}, err
	}
	if old.Spec.Service != nil {
		if err := s.checkReleaseKept(ctx, old); err != nil {
			return DeploymentDetail{}, err
		}
	} else if err := s.checkImagePresent(ctx, a.ServerID, old); err != nil {
		return DeploymentDetail{}, err
	}
	sealed, err := s.store.DeploymentEnv(ctx, old.ID)
	if err != nil {
		return DeploymentDetail{}, err
	}
	env, err := s.openEnv("deployments", old.ID, sealed)
	if err != nil {
		return DeploymentDetail{}, err
	}
	spec := old.Spec
	spec.ImageID = old.ImageID
	if spec.Compose != nil {
		if old.Release == nil || spec.Compose.Document == "" && old.Release.Document == "" {
			return DeploymentDetail{}, fault.Conflictf("deployment-not-succeeded", "Deployment %s kept no release to roll back to.", old.ID)
		}
		c := *spec.Compose
		c.ImageIDs = old.Release.Services
		if c.Document == "" {
			// From git: the document the deployment read from its commit.
			c.Document = old.Release.Document
		}
		spec.Compose = &c
	}
	if old.Spec.Service != nil {
		sv := *old.Spec.Service
		sv.Release = releaseOf(old)
		spec.Service = &sv
	}
	d, err := s.queue(ctx, a, spec, env, buildValues{}, old.Ref, old.ID, c.Actor.ID, nil)
	if err != nil {
		return DeploymentDetail{}, err
	}
	if err := s.audit.Record(ctx, c, ActionRollback, audit.Target{Type: "application", ID: a.ID}, map[string]any{
		"deployment_id": d.ID, "rollback_of": old.ID, "image": spec.Image, "image_id": spec.ImageID}); err != nil {
		return DeploymentDetail{}, err
	}
	return s.settleAndGet(ctx, d)
}

// checkImagePresent refuses a rollback to d when the server's latest
// inventory lists its images, was collected after d finished (so it would
// list d's image had it stayed), and does not list d's image.
func (s *Service) checkImagePresent(ctx context.Context, serverID string, d DeploymentRecord) error {
	ids, at, known, err := s.store.ServerImageIDs(ctx, serverID)
	if err != nil || !known || d.FinishedAt == nil || !at.After(*d.FinishedAt) {
		return err
	}
	if d.Release != nil {
		// A compose release needs the image of every service.
		for _, svc := range sortedKeys(d.Release.Services) {
			if id := d.Release.Services[svc]; !contains(ids, id) {
				return fault.Conflictf("image-gone",
					"The image %s of service %s of deployment %s is no longer on the server: its inventory of %s does not list it "+
						"(images of the releases that fall out of an application's last %d deployments are pruned). Deploy the compose "+
						"document again instead.", id, svc, d.ID, at.Format(time.RFC3339), KeepImages)
			}
		}
		return nil
	}
	for _, id := range ids {
		if id == d.ImageID {
			return nil
		}
	}
	return fault.Conflictf("image-gone",
		"The image %s of deployment %s is no longer on the server: its inventory of %s does not list it (images that fall out "+
			"of an application's last %d deployments are pruned). Deploy the image reference %s again instead.",
		d.ImageID, d.ID, at.Format(time.RFC3339), KeepImages, d.Spec.Image)
}

// buildValues are what a deployment from git builds with, sealed to it.
type buildValues struct {
	args    []EnvVar
	secrets []BuildSecret
}

// queue stores a queued deployment with its environment and build
// values sealed to it; after, when set, only if the application's newest
// deployment is still *after (errDeploymentsChanged otherwise).
func (s *Service) queue(ctx context.Context, a App, spec Spec, env []EnvVar, build buildValues, ref, rollbackOf, createdBy string,
	after *string) (DeploymentRecord, error) {
	now := s.now().UTC()
	if spec.EnvKeys == nil {
		spec.EnvKeys = []string{}
	}
	d := DeploymentRecord{ID: ids.NewAt(DeploymentIDPrefix, now), AppID: a.ID, ServerID: a.ServerID, Status: Queued,
		Spec: spec, Ref: ref, RollbackOf: rollbackOf, CreatedBy: createdBy, CreatedAt: now, UpdatedAt: now}
	sealed, err := s.sealEnv("deployments", d.ID, env)
	if err != nil {
		return DeploymentRecord{}, err
	}
	if d.SealedBuildArgs, err = s.sealBuildArgs("deployments", d.ID, build.args); err != nil {
		return DeploymentRecord{}, err
	}
	if d.SealedBuildSecrets, err = s.sealBuildSecrets("deployments", d.ID, build.secrets); err != nil {
		return DeploymentRecord{}, err
	}
	if after == nil {
		return d, s.store.InsertDeployment(ctx, d, sealed)
	}
	ok, err := s.store.InsertDeploymentAfter(ctx, d, sealed, *after)
	if err == nil && !ok {
		err = errDeploymentsChanged
	}
	return d, err
}

// settleAndGet dispatches what can start and returns the deployment. A
// failure to dispatch is logged: the deployment exists, and the next
// read of the application or deployment dispatches it.
func (s *Service) settleAndGet(ctx context.Context, d DeploymentRecord) (DeploymentDetail, error) {
	if err := s.reconcile(ctx, d.AppID); err != nil {
		s.log.ErrorContext(ctx, "dispatching deployments", "app_id", d.AppID, "err", err.Error())
	}
	return s.deploymentDetail(ctx, d.ID, jobs.AdminReader)
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
	sealed, err := s.store.DeploymentEnv(ctx, d.ID)
	if err != nil {
		return agentproto.DeployPayload{}, nil, err
	}
	env, err := s.openEnv("deployments", d.ID, sealed)
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
