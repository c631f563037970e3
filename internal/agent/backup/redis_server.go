package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A Redis/Valkey snapshot loads into a throwaway server of the same or a
// newer version (RDB is read by newer servers, not by older ones): one in
// a throwaway container of the image the control plane chose (agentproto
// DBArtifactSource.Image, by agentproto.LoadVersion), or, only when
// there is no image at or above the snapshot's version, the engine's
// server installed on the agent's host if LoadVersion takes its version.
// The container comes first because a snapshot can hold code the server
// runs as it loads (function libraries in Lua): in the container it runs
// as nobody, with no way to the agent's Docker engine.

// throwawayKV is a Redis/Valkey server that a verification or a restore
// loads a snapshot into, on a loopback port, with no persistence.
type throwawayKV interface {
	// start starts the server on port with the snapshot read from rdb
	// as its data.
	start(ctx context.Context, port int, rdb io.Reader) error
	// exited says whether the server has exited, with the end of its
	// output when it has.
	exited(ctx context.Context) (bool, string, error)
	// remove stops the server and removes what it left behind; it does
	// nothing when start made nothing.
	remove(ctx context.Context)
	// describe fills what res says of the loader (agentproto
	// BackupVerifyResult.Loader, LoaderVersion, LoaderRef).
	describe(res *agentproto.BackupVerifyResult)
	// String says what it is, for events.
	String() string
}

// kvServerName is the engine's server binary.
func kvServerName(engine string) string {
	if engine == agentproto.EngineValkey {
		return "valkey-server"
	}
	return "redis-server"
}

// hostKVServer returns the path and version of the engine's server
// installed on the host ("7.0.15", from its --version), if there is one.
func hostKVServer(ctx context.Context, engine string) (path, version string, ok bool) {
	p, err := exec.LookPath(kvServerName(engine))
	if err != nil {
		return "", "", false
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, p, "--version").Output()
	if err != nil {
		return "", "", false
	}
	v := kvServerVersion(string(out))
	return p, v, v != ""
}

// kvServerVersion reads the version from a server's --version output:
// "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 …"
// → "7.0.15". "" when it has none.
func kvServerVersion(out string) string {
	for f := range strings.FieldsSeq(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			if _, ok := agentproto.CompareVersions(v, v); ok {
				return v
			}
		}
	}
	return ""
}

// pickKVServer chooses where a snapshot of src loads: in the image
// (src.Image, of src.ImageVersion) when there is one, which the control
// plane chose by agentproto.LoadVersion; else in the host's server
// (hostVersion; "" when there is none) when LoadVersion takes its
// version, counted to the precision of the snapshot's ("7.0.15" is 7.0
// for a 7.0 snapshot). host is true for the host's server. With neither,
// the error says what there is.
func pickKVServer(engine string, src agentproto.DBArtifactSource, hostVersion string) (host bool, err error) {
	if src.Image != "" {
		imageVersion := src.ImageVersion
		if imageVersion == "" {
			imageVersion = src.Version
		}
		// A control plane chooses no older image; an agent checks.
		if _, ok := agentproto.LoadVersion(src.Version, []string{imageVersion}); ok {
			return false, nil
		}
	}
	if _, ok := agentproto.LoadVersion(src.Version, []string{versionTo(hostVersion, src.Version)}); ok && hostVersion != "" {
		return true, nil
	}
	err = dump.NoLoadImage(engine, src, "load the snapshot in")
	if hostVersion != "" {
		return false, fmt.Errorf("%w; this server's %s is %s", err, kvServerName(engine), hostVersion)
	}
	return false, fmt.Errorf("%w, and this server has no %s", err, kvServerName(engine))
}

// versionTo cuts version to as many numbers as like has ("7.0.15", "7.0"
// → "7.0"); "" when version is "".
func versionTo(version, like string) string {
	if version == "" {
		return ""
	}
	n := strings.Count(like, ".") + 1
	parts := strings.Split(version, ".")
	if len(parts) > n {
		parts = parts[:n]
	}
	return strings.Join(parts, ".")
}

// kvServer returns the throwaway server a snapshot of p loads into
// (pickKVServer).
func (b *Backups) kvServer(ctx context.Context, p agentproto.BackupRestorePayload) (throwawayKV, error) {
	path, version, _ := hostKVServer(ctx, p.Target.Engine)
	host, err := pickKVServer(p.Target.Engine, p.Source, version)
	if err != nil {
		return nil, err
	}
	if host {
		return &hostKV{path: path, version: version}, nil
	}
	if b.Transfer == nil || b.Transfer.Docker == nil {
		return nil, errors.New("this agent has no Docker engine to load the snapshot in")
	}
	cli, err := b.Transfer.Docker.Client()
	if err != nil {
		return nil, err
	}
	return &containerKV{cli: cli, p: p}, nil
}

// containerKV is a server in a throwaway container of the engine's image
// on the host's network (startThrowawayRedis).
type containerKV struct {
	cli *client.Client
	p   agentproto.BackupRestorePayload
	id  string
}

func (s *containerKV) start(ctx context.Context, port int, rdb io.Reader) error {
	var err error
	s.id, err = startThrowawayRedis(ctx, s.cli, s.p, port, rdb)
	return err
}

func (s *containerKV) exited(ctx context.Context) (bool, string, error) {
	insp, err := s.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		return false, "", err
	}
	if insp.Container.State != nil && !insp.Container.State.Running {
		return true, containerLogTail(ctx, s.cli, s.id), nil
	}
	return false, "", nil
}

func (s *containerKV) remove(ctx context.Context) {
	if s.id == "" {
		return
	}
	_, _ = s.cli.ContainerRemove(ctx, s.id, client.ContainerRemoveOptions{Force: true})
}

func (s *containerKV) describe(res *agentproto.BackupVerifyResult) {
	res.Loader, res.LoaderVersion, res.LoaderRef = agentproto.DBToolImage, s.p.Source.ImageVersion, s.p.Source.Image
	if res.LoaderVersion == "" {
		res.LoaderVersion = s.p.Source.Version
	}
}

func (s *containerKV) String() string {
	return "in a throwaway container of " + s.p.Source.Image
}

// hostKV is the host's own server binary run as a throwaway process of
// the agent, its data in a private temporary directory; when the agent
// runs as root, the process runs as nobody.
type hostKV struct {
	path, version string

	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process was waited for
	out  lockedTail
}

func (s *hostKV) start(ctx context.Context, port int, rdb io.Reader) error {
	dir, err := os.MkdirTemp("", "capstan-kv-*")
	if err != nil {
		return err
	}
	s.dir = dir
	f, err := os.OpenFile(filepath.Join(dir, "capstan.rdb"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, rdb)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the snapshot for %s: %w", s.path, err)
	}
	// The server runs until remove ends it, not until the job's context
	// does: remove is always called.
	s.cmd = exec.Command(s.path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--dbfilename", "capstan.rdb", "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
	if os.Geteuid() == 0 {
		for _, p := range []string{dir, filepath.Join(dir, "capstan.rdb")} {
			if err := os.Chown(p, nobody, nobody); err != nil {
				return err
			}
		}
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	s.out.tail = dump.NewTail(4 << 10)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fmt.Errorf("starting %s: %w", s.path, err)
	}
	s.done = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	return nil
}

func (s *hostKV) exited(context.Context) (bool, string, error) {
	select {
	case <-s.done:
		return true, strings.TrimSpace(s.out.String()), nil
	default:
		return false, "", nil
	}
}

func (s *hostKV) remove(ctx context.Context) {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func (s *hostKV) describe(res *agentproto.BackupVerifyResult) {
	res.Loader, res.LoaderVersion, res.LoaderRef = agentproto.DBToolHost, s.version, s.path
}

func (s *hostKV) String() string {
	return fmt.Sprintf("as a throwaway process of this server's %s %s", s.path, s.version)
}

// nobody is the user and group a root agent runs a host server as.
const nobody = 65534

// lockedTail is a tail written by a process's output and read while it
// runs.
type lockedTail struct {
	mu   sync.Mutex
	tail *dump.Tail
}

func (t *lockedTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tail.Write(p)
}

func (t *lockedTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tail.String()
}
