package service

// A throwaway systemd host for the service tests: the Debian tree that the
// e2e installer tests cache (built here the same way if missing, so it is
// built once per machine), booted with systemd-nspawn on a tmpfs overlay
// (the cached tree is never written). The jobs run inside it through
// testdata/svcjob, as the agent's unprivileged account.

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

// The cached Debian tree, shared with e2e/install_harness_test.go: the
// same path, recipe and stamp. A tree with any stamp is used as it is (the
// e2e tests own the recipe); a missing one is built from this recipe.
const (
	defaultRootfsCache = "/var/cache/capstan-test/bookworm-rootfs"
	defaultMirror      = "http://deb.debian.org/debian"
	rootfsSuite        = "bookworm"
	rootfsStamp        = ".capstan-rootfs"
	rootfsPackages     = "systemd,systemd-sysv,dbus,libpam-systemd,curl,ca-certificates,polkitd"
	rootfsRecipe       = "v2 " + rootfsSuite + " minbase " + rootfsPackages + "\n"

	rootfsBuildTimeout = 15 * time.Minute
	bootTimeout        = 60 * time.Second
	execTimeout        = 90 * time.Second
	containerPath      = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// requireNspawnHost skips the test, or fails it when CI=true, unless this
// machine can boot a systemd container.
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
	if !rootfsUsable(rootfsCacheDir()) {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			missing = append(missing, "debootstrap (the Debian tree is not cached at "+rootfsCacheDir()+")")
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "booting a systemd container needs " + strings.Join(missing, ", ") +
		" (as root: apt-get install systemd-container debootstrap)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true, so this is a failure rather than a skip")
	}
	t.Skip(msg)
}

func rootfsCacheDir() string {
	if d := os.Getenv("CAPSTAN_TEST_ROOTFS"); d != "" {
		return d
	}
	return defaultRootfsCache
}

func rootfsUsable(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, rootfsStamp))
	return err == nil && len(b) > 0
}

// debianRootfs returns the cached Debian tree, building it first (under
// the lock the e2e tests use) if there is none.
func debianRootfs(t *testing.T) string {
	t.Helper()
	dir := rootfsCacheDir()
	if rootfsUsable(dir) {
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
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("flock %s.lock: %v", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if rootfsUsable(dir) {
		return dir
	}
	if old, _ := filepath.Glob(filepath.Join(parent, base+".tmp-*")); len(old) > 0 {
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	tmp, err := os.MkdirTemp(parent, base+".tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	mirror := os.Getenv("CAPSTAN_TEST_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = defaultMirror
	}
	t.Logf("building the Debian %s tree in %s with debootstrap (once; takes a minute or two)", rootfsSuite, dir)
	ctx, cancel := context.WithTimeout(context.Background(), rootfsBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+rootfsPackages, rootfsSuite, tmp, mirror)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap %s %s %s: %v\n%s", rootfsSuite, tmp, mirror, err, tail(string(out), 40))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		os.Remove(d)
	}
	os.Remove(filepath.Join(tmp, "etc/hostname"))
	for _, unit := range []string{"console-getty.service", "getty@.service", "systemd-networkd.service",
		"systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer"} {
		link := filepath.Join(tmp, "etc/systemd/system", unit)
		os.Remove(link)
		if err := os.Symlink("/dev/null", link); err != nil {
			t.Fatalf("masking %s: %v", unit, err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, rootfsStamp), []byte(rootfsRecipe), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatalf("renaming the new tree into place: %v", err)
	}
	return dir
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// machine is a booted systemd-nspawn container.
type machine struct {
	name    string
	cmd     *exec.Cmd
	initPID int
	logPath string
	exited  chan struct{}
}

var machineSeq atomic.Int64

// bootMachine boots root on a tmpfs overlay with binds (host:container,
// read-only), sharing the host's network, and waits until its systemd has
// started up. It is stopped when the test ends.
func bootMachine(t *testing.T, root string, binds ...string) *machine {
	t.Helper()
	m := &machine{
		name:    fmt.Sprintf("capstan-svc-%d-%d", os.Getpid(), machineSeq.Add(1)),
		logPath: filepath.Join(t.TempDir(), "nspawn.log"),
		exited:  make(chan struct{}),
	}
	logf, err := os.Create(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"--quiet", "-D", root, "--volatile=overlay", "-b", "-M", m.name, "--register=no", "--keep-unit"}
	for _, b := range binds {
		args = append(args, "--bind-ro="+b)
	}
	m.cmd = exec.Command("systemd-nspawn", args...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() {
		m.cmd.Wait() //nolint:errcheck // reported through the log
		close(m.exited)
	}()
	t.Cleanup(func() { m.stop(t) })

	deadline := time.Now().Add(bootTimeout)
	for m.initPID == 0 {
		if m.initPID = childNamed(m.cmd.Process.Pid, "systemd"); m.initPID != 0 {
			break
		}
		select {
		case <-m.exited:
			t.Fatalf("systemd-nspawn exited while booting:\n%s", m.log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no systemd under systemd-nspawn within %s:\n%s", bootTimeout, m.log())
		}
	}
	for {
		out, _, code := m.exec(t, "timeout", "60", "systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not finish booting within %s (state %q, exit %d)\n%s", bootTimeout, state, code, m.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m
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

func (m *machine) log() string {
	b, _ := os.ReadFile(m.logPath)
	return tail(string(b), 60)
}

// exec runs a command (an argument list) inside the container as root,
// with a clean environment.
func (m *machine) exec(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	args := append([]string{"-t", strconv.Itoa(m.initPID), "-a", "--",
		"/usr/bin/env", "-i", "PATH=" + containerPath, "LANG=C.UTF-8"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		code = exit.ExitCode()
	default:
		t.Fatalf("in container %s: %q: %v\nstdout: %s\nstderr: %s", m.name, argv, err, out.String(), errb.String())
	}
	return out.String(), errb.String(), code
}

func (m *machine) mustExec(t *testing.T, argv ...string) string {
	t.Helper()
	out, errs, code := m.exec(t, argv...)
	if code != 0 {
		t.Fatalf("in container %s: %q: exit %d\nstdout: %s\nstderr: %s", m.name, argv, code, out, errs)
	}
	return out
}

func (m *machine) stop(t *testing.T) {
	select {
	case <-m.exited:
		return
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case <-m.exited:
		return
	case <-time.After(15 * time.Second):
	}
	t.Errorf("container %s did not stop within 15s of SIGTERM; killing it", m.name)
	m.cmd.Process.Kill() //nolint:errcheck
	<-m.exited
}
