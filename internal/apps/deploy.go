package apps

import (
	"context"
	"errors"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

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
	_, env, err := s.appEnv(ctx, appID)
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
	env, err := s.deploymentEnv(ctx, old.ID)
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
	if d.SealedBuildArgs, d.SealedBuildSecrets, err = s.sealBuild("deployments", d.ID, build); err != nil {
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
