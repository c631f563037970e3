package apps

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/compose"
	"github.com/capstan-dev/capstan/internal/fault"
)

// SourceInline is the source of a compose application whose compose
// document is given in the request.
const SourceInline = "inline"

// DefaultComposeFile names, in a compose application's spec, the
// default compose file of a repository: compose.yaml, else
// docker-compose.yml.
const DefaultComposeFile = "compose.yaml|docker-compose.yml"

// ComposeSpec is the frozen stack of a compose deployment.
type ComposeSpec struct {
	Document   string            `json:"document" doc:"The compose document deployed; for an application from git, empty until the deployment read it from the commit (the release keeps it)"`
	File       string            `json:"compose_file,omitempty" doc:"For an application from git: the compose file read from the commit (compose.yaml|docker-compose.yml: the first of them that exists)"`
	WebService string            `json:"web_service" doc:"The service the proxy routes to"`
	ImageIDs   map[string]string `json:"pinned_image_ids,omitempty" doc:"Rollbacks: the exact local image of every service"`
	// Masked is set in what is shown with the document masked.
	Masked bool `json:"document_masked,omitempty" doc:"True when document is the masked form (every value of an environment, build argument, label, command and x- extension is ********): in lists, and for members"`
}

// ServiceState is the state of one service of a compose application on
// its server, from the server's latest inventory.
type ServiceState struct {
	Service      string `json:"service"`
	Container    string `json:"container" doc:"The service's newest container"`
	State        string `json:"state" doc:"The container's state: running, restarting, exited…"`
	Status       string `json:"status" doc:"The engine's status text, e.g. Up 2 minutes (healthy)"`
	RestartCount int    `json:"restart_count"`
	DeploymentID string `json:"deployment_id" doc:"The deployment that created the container"`
}

// ServiceStates are the services of a compose application as its
// server's inventory last listed them.
type ServiceStates struct {
	CollectedAt *time.Time     `json:"collected_at" doc:"When the server's inventory was collected; null when it has none"`
	Services    []ServiceState `json:"services" doc:"By service name; a service of the current deployment the inventory does not list has state missing"`
}

// validateCompose checks a compose application's stack into errs: the
// source is inline with a document, or git with the compose file's path
// in the repository (read by the agent from each commit deployed); the
// web service is a service of the document; an inline document holds
// only what Capstan runs, without builds (422 naming every unsupported
// key).
func validateCompose(ctx context.Context, name string, src Source, c ComposeSettings, errs *fault.Fields) {
	if p := serviceNameProblem(c.WebService); p != "" {
		errs.Add("web_service", "%s", p)
	}
	switch src.Type {
	case SourceInline:
	case SourceGit:
		validateSource(src, errs)
		if c.Document != "" {
			errs.Add("compose", "is only for an inline document: an application from git deploys the compose file of each commit (compose_file)")
		}
		if p := BuildPathProblem(c.File); c.File != "" && p != "" {
			errs.Add("compose_file", "%s", p)
		}
		return
	default:
		errs.Add("source.type", "compose applications take their compose document inline (source type inline) or from git (source type git)")
		return
	}
	if c.File != "" {
		errs.Add("compose_file", "is only for compose applications from git")
	}
	if strings.TrimSpace(c.Document) == "" {
		errs.Add("compose", "is required: the compose document")
		return
	}
	if _, err := compose.Load(ctx, composeProject(name), []byte(c.Document), compose.Options{WebService: c.WebService}); err != nil {
		if p := compose.AsProblem(err); p != nil {
			if len(p.Unsupported) > 0 {
				errs.Add("compose", "unsupported keys: %s", strings.Join(p.Unsupported, ", "))
			}
			for _, m := range p.Messages {
				errs.Add("compose", "%s", m)
			}
			return
		}
		errs.Add("compose", "%s", err.Error())
	}
}

// composeProject is the project name a document is read as: any valid
// one (nothing the engine sees is named after it).
func composeProject(name string) string {
	if NameProblem(name) != "" {
		return "app"
	}
	return name
}

func serviceNameProblem(s string) string {
	if s == "" {
		return "is required: the service the proxy routes to"
	}
	if NameProblem(s) != "" {
		return "must be a service name: lowercase letters, digits and '-'"
	}
	return ""
}

// composeSpec is the stack a deployment of a compose application freezes.
func composeSpec(a App) *ComposeSpec {
	c := &ComposeSpec{Document: a.Compose.Document, WebService: a.Compose.WebService}
	if a.Source.Type == SourceGit {
		c.File = cmpOr(a.Compose.File, DefaultComposeFile)
	}
	return c
}

// composePayload is the stack of a deployment's job.
func composePayload(c *ComposeSpec) *agentproto.ComposeSpec {
	if c == nil {
		return nil
	}
	p := &agentproto.ComposeSpec{Document: c.Document, WebService: c.WebService, ImageIDs: c.ImageIDs}
	if c.Document == "" {
		// From git: the agent reads the compose file of the commit.
		p.File = c.File
		if p.File == DefaultComposeFile {
			p.File = ""
		}
	}
	return p
}

// serviceStates reads a compose application's services from its server's
// latest inventory.
func (s *Service) serviceStates(ctx context.Context, a App, current *DeploymentRecord) (*ServiceStates, error) {
	inv, err := s.store.ServerInventory(ctx, a.ServerID)
	if err != nil {
		return nil, err
	}
	out := &ServiceStates{Services: []ServiceState{}}
	newest := map[string]ServiceState{}
	if inv != nil {
		t := inv.CollectedAt
		out.CollectedAt = &t
		for _, c := range inv.Containers {
			if c.Labels[agentproto.LabelApp] != a.ID && c.Labels[agentproto.LabelComposeApp] != a.ID {
				continue
			}
			svc := c.Labels[agentproto.LabelService]
			if svc == "" {
				continue
			}
			st := ServiceState{Service: svc, Container: c.Name, State: c.State, Status: c.Status, RestartCount: c.RestartCount,
				DeploymentID: c.Labels[agentproto.LabelDeployment]}
			// The running one wins; then the newest deployment's.
			if old, ok := newest[svc]; ok && (old.State == "running" && st.State != "running" ||
				(old.State == "running") == (st.State == "running") && old.DeploymentID > st.DeploymentID) {
				continue
			}
			newest[svc] = st
		}
	}
	if current != nil && current.Release != nil && inv != nil {
		for svc := range current.Release.Services {
			if _, ok := newest[svc]; !ok {
				newest[svc] = ServiceState{Service: svc, State: "missing"}
			}
		}
	}
	for _, st := range newest {
		out.Services = append(out.Services, st)
	}
	sort.Slice(out.Services, func(i, j int) bool { return out.Services[i].Service < out.Services[j].Service })
	return out, nil
}

// serviceOf checks the service of a log read: "" for every application
// (a compose application's web service), else a service of the compose
// application's current document.
func (s *Service) serviceOf(ctx context.Context, a App, service string) error {
	if service == "" {
		return nil
	}
	if a.Kind != KindCompose {
		return fault.Invalidf("service", "is only for compose applications")
	}
	doc := a.Compose.Document
	if a.CurrentDeploymentID != "" {
		if cur, err := s.store.Deployment(ctx, a.CurrentDeploymentID); err == nil && cur.Spec.Compose != nil {
			doc = cur.Spec.Compose.Document
			if doc == "" && cur.Release != nil {
				doc = cur.Release.Document
			}
		}
	}
	if doc == "" {
		return fault.Invalidf("service", "the application has no deployed compose document yet")
	}
	p, err := compose.Load(ctx, composeProject(a.Name), []byte(doc), compose.Options{AllowBuild: true})
	if err != nil {
		return fault.Invalidf("service", "the application's compose document cannot be read: %v", err)
	}
	if _, ok := p.Services[service]; !ok {
		return fault.Invalidf("service", "is not a service of the application's compose document")
	}
	return nil
}

// composeSpecOf is the spec a deployment of a compose application
// freezes: its document and web service; container_port and health_path
// are the web service's, memory_limit its default memory limit.
func composeSpecOf(a App) (Spec, error) {
	mem, p := ParseMemory(a.MemoryLimit)
	if p != "" {
		return Spec{}, fault.Conflictf("invalid-settings", "The application's memory limit %s", p)
	}
	return Spec{AppName: a.Name, ContainerPort: a.ContainerPort, HealthPath: a.HealthPath, EnvKeys: a.EnvKeys,
		MemoryLimit: a.MemoryLimit, MemoryLimitBytes: mem, Compose: composeSpec(a)}, nil
}

// composeImages are the images a compose deployment keeps and prunes:
// every service's image of the releases of the application's newest
// KeepImages succeeded deployments (and of the release a rollback
// re-creates) is kept; the images of the releases of up to PruneWindow
// succeeded deployments past those are pruned, unless kept or run by
// another application on the server. The agent keeps, besides, every
// image the new release runs and every image a container uses.
func (s *Service) composeImages(ctx context.Context, d DeploymentRecord) (keep, prune []string, err error) {
	list, err := s.store.ListDeployments(ctx, d.AppID, MaxDeploymentLimit)
	if err != nil {
		return nil, nil, err
	}
	kept := map[string]bool{}
	keep = []string{}
	add := func(id string) {
		if id != "" && !kept[id] {
			kept[id] = true
			keep = append(keep, id)
		}
	}
	for _, id := range sortedValues(d.Spec.Compose.ImageIDs) {
		add(id)
	}
	var older []string
	for n, r := range succeededReleases(list) {
		switch {
		case n < KeepImages:
			for _, id := range sortedValues(r.Release.Services) {
				add(id)
			}
		case n < KeepImages+PruneWindow:
			older = append(older, sortedValues(r.Release.Services)...)
		}
	}
	if len(older) == 0 {
		return keep, nil, nil
	}
	shared, err := s.store.OtherAppsImageIDs(ctx, d.AppID)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range older {
		if !kept[id] && !contains(shared, id) && !contains(prune, id) {
			prune = append(prune, id)
		}
	}
	return keep, prune, nil
}

func sortedValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// succeededReleases are the deployments of list (newest first) that
// succeeded with a compose release, in the same order.
func succeededReleases(list []DeploymentRecord) []DeploymentRecord {
	var out []DeploymentRecord
	for _, r := range list {
		if r.Status == Succeeded && r.Release != nil {
			out = append(out, r)
		}
	}
	return out
}

// composeKind is the kind of a multi-container stack, from an inline
// compose document or a compose file in git.
type composeKind struct{}

// view shows the stack, the document masked unless reveal.
func (composeKind) view(a App, v *Application, reveal bool) {
	v.WebService, v.Compose, v.ComposeFile = a.Compose.WebService, a.Compose.Document, a.Compose.File
	if !reveal && v.Compose != "" {
		v.Compose, v.ComposeMasked = MaskCompose(v.Compose), true
	}
}

func (composeKind) revealed(a App) []string {
	if a.Compose.Document != "" {
		return []string{"compose_document"}
	}
	return nil
}

func (composeKind) checkNew(ctx context.Context, n NewApp, errs *fault.Fields) ServiceSettings {
	validateCompose(ctx, n.Name, n.Source, n.stack(), errs)
	svc := n.serviceSettings()
	validateService(KindCompose, n.Source, svc, errs)
	checkPort(n.ContainerPort, errs)
	return svc
}

// newBuild refuses build fields: the stack's services name their images.
func (composeKind) newBuild(n NewApp, _ BuildSettings, errs *fault.Fields) BuildSettings {
	if n.Dockerfile != nil || n.BuildContext != nil || len(n.BuildArgs) > 0 {
		errs.Add("dockerfile", "dockerfile, build_context and build_args are not used by compose applications")
	}
	return BuildSettings{}
}

func (composeKind) renameProblem(App, string) string { return "" }

// checkPatch leaves the source to patchBuild's check of the stack.
func (composeKind) checkPatch(Patch, *fault.Fields) {}

func (composeKind) patchBuild(ctx context.Context, _ *Service, a *App, p Patch, errs *fault.Fields) buildPatch {
	if p.Dockerfile != nil || p.BuildContext != nil || p.BuildArgs != nil {
		errs.Add("dockerfile", "dockerfile, build_context and build_args are not used by compose applications")
	}
	if p.BuildSecrets != nil && len(*p.BuildSecrets) > 0 {
		validateBuildSecrets(a.Kind, a.Source, *p.BuildSecrets, errs)
	}
	if p.Name != nil || p.Source != nil || p.Image != nil || p.Compose != nil || p.WebService != nil || p.ComposeFile != nil {
		validateCompose(ctx, a.Name, a.Source, a.Compose, errs)
	}
	return buildPatch{}
}

// refProblem refuses a ref for an inline document: there is nothing else
// to deploy than the document.
func (composeKind) refProblem(a App, ref string) error {
	if ref != "" && a.Source.Type != SourceGit {
		return fault.Invalidf("ref", "is not used by compose applications with an inline document: each deployment runs the document")
	}
	return nil
}

func (composeKind) spec(ctx context.Context, s *Service, a App, ref string) (Spec, error) {
	if a.Source.Type != SourceGit {
		return composeSpecOf(a)
	}
	spec, err := s.gitSpec(ctx, a, ref)
	if err == nil {
		spec.Compose = composeSpec(a)
	}
	return spec, err
}

func (composeKind) runtime(ctx context.Context, s *Service, a App, d *ApplicationDetail) (err error) {
	d.Services, err = s.serviceStates(ctx, a, s.currentRecord(ctx, a))
	return err
}

// keptImages are every service's image of the releases of the
// application's newest KeepImages succeeded deployments.
func (composeKind) keptImages(ctx context.Context, st Store, a App) ([]string, error) {
	deps, err := st.ListDeployments(ctx, a.ID, MaxDeploymentLimit)
	if err != nil {
		return nil, err
	}
	var ids []string
	rs := succeededReleases(deps)
	for _, r := range rs[:min(len(rs), KeepImages)] {
		ids = append(ids, sortedValues(r.Release.Services)...)
	}
	return ids, nil
}
