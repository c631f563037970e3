package apps

import (
	"context"

	"github.com/capstan-dev/capstan/internal/fault"
)

// containerKind is the kind of an application that runs one image, from
// a registry or built from git.
type containerKind struct{}

func (containerKind) view(a App, v *Application, reveal bool) { viewBuild(a, v) }

func (containerKind) revealed(App) []string { return nil }

func (containerKind) checkNew(_ context.Context, n NewApp, errs *fault.Fields) ServiceSettings {
	checkNotCompose(n, errs)
	svc := n.serviceSettings()
	validateService(KindContainer, n.Source, svc, errs)
	checkPort(n.ContainerPort, errs)
	return svc
}

func (containerKind) newBuild(n NewApp, build BuildSettings, errs *fault.Fields) BuildSettings {
	validateBuild(n.Source, build, n.BuildArgs, errs)
	return build
}

func (containerKind) renameProblem(App, string) string { return "" }

func (containerKind) checkPatch(p Patch, errs *fault.Fields) { checkPatchNotCompose(p, errs) }

func (containerKind) patchBuild(_ context.Context, s *Service, a *App, p Patch, errs *fault.Fields) buildPatch {
	return s.patchBuild(a, p, errs)
}

func (containerKind) refProblem(App, string) error { return nil }

func (containerKind) spec(ctx context.Context, s *Service, a App, ref string) (Spec, error) {
	return s.imageSpec(ctx, a, ref)
}

func (containerKind) runtime(context.Context, *Service, App, *ApplicationDetail) error { return nil }

// keptImages are the images of the application's newest KeepImages
// succeeded deployments.
func (containerKind) keptImages(ctx context.Context, st Store, a App) ([]string, error) {
	return st.SucceededImageIDs(ctx, a.ID, KeepImages)
}
