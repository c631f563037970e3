package apps

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

// Service applications (kind service) are built on their server from git
// and run by its service manager: one systemd unit per release slot on a
// loopback port the agent picks (PORT in the program's environment). A
// deployment builds a release kept on the server under its own id; a
// rollback starts the release an earlier deployment ran again. The
// releases of the last KeepReleases succeeded deployments are kept.

// KeepReleases is how many releases of a service application stay on its
// server for rollbacks.
const KeepReleases = 5

// Limits of a service application's settings.
const (
	MaxCommandLen              = 4096
	DefaultBuildTimeoutSeconds = 900
	MaxBuildTimeoutSeconds     = 7200
)

// ServiceSettings are a service application's build and start.
type ServiceSettings struct {
	BuildCommand        string `json:"build_command" doc:"Runs with /bin/sh -c in the checkout of the commit, as the server's unprivileged build account; empty for nothing to build"`
	StartCommand        string `json:"start_command" doc:"Runs with /bin/sh -c in the release directory under the slot's systemd unit; the program listens on 127.0.0.1:$PORT"`
	BuildTimeoutSeconds int    `json:"build_timeout_seconds" doc:"Time limit of the build command in seconds (1 to 7200)"`
	// CommandsHidden is set in what is shown without the commands.
	CommandsHidden bool `json:"commands_hidden,omitempty" doc:"True when build_command and start_command are withheld (empty here): they may carry secrets, and only an administrator reads them, on GET of the application with reveal=true (audited as application.env.read) or in a deployment's detail"`
}

// hidden is the settings without their commands, which may carry
// secrets as the environment does.
func (s ServiceSettings) hidden() ServiceSettings {
	s.BuildCommand, s.StartCommand, s.CommandsHidden = "", "", true
	return s
}

// ServiceSpec is the frozen build and start of a service application's
// deployment.
type ServiceSpec struct {
	ServiceSettings
	// Release, for a rollback, is the deployment whose kept release runs
	// again; "" means the deployment builds its own.
	Release string `json:"release,omitempty" doc:"Rollbacks: the deployment whose kept release runs again"`
}

// releaseOf is the release a deployment of a service application runs.
func releaseOf(d DeploymentRecord) string {
	if d.Spec.Service != nil && d.Spec.Service.Release != "" {
		return d.Spec.Service.Release
	}
	return d.ID
}

// commandProblem says what is wrong with a command.
func commandProblem(cmd string, required bool) string {
	switch {
	case cmd == "" && required:
		return "is required"
	case len(cmd) > MaxCommandLen:
		return "must be at most 4096 characters"
	case strings.ContainsFunc(cmd, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
		return "must be one line without control characters"
	}
	return ""
}

// validateService checks a service application's settings (and that the
// other kinds have none).
func validateService(kind string, src Source, svc ServiceSettings, errs *fault.Fields) {
	if kind != KindService {
		if svc != (ServiceSettings{}) {
			errs.Add("build_command", "build_command, start_command and build_timeout_seconds are only for service applications")
		}
		return
	}
	if src.Type != SourceGit {
		errs.Add("source.type", "a service application is built from git: must be git")
	}
	if p := commandProblem(svc.BuildCommand, false); p != "" {
		errs.Add("build_command", "%s", p)
	}
	if p := commandProblem(svc.StartCommand, true); p != "" {
		errs.Add("start_command", "%s", p)
	}
	if svc.BuildTimeoutSeconds < 1 || svc.BuildTimeoutSeconds > MaxBuildTimeoutSeconds {
		errs.Add("build_timeout_seconds", "must be between 1 and 7200")
	}
}

// ServicePatch changes a service application's settings; nil fields stay.
type ServicePatch struct {
	BuildCommand        *string
	StartCommand        *string
	BuildTimeoutSeconds *int
}

// apply applies p to a's service settings and names what changed.
func (p ServicePatch) apply(a *App) []string {
	var changed []string
	setField(&a.Service.BuildCommand, p.BuildCommand, "build_command", &changed)
	setField(&a.Service.StartCommand, p.StartCommand, "start_command", &changed)
	setField(&a.Service.BuildTimeoutSeconds, p.BuildTimeoutSeconds, "build_timeout_seconds", &changed)
	return changed
}

// keptReleases are the releases of the application's newest succeeded
// deployments, KeepReleases at most.
func (s *Service) keptReleases(ctx context.Context, appID string) ([]string, error) {
	list, err := s.store.ListDeployments(ctx, appID, 200)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, d := range list {
		if d.Status != Succeeded {
			continue
		}
		if r := releaseOf(d); !contains(out, r) {
			out = append(out, r)
		}
		if len(out) == KeepReleases {
			break
		}
	}
	return out, nil
}

// servicePayload fills in the service part of a deployment's payload.
func (s *Service) servicePayload(ctx context.Context, d DeploymentRecord, p *agentproto.DeployPayload) error {
	keep, err := s.keptReleases(ctx, d.AppID)
	if err != nil {
		return err
	}
	sv := d.Spec.Service
	p.Service = &agentproto.ServiceSpec{BuildCommand: sv.BuildCommand, StartCommand: sv.StartCommand,
		BuildTimeoutSeconds: sv.BuildTimeoutSeconds, Release: sv.Release, KeepReleases: keep}
	// Nothing of a container: no image to keep or prune.
	p.KeepImageIDs, p.PruneImageIDs = []string{}, nil
	if sv.Release != "" {
		p.Build = nil
	}
	return nil
}

// checkReleaseKept refuses a rollback to a service deployment whose
// release fell out of the kept ones.
func (s *Service) checkReleaseKept(ctx context.Context, d DeploymentRecord) error {
	keep, err := s.keptReleases(ctx, d.AppID)
	if err != nil {
		return err
	}
	if !contains(keep, releaseOf(d)) {
		return fault.Conflictf("release-gone",
			"The release of deployment %s is no longer kept on the server (the releases of an application's last %d succeeded deployments are). Deploy its commit again instead.",
			d.ID, KeepReleases)
	}
	return nil
}

// serviceName is the name a service application's units and releases
// carry on its server; "" for the other kinds.
func serviceName(a App) string {
	if a.Kind != KindService {
		return ""
	}
	return a.Name
}

// SlotState is the state of one release slot of a service application on
// its server, from the server's latest inventory.
type SlotState struct {
	Unit    string `json:"unit" doc:"The slot's systemd unit, capstan-app-<name>@<port>.service"`
	Port    int    `json:"port" doc:"The loopback port the slot listens on"`
	Release string `json:"release" doc:"The deployment whose release the slot runs (for a rollback, the deployment rolled back to)"`
	State   string `json:"state" enum:"running,starting,stopping,stopped,failed,missing" doc:"running (systemd: active), starting (activating or reloading), stopping (deactivating), stopped (inactive), failed; missing for the live slot the inventory does not list"`
	Status  string `json:"status" doc:"systemd's own words: the active state and the sub-state, e.g. active (running)"`
	Live    bool   `json:"live" doc:"The proxy sends the application's requests to this slot: the current deployment's"`
}

// SlotStates are the release slots of a service application as its
// server's inventory last listed them.
type SlotStates struct {
	CollectedAt *time.Time  `json:"collected_at" doc:"When the server's inventory was collected; null when it has none"`
	Slots       []SlotState `json:"slots" doc:"By port; the current deployment's slot, if the inventory does not list it, has state missing"`
}

// slotStates reads a service application's slots from its server's
// latest inventory: its units capstan-app-<name>@<port>.service, whose
// description names the release they run. The live slot is the current
// deployment's.
func (s *Service) slotStates(ctx context.Context, a App, current *DeploymentRecord) (*SlotStates, error) {
	inv, err := s.store.ServerInventory(ctx, a.ServerID)
	if err != nil {
		return nil, err
	}
	out := &SlotStates{Slots: []SlotState{}}
	live, liveRelease := 0, ""
	if current != nil && len(current.Result) > 0 {
		var res agentproto.DeployResult
		if json.Unmarshal(current.Result, &res) == nil && res.Service != nil {
			live, liveRelease = res.Service.Port, res.Service.Release
		}
	}
	if inv == nil {
		return out, nil
	}
	t := inv.CollectedAt
	out.CollectedAt = &t
	prefix := "capstan-app-" + a.Name + "@"
	for _, u := range inv.Services {
		rest, ok := strings.CutPrefix(u.Name, prefix)
		if !ok {
			continue
		}
		port, err := strconv.Atoi(strings.TrimSuffix(rest, ".service"))
		if err != nil || !strings.HasSuffix(rest, ".service") || port < 1 || port > 65535 {
			continue
		}
		st := SlotState{Unit: u.Name, Port: port, State: slotState(u.ActiveState), Status: u.ActiveState + " (" + u.SubState + ")",
			Live: port == live}
		if m := releaseInDescription.FindStringSubmatch(u.Description); m != nil {
			st.Release = m[1]
		}
		out.Slots = append(out.Slots, st)
	}
	if live != 0 && !slices.ContainsFunc(out.Slots, func(st SlotState) bool { return st.Live }) {
		out.Slots = append(out.Slots, SlotState{Unit: fmt.Sprintf("%s%d.service", prefix, live), Port: live, Release: liveRelease,
			State: "missing", Live: true})
	}
	sort.Slice(out.Slots, func(i, j int) bool { return out.Slots[i].Port < out.Slots[j].Port })
	return out, nil
}

// releaseInDescription finds the release in a slot unit's description,
// "Capstan application <name> (deployment <id>)".
var releaseInDescription = regexp.MustCompile(`\(deployment ([A-Za-z0-9_]+)\)$`)

// slotState is systemd's active state as the detail shows it.
func slotState(active string) string {
	switch active {
	case "active":
		return "running"
	case "activating", "reloading":
		return "starting"
	case "deactivating":
		return "stopping"
	case "failed":
		return "failed"
	}
	return "stopped"
}

// serviceKind is the kind of a program built from git on its server and
// run under its service manager.
type serviceKind struct{}

// view shows the build settings and the service's, its commands hidden
// unless reveal.
func (serviceKind) view(a App, v *Application, reveal bool) {
	viewBuild(a, v)
	svc := a.Service
	if !reveal {
		svc = svc.hidden()
	}
	v.Service = &svc
}

func (serviceKind) revealed(App) []string { return []string{"service_commands"} }

// checkNew defaults the build timeout; the container port may be 0: the
// agent picks the port of each release slot.
func (serviceKind) checkNew(_ context.Context, n NewApp, errs *fault.Fields) ServiceSettings {
	checkNotCompose(n, errs)
	svc := n.serviceSettings()
	if svc.BuildTimeoutSeconds == 0 {
		svc.BuildTimeoutSeconds = DefaultBuildTimeoutSeconds
	}
	validateService(KindService, n.Source, svc, errs)
	if n.ContainerPort != 0 {
		checkPort(n.ContainerPort, errs)
	}
	return svc
}

func (serviceKind) newBuild(n NewApp, build BuildSettings, errs *fault.Fields) BuildSettings {
	validateBuild(n.Source, build, n.BuildArgs, errs)
	return build
}

func (serviceKind) renameProblem(a App, name string) string {
	if name != a.Name {
		return "a service application's units and releases on its server carry its name: it cannot change"
	}
	return ""
}

func (serviceKind) checkPatch(p Patch, errs *fault.Fields) { checkPatchNotCompose(p, errs) }

func (serviceKind) patchBuild(_ context.Context, s *Service, a *App, p Patch, errs *fault.Fields) buildPatch {
	return s.patchBuild(a, p, errs)
}

func (serviceKind) refProblem(App, string) error { return nil }

// spec adds the build and start of the service.
func (serviceKind) spec(ctx context.Context, s *Service, a App, ref string) (Spec, error) {
	spec, err := s.imageSpec(ctx, a, ref)
	if err != nil {
		return Spec{}, err
	}
	spec.Service = &ServiceSpec{ServiceSettings: a.Service}
	return spec, nil
}

func (serviceKind) runtime(ctx context.Context, s *Service, a App, d *ApplicationDetail) (err error) {
	d.Slots, err = s.slotStates(ctx, a, s.currentRecord(ctx, a))
	return err
}

// keptImages is none: a service keeps releases, not images.
func (serviceKind) keptImages(context.Context, Store, App) ([]string, error) { return nil, nil }
