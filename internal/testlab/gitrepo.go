package testlab

import (
	"maps"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Real git repositories of the GitHost stand-in: a bare repository per
// HostedRepo made with AddGitRepo, served over git's smart HTTP protocol
// by git http-backend (through net/http/cgi) at the repository's
// clone_url, https://HOST/OWNER/NAME.git, as GitHub serves them. Every
// request must carry a live installation token of the stand-in that may
// read the repository as the password of HTTP basic authentication (the
// user name is not checked, as on GitHub); anything else is answered 401.

// GitBinary returns the path of git, or skips the test (fails under CI).
func GitBinary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		Require(t, "git (apt-get install git)")
	}
	return p
}

// gitRepo is the bare repository of a HostedRepo and a work tree that
// pushes to it.
type gitRepo struct {
	bare, work string
	// fetches counts the upload-pack requests (fetches) served.
	fetches atomic.Int64
	// refused counts the requests answered 401.
	refused atomic.Int64
}

// runGit runs git in dir with a clean configuration and fails the test on
// error; it returns the output, trimmed.
func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(GitBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "XDG_CONFIG_HOME="+dir, "LC_ALL=C",
		"GIT_AUTHOR_NAME=Ada Lovelace", "GIT_AUTHOR_EMAIL=ada@example.com",
		"GIT_COMMITTER_NAME=Ada Lovelace", "GIT_COMMITTER_EMAIL=ada@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// AddGitRepo adds a repository backed by a real bare git repository with
// no commits yet; Push adds commits.
func (g *GitHost) AddGitRepo(t testing.TB, owner, name string, private bool) *HostedRepo {
	t.Helper()
	GitBinary(t)
	root := t.TempDir()
	bare := filepath.Join(root, "repos", owner, name+".git")
	work := filepath.Join(root, "work")
	for _, d := range []string{bare, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runGit(t, bare, "init", "-q", "--bare", "-b", "main")
	runGit(t, work, "init", "-q", "-b", "main")
	r := g.AddRepo(owner, name, private, nil)
	gr := &gitRepo{bare: bare, work: work}
	g.mu.Lock()
	g.gitRepos[r.ID] = gr
	r.Resolve = func(ref string) (HostedCommit, bool) {
		cmd := exec.Command("git", "log", "-1", "--format=%H%x00%P%x00%an%x00%ae%x00%B", ref+"^{commit}", "--")
		cmd.Dir = bare
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+bare)
		out, err := cmd.Output()
		if err != nil || strings.HasPrefix(ref, "-") {
			return HostedCommit{}, false
		}
		f := strings.SplitN(string(out), "\x00", 5)
		if len(f) != 5 {
			return HostedCommit{}, false
		}
		return HostedCommit{SHA: f[0], Parents: strings.Fields(f[1]), AuthorName: f[2], AuthorEmail: f[3],
			Message: strings.TrimRight(f[4], "\n")}, true
	}
	g.mu.Unlock()
	return r
}

// Push commits files (path → content; a nil content deletes the file) to
// branch of a repository made by AddGitRepo and pushes it; it returns the
// commit's sha.
func (g *GitHost) Push(t testing.TB, r *HostedRepo, branch string, files map[string][]byte, message string) string {
	t.Helper()
	g.mu.Lock()
	gr := g.gitRepos[r.ID]
	g.mu.Unlock()
	if gr == nil {
		t.Fatalf("testlab.GitHost: %s was not made by AddGitRepo", r.FullName())
	}
	// Switch to the branch, creating it from the current commit.
	runGitOK(gr.work, "checkout", "-q", "-B", branch)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(gr.work, filepath.FromSlash(name))
		if files[name] == nil {
			os.Remove(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, files[name], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runGit(t, gr.work, "add", "-A")
	runGit(t, gr.work, "commit", "-q", "--allow-empty", "-m", message)
	sha := runGit(t, gr.work, "rev-parse", "HEAD")
	runGit(t, gr.work, "push", "-q", "-f", gr.bare, "HEAD:refs/heads/"+branch)
	g.UpdateRepo(r, func(r *HostedRepo) {
		r.Branches[branch] = sha
		if c, ok := r.Resolve(sha); ok {
			r.Commits[sha] = c
		}
	})
	return sha
}

// runGitOK runs git, ignoring failures (a checkout of a branch in an
// empty repository).
func runGitOK(dir string, args ...string) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	cmd.Run() //nolint:errcheck // best effort
}

// GitFetches is how many fetches of the repository the stand-in served.
func (g *GitHost) GitFetches(r *HostedRepo) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr := g.gitRepos[r.ID]; gr != nil {
		return gr.fetches.Load()
	}
	return 0
}

// GitRefused is how many git requests of the repository were refused for
// want of a valid token.
func (g *GitHost) GitRefused(r *HostedRepo) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr := g.gitRepos[r.ID]; gr != nil {
		return gr.refused.Load()
	}
	return 0
}

// serveGit serves /OWNER/NAME.git/… of a repository made by AddGitRepo;
// false when the path names none.
func (g *GitHost) serveGit(w http.ResponseWriter, r *http.Request) bool {
	owner, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !ok {
		return false
	}
	name, sub, ok := strings.Cut(rest, ".git/")
	if !ok {
		return false
	}
	g.mu.Lock()
	var repo *HostedRepo
	var gr *gitRepo
	for id, hr := range g.repos {
		if g.gitRepos[id] != nil && strings.EqualFold(hr.Owner, owner) && strings.EqualFold(hr.Name, name) {
			repo, gr = hr, g.gitRepos[id]
		}
	}
	g.mu.Unlock()
	if repo == nil {
		return false
	}
	_, password, _ := r.BasicAuth()
	if password == "" || !g.TokenAllows(password, repo.ID) {
		gr.refused.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "Invalid username or token. Password authentication is not supported for Git operations.", http.StatusUnauthorized)
		return true
	}
	if sub == "git-upload-pack" {
		gr.fetches.Add(1)
	}
	if sub == "git-receive-pack" || r.URL.Query().Get("service") == "git-receive-pack" {
		http.Error(w, "read-only", http.StatusForbidden)
		return true
	}
	h := &cgi.Handler{
		Path: GitBinaryPath(),
		Args: []string{"http-backend"},
		Dir:  gr.bare,
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(filepath.Dir(gr.bare)), "GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1", "HOME=" + gr.bare},
		InheritEnv: []string{"PATH"},
	}
	// git reads the protocol version the client asks for from
	// GIT_PROTOCOL; cgi passes the header as HTTP_GIT_PROTOCOL.
	if v := r.Header.Get("Git-Protocol"); v != "" {
		h.Env = append(h.Env, "GIT_PROTOCOL="+v)
	}
	h.ServeHTTP(w, r)
	return true
}

// GitBinaryPath is git's path, or "git".
func GitBinaryPath() string {
	if p, err := exec.LookPath("git"); err == nil {
		return p
	}
	return "git"
}

// TokenFor mints an installation token of a new installation on the
// repositories' owner that can read exactly them, without the app's JWT:
// for tests of the agent, which only ever receives such a token.
func (g *GitHost) TokenFor(t testing.TB, repos ...*HostedRepo) string {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	in := &hostedInstallation{id: g.id(), account: repos[0].Owner, accountType: "Organization"}
	for _, r := range repos {
		in.repos = append(in.repos, r.ID)
	}
	g.installations[in.id] = in
	value := "ghs_" + randomHex(18)
	g.tokens[value] = hostedToken{installation: in.id, expires: time.Now().Add(g.tokenTTL)}
	return value
}
