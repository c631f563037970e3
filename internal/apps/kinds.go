package apps

import (
	"context"

	"github.com/capstan-dev/capstan/internal/fault"
)

// kind is what differs between the kinds of application: container (one
// image, container.go), compose (a multi-container stack, compose.go) and
// service (a program under systemd, svcapp.go).
type kind interface {
	// view shows a's kind-specific settings in v: unless reveal, the
	// compose document masked and a service's commands hidden.
	view(a App, v *Application, reveal bool)
	// revealed names, as audit details, what a read that reveals a's
	// secrets returns besides its env; a read that returns none of them
	// and no env is not audited.
	revealed(a App) []string
	// checkNew checks the settings of a new application that depend on
	// its kind (its source or stack, service settings and container port)
	// into errs and returns the service settings it keeps.
	checkNew(ctx context.Context, n NewApp, errs *fault.Fields) ServiceSettings
	// newBuild checks a new application's build fields into errs and
	// returns the build settings it keeps.
	newBuild(n NewApp, build BuildSettings, errs *fault.Fields) BuildSettings
	// renameProblem says why a may not be renamed to name; "" if it may.
	renameProblem(a App, name string) string
	// checkPatch checks into errs that p's source and compose fields fit
	// the kind.
	checkPatch(p Patch, errs *fault.Fields)
	// patchBuild applies p's build fields to a (whose other settings p
	// changed already) and checks them, and a compose stack, into errs.
	patchBuild(ctx context.Context, s *Service, a *App, p Patch, errs *fault.Fields) buildPatch
	// refProblem refuses a deployment's ref the kind does not use.
	refProblem(a App, ref string) error
	// spec is the spec a deployment of a freezes; ref, when set,
	// overrides its image or git ref.
	spec(ctx context.Context, s *Service, a App, ref string) (Spec, error)
	// runtime fills in d's states of a on its server, from the server's
	// latest inventory.
	runtime(ctx context.Context, s *Service, a App, d *ApplicationDetail) error
	// keptImages are the images a keeps on its server for rollbacks.
	keptImages(ctx context.Context, st Store, a App) ([]string, error)
}

// kindOf is a's kind; an empty or unknown kind is a container.
func kindOf(a App) kind { return kindNamed(a.Kind) }

func kindNamed(k string) kind {
	switch k {
	case KindCompose:
		return composeKind{}
	case KindService:
		return serviceKind{}
	}
	return containerKind{}
}

// viewBuild shows the build settings of an application built from git.
func viewBuild(a App, v *Application) {
	if a.Source.Type == SourceGit {
		v.Dockerfile, v.BuildContext, v.BuildArgKeys = a.Build.Dockerfile, a.Build.Context, nonNilKeys(a.Build.ArgKeys)
		v.BuildSecretKeys = a.Build.SecretKeys
	}
}

// checkNotCompose checks the source of a new application that is not a
// compose application, and that it has no stack.
func checkNotCompose(n NewApp, errs *fault.Fields) {
	validateSource(n.Source, errs)
	if n.stack() != (ComposeSettings{}) {
		errs.Add("compose", "compose and web_service are only for compose applications")
	}
}

// serviceSettings are the service settings a new application asks for.
func (n NewApp) serviceSettings() ServiceSettings {
	if n.Service == nil {
		return ServiceSettings{}
	}
	return *n.Service
}

// stack is the compose stack a new application asks for.
func (n NewApp) stack() ComposeSettings {
	return ComposeSettings{WebService: n.WebService, Document: n.Compose, File: n.ComposeFile}
}

// checkPort checks a container port into errs.
func checkPort(port int, errs *fault.Fields) {
	if p := PortProblem(port); p != "" {
		errs.Add("container_port", "%s", p)
	}
}

// checkPatchNotCompose checks the source and compose fields of a patch of
// an application that is not a compose application.
func checkPatchNotCompose(p Patch, errs *fault.Fields) {
	if p.Source != nil {
		validateSource(*p.Source, errs)
	}
	if p.Compose != nil || p.WebService != nil || p.ComposeFile != nil {
		errs.Add("compose", "compose, compose_file and web_service are only for compose applications")
	}
}

// imageSpec is the spec of a deployment built from git or run from an
// image reference.
func (s *Service) imageSpec(ctx context.Context, a App, ref string) (Spec, error) {
	if a.Source.Type == SourceGit {
		return s.gitSpec(ctx, a, ref)
	}
	return specOf(a, ref)
}

// currentRecord is a's current deployment; nil if none or unreadable.
func (s *Service) currentRecord(ctx context.Context, a App) *DeploymentRecord {
	if a.CurrentDeploymentID == "" {
		return nil
	}
	c, err := s.store.Deployment(ctx, a.CurrentDeploymentID)
	if err != nil {
		return nil
	}
	return &c
}
