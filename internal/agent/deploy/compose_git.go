package deploy

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/compose"
)

// A compose application from git: the release fetches the deployment's
// commit once, reads the compose file from it (ComposeSpec.File, else
// compose.yaml, else docker-compose.yml), and builds every service with a
// build from its context in the checkout, through the engine's API like
// the image of a container application from git, the output streamed as
// events. A build's context and Dockerfile stay inside the checkout: a
// path that leaves it (.., an absolute path, a symbolic link pointing
// out) fails the deployment before anything runs.

// defaultComposeFiles are the compose files looked for, in order, when the
// application names none.
var defaultComposeFiles = []string{"compose.yaml", "docker-compose.yml"}

// composeCheckout is a fetched commit of a compose application from git.
type composeCheckout struct {
	repo  string // the checkout
	file  string // the compose file's path in it, slash-separated
	doc   []byte
	in    buildInputs
	build *agentproto.BuildResult
}

// checkoutCompose fetches the payload's commit and reads its compose file;
// the caller removes dir.
func (d *Deployer) checkoutCompose(ctx context.Context, p agentproto.DeployPayload, in buildInputs, events agent.EventSink) (co *composeCheckout, dir string, err error) {
	res := &agentproto.BuildResult{Commit: p.Build.Commit}
	repo, dir, err := d.checkout(ctx, p, in, res, events)
	if err != nil {
		return nil, dir, err
	}
	names := defaultComposeFiles
	if f := p.Compose.File; f != "" {
		if !localPath(f) {
			return nil, dir, fmt.Errorf("compose_file %q must be a relative path inside the repository", f)
		}
		names = []string{f}
	}
	for _, name := range names {
		full := filepath.Join(repo, filepath.FromSlash(name))
		fi, err := os.Lstat(full)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			return nil, dir, fmt.Errorf("the compose file %s of commit %s is not a regular file", name, p.Build.Commit[:12])
		}
		if err := insideRepo(repo, filepath.Dir(full)); err != nil {
			return nil, dir, fmt.Errorf("the compose file %s: %w", name, err)
		}
		if fi.Size() > compose.MaxDocumentBytes {
			return nil, dir, fmt.Errorf("the compose file %s is larger than %d KiB", name, compose.MaxDocumentBytes>>10)
		}
		doc, err := os.ReadFile(full)
		if err != nil {
			return nil, dir, fmt.Errorf("reading the compose file %s: %w", name, err)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("read the compose file %s of commit %s", name, p.Build.Commit[:12]), nil)
		return &composeCheckout{repo: repo, file: name, doc: doc, in: in, build: res}, dir, nil
	}
	return nil, dir, fmt.Errorf("commit %s has no compose file %s", p.Build.Commit[:12], strings.Join(names, " or "))
}

// buildService builds the image of a service with a build from the
// checkout, tagged <repository>-<service>:<tag> after the payload's image
// reference. The context is relative to the compose file's directory.
func (d *Deployer) buildService(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, co *composeCheckout, ps *plannedService, events agent.EventSink) (image, error) {
	b := ps.svc.Build
	ctxRel := path.Join(path.Dir(co.file), orDot(b.Context))
	if !localPath(ctxRel) && ctxRel != "." {
		return image{}, fmt.Errorf("service %s: build.context %q leads outside the repository", ps.name, b.Context)
	}
	if b.Dockerfile != "" && !localPath(b.Dockerfile) {
		return image{}, fmt.Errorf("service %s: build.dockerfile %q must be a path inside the build context", ps.name, b.Dockerfile)
	}
	tag := serviceImageTag(p.Image, ps.name)
	img, err := d.buildFrom(ctx, cli, p.AppID, p.Build.Commit, co.repo, contextOf(ctxRel), b.Dockerfile, tag, co.in, co.build, events)
	if err != nil {
		return image{}, fmt.Errorf("service %s: %w", ps.name, err)
	}
	return img, nil
}

func contextOf(rel string) string {
	if rel == "." {
		return ""
	}
	return rel
}

// serviceImageTag is the tag of a service's built image: the payload's
// image reference with -<service> after its repository.
func serviceImageTag(ref, service string) string {
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok {
		return ref + "-" + service
	}
	return repo + "-" + service + ":" + tag
}
