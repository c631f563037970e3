package e2e

// A throwaway systemd host for installer tests: a Debian tree made once with
// debootstrap and cached, booted with systemd-nspawn on a tmpfs overlay (the
// cached tree is never written), sharing the host's network so that
// 127.0.0.1 inside reaches the control plane under test.

import (
	"bytes"
	"context"
	"errors"
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
	bootTimeout        = 60 * time.Second
	execTimeout        = 90 * time.Second
)

// containerPath is PATH for commands inside the container.
const containerPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// inCI reports whether a missing prerequisite fails a test rather than
// skipping it.
func inCI() bool { return os.Getenv("CI") == "true" }

// requireNspawnHost skips the test, or fails it when CI=true, unless this
// machine can boot a systemd container: Linux, root, systemd-nspawn,
// nsenter, and debootstrap unless the tree is already cached.
func requireNspawnHost(t *testing.T) {
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
	if len(missing) == 0 {
		return
	}
	msg := "booting a systemd container needs " + strings.Join(missing, ", ") +
		" (as root: apt-get install systemd-container debootstrap)"
	if inCI() {
		t.Fatal(msg + "; CI=true, so this is a failure rather than a skip")
	}
	t.Skip(msg)
}

// rootfsCacheDir is where the Debian tree is cached
// (CAPSTAN_TEST_ROOTFS overrides the default).
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

// debianRootfs returns the cached Debian tree, building it first if it is
// missing or was made from another recipe. The build goes to a temporary
// directory next to the cache, renamed into place when complete, under an
// exclusive lock so that concurrent test processes build it once.
func debianRootfs(t *testing.T) string {
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

// buildRootfs runs debootstrap into root and prepares the tree for quick
// container boots.
func buildRootfs(t *testing.T, root string) {
	t.Helper()
	mirror := os.Getenv("CAPSTAN_TEST_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = defaultMirror
	}
	ctx, cancel := context.WithTimeout(context.Background(), rootfsBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+rootfsPackages,
		rootfsSuite, root, mirror)
	cmd.Env = append(childEnv(nil), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("debootstrap %s %s %s: %v\n%s", rootfsSuite, root, mirror, err, tail(string(out), 40))
		if b, rerr := os.ReadFile(filepath.Join(root, "debootstrap", "debootstrap.log")); rerr == nil {
			msg += "\ndebootstrap.log:\n" + tail(string(b), 60)
		}
		t.Fatal(msg)
	}
	// Downloaded packages are of no use in the cached tree.
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		os.Remove(d)
	}
	// debootstrap copies the build host's name; without it, a container
	// keeps the name systemd-nspawn gives it (its machine name).
	os.Remove(filepath.Join(root, "etc/hostname"))
	// A booted container must not try to talk to a (missing) console
	// login or to set up networking it shares with the host.
	for _, unit := range []string{"console-getty.service", "getty@.service", "systemd-networkd.service",
		"systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer"} {
		link := filepath.Join(root, "etc/systemd/system", unit)
		os.Remove(link)
		if err := os.Symlink("/dev/null", link); err != nil {
			t.Fatalf("masking %s: %v", unit, err)
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Container is a booted systemd-nspawn container.
type Container struct {
	Name    string
	cmd     *exec.Cmd
	initPID int // the container's systemd, as seen from the host
	logPath string
	exited  chan struct{}
}

var containerSeq atomic.Int64

// bootContainer boots root with systemd-nspawn on a tmpfs overlay (root is
// not modified), sharing the host's network, and waits until its systemd
// has finished starting up. The container is stopped when the test ends.
func bootContainer(t *testing.T, root string) *Container {
	t.Helper()
	c := &Container{
		Name:    fmt.Sprintf("capstan-e2e-%d-%d", os.Getpid(), containerSeq.Add(1)),
		logPath: filepath.Join(t.TempDir(), "nspawn.log"),
		exited:  make(chan struct{}),
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c.cmd = exec.Command("systemd-nspawn", "--quiet", "-D", root, "--volatile=overlay", "-b",
		"-M", c.Name, "--register=no", "--keep-unit")
	c.cmd.Env = childEnv(nil)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// Its own session, away from the test's terminal; stopped with the
	// test process even if that dies without cleaning up.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() {
		c.cmd.Wait() //nolint:errcheck // reported through the log
		close(c.exited)
	}()
	t.Cleanup(func() { c.stop(t) })

	deadline := time.Now().Add(bootTimeout)
	for c.initPID == 0 {
		c.initPID = childNamed(c.cmd.Process.Pid, "systemd")
		if c.initPID != 0 {
			break
		}
		select {
		case <-c.exited:
			t.Fatalf("systemd-nspawn exited while booting:\n%s", c.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no systemd under systemd-nspawn (pid %d) within %s:\n%s", c.cmd.Process.Pid, bootTimeout, c.Log())
		}
	}
	// systemd's private socket appears a moment after it starts.
	var state string
	for {
		res := c.Exec(t, "timeout 60 systemctl is-system-running --wait")
		state = strings.TrimSpace(res.Stdout)
		if state == "running" || state == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not finish booting within %s (state %q, exit %d: %s)\n%s",
				bootTimeout, state, res.ExitCode, res.Stderr, c.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if state == "degraded" {
		t.Logf("container %s booted degraded:\n%s", c.Name, c.Exec(t, "systemctl --failed --no-pager").Stdout)
	}
	return c
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

// Log is what systemd-nspawn and the container's console wrote so far.
func (c *Container) Log() string {
	b, _ := os.ReadFile(c.logPath)
	return tail(string(b), 60)
}

// Exec runs a sh script as root inside the container, with a clean
// environment, and returns its output and exit status.
func (c *Container) Exec(t *testing.T, script string) CLIResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.initPID), "-a", "--",
		"/usr/bin/env", "-i", "PATH="+containerPath, "HOME=/root", "LANG=C.UTF-8", "TERM=dumb",
		"/bin/sh", "-c", script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := CLIResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		res.ExitCode = exit.ExitCode()
	default:
		t.Fatalf("in container %s: %q: %v\nstdout: %s\nstderr: %s", c.Name, script, err, res.Stdout, res.Stderr)
	}
	return res
}

// MustExec runs script like Exec and fails the test unless it exits 0; it
// returns the standard output.
func (c *Container) MustExec(t *testing.T, script string) string {
	t.Helper()
	res := c.Exec(t, script)
	if res.ExitCode != 0 {
		t.Fatalf("in container %s: %q: exit %d\nstdout: %s\nstderr: %s", c.Name, script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// Show returns properties of a unit as systemctl show reports them.
func (c *Container) Show(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out := c.MustExec(t, "systemctl show "+unit+" -p "+strings.Join(props, " -p "))
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// stop halts the container (SIGTERM to systemd-nspawn makes it shut the
// container down), killing it if that takes too long.
func (c *Container) stop(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case <-c.exited:
		return
	case <-time.After(15 * time.Second):
	}
	t.Errorf("container %s did not stop within 15s of SIGTERM; killing it", c.Name)
	c.cmd.Process.Kill() //nolint:errcheck
	<-c.exited
}
