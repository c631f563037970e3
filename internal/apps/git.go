package apps

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Applications from git: the source names an installation of the git host
// app, a repository and a branch. A deployment resolves its ref (the
// branch by default) to an exact commit on the control plane and freezes
// it in its spec; the agent fetches that commit with an installation
// token handed over in the job's secrets, builds the image
// capstan/<name>:<short sha> and releases it like any image. A rollback
// runs the image a deployment built, without building.
//
// A container application from git may have build secrets: values that
// only the build reads, through BuildKit secret mounts. Like build
// arguments they are sealed with the application, frozen with each
// deployment and handed to the agent in the job's secrets; unlike them
// they are in no layer of the image nor in its history. Nobody reads
// them back, administrators included.

// Defaults and limits of builds.
const (
	DefaultDockerfile   = "Dockerfile"
	DefaultBuildContext = "."
	MaxBuildPathLen     = 255
	MaxRefLen           = 255
	// MaxBuildSecrets and MaxBuildSecretKeyLen bound an application's
	// build secrets; a value is at most MaxEnvValueBytes.
	MaxBuildSecrets      = 50
	MaxBuildSecretKeyLen = 64
	// ShortSHALen is the length of the commit sha in image tags.
	ShortSHALen = 12
)

// GitHost is what applications need of the git host integration.
type GitHost interface {
	// Access returns a repository an installation can read, with a token
	// scoped to it; field names the input field of a refusal (fault
	// Invalid), or "" for a 404.
	Access(ctx context.Context, installationID, repoID int64, field string) (githost.RepoAccess, error)
	// Resolve resolves a branch, tag or commit of the repository to its
	// commit; a ref the repository does not have is fault Invalid on ref.
	Resolve(ctx context.Context, ra githost.RepoAccess, ref string) (githost.Commit, error)
	// Compare says where commit head stands relative to commit base; two
	// commits the repository cannot compare are fault NotFound.
	Compare(ctx context.Context, ra githost.RepoAccess, base, head string) (githost.Comparison, error)
}

// BuildSettings say how a git application's image is built.
type BuildSettings struct {
	// Dockerfile is the Dockerfile's path inside the build context.
	Dockerfile string `json:"dockerfile"`
	// Context is the build context's directory in the repository.
	Context string `json:"build_context"`
	// ArgKeys name the build arguments (values sealed with the app).
	ArgKeys []string `json:"build_arg_keys"`
	// SecretKeys name the build secrets (values sealed with the app);
	// nil when none.
	SecretKeys []string `json:"build_secret_keys,omitempty"`
}

// GitSpec is what a deployment from git builds.
type GitSpec struct {
	InstallationID int64    `json:"installation_id"`
	RepoID         int64    `json:"repo_id"`
	Repository     string   `json:"repository" doc:"owner/name"`
	Ref            string   `json:"ref" doc:"The branch, tag or commit asked for"`
	CommitSHA      string   `json:"commit_sha" doc:"The exact commit built"`
	CommitMessage  string   `json:"commit_message"`
	CommitAuthor   string   `json:"commit_author" doc:"Name <email>"`
	Dockerfile     string   `json:"dockerfile"`
	BuildContext   string   `json:"build_context"`
	BuildArgKeys   []string `json:"build_arg_keys" doc:"Names of the build arguments; the values are never shown"`
	// BuildSecretKeys is nil for deployments without build secrets.
	BuildSecretKeys []string `json:"build_secret_keys,omitempty" doc:"Names of the build secrets; the values are never shown"`
}

// buildSecretKeyPattern is Docker's rule for the names of secrets.
var buildSecretKeyPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$`)

// RefProblem says what is wrong with a git ref (a branch, tag or commit);
// "" if nothing. These are git's rules for ref names (check-ref-format).
func RefProblem(ref string) string {
	switch {
	case ref == "":
		return "is required"
	case len(ref) > MaxRefLen:
		return fmt.Sprintf("must be at most %d characters", MaxRefLen)
	case hasControlOrSpace(ref) || strings.ContainsAny(ref, "~^:?*[\\"):
		return "must not contain spaces, control characters or any of ~ ^ : ? * [ \\"
	case strings.HasPrefix(ref, "-") || strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/") ||
		strings.HasSuffix(ref, ".") || strings.HasSuffix(ref, ".lock"):
		return "must not start with '-' or '/', nor end with '/', '.' or '.lock'"
	case strings.Contains(ref, "..") || strings.Contains(ref, "//") || strings.Contains(ref, "@{") || ref == "@" ||
		strings.Contains(ref, "/."):
		return "must not contain '..', '//', '@{' or a component starting with '.'"
	}
	return ""
}

// BuildPathProblem says what is wrong with a path inside the repository.
func BuildPathProblem(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case len(p) > MaxBuildPathLen:
		return fmt.Sprintf("must be at most %d characters", MaxBuildPathLen)
	case hasControlOrSpace(p) || strings.ContainsRune(p, '\\'):
		return "must not contain spaces, control characters or backslashes"
	case strings.HasPrefix(p, "/"):
		return "must be relative to the repository"
	case path.Clean(p) != p:
		return "must be a clean path (no '//', './' or trailing '/')"
	case p == ".." || strings.HasPrefix(p, "../"):
		return "must stay inside the repository"
	}
	return ""
}

// validateBuild checks the build settings of a source into errs.
func validateBuild(src Source, b BuildSettings, args []EnvVar, errs *fault.Fields) {
	if src.Type != SourceGit {
		if b.Dockerfile != "" || b.Context != "" || len(args) > 0 {
			errs.Add("dockerfile", "dockerfile, build_context and build_args are only for git sources")
		}
		return
	}
	if p := BuildPathProblem(b.Dockerfile); p != "" || b.Dockerfile == "." {
		if p == "" {
			p = "must name a file"
		}
		errs.Add("dockerfile", "%s", p)
	}
	if p := BuildPathProblem(b.Context); p != "" {
		errs.Add("build_context", "%s", p)
	}
	var fe fault.Fields
	validateEnv(args, &fe)
	for _, f := range fe {
		errs.Add("build_"+f.Field, "%s", f.Message)
	}
}

// validateBuildSecrets checks build secrets into errs: only a container
// application from git builds with them.
func validateBuildSecrets(kind string, src Source, secrets []BuildSecret, errs *fault.Fields) {
	if len(secrets) == 0 {
		return
	}
	if kind != KindContainer || src.Type != SourceGit {
		errs.Add("build_secrets", "build secrets are only for container applications from git (their Dockerfile builds)")
		return
	}
	if len(secrets) > MaxBuildSecrets {
		errs.Add("build_secrets", "at most %d build secrets", MaxBuildSecrets)
		return
	}
	seen := map[string]bool{}
	for i, e := range secrets {
		if p := keyProblem(e.Key, MaxBuildSecretKeyLen, buildSecretKeyPattern, seen,
			"must be letters, digits, '_', '-' and '.', starting and ending with a letter or digit"); p != "" {
			errs.Add(fmt.Sprintf("build_secrets[%d].key", i), "%s", p)
		}
		seen[e.Key] = true
		val := fmt.Sprintf("build_secrets[%d].value", i)
		switch {
		case e.Value == "":
			errs.Add(val, "is required")
		case len(e.Value) > MaxEnvValueBytes:
			errs.Add(val, "must be at most %d bytes", MaxEnvValueBytes)
		}
	}
}

func buildSecretKeys(secrets []BuildSecret) []string {
	var keys []string
	for _, e := range secrets {
		keys = append(keys, e.Key)
	}
	return keys
}

// buildSecretsAgent checks that serverID's agent builds with build
// secrets: an older one would build without them.
func (s *Service) buildSecretsAgent(ctx context.Context, serverID string) error {
	srv, err := s.servers.Get(ctx, serverID)
	if err != nil {
		return err
	}
	if srv.Facts != nil && slices.Contains(srv.Facts.Capabilities, agentproto.CapabilityBuildSecrets) {
		return nil
	}
	return fault.Conflictf("agent-upgrade-required", "%s", noBuildSecretsAgent(srv))
}

// noBuildSecretsAgent says that the server's agent cannot build with
// build secrets.
func noBuildSecretsAgent(srv servers.Server) string {
	version := "unknown"
	if srv.Facts != nil && strings.TrimSpace(srv.Facts.AgentVersion) != "" {
		version = srv.Facts.AgentVersion
	}
	return fmt.Sprintf("The agent of server %s (version %s) does not build with build secrets; it would build without them. "+
		"Upgrade the agent on the server, then try again.", srv.ID, version)
}

func buildArgKeys(args []EnvVar) []string {
	keys := envKeys(args)
	if len(keys) == 0 {
		return nil
	}
	return keys
}

// gitProblems checks, with the git host, that the installation can read
// the repository and that the branch exists. The caller validated the
// fields' formats.
func (s *Service) gitProblems(ctx context.Context, src Source, errs *fault.Fields) error {
	if s.git == nil {
		errs.Add("source.type", "git sources need the git host integration, which this control plane does not have")
		return nil
	}
	ra, err := s.git.Access(ctx, src.InstallationID, src.RepoID, "source.repo_id")
	if fe := fault.As(err); fe != nil && fe.Kind == fault.Invalid {
		for _, f := range fe.Fields {
			errs.Add(f.Field, "%s", f.Message)
		}
		return nil
	} else if fe != nil && fe.Kind == fault.Conflict {
		// No app is connected.
		errs.Add("source.type", "%s", fe.Message)
		return nil
	}
	if err != nil {
		return err
	}
	_, err = s.git.Resolve(ctx, ra, src.Branch)
	if fe := fault.As(err); fe != nil && fe.Kind == fault.Invalid {
		errs.Add("source.branch", "repository %s has no branch %s", ra.Repository.FullName, src.Branch)
		return nil
	}
	return err
}

// gitSpec resolves ref (the application's branch when "") to its commit
// and returns the spec that builds it.
func (s *Service) gitSpec(ctx context.Context, a App, ref string) (Spec, error) {
	mem, p := ParseMemory(a.MemoryLimit)
	if p != "" {
		return Spec{}, fault.Conflictf("invalid-settings", "The application's memory limit %s", p)
	}
	if ref == "" {
		ref = a.Source.Branch
	}
	if p := RefProblem(ref); p != "" {
		return Spec{}, fault.Invalidf("ref", "%s", p)
	}
	if s.git == nil {
		return Spec{}, fault.Conflictf("githost-not-connected", "The application deploys from git, and this control plane has no git host integration.")
	}
	ra, err := s.git.Access(ctx, a.Source.InstallationID, a.Source.RepoID, "")
	if err != nil {
		if fe := fault.As(err); fe != nil && (fe.Kind == fault.NotFound || fe.Kind == fault.Conflict) {
			return Spec{}, fault.Conflictf("repository-unavailable", "The application's repository cannot be read: %s", fe.Message)
		}
		return Spec{}, err
	}
	c, err := s.git.Resolve(ctx, ra, ref)
	if err != nil {
		return Spec{}, err
	}
	b := a.Build
	return Spec{AppName: a.Name, Image: "capstan/" + a.Name + ":" + c.SHA[:ShortSHALen], ContainerPort: a.ContainerPort,
		HealthPath: a.HealthPath, EnvKeys: a.EnvKeys, MemoryLimit: a.MemoryLimit, MemoryLimitBytes: mem,
		Git: &GitSpec{InstallationID: a.Source.InstallationID, RepoID: a.Source.RepoID, Repository: ra.Repository.FullName,
			Ref: ref, CommitSHA: c.SHA, CommitMessage: c.Message, CommitAuthor: c.Author,
			Dockerfile: b.Dockerfile, BuildContext: b.Context, BuildArgKeys: nonNilKeys(b.ArgKeys), BuildSecretKeys: b.SecretKeys}}, nil
}

func nonNilKeys(k []string) []string {
	if k == nil {
		return []string{}
	}
	return k
}

func buildArgsContext(prefix, id string) string { return prefix + ".build_args:" + id }

func (s *Service) sealBuildArgs(prefix, id string, args []EnvVar) (string, error) {
	return sealList(s.key, buildArgsContext(prefix, id), args)
}

func (s *Service) openBuildArgs(prefix, id, sealed string) ([]EnvVar, error) {
	return openList[EnvVar](s.key, buildArgsContext(prefix, id), sealed)
}

func buildSecretsContext(prefix, id string) string { return prefix + ".build_secrets:" + id }

func (s *Service) sealBuildSecrets(prefix, id string, secrets []BuildSecret) (string, error) {
	return sealList(s.key, buildSecretsContext(prefix, id), secrets)
}

func (s *Service) openBuildSecrets(prefix, id, sealed string) ([]BuildSecret, error) {
	return openList[BuildSecret](s.key, buildSecretsContext(prefix, id), sealed)
}

// sealBuild seals build values to an application or a deployment.
func (s *Service) sealBuild(prefix, id string, b buildValues) (args, secrets string, err error) {
	if args, err = s.sealBuildArgs(prefix, id, b.args); err != nil {
		return "", "", err
	}
	secrets, err = s.sealBuildSecrets(prefix, id, b.secrets)
	return args, secrets, err
}

// buildPayload is the build of a deployment from git with its secrets:
// a token scoped to the repository, minted now, the build arguments and
// the build secrets. A repository that cannot be read, or build secrets
// for an agent that would build without them, fail the deployment,
// saying why.
func (s *Service) buildPayload(ctx context.Context, d DeploymentRecord, secrets map[string]string) (*agentproto.BuildSpec, error) {
	g := d.Spec.Git
	if s.git == nil {
		return nil, &cannotStart{reason: "the application deploys from git, and this control plane has no git host integration"}
	}
	ra, err := s.git.Access(ctx, g.InstallationID, g.RepoID, "")
	if err != nil {
		if fe := fault.As(err); fe != nil {
			return nil, &cannotStart{reason: "the repository cannot be read: " + fe.Message}
		}
		return nil, err
	}
	sealed, err := s.store.DeploymentBuildArgs(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	args, err := s.openBuildArgs("deployments", d.ID, sealed)
	if err != nil {
		return nil, err
	}
	keys := []string{}
	for _, a := range args {
		secrets[agentproto.SecretBuildArgPrefix+a.Key] = a.Value
		keys = append(keys, a.Key)
	}
	sealed, err = s.store.DeploymentBuildSecrets(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	buildSecrets, err := s.openBuildSecrets("deployments", d.ID, sealed)
	if err != nil {
		return nil, err
	}
	if len(buildSecrets) > 0 {
		if err := s.buildSecretsAgent(ctx, d.ServerID); err != nil {
			if fe := fault.As(err); fe != nil {
				return nil, &cannotStart{reason: fe.Message}
			}
			return nil, err
		}
	}
	for _, b := range buildSecrets {
		secrets[agentproto.SecretBuildSecretPrefix+b.Key] = b.Value
	}
	secrets[agentproto.SecretGitToken] = ra.Token.Value
	return &agentproto.BuildSpec{CloneURL: ra.Repository.CloneURL, Repository: ra.Repository.FullName, Commit: g.CommitSHA,
		Dockerfile: g.Dockerfile, Context: contextDir(g.BuildContext), BuildArgKeys: keys, BuildSecretKeys: buildSecretKeys(buildSecrets)}, nil
}

// contextDir is a build context as the agent takes it: "" for the root.
func contextDir(c string) string {
	if c == DefaultBuildContext {
		return ""
	}
	return c
}

// buildPatch is what a patch changes of an application's build: the new
// build arguments and build secrets when it replaces them (nil when it
// does not), and the fields changed.
type buildPatch struct {
	args    *[]EnvVar
	secrets *[]BuildSecret
	changed []string
}

// patchBuild applies the build fields of a patch to a (whose source the
// patch changed already) and checks them into errs.
func (s *Service) patchBuild(a *App, p Patch, errs *fault.Fields) buildPatch {
	var bp buildPatch
	if a.Source.Type != SourceGit {
		a.Build, a.SealedBuildArgs, a.SealedBuildSecrets = BuildSettings{}, "", ""
	} else {
		a.Build.Dockerfile = cmpOr(a.Build.Dockerfile, DefaultDockerfile)
		a.Build.Context = cmpOr(a.Build.Context, DefaultBuildContext)
	}
	setField(&a.Build.Dockerfile, p.Dockerfile, "dockerfile", &bp.changed)
	setField(&a.Build.Context, p.BuildContext, "build_context", &bp.changed)
	var args []EnvVar
	if p.BuildArgs != nil {
		args = *p.BuildArgs
		if args == nil {
			args = []EnvVar{}
		}
		a.Build.ArgKeys = buildArgKeys(args)
		bp.changed = append(bp.changed, "build_args")
		bp.args = &args
	}
	validateBuild(a.Source, a.Build, args, errs)
	if p.BuildSecrets != nil {
		secrets := *p.BuildSecrets
		if secrets == nil {
			secrets = []BuildSecret{}
		}
		validateBuildSecrets(a.Kind, a.Source, secrets, errs)
		a.Build.SecretKeys = buildSecretKeys(secrets)
		bp.changed = append(bp.changed, "build_secrets")
		bp.secrets = &secrets
	}
	return bp
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// AutoDeploy queues a deployment of a pushed commit for each active
// application from git that follows the pushed branch of the repository,
// through the installation, with auto_deploy on, unless the commit is
// older than what the application deploys already (see pushProblem). A
// burst of pushes coalesces: while a deployment runs, the newest queued
// one supersedes the older queued ones when the slot frees. An
// application whose deployment is refused (its server is gone, say) is
// skipped, saying why; a failure of the git host or the store fails the
// push, for the provider to deliver it again (applications that queued
// it already then skip it as the commit they deploy).
func (s *Service) AutoDeploy(ctx context.Context, p githost.Push) (githost.PushOutcome, error) {
	out := githost.PushOutcome{DeploymentIDs: []string{}}
	list, err := s.store.ListApps(ctx, "")
	if err != nil {
		return out, err
	}
	for _, a := range list {
		if a.Source.Type != SourceGit || !a.AutoDeploy || a.State != StateActive || a.Source.InstallationID != p.InstallationID ||
			a.Source.RepoID != p.RepoID || a.Source.Branch != p.Branch {
			continue
		}
		id, skip, err := s.autoDeploy(ctx, a, p)
		switch {
		case err != nil:
			return out, err
		case skip != "":
			out.Skipped = append(out.Skipped, githost.SkippedDeploy{ApplicationID: a.ID, Reason: skip})
		default:
			out.DeploymentIDs = append(out.DeploymentIDs, id)
		}
	}
	return out, nil
}

// pushLookback is how many of an application's newest deployments a push
// is compared against: the newest of them from git that is no rollback.
const pushLookback = 20

// autoDeploy queues a's deployment of a push and returns its id, or says
// why it skips it. The deployment is queued only if no other deployment
// of a was queued since its newest was compared with the push; otherwise
// the push is compared again with the new newest, so that of two pushes
// handled at once the older never ends up queued after the newer.
func (s *Service) autoDeploy(ctx context.Context, a App, p githost.Push) (id, skip string, err error) {
	for {
		recent, err := s.store.ListDeployments(ctx, a.ID, pushLookback)
		if err != nil {
			return "", "", err
		}
		if skip, err := s.pushProblem(ctx, a, p, recent); err != nil || skip != "" {
			return "", skip, err
		}
		after := ""
		if len(recent) > 0 {
			after = recent[0].ID
		}
		d, err := s.deploy(ctx, audit.System, a.ID, p.CommitSHA, &after)
		if errors.Is(err, errDeploymentsChanged) {
			if err := ctx.Err(); err != nil {
				return "", "", err
			}
			continue
		}
		if err == nil {
			return d.ID, "", nil
		}
		if k := fault.KindOf(err); k == fault.Upstream || k == fault.Internal {
			return "", "", err // for a redelivery to try again
		}
		s.log.WarnContext(ctx, "auto-deploy of a push not queued", "app_id", a.ID, "commit", p.CommitSHA, "err", err.Error())
		return "", "the deployment could not be queued: " + fault.As(err).Message, nil
	}
}

// lastGitDeployment is the newest of recent (newest first) that deploys a
// commit of the repository and is no rollback: a rollback runs an older
// commit on purpose, and does not make the commits after it new again.
func lastGitDeployment(recent []DeploymentRecord, repoID int64) *DeploymentRecord {
	for i, d := range recent {
		if d.RollbackOf == "" && d.Spec.Git != nil && d.Spec.Git.RepoID == repoID && d.Spec.Git.CommitSHA != "" {
			return &recent[i]
		}
	}
	return nil
}

func shortSHA(sha string) string { return sha[:min(len(sha), ShortSHALen)] }

// pushProblem says why a push is not deployed to a, or "" to deploy it.
// The pushed commit is compared, through the git host, with the commit of
// a's newest deployment from the repository (rollbacks aside): a commit
// ahead of it is deployed; the same commit is not deployed again; one
// behind it (older) or diverged from it is deployed only if it is the
// branch's head on the git host now, as after a reset or a force-push,
// which a push delivered again after newer ones never is. A deployment by
// ref through the API is never subject to this.
func (s *Service) pushProblem(ctx context.Context, a App, p githost.Push, recent []DeploymentRecord) (string, error) {
	last := lastGitDeployment(recent, p.RepoID)
	if last == nil || s.git == nil {
		return "", nil
	}
	base := last.Spec.Git.CommitSHA
	if base == p.CommitSHA {
		return fmt.Sprintf("commit %s is the commit of deployment %s already", shortSHA(p.CommitSHA), last.ID), nil
	}
	ra, err := s.git.Access(ctx, a.Source.InstallationID, a.Source.RepoID, "")
	if err != nil {
		if fe := fault.As(err); fe != nil && (fe.Kind == fault.NotFound || fe.Kind == fault.Conflict) {
			return "the repository cannot be read: " + fe.Message, nil
		}
		return "", err
	}
	status := githost.CompareDiverged // two commits the git host cannot compare: as unrelated
	c, err := s.git.Compare(ctx, ra, base, p.CommitSHA)
	switch {
	case err == nil:
		status = c.Status
	case !fault.Is(err, fault.NotFound):
		return "", err
	}
	switch status {
	case githost.CompareAhead:
		return "", nil
	case githost.CompareIdentical:
		return fmt.Sprintf("commit %s is the commit of deployment %s already", shortSHA(p.CommitSHA), last.ID), nil
	}
	head, err := s.git.Resolve(ctx, ra, p.Branch)
	if err != nil && !fault.Is(err, fault.Invalid) {
		return "", err
	}
	if err == nil && head.SHA == p.CommitSHA {
		return "", nil // the branch was reset or force-pushed to it
	}
	now := "no longer exists"
	if err == nil {
		now = "is at " + shortSHA(head.SHA) + " now"
	}
	how := "is older than"
	if status != githost.CompareBehind {
		how = "is not a descendant of"
	}
	return fmt.Sprintf("commit %s %s commit %s of deployment %s, and branch %s %s; deploy it by ref to run it anyway",
		shortSHA(p.CommitSHA), how, shortSHA(base), last.ID, p.Branch, now), nil
}
