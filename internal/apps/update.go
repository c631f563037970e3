package apps

import (
	"context"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Patch changes an application's settings for its next deployment; nil
// fields stay as they are. Env replaces the whole list.
type Patch struct {
	Name *string
	// Kind is fixed at creation: only the application's own is accepted.
	Kind          *string
	Image         *string
	Source        *Source
	ContainerPort *int
	HealthPath    *string
	Env           *[]EnvVar
	AutoDeploy    *bool
	MemoryLimit   *string
	// Git sources; BuildArgs and BuildSecrets replace the whole list.
	Dockerfile   *string
	BuildContext *string
	BuildArgs    *[]EnvVar
	BuildSecrets *[]BuildSecret
	// Compose applications.
	Compose     *string
	WebService  *string
	ComposeFile *string
	// Service changes a service application's build and start.
	Service ServicePatch
	// Publish sets the published port; HostPort 0 removes it.
	Publish *Publish
}

// setField sets *dst to *v when v is set, and names field in changed.
func setField[T any](dst, v *T, field string, changed *[]string) {
	if v != nil {
		*dst = *v
		*changed = append(*changed, field)
	}
}

// Update changes settings for the next deployment; the running container
// is untouched.
func (s *Service) Update(ctx context.Context, c audit.Caller, id string, p Patch) (ApplicationDetail, error) {
	a, err := s.store.App(ctx, id)
	if err != nil {
		return ApplicationDetail{}, err
	}
	k := kindOf(a)
	var errs fault.Fields
	var changed []string
	if p.Name != nil {
		if pr := NameProblem(*p.Name); pr != "" {
			errs.Add("name", "%s", pr)
		}
		if pr := k.renameProblem(a, *p.Name); pr != "" {
			errs.Add("name", "%s", pr)
		}
		a.Name = *p.Name
		changed = append(changed, "name")
	}
	if p.Kind != nil && *p.Kind != a.Kind {
		errs.Add("kind", "is fixed at creation: this is a %s application", a.Kind)
	}
	k.checkPatch(p, &errs)
	setField(&a.Source, p.Source, "source", &changed)
	setField(&a.Compose.File, p.ComposeFile, "compose_file", &changed)
	setField(&a.Compose.Document, p.Compose, "compose", &changed)
	setField(&a.Compose.WebService, p.WebService, "web_service", &changed)
	if p.Image != nil {
		if p.Source != nil {
			errs.Add("image", "give image or source, not both")
		} else if pr := ImageProblem(*p.Image); pr != "" {
			errs.Add("image", "%s", pr)
		}
		a.Source = Source{Type: SourceImage, Image: *p.Image}
		changed = append(changed, "image")
	}
	if p.ContainerPort != nil {
		if pr := PortProblem(*p.ContainerPort); pr != "" {
			errs.Add("container_port", "%s", pr)
		}
		a.ContainerPort = *p.ContainerPort
		changed = append(changed, "container_port")
	}
	if p.HealthPath != nil {
		if pr := HealthPathProblem(*p.HealthPath); pr != "" {
			errs.Add("health_path", "%s", pr)
		}
		a.HealthPath = *p.HealthPath
		changed = append(changed, "health_path")
	}
	var sealed *string
	if p.Env != nil {
		env := *p.Env
		if env == nil {
			env = []EnvVar{}
		}
		validateEnv(env, &errs)
		if len(errs) == 0 {
			sl, err := s.sealEnv("applications", a.ID, env)
			if err != nil {
				return ApplicationDetail{}, err
			}
			sealed = &sl
		}
		a.EnvKeys = envKeys(env)
		changed = append(changed, "env")
	}
	setField(&a.AutoDeploy, p.AutoDeploy, "auto_deploy", &changed)
	if p.MemoryLimit != nil {
		if _, pr := ParseMemory(*p.MemoryLimit); pr != "" {
			errs.Add("memory_limit", "%s", pr)
		}
		a.MemoryLimit = lower(*p.MemoryLimit)
		changed = append(changed, "memory_limit")
	}
	publishChanged := false
	if p.Publish != nil {
		var next *Publish
		if p.Publish.HostPort != 0 || p.Publish.Bind != "" {
			addPublishProblems(*p.Publish, &errs)
			n := normalizePublish(*p.Publish)
			next = &n
		}
		publishChanged = !samePublish(a.Publish, next)
		if publishChanged {
			a.Publish = next
			changed = append(changed, "publish")
		}
	}
	changed = append(changed, p.Service.apply(&a)...)
	if p.Service != (ServicePatch{}) {
		validateService(a.Kind, a.Source, a.Service, &errs)
	}
	build := k.patchBuild(ctx, s, &a, p, &errs)
	changed = append(changed, build.changed...)
	if len(errs) == 0 && a.Source.Type == SourceGit && (p.Source != nil || p.Image != nil) {
		if err := s.gitProblems(ctx, a.Source, &errs); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if err := errs.Err(); err != nil {
		return ApplicationDetail{}, err
	}
	if build.args != nil {
		if a.SealedBuildArgs, err = s.sealBuildArgs("applications", a.ID, *build.args); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if build.secrets != nil {
		if len(*build.secrets) > 0 {
			if err := s.buildSecretsAgent(ctx, a.ServerID); err != nil {
				return ApplicationDetail{}, err
			}
		}
		if a.SealedBuildSecrets, err = s.sealBuildSecrets("applications", a.ID, *build.secrets); err != nil {
			return ApplicationDetail{}, err
		}
	}
	if a.State == StateRemoving {
		return ApplicationDetail{}, errRemoving()
	}
	if len(changed) == 0 {
		return s.Get(ctx, id, Reading{Reader: jobs.AdminReader})
	}
	a.UpdatedAt = s.now().UTC()
	if err := s.store.UpdateApp(ctx, a, sealed); err != nil {
		return ApplicationDetail{}, err
	}
	details := map[string]any{"fields": changed}
	if p.Env != nil {
		details["env_keys"] = a.EnvKeys
	}
	if build.secrets != nil {
		details["build_secret_keys"] = nonNilKeys(a.Build.SecretKeys)
	}
	if publishChanged {
		details["publish"] = ""
		if a.Publish != nil {
			details["publish"] = a.Publish.Address()
		}
	}
	if err := s.audit.Record(ctx, c, ActionUpdated, audit.Target{Type: "application", ID: a.ID}, details); err != nil {
		return ApplicationDetail{}, err
	}
	if publishChanged && a.CurrentDeploymentID != "" {
		// The live release is served on the new port (or no longer on
		// the old one) now, not at the next deployment.
		if err := s.applyProxy(ctx, c, a.ServerID); err != nil {
			return ApplicationDetail{}, err
		}
	}
	return s.Get(ctx, id, Reading{Reader: jobs.AdminReader})
}
