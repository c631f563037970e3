package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A deploy from git fetches exactly one commit into a fresh directory
// (shallow, over HTTPS, the installation token passed to git through
// GIT_CONFIG_* environment variables as an HTTP header, so it is never
// written to a file or a URL), builds the image through the engine's API
// from a tar of the build context, tags it, and removes the directory.
// A build with build secrets is a BuildKit build (buildkit.go); the
// others use the engine's legacy builder.

var (
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	buildArgKey   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// buildSecretID is Docker's rule for secret names.
	buildSecretID = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?$`)
)

// maxBuildLine bounds one line of build output sent as an event.
const maxBuildLine = 4 << 10

// buildInputs are the secrets of a build.
type buildInputs struct {
	token string
	args  map[string]*string
	// secrets are the build secrets by id; nil when the build has none.
	secrets map[string][]byte
}

// checkBuild checks a build spec and takes its secrets.
func checkBuild(p agentproto.DeployPayload, secrets map[string]string) (buildInputs, error) {
	b := p.Build
	u, err := url.Parse(b.CloneURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return buildInputs{}, fmt.Errorf("build.clone_url must be an https:// URL without credentials")
	}
	if !commitPattern.MatchString(b.Commit) {
		return buildInputs{}, fmt.Errorf("build.commit must be 40 lowercase hexadecimal digits, not %q", b.Commit)
	}
	for _, p := range []string{b.Dockerfile, b.Context} {
		if p != "" && !localPath(p) {
			return buildInputs{}, fmt.Errorf("build paths must be relative paths inside the repository, not %q", p)
		}
	}
	if p.Image == "" {
		return buildInputs{}, errors.New("image (the tag to build) is required")
	}
	in := buildInputs{token: secrets[agentproto.SecretGitToken], args: map[string]*string{}}
	if in.token == "" {
		return buildInputs{}, fmt.Errorf("the job's secrets have no %s to fetch the repository with", agentproto.SecretGitToken)
	}
	for _, k := range b.BuildArgKeys {
		v, ok := secrets[agentproto.SecretBuildArgPrefix+k]
		if !buildArgKey.MatchString(k) || !ok {
			return buildInputs{}, fmt.Errorf("build argument %q is invalid or has no value in the job's secrets", k)
		}
		in.args[k] = &v
	}
	for _, id := range b.BuildSecretKeys {
		v, ok := secrets[agentproto.SecretBuildSecretPrefix+id]
		if !buildSecretID.MatchString(id) || !ok {
			return buildInputs{}, fmt.Errorf("build secret %q is invalid or has no value in the job's secrets", id)
		}
		if in.secrets == nil {
			in.secrets = map[string][]byte{}
		}
		in.secrets[id] = []byte(v)
	}
	return in, nil
}

// localPath reports whether p is a relative path that stays inside its
// root.
func localPath(p string) bool {
	return filepath.IsLocal(p) && !strings.ContainsRune(p, '\\')
}

// buildImage fetches the commit and builds the payload's image from it.
func (d *Deployer) buildImage(ctx context.Context, cli *client.Client, p agentproto.DeployPayload, in buildInputs, events agent.EventSink) (image, *agentproto.BuildResult, error) {
	b := p.Build
	res := &agentproto.BuildResult{Commit: b.Commit}
	repo, dir, err := d.checkout(ctx, p, in, res, events)
	defer os.RemoveAll(dir)
	if err != nil {
		return image{}, nil, err
	}
	img, err := d.buildFrom(ctx, cli, p.AppID, b.Commit, repo, b.Context, b.Dockerfile, p.Image, in, res, events)
	if err != nil {
		return image{}, nil, err
	}
	return img, res, nil
}

// checkout fetches the payload's commit into repo, in a new directory
// dir ("" when none was made) that the caller removes.
func (d *Deployer) checkout(ctx context.Context, p agentproto.DeployPayload, in buildInputs, res *agentproto.BuildResult, events agent.EventSink) (repo, dir string, err error) {
	b := p.Build
	dir, err = os.MkdirTemp(d.opts.BuildDir, "capstan-build-")
	if err != nil {
		return "", "", fmt.Errorf("making the build directory: %w", err)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("fetching commit %s of %s", b.Commit[:12], b.Repository), nil)
	start := time.Now()
	repo = filepath.Join(dir, "src")
	if err := fetchCommit(ctx, dir, repo, b.CloneURL, b.Commit, in.token); err != nil {
		return "", dir, err
	}
	res.FetchMillis = time.Since(start).Milliseconds()
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("fetched commit %s in %d ms", b.Commit[:12], res.FetchMillis), nil)
	return repo, dir, nil
}

// buildFrom builds the image tag from the build context ctxRel of the
// checkout repo ("" for its root), with the Dockerfile at dockerfile in
// it ("" for Dockerfile) and the build arguments and secrets of in, and
// adds the build to res. The context must be a directory of the
// checkout, its symbolic links resolved.
func (d *Deployer) buildFrom(ctx context.Context, cli *client.Client, app, commit, repo, ctxRel, dockerfile, tag string,
	in buildInputs, res *agentproto.BuildResult, events agent.EventSink) (image, error) {
	ctxDir := repo
	if ctxRel != "" {
		ctxDir = filepath.Join(repo, filepath.FromSlash(ctxRel))
	}
	if dockerfile == "" {
		dockerfile = "Dockerfile"
	}
	if err := insideRepo(repo, ctxDir); err != nil {
		return image{}, fmt.Errorf("build context %q: %w", ctxRel, err)
	}
	if fi, err := os.Lstat(filepath.Join(ctxDir, filepath.FromSlash(dockerfile))); err != nil || !fi.Mode().IsRegular() {
		return image{}, fmt.Errorf("commit %s has no Dockerfile at %s in the build context %q", commit[:12], dockerfile, orDot(ctxRel))
	}

	msg := fmt.Sprintf("building %s from %s", tag, path.Join(orDot(ctxRel), dockerfile))
	if len(in.secrets) > 0 {
		msg += fmt.Sprintf(" with BuildKit and %d build secrets", len(in.secrets))
	}
	events.Emit(agentproto.LevelInfo, msg, nil)
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarContext(pw, ctxDir, repo)) }()
	defer pr.Close()
	opts := client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: dockerfile, BuildArgs: in.args, Remove: true, ForceRemove: true,
		Labels:  map[string]string{agentproto.LabelApp: app, agentproto.LabelCommit: commit},
		Version: build.BuilderV1,
	}
	var id string
	var err error
	if len(in.secrets) > 0 {
		id, err = buildKit(ctx, cli, pr, opts, in.secrets, res, events)
	} else {
		id, err = buildLegacy(ctx, cli, pr, opts, res, events)
	}
	if err != nil {
		return image{}, fmt.Errorf("building %s: %w", tag, err)
	}
	insp, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		return image{}, fmt.Errorf("inspecting the built image %s: %w", tag, err)
	}
	if id != "" && !sameImage(id, insp.ID) {
		return image{}, fmt.Errorf("the built image is %s but %s names %s (another build tagged it meanwhile)", shortImage(id), tag, shortImage(insp.ID))
	}
	res.ImageID = insp.ID
	took := time.Since(start).Milliseconds()
	res.BuildMillis += took
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("built %s: image %s in %d ms (%d of %d steps from the cache)",
		tag, shortImage(insp.ID), took, res.CachedSteps, res.Steps), nil)
	return image{ID: insp.ID}, nil
}

func orDot(s string) string {
	if s == "" {
		return "."
	}
	return s
}

// insideRepo checks that dir, symlinks resolved, is repo or below it.
func insideRepo(repo, dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return errors.New("not in the commit")
	}
	root, err := filepath.EvalSymlinks(repo)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return errors.New("leads outside the repository")
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return errors.New("is not a directory of the commit")
	}
	return nil
}

// gitEnv is the environment of the git commands: the agent's own (for the
// CA settings, PATH and proxy variables) without any git configuration
// from files or the environment, with the token as an HTTP header.
func gitEnv(home, token string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GIT_") && k != "GIT_SSL_CAINFO" && k != "GIT_SSL_CAPATH" || k == "HOME" || k == "XDG_CONFIG_HOME" {
			continue
		}
		env = append(env, kv)
	}
	header := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	return append(env,
		"HOME="+home, "XDG_CONFIG_HOME="+home, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
		"GIT_CONFIG_COUNT=3",
		"GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+header,
		"GIT_CONFIG_KEY_1=credential.helper", "GIT_CONFIG_VALUE_1=",
		"GIT_CONFIG_KEY_2=advice.detachedHead", "GIT_CONFIG_VALUE_2=false",
	)
}

// fetchCommit makes repo a checkout of commit, fetched alone (depth 1)
// from cloneURL. The URL is given on the command line, never stored as a
// remote.
func fetchCommit(ctx context.Context, home, repo, cloneURL, commit, token string) error {
	if _, err := exec.LookPath("git"); err != nil {
		return errors.New("git is not installed on this server (apt-get install git); it fetches the commits to build")
	}
	env := gitEnv(home, token)
	run := func(what string, args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env = repo, env
		cmd.WaitDelay = 5 * time.Second
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			msg := strings.TrimSpace(out.String())
			if len(msg) > 2000 {
				msg = msg[len(msg)-2000:]
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", what, context.Cause(ctx))
			}
			if strings.Contains(msg, "could not read Username") || strings.Contains(msg, "Authentication failed") ||
				strings.Contains(msg, "The requested URL returned error: 401") || strings.Contains(msg, "The requested URL returned error: 403") {
				return fmt.Errorf("%s: the git host refused the credentials (an expired or revoked installation token, or a repository the installation no longer reaches): %s", what, msg)
			}
			return fmt.Errorf("%s: %v: %s", what, err, msg)
		}
		return nil
	}
	if err := os.Mkdir(repo, 0o700); err != nil {
		return err
	}
	if err := run("git init", "init", "-q"); err != nil {
		return err
	}
	if err := run("fetching commit "+commit[:12], "fetch", "-q", "--depth", "1", "--no-tags", cloneURL, commit); err != nil {
		return err
	}
	return run("checking out commit "+commit[:12], "checkout", "-q", "--detach", "FETCH_HEAD")
}

// contextTime is the modification time of every file of a build context:
// a checkout's times are those of the fetch, and the same content must
// hit the builder's cache.
var contextTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// tarContext writes the build context dir as a tar stream to w, without
// the repository's .git directory.
func tarContext(w io.Writer, dir, repo string) error {
	tw := tar.NewWriter(w)
	gitDir := filepath.Join(repo, ".git")
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == gitDir {
			return filepath.SkipDir
		}
		if p == dir {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = contextTime, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("packing the build context: %w", err)
	}
	return tw.Close()
}

// buildLegacy builds with the engine's legacy builder and returns the
// id of the image built.
func buildLegacy(ctx context.Context, cli *client.Client, body io.Reader, opts client.ImageBuildOptions, res *agentproto.BuildResult, events agent.EventSink) (string, error) {
	out, err := cli.ImageBuild(ctx, body, opts)
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	return readBuild(out.Body, res, events)
}

// readBuild reads the engine's build output: each line becomes an event;
// it counts steps and cache hits and returns the image id the engine
// reports.
func readBuild(r io.Reader, res *agentproto.BuildResult, events agent.EventSink) (string, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var id string
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return id, nil
		} else if err != nil {
			return "", fmt.Errorf("reading the build output: %w", err)
		}
		if m.Error != nil {
			events.Emit(agentproto.LevelError, trimLine(m.Error.Message), nil)
			return "", errors.New(m.Error.Message)
		}
		if m.Aux != nil {
			var aux struct {
				ID string `json:"ID"`
			}
			if json.Unmarshal(*m.Aux, &aux) == nil && aux.ID != "" {
				id = aux.ID
			}
		}
		for _, line := range strings.Split(m.Stream, "\n") {
			line = strings.TrimRight(line, "\r ")
			if line == "" {
				continue
			}
			switch {
			case strings.HasPrefix(line, "Step "):
				res.Steps++
			case strings.Contains(line, "---> Using cache"):
				res.CachedSteps++
			}
			events.Emit(agentproto.LevelInfo, trimLine(line), map[string]string{"build": "output"})
		}
	}
}

func trimLine(s string) string {
	if len(s) > maxBuildLine {
		return s[:maxBuildLine] + "…"
	}
	return s
}

// danglingBuilds returns the application's built images that lost their
// tag to a newer build of the same commit: prune candidates.
func danglingBuilds(ctx context.Context, cli *client.Client, app string) []string {
	list, err := cli.ImageList(ctx, client.ImageListOptions{
		Filters: client.Filters{}.Add("dangling", "true").Add("label", agentproto.LabelApp+"="+app),
	})
	if err != nil {
		return nil
	}
	var ids []string
	for _, im := range list.Items {
		ids = append(ids, im.ID)
	}
	slices.Sort(ids)
	return ids
}
