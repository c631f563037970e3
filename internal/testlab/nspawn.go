package testlab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The cached Debian tree. Change rootfsRecipe (suite, variant, packages or
// the tweaks in buildRootfs) and the cache is rebuilt on the next run.
const (
	defaultRootfsCache = "/var/cache/capstan-test/bookworm-rootfs"
	defaultMirror      = "http://deb.debian.org/debian"
	rootfsSuite        = "bookworm"
	// rootfsStamp, at the top of a complete tree, holds rootfsRecipe.
	rootfsStamp = ".capstan-rootfs"
	// libpam-systemd provides "logind", which polkitd depends on and
	// debootstrap cannot resolve by itself.
	rootfsPackages = "systemd,systemd-sysv,dbus,libpam-systemd,curl,ca-certificates,polkitd,caddy"
	rootfsRecipe   = "v2 " + rootfsSuite + " minbase " + rootfsPackages + "\n"

	rootfsBuildTimeout = 15 * time.Minute
	bootTimeout        = 2 * time.Minute
	execTimeout        = 2 * time.Minute
	hostStopTimeout    = 30 * time.Second
)

// hostPath is PATH for commands inside a host.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// RequireNspawn skips the test, or fails it when CI=true, unless this
// machine can boot a systemd host: Linux, root, systemd-nspawn, nsenter,
// and debootstrap unless the tree is already cached.
func RequireNspawn(t testing.TB) {
	t.Helper()
	var missing []string
	if runtime.GOOS != "linux" {
		missing = append(missing, "Linux")
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, bin := range []string{"systemd-nspawn", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if !rootfsComplete(rootfsCacheDir()) {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			missing = append(missing, "debootstrap (the Debian tree is not cached at "+rootfsCacheDir()+")")
		}
	}
	if len(missing) > 0 {
		Require(t, "booting a systemd host needs "+strings.Join(missing, ", ")+
			" (as root: apt-get install systemd-container debootstrap)")
	}
}

// rootfsCacheDir is where the Debian tree is cached (CAPSTAN_TEST_ROOTFS
// overrides the default).
func rootfsCacheDir() string {
	if d := os.Getenv("CAPSTAN_TEST_ROOTFS"); d != "" {
		return d
	}
	return defaultRootfsCache
}

func rootfsComplete(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, rootfsStamp))
	return err == nil && string(b) == rootfsRecipe
}

// DebianRootfs returns the cached Debian tree (minbase with systemd,
// polkit, curl and caddy), building it first if it is missing or was made
// from another recipe. The build goes to a temporary directory next to
// the cache, renamed into place when complete, under an exclusive lock so
// that concurrent test processes build it once. Hosts never write to it.
func DebianRootfs(t testing.TB) string {
	t.Helper()
	dir := rootfsCacheDir()
	if rootfsComplete(dir) {
		return dir
	}
	parent, base := filepath.Split(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	t.Logf("waiting for the lock on %s.lock", dir)
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("flock %s.lock: %v", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if rootfsComplete(dir) {
		return dir // another process built it meanwhile
	}
	// Leftovers of interrupted builds: nobody else builds while we hold
	// the lock.
	if old, _ := filepath.Glob(filepath.Join(parent, base+".tmp-*")); len(old) > 0 {
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	tmp, err := os.MkdirTemp(parent, base+".tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // gone after the rename unless the build failed
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Logf("building the Debian %s tree in %s with debootstrap (once; takes a minute or two)", rootfsSuite, dir)
	buildRootfs(t, tmp)
	if err := os.WriteFile(filepath.Join(tmp, rootfsStamp), []byte(rootfsRecipe), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		stale := fmt.Sprintf("%s.tmp-stale-%d", dir, os.Getpid())
		if err := os.Rename(dir, stale); err != nil {
			t.Fatalf("moving the outdated tree away: %v", err)
		}
		defer os.RemoveAll(stale)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatalf("renaming the new tree into place: %v", err)
	}
	t.Logf("built %s in %s", dir, time.Since(start).Round(time.Second))
	return dir
}

// debianMirror is the Debian mirror debootstrap installs from
// (CAPSTAN_TEST_DEBIAN_MIRROR overrides the default).
func debianMirror() string {
	if m := os.Getenv("CAPSTAN_TEST_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return defaultMirror
}

// buildRootfs runs debootstrap into root and prepares the tree for quick
// boots.
func buildRootfs(t testing.TB, root string) {
	t.Helper()
	mirror := debianMirror()
	ctx, cancel := context.WithTimeout(context.Background(), rootfsBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+rootfsPackages,
		rootfsSuite, root, mirror)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("debootstrap %s %s %s: %v\n%s", rootfsSuite, root, mirror, err, Tail(string(out), 40))
		if b, rerr := os.ReadFile(filepath.Join(root, "debootstrap", "debootstrap.log")); rerr == nil {
			msg += "\ndebootstrap.log:\n" + Tail(string(b), 60)
		}
		t.Fatal(msg)
	}
	// Downloaded packages are of no use in the cached tree.
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		os.Remove(d)
	}
	// debootstrap copies the build host's name; without it, a host keeps
	// the name systemd-nspawn gives it (its machine name).
	os.Remove(filepath.Join(root, "etc/hostname"))
	// A booted host must not try to talk to a (missing) console login or
	// to set up networking it shares with the machine.
	for _, unit := range []string{"console-getty.service", "getty@.service", "systemd-networkd.service",
		"systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer"} {
		link := filepath.Join(root, "etc/systemd/system", unit)
		os.Remove(link)
		if err := os.Symlink("/dev/null", link); err != nil {
			t.Fatalf("masking %s: %v", unit, err)
		}
	}
}

// HostOptions configure BootHost.
type HostOptions struct {
	// BindsRO are read-only bind mounts, "HOSTPATH:PATH" each.
	BindsRO []string
	// Binds are writable bind mounts, "HOSTPATH:PATH" each (the Docker
	// socket, for one).
	Binds []string
}

// Host is a booted systemd host: a systemd-nspawn container with systemd
// as its PID 1, sharing the machine's network (127.0.0.1 inside is the
// machine's).
type Host struct {
	// Name is the machine name, which is also its hostname.
	Name    string
	cmd     *exec.Cmd
	initPID int // the host's systemd, as seen from the machine
	logPath string
	exited  chan struct{}
}

var hostSeq atomic.Int64

// BootHost boots root (see DebianRootfs) with systemd-nspawn on a tmpfs
// overlay, so root is not modified, and waits until its systemd has
// finished starting up. The host is halted when the test ends.
func BootHost(t testing.TB, root string, opts HostOptions) *Host {
	t.Helper()
	h := &Host{
		Name:    fmt.Sprintf("capstan-test-%d-%d", os.Getpid(), hostSeq.Add(1)),
		logPath: filepath.Join(t.TempDir(), "nspawn.log"),
		exited:  make(chan struct{}),
	}
	logf, err := os.Create(h.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"--quiet", "-D", root, "--volatile=overlay", "-b", "-M", h.Name, "--register=no", "--keep-unit"}
	for _, b := range opts.BindsRO {
		args = append(args, "--bind-ro="+b)
	}
	for _, b := range opts.Binds {
		args = append(args, "--bind="+b)
	}
	h.cmd = exec.Command("systemd-nspawn", args...)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	// Its own session, away from the test's terminal; halted with the
	// test process even if that dies without cleaning up.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() {
		h.cmd.Wait() //nolint:errcheck // reported through the log
		close(h.exited)
	}()
	t.Cleanup(func() { h.Stop(t) })

	deadline := time.Now().Add(bootTimeout)
	EventuallyReport(t, bootTimeout, "systemd under systemd-nspawn (pid "+strconv.Itoa(h.cmd.Process.Pid)+")", func() (bool, string) {
		select {
		case <-h.exited:
			t.Fatalf("systemd-nspawn exited while booting:\n%s", h.Log())
		default:
		}
		h.initPID = childNamed(h.cmd.Process.Pid, "systemd")
		return h.initPID != 0, h.Log()
	})
	// systemd's private socket appears a moment after it starts.
	var state string
	EventuallyReport(t, time.Until(deadline), "host "+h.Name+" finished booting", func() (bool, string) {
		res := h.Exec(t, "timeout 60 systemctl is-system-running --wait")
		state = strings.TrimSpace(res.Stdout)
		return state == "running" || state == "degraded",
			fmt.Sprintf("state %q, exit %d: %s\n%s", state, res.ExitCode, res.Stderr, h.Log())
	})
	if state == "degraded" {
		t.Logf("host %s booted degraded:\n%s", h.Name, h.Exec(t, "systemctl --failed --no-pager").Stdout)
	}
	return h
}

// childNamed returns the pid of a child of ppid whose command is comm, or 0.
func childNamed(ppid int, comm string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || s[open+1:end] != comm {
			continue
		}
		if p, _ := strconv.Atoi(fields[1]); p == ppid {
			return pid
		}
	}
	return 0
}

// Log is the end of what systemd-nspawn and the host's console wrote.
func (h *Host) Log() string {
	b, _ := os.ReadFile(h.logPath)
	return Tail(string(b), 60)
}

// Exec runs a sh script as root inside the host, with a clean
// environment, and returns its output and exit status.
func (h *Host) Exec(t testing.TB, script string) ExecResult {
	t.Helper()
	return h.Run(t, "/bin/sh", "-c", script)
}

// Run runs a command (an argument list) as root inside the host, with a
// clean environment, and returns its output and exit status.
func (h *Host) Run(t testing.TB, argv ...string) ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	args := append([]string{"-t", strconv.Itoa(h.initPID), "-a", "--",
		"/usr/bin/env", "-i", "PATH=" + hostPath, "HOME=/root", "LANG=C.UTF-8", "TERM=dumb"}, argv...)
	return RunCommand(t, ctx, exec.CommandContext(ctx, "nsenter", args...), fmt.Sprintf("in host %s: %q", h.Name, argv))
}

// MustExec runs script like Exec and fails the test unless it exits 0;
// it returns the standard output.
func (h *Host) MustExec(t testing.TB, script string) string {
	t.Helper()
	return h.MustRun(t, "/bin/sh", "-c", script)
}

// MustRun runs argv like Run and fails the test unless it exits 0; it
// returns the standard output.
func (h *Host) MustRun(t testing.TB, argv ...string) string {
	t.Helper()
	res := h.Run(t, argv...)
	if res.ExitCode != 0 {
		t.Fatalf("in host %s: %q: exit %d\nstdout: %s\nstderr: %s", h.Name, argv, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// Show returns properties of a unit as systemctl show reports them.
func (h *Host) Show(t testing.TB, unit string, props ...string) map[string]string {
	t.Helper()
	out := h.MustExec(t, "systemctl show "+unit+" -p "+strings.Join(props, " -p "))
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// RunInstaller fetches the agent's installer from url with curl inside
// the host and runs it as root with args, as an operator pastes the
// install command ("curl -fsSL URL | sh -s -- ARGS"). It returns the
// installer's output and exit status.
func (h *Host) RunInstaller(t testing.TB, url string, args ...string) ExecResult {
	t.Helper()
	script := "curl -fsSL " + shellQuote(url) + " | sh -s --"
	for _, a := range args {
		script += " " + shellQuote(a)
	}
	return h.Exec(t, script)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Stop halts the host (SIGTERM to systemd-nspawn shuts it down cleanly),
// killing it if that takes too long. Later calls do nothing.
func (h *Host) Stop(t testing.TB) {
	select {
	case <-h.exited:
		return
	default:
	}
	h.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case <-h.exited:
		return
	case <-time.After(hostStopTimeout):
	}
	t.Errorf("host %s did not halt within %s of SIGTERM; killing it", h.Name, hostStopTimeout)
	h.cmd.Process.Kill() //nolint:errcheck
	<-h.exited
}

// InstallPackages installs Debian packages inside the host with apt-get
// (from the mirror debootstrap used), failing the test if it cannot. The
// host's overlay keeps them until it stops; the cached tree is untouched.
func (h *Host) InstallPackages(t testing.TB, pkgs ...string) {
	t.Helper()
	script := "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends"
	for _, p := range pkgs {
		script += " " + shellQuote(p)
	}
	res := h.Exec(t, script+" >/dev/null")
	if res.ExitCode != 0 {
		t.Fatalf("installing %s in host %s: exit %d\n%s", strings.Join(pkgs, " "), h.Name, res.ExitCode, Tail(res.Stderr, 30))
	}
}
