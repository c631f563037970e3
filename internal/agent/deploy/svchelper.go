package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The root side of service applications. The agent runs unprivileged; what
// needs root (moving a checkout into a release directory, running the
// build as the build account, writing a slot's unit and its root-only
// environment file, removing them) is done by the helper unit the
// installer sets up, capstan-app-helper@<app name>.service, which runs
// `capstan-agent app-helper <app name>` as root. The agent starts it
// through systemd (as it starts any service unit) after writing the
// request in its own state directory; the helper answers in the same
// directory. The helper trusts nothing in the request: names, ports and
// paths are checked again, and it only ever writes capstan-app-* units,
// /etc/capstan-apps/<app> and /var/lib/capstan-apps/<app>.

// Fixed places of service applications.
const (
	// AppsDir holds each service application's releases:
	// AppsDir/<name>/releases/<deployment id>.
	AppsDir = "/var/lib/capstan-apps"
	// AppsEnvDir holds each slot's environment file, root-only:
	// AppsEnvDir/<name>/<port>.env.
	AppsEnvDir = "/etc/capstan-apps"
	// UnitDir is where the slots' units are written.
	UnitDir = "/etc/systemd/system"
	// BuildAccount is the unprivileged account builds run as.
	BuildAccount = "capstan-build"
	// HelperUnitPrefix + name + ".service" is the helper's unit.
	HelperUnitPrefix = "capstan-app-helper@"
	// DefaultBuildTimeout bounds a build whose spec gives no limit.
	DefaultBuildTimeout = 15 * time.Minute
	// MaxBuildTimeout bounds ServiceSpec.BuildTimeoutSeconds.
	MaxBuildTimeout = 2 * time.Hour
)

// Helper operations.
const (
	opBuild   = "build"
	opInstall = "install"
	opRetire  = "retire"
	opPrune   = "prune"
	opRemove  = "remove"
)

var (
	svcNamePattern    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	releasePattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	slotUnitPattern   = regexp.MustCompile(`^capstan-app-([a-z0-9-]+)@([0-9]{1,5})\.service$`)
	envKeyPattern     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	errHelperRequest  = errors.New("invalid helper request")
	helperRequestFile = "request.json"
	helperResultFile  = "result.json"
	helperBuildLog    = "build.log"
)

// helperRequest is what the agent asks of the helper.
type helperRequest struct {
	Op   string `json:"op"`
	Name string `json:"name"`
	// Release is the deployment id of the release (build, install).
	Release string `json:"release,omitempty"`
	// Checkout is the directory name, in the app's state directory, of
	// the fetched commit to build (build).
	Checkout            string `json:"checkout,omitempty"`
	BuildCommand        string `json:"build_command,omitempty"`
	BuildTimeoutSeconds int    `json:"build_timeout_seconds,omitempty"`
	// Port is the slot (install, retire).
	Port         int      `json:"port,omitempty"`
	StartCommand string   `json:"start_command,omitempty"`
	MemoryMax    int64    `json:"memory_max,omitempty"`
	Env          []envVar `json:"env,omitempty"`
	Description  string   `json:"description,omitempty"`
	// Keep are the releases prune keeps (besides those a slot runs).
	Keep []string `json:"keep,omitempty"`
}

type envVar struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// helperResult is the helper's answer.
type helperResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Pruned are the releases prune removed.
	Pruned []string `json:"pruned,omitempty"`
	// BuildMillis is how long the build command ran.
	BuildMillis int64 `json:"build_ms,omitempty"`
}

// HelperPaths are the places the helper works in; the zero value means
// the fixed ones (tests point them elsewhere).
type HelperPaths struct {
	// StateDir is the agent's state directory; the requests are in
	// StateDir/apps/<name>.
	StateDir string
	AppsDir  string
	EnvDir   string
	UnitDir  string
	// Systemctl is the systemctl binary ("" means systemctl on PATH).
	Systemctl string
}

func (p HelperPaths) withDefaults() HelperPaths {
	if p.StateDir == "" {
		p.StateDir = "/var/lib/capstan-agent"
	}
	if p.AppsDir == "" {
		p.AppsDir = AppsDir
	}
	if p.EnvDir == "" {
		p.EnvDir = AppsEnvDir
	}
	if p.UnitDir == "" {
		p.UnitDir = UnitDir
	}
	if p.Systemctl == "" {
		p.Systemctl = "systemctl"
	}
	return p
}

// RunHelper is `capstan-agent app-helper NAME`: it reads the agent's
// request for application name, carries it out and writes the result
// (also on failure, which it returns as well).
func RunHelper(ctx context.Context, paths HelperPaths, name string) error {
	paths = paths.withDefaults()
	if !svcNamePattern.MatchString(name) {
		return fmt.Errorf("%w: application name %q", errHelperRequest, name)
	}
	dir := filepath.Join(paths.StateDir, "apps", name)
	res := helperResult{}
	err := func() error {
		b, err := readNoFollow(filepath.Join(dir, helperRequestFile), 1<<20)
		if err != nil {
			return fmt.Errorf("reading the request: %w", err)
		}
		// The request may hold environment values: gone once read.
		os.Remove(filepath.Join(dir, helperRequestFile))
		var req helperRequest
		if err := json.Unmarshal(b, &req); err != nil {
			return fmt.Errorf("%w: %v", errHelperRequest, err)
		}
		if req.Name != name {
			return fmt.Errorf("%w: the request is for %q, not %q", errHelperRequest, req.Name, name)
		}
		h := helper{paths: paths, dir: dir, req: req}
		return h.run(ctx, &res)
	}()
	if err != nil {
		res.Error = err.Error()
	} else {
		res.OK = true
	}
	b, _ := json.Marshal(res)
	if werr := writeAtomic(dir, helperResultFile, b, 0o600, agentOwner(dir)); werr != nil && err == nil {
		err = werr
	}
	return err
}

type helper struct {
	paths HelperPaths
	dir   string // the app's directory in the agent's state directory
	req   helperRequest
}

func (h helper) appDir() string      { return filepath.Join(h.paths.AppsDir, h.req.Name) }
func (h helper) releasesDir() string { return filepath.Join(h.appDir(), "releases") }
func (h helper) envDir() string      { return filepath.Join(h.paths.EnvDir, h.req.Name) }

func (h helper) run(ctx context.Context, res *helperResult) error {
	r := h.req
	switch r.Op {
	case opBuild:
		if !releasePattern.MatchString(r.Release) || !releasePattern.MatchString(r.Checkout) {
			return fmt.Errorf("%w: release %q, checkout %q", errHelperRequest, r.Release, r.Checkout)
		}
		return h.build(ctx, res)
	case opInstall:
		if !releasePattern.MatchString(r.Release) || r.Port < 1 || r.Port > 65535 || r.MemoryMax < 0 || !oneLine(r.StartCommand) || r.StartCommand == "" {
			return fmt.Errorf("%w: release %q, port %d, start command %q", errHelperRequest, r.Release, r.Port, r.StartCommand)
		}
		return h.install(ctx)
	case opRetire:
		if r.Port < 1 || r.Port > 65535 {
			return fmt.Errorf("%w: port %d", errHelperRequest, r.Port)
		}
		return h.retire(ctx, r.Port)
	case opPrune:
		for _, k := range r.Keep {
			if !releasePattern.MatchString(k) {
				return fmt.Errorf("%w: release %q", errHelperRequest, k)
			}
		}
		pruned, err := h.prune()
		res.Pruned = pruned
		return err
	case opRemove:
		return h.remove(ctx)
	}
	return fmt.Errorf("%w: operation %q", errHelperRequest, r.Op)
}

// oneLine: a command on one line without control characters.
func oneLine(s string) bool {
	return len(s) <= 4096 && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f })
}

// build moves the checkout into the release directory, hands it to the
// build account, runs the build command there with the time limit
// (output appended to the app's build log), then makes the release
// root-owned so that no later build can change it.
func (h helper) build(ctx context.Context, res *helperResult) error {
	acct, err := user.Lookup(BuildAccount)
	if err != nil {
		return fmt.Errorf("the build account %s does not exist (the agent's installer creates it; run it again): %v", BuildAccount, err)
	}
	uid, _ := strconv.Atoi(acct.Uid)
	gid, _ := strconv.Atoi(acct.Gid)
	logf, err := os.OpenFile(filepath.Join(h.dir, helperBuildLog), os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("opening the build log: %w", err)
	}
	defer logf.Close()

	if err := mkdirRoot(h.releasesDir(), 0o755); err != nil {
		return err
	}
	dst := filepath.Join(h.releasesDir(), h.req.Release)
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("release %s exists already", h.req.Release)
	}
	src := filepath.Join(h.dir, h.req.Checkout)
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return fmt.Errorf("the checkout %s is not a directory", h.req.Checkout)
	}
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("moving the checkout into the release directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dst)
		}
	}()
	// Moved into root's directory, it is what it was renamed as: a link
	// swapped in after the check above is refused before anything follows
	// it.
	if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
		return fmt.Errorf("the checkout %s is not a directory", h.req.Checkout)
	}
	// The agent's account may no longer reach into it, and nothing in it
	// is followed: links stay links, files linked elsewhere are dropped.
	if err := os.Lchown(dst, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o700); err != nil {
		return err
	}
	os.RemoveAll(filepath.Join(dst, ".git"))
	if err := chownTree(dst, uid, gid); err != nil {
		return err
	}
	home := filepath.Join(h.appDir(), "build-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(home, uid, gid); err != nil {
		return err
	}

	if h.req.BuildCommand != "" {
		timeout := time.Duration(h.req.BuildTimeoutSeconds) * time.Second
		if timeout <= 0 || timeout > MaxBuildTimeout {
			timeout = DefaultBuildTimeout
		}
		bctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(bctx, "/bin/sh", "-c", h.req.BuildCommand)
		cmd.Dir = dst
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8",
			"CAPSTAN_RELEASE=" + h.req.Release}
		cmd.Stdin = nil
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
			Setpgid:    true, Pdeathsig: syscall.SIGKILL,
		}
		// The whole process group goes at the time limit, not only the
		// shell.
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		// The build account must reach its directory.
		if err := os.Lchown(dst, uid, gid); err != nil {
			return err
		}
		fmt.Fprintf(logf, "$ %s\n", h.req.BuildCommand)
		start := time.Now()
		err := cmd.Run()
		res.BuildMillis = time.Since(start).Milliseconds()
		// Whatever the build left running is killed with its group.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		switch {
		case bctx.Err() == context.DeadlineExceeded:
			fmt.Fprintf(logf, "the build command exceeded its time limit of %s and was killed\n", timeout)
			return fmt.Errorf("the build command exceeded its time limit of %s", timeout)
		case ctx.Err() != nil:
			return fmt.Errorf("the build was cancelled: %w", ctx.Err())
		case err != nil:
			fmt.Fprintf(logf, "the build command failed: %v\n", err)
			return fmt.Errorf("the build command failed: %v", err)
		}
	}
	// The release is root's from now on: read-only to the units (which
	// run as dynamic users) and to later builds.
	if err := chownTree(dst, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return err
	}
	ok = true
	return nil
}

// chownTree gives every entry of dir to uid:gid without following links;
// a regular file with several links (one could point at a file outside)
// is removed instead.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			return os.Remove(p)
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			// No devices, sockets or pipes in a release.
			return os.Remove(p)
		}
		return os.Lchown(p, uid, gid)
	})
}

// SlotUnit is the unit of a service application's slot.
func SlotUnit(name string, port int) string {
	return fmt.Sprintf("capstan-app-%s@%d.service", name, port)
}

// install writes the slot's environment file and unit, and has systemd
// load it.
func (h helper) install(ctx context.Context) error {
	r := h.req
	dir := filepath.Join(h.releasesDir(), r.Release)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("release %s is not on this server", r.Release)
	}
	var env strings.Builder
	for _, kv := range r.Env {
		if !envKeyPattern.MatchString(kv.Key) || kv.Key == "PORT" {
			return fmt.Errorf("%w: environment variable %q", errHelperRequest, kv.Key)
		}
		env.WriteString(kv.Key + "=" + envQuote(kv.Value) + "\n")
	}
	fmt.Fprintf(&env, "PORT=%d\n", r.Port)
	if err := mkdirRoot(h.envDir(), 0o700); err != nil {
		return err
	}
	envFile := filepath.Join(h.envDir(), fmt.Sprintf("%d.env", r.Port))
	if err := writeAtomic(h.envDir(), filepath.Base(envFile), []byte(env.String()), 0o600, nil); err != nil {
		return err
	}
	unit := SlotUnit(r.Name, r.Port)
	body := renderSlotUnit(r, dir, envFile)
	if err := writeAtomic(h.paths.UnitDir, unit, []byte(body), 0o644, nil); err != nil {
		return err
	}
	// Enabled, so that the live slot comes back after a reboot.
	wants := filepath.Join(h.paths.UnitDir, "multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	link := filepath.Join(wants, unit)
	os.Remove(link)
	if err := os.Symlink(filepath.Join(h.paths.UnitDir, unit), link); err != nil {
		return err
	}
	return h.systemctl(ctx, "daemon-reload")
}

// renderSlotUnit is the unit of one slot: the start command as a dynamic
// user, sandboxed, in the release directory.
func renderSlotUnit(r helperRequest, dir, envFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by capstan-agent: application %s, release %s, port %d.\n", r.Name, r.Release, r.Port)
	b.WriteString("[Unit]\n")
	fmt.Fprintf(&b, "Description=%s\n", unitEscape(oneLineOr(r.Description, "Capstan application "+r.Name)))
	b.WriteString("After=network.target\n\n[Service]\nType=simple\n")
	b.WriteString("DynamicUser=yes\nProtectSystem=strict\nProtectHome=yes\nPrivateTmp=yes\nPrivateDevices=yes\nNoNewPrivileges=yes\n")
	fmt.Fprintf(&b, "WorkingDirectory=%s\n", dir)
	fmt.Fprintf(&b, "EnvironmentFile=%s\n", envFile)
	fmt.Fprintf(&b, "ExecStart=/bin/sh -c %s\n", execQuote(r.StartCommand))
	if r.MemoryMax > 0 {
		fmt.Fprintf(&b, "MemoryMax=%d\n", r.MemoryMax)
	}
	fmt.Fprintf(&b, "SyslogIdentifier=%s\n", r.Name)
	b.WriteString("Restart=on-failure\nRestartSec=1s\nKillMode=control-group\nTimeoutStopSec=10s\n\n")
	b.WriteString("[Install]\nWantedBy=multi-user.target\n")
	return b.String()
}

func oneLineOr(s, def string) string {
	if s == "" || !oneLine(s) {
		return def
	}
	return s
}

// unitEscape keeps systemd's specifiers out of a value.
func unitEscape(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// execQuote is s as one argument of ExecStart: double-quoted with C-style
// escapes, with systemd's specifiers (%) and variable references ($) kept
// literal.
func execQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '%':
			b.WriteString("%%")
		case '$':
			b.WriteString("$$")
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// envQuote is v as a value of an environment file: double-quoted, with
// the characters that are special there escaped.
func envQuote(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		switch r {
		case '\\', '"', '$', '`':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// retire stops a slot and removes its unit and environment file.
func (h helper) retire(ctx context.Context, port int) error {
	unit := SlotUnit(h.req.Name, port)
	path := filepath.Join(h.paths.UnitDir, unit)
	if _, err := os.Lstat(path); err == nil {
		if err := h.systemctl(ctx, "stop", unit); err != nil {
			return err
		}
	}
	os.Remove(filepath.Join(h.paths.UnitDir, "multi-user.target.wants", unit))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(filepath.Join(h.envDir(), fmt.Sprintf("%d.env", port))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := h.systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	// A failed unit stays listed until reset.
	h.systemctl(ctx, "reset-failed", unit) //nolint:errcheck // gone units are fine
	return nil
}

// prune removes the releases neither kept nor run by a slot.
func (h helper) prune() ([]string, error) {
	entries, err := os.ReadDir(h.releasesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	keep := slices.Clone(h.req.Keep)
	slots, err := listSlots(h.paths.UnitDir, h.req.Name)
	if err != nil {
		return nil, err
	}
	for _, s := range slots {
		keep = append(keep, s.Release)
	}
	var pruned []string
	for _, e := range entries {
		if slices.Contains(keep, e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(h.releasesDir(), e.Name())); err != nil {
			return pruned, err
		}
		pruned = append(pruned, e.Name())
	}
	return pruned, nil
}

// remove retires every slot and removes the application's releases and
// environment files.
func (h helper) remove(ctx context.Context) error {
	slots, err := listSlots(h.paths.UnitDir, h.req.Name)
	if err != nil {
		return err
	}
	for _, s := range slots {
		if err := h.retire(ctx, s.Port); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(h.envDir()); err != nil {
		return err
	}
	return os.RemoveAll(h.appDir())
}

func (h helper) systemctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, h.paths.Systemctl, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// slot is a slot unit found in the unit directory.
type slot struct {
	Unit    string
	Port    int
	Release string
}

// listSlots lists the slot units of application name, from the unit files
// (their first line names the release).
func listSlots(unitDir, name string) ([]slot, error) {
	matches, err := filepath.Glob(filepath.Join(unitDir, "capstan-app-"+name+"@*.service"))
	if err != nil {
		return nil, err
	}
	var out []slot
	for _, m := range matches {
		unit := filepath.Base(m)
		sm := slotUnitPattern.FindStringSubmatch(unit)
		if sm == nil || sm[1] != name {
			continue
		}
		port, _ := strconv.Atoi(sm[2])
		b, err := readNoFollow(m, 64<<10)
		if err != nil {
			continue
		}
		release := ""
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "WorkingDirectory="); ok {
				release = filepath.Base(d)
				break
			}
		}
		out = append(out, slot{Unit: unit, Port: port, Release: release})
	}
	slices.SortFunc(out, func(a, b slot) int { return a.Port - b.Port })
	return out, nil
}

// readNoFollow reads a regular file that is not a link, up to max bytes.
func readNoFollow(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// writeAtomic writes dir/name through a temporary file renamed over it
// (a link planted at name is replaced, never followed); owner, when not
// nil, is given the file.
func writeAtomic(dir, name string, data []byte, mode fs.FileMode, owner *[2]int) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if owner != nil {
		if err := f.Chown(owner[0], owner[1]); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// agentOwner is the owner of the agent's directory dir, for the files the
// helper leaves there.
func agentOwner(dir string) *[2]int {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return &[2]int{int(st.Uid), int(st.Gid)}
}

// mkdirRoot makes dir (and its parents) owned by root with mode.
func mkdirRoot(dir string, mode fs.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}
