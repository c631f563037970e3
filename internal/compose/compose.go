// Package compose reads the compose documents of multi-container
// applications with the Compose Specification's Go library and checks
// that they hold only what Capstan runs: services with an image or a
// build, environment, env_file (standing for the application's
// environment), command, depends_on (with service_started or
// service_healthy), healthcheck, named volumes, networks, restart,
// mem_limit and expose. Ports are refused: the server's proxy routes to
// the application's web service.
//
// The control plane checks inline documents when they are given; the
// agent reads the document of every deployment (inline or from the
// repository) with the same rules before it creates anything.
package compose

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/tree"
	"github.com/compose-spec/compose-go/v2/types"
)

// Limits of a compose document.
const (
	MaxDocumentBytes = 256 << 10
	MaxServices      = 32
)

// supported are the attribute paths Capstan runs. Every other attribute
// of a document is reported by name.
var supported = func() []tree.Path {
	var out []tree.Path
	for _, p := range []string{
		"name", "version",
		"services",
		"services.*",
		"services.*.image",
		"services.*.build",
		"services.*.build.context",
		"services.*.build.dockerfile",
		"services.*.environment",
		"services.*.environment.*",
		"services.*.environment.[]",
		"services.*.env_file",
		"services.*.env_file.[]",
		"services.*.env_file.[].path",
		"services.*.env_file.[].required",
		"services.*.command",
		"services.*.command.[]",
		"services.*.depends_on",
		"services.*.depends_on.[]",
		"services.*.depends_on.*",
		"services.*.depends_on.*.condition",
		"services.*.depends_on.*.required",
		"services.*.healthcheck",
		"services.*.healthcheck.test",
		"services.*.healthcheck.test.[]",
		"services.*.healthcheck.interval",
		"services.*.healthcheck.timeout",
		"services.*.healthcheck.retries",
		"services.*.healthcheck.start_period",
		"services.*.healthcheck.start_interval",
		"services.*.healthcheck.disable",
		"services.*.volumes",
		"services.*.volumes.[]",
		"services.*.volumes.[].type",
		"services.*.volumes.[].source",
		"services.*.volumes.[].target",
		"services.*.volumes.[].read_only",
		"services.*.volumes.[].volume",
		"services.*.networks",
		"services.*.networks.[]",
		"services.*.networks.*",
		"services.*.restart",
		"services.*.mem_limit",
		"services.*.expose",
		"services.*.expose.[]",
		"volumes",
		"volumes.*",
		"networks",
		"networks.*",
	} {
		out = append(out, tree.NewPath(strings.Split(p, ".")...))
	}
	return out
}()

// Problem is a document Capstan does not run: the attributes it does not
// support, by path (services.web.ports), or what else is wrong.
type Problem struct {
	Unsupported []string
	Messages    []string
}

func (p *Problem) Error() string {
	var parts []string
	if len(p.Unsupported) > 0 {
		parts = append(parts, "unsupported keys: "+strings.Join(p.Unsupported, ", "))
	}
	parts = append(parts, p.Messages...)
	return "the compose document is not supported: " + strings.Join(parts, "; ")
}

// AsProblem returns err's *Problem, or nil.
func AsProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return nil
}

// Options say what a document may use.
type Options struct {
	// AllowBuild allows services built from the repository (git sources).
	AllowBuild bool
	// WebService is the service the proxy routes to; it must exist.
	WebService string
}

// Load reads a compose document as project name (an application name)
// and checks it. Values are taken literally: nothing is interpolated
// from an environment, and env_file entries stand for the application's
// environment (no file is read). It returns a *Problem for a document
// Capstan does not run, another error for one that is not a compose
// document.
func Load(ctx context.Context, name string, doc []byte, o Options) (*types.Project, error) {
	if len(doc) > MaxDocumentBytes {
		return nil, &Problem{Messages: []string{fmt.Sprintf("the document is larger than %d KiB", MaxDocumentBytes>>10)}}
	}
	var unsupported []loader.UnsupportedAttribute
	details := types.ConfigDetails{
		WorkingDir:  "/nonexistent",
		ConfigFiles: []types.ConfigFile{{Filename: "compose.yaml", Content: doc}},
		Environment: types.Mapping{},
	}
	p, err := loader.LoadWithContext(ctx, details,
		loader.WithSupportedAttributes(supported, func(a []loader.UnsupportedAttribute) { unsupported = a }),
		func(o *loader.Options) {
			o.SetProjectName(name, true)
			o.SkipInterpolation = true
			o.ResolvePaths = false
			o.SkipResolveEnvironment = true
			o.SkipInclude = true
			o.SkipExtends = true
			o.ResourceLoaders = nil
		})
	if len(unsupported) > 0 {
		pr := &Problem{}
		for _, a := range unsupported {
			pr.Unsupported = append(pr.Unsupported, string(a.Path))
		}
		slices.Sort(pr.Unsupported)
		pr.Unsupported = slices.Compact(pr.Unsupported)
		return nil, pr
	}
	if err != nil {
		return nil, fmt.Errorf("reading the compose document: %w", err)
	}
	if err := check(p, o); err != nil {
		return nil, err
	}
	return p, nil
}

// check checks what the schema does not.
func check(p *types.Project, o Options) error {
	pr := &Problem{}
	add := func(format string, args ...any) { pr.Messages = append(pr.Messages, fmt.Sprintf(format, args...)) }
	if len(p.Services) == 0 {
		add("the document has no services")
	}
	if len(p.Services) > MaxServices {
		add("at most %d services", MaxServices)
	}
	if _, ok := p.Services[o.WebService]; o.WebService != "" && !ok {
		add("web_service %q is not a service of the document", o.WebService)
	}
	for _, name := range sortedNames(p) {
		s := p.Services[name]
		if !serviceName(name) {
			add("service name %q must be lowercase letters, digits and '-' (at most 63)", name)
		}
		switch {
		case s.Build != nil && !o.AllowBuild:
			add("services.%s.build: only applications from git build services; give an image", name)
		case s.Build == nil && s.Image == "":
			add("services.%s needs an image or a build", name)
		}
		if s.Build != nil && s.Build.Context != "" && !relativeInside(s.Build.Context) {
			add("services.%s.build.context must be a directory inside the repository", name)
		}
		if s.Build != nil && s.Build.Dockerfile != "" && !relativeInside(s.Build.Dockerfile) {
			add("services.%s.build.dockerfile must be a path inside the build context", name)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeVolume || v.Source == "" {
				add("services.%s.volumes: only named volumes are supported (%s is a %s)", name, v.Target, v.Type)
				continue
			}
			if _, ok := p.Volumes[v.Source]; !ok {
				add("services.%s.volumes: volume %q is not declared under volumes", name, v.Source)
			}
		}
		for dep, d := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				add("services.%s.depends_on: %q is not a service of the document", name, dep)
			}
			switch d.Condition {
			case types.ServiceConditionStarted, types.ServiceConditionHealthy, "":
			default:
				add("services.%s.depends_on.%s.condition: %s is not supported (service_started or service_healthy)", name, dep, d.Condition)
			}
			if d.Condition == types.ServiceConditionHealthy {
				if dp, ok := p.Services[dep]; ok && (dp.HealthCheck == nil || dp.HealthCheck.Disable || len(dp.HealthCheck.Test) == 0) {
					add("services.%s.depends_on.%s: service_healthy needs a healthcheck on %s", name, dep, dep)
				}
			}
		}
		switch s.Restart {
		case "", types.RestartPolicyAlways, types.RestartPolicyUnlessStopped, types.RestartPolicyNo, types.RestartPolicyOnFailure:
		default:
			if !strings.HasPrefix(s.Restart, types.RestartPolicyOnFailure+":") {
				add("services.%s.restart: %q is not a restart policy", name, s.Restart)
			}
		}
	}
	for name, v := range p.Volumes {
		if v.External || v.Driver != "" || len(v.DriverOpts) > 0 {
			add("volumes.%s: only local volumes Capstan creates are supported", name)
		}
	}
	if _, err := Order(p); err != nil {
		add("%v", err)
	}
	if len(pr.Messages) > 0 {
		return pr
	}
	return nil
}

func sortedNames(p *types.Project) []string {
	names := make([]string, 0, len(p.Services))
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func serviceName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func relativeInside(p string) bool {
	if strings.HasPrefix(p, "/") || strings.Contains(p, "://") || strings.ContainsAny(p, "\x00\n") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return false
		}
	}
	return true
}

// Order returns the services in dependency order: each after those it
// depends on, ties by name. A cycle is an error.
func Order(p *types.Project) ([]string, error) {
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string, path []string) error
	visit = func(n string, path []string) error {
		switch state[n] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("depends_on has a cycle: %s", strings.Join(append(path, n), " → "))
		}
		state[n] = 1
		s := p.Services[n]
		deps := make([]string, 0, len(s.DependsOn))
		for d := range s.DependsOn {
			if _, ok := p.Services[d]; ok {
				deps = append(deps, d)
			}
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d, append(path, n)); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, n)
		return nil
	}
	for _, n := range sortedNames(p) {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}
