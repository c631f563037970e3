package testlab

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// Images of the database engines that Capstan runs as managed instances,
// built on this machine because no registry is reachable from the tests.
// One Debian tree with PostgreSQL 15, MariaDB 10.11 and Redis 7.0 from
// Debian's packages is imported once as engineBaseRef; each engine's
// image adds its entrypoint (engineimages/*.sh, honouring the official
// image's environment and volume) in a thin layer on top. Every image
// carries the hash of what it was made from in the engineRecipeLabel
// label: a changed recipe or entrypoint makes EngineImage rebuild it.
const (
	engineBaseRef      = "capstan-test/engine-base:bookworm"
	engineRecipeLabel  = "dev.capstan.test.recipe"
	enginePackages     = "postgresql-15 mariadb-server redis-server"
	engineBuildTimeout = 15 * time.Minute
	engineReadyTimeout = 2 * time.Minute
	engineStopSeconds  = 30
)

// engineBaseScript runs as root inside the fresh minbase tree (chroot,
// with its own /proc): it installs the engines without starting them or
// creating their data, and leaves out what an image does not need.
const engineBaseScript = `set -eu
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d
mkdir -p /etc/postgresql-common/createcluster.d
echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/capstan.conf
printf 'path-exclude=/usr/share/doc/*\npath-exclude=/usr/share/man/*\npath-exclude=/usr/share/info/*\npath-exclude=/usr/share/locale/*\n' \
	>/etc/dpkg/dpkg.cfg.d/capstan-nodoc
apt-get -q update
apt-get -q install -y --no-install-recommends ` + enginePackages + `
# The official postgres image makes every new cluster listen on all
# interfaces.
sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" /usr/share/postgresql/15/postgresql.conf.sample
grep -q "^listen_addresses = '\*'" /usr/share/postgresql/15/postgresql.conf.sample
mkdir -p /var/lib/postgresql/data /var/run/postgresql
chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql
# MariaDB's package made a data directory: the entrypoint makes its own.
rm -rf /var/lib/mysql
mkdir -p /var/lib/mysql /run/mysqld
chown mysql:mysql /var/lib/mysql /run/mysqld
printf '[mariadbd]\nbind-address = *\nskip-name-resolve\nhost-cache-size = 0\n' >/etc/mysql/mariadb.conf.d/90-container.cnf
mkdir -p /data
chown redis:redis /data
rm -f /usr/sbin/policy-rc.d /etc/hostname
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/*.log /var/log/apt/*
`

//go:embed engineimages/*.sh
var engineEntrypoints embed.FS

// engineSpec is how one engine's image is made and reached.
type engineSpec struct {
	ref        string
	entrypoint string // file in engineimages/
	port       string // the engine's port in the container, "5432/tcp"
	dataDir    string // the image's volume
	// dockerfile is what follows FROM and the COPY of the entrypoint.
	dockerfile string
	// probe tells whether the engine on conn accepts clients, describing
	// what it saw.
	probe func(conn net.Conn) (bool, string)
}

var engineSpecs = map[string]engineSpec{
	"postgres": {
		ref: "capstan-test/postgres:15", entrypoint: "postgres.sh", port: "5432/tcp",
		dataDir: "/var/lib/postgresql/data",
		dockerfile: `ENV PG_MAJOR=15 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/15/bin PGDATA=/var/lib/postgresql/data
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
`,
		probe: probePostgres,
	},
	"mariadb": {
		ref: "capstan-test/mariadb:10.11", entrypoint: "mariadb.sh", port: "3306/tcp",
		dataDir: "/var/lib/mysql",
		dockerfile: `VOLUME /var/lib/mysql
EXPOSE 3306
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["mariadbd"]
`,
		probe: probeMariaDB,
	},
	"redis": {
		ref: "capstan-test/redis:7", entrypoint: "redis.sh", port: "6379/tcp",
		dataDir: "/data",
		dockerfile: `VOLUME /data
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
`,
		probe: probeRedis,
	},
}

// Engines are the engines EngineImage builds images of.
func Engines() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for e := range engineSpecs {
			if !yield(e) {
				return
			}
		}
	})
}

func recipeHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func engineBaseRecipe() string {
	return recipeHash("engine-base v1", rootfsSuite, "minbase", engineBaseScript)
}

// engineDockerfile is the Dockerfile of spec's image, its entrypoint and
// the hash of both with the base's recipe.
func engineDockerfile(t testing.TB, spec engineSpec) (dockerfile string, entrypoint []byte, recipe string) {
	t.Helper()
	entrypoint, err := engineEntrypoints.ReadFile("engineimages/" + spec.entrypoint)
	if err != nil {
		t.Fatal(err)
	}
	recipe = recipeHash(engineBaseRecipe(), spec.dockerfile, string(entrypoint))
	dockerfile = "FROM " + engineBaseRef + "\n" +
		"COPY entrypoint /usr/local/bin/docker-entrypoint.sh\n" +
		spec.dockerfile +
		"LABEL " + engineRecipeLabel + "=" + recipe + "\n"
	return dockerfile, entrypoint, recipe
}

// imageRecipe returns the ID of the image tagged ref and its recipe
// label, or "" and "" if there is no such image.
func imageRecipe(t testing.TB, cli *client.Client, ref string) (id, recipe string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	insp, err := cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "", ""
	}
	if err != nil {
		t.Fatalf("inspecting image %s: %v", ref, err)
	}
	if insp.Config != nil {
		recipe = insp.Config.Labels[engineRecipeLabel]
	}
	return insp.ID, recipe
}

// EngineImage returns the reference of the local image of engine
// ("postgres", "mariadb" or "redis"; see Engines), a Debian bookworm
// image with Debian's package of the engine and an entrypoint that
// honours the official image's environment and volume:
//
//   - capstan-test/postgres:15: POSTGRES_PASSWORD, POSTGRES_USER,
//     POSTGRES_DB, POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD; data
//     in /var/lib/postgresql/data; port 5432, scram-sha-256 for remote
//     clients.
//   - capstan-test/mariadb:10.11: MARIADB_ROOT_PASSWORD (or
//     MYSQL_ROOT_PASSWORD), MARIADB_DATABASE, MARIADB_USER,
//     MARIADB_PASSWORD (each also MYSQL_…); data in /var/lib/mysql; port
//     3306, root@% with the password.
//   - capstan-test/redis:7: redis-server with its options as the command
//     (--requirepass, --aclfile) or REDIS_PASSWORD; data in /data; port
//     6379.
//
// The images are built once per machine and Docker engine, the first time
// a test asks for one (about two minutes, most of it debootstrap and apt),
// and rebuilt when their recipe in this package changes. Builds take an
// exclusive lock, so concurrent tests and test processes build once.
// Building needs root, debootstrap and Debian's mirror
// (CAPSTAN_TEST_DEBIAN_MIRROR); without them the test is skipped, or
// fails when CI=true.
func EngineImage(t testing.TB, engine string) string {
	t.Helper()
	spec, ok := engineSpecs[engine]
	if !ok {
		t.Fatalf("no engine image for %q; there are %v", engine, Engines())
	}
	cli := Docker(t)
	if _, recipe := imageRecipe(t, cli, spec.ref); recipe != "" {
		if _, _, want := engineDockerfile(t, spec); recipe == want {
			return spec.ref
		}
	}

	lockPath := filepath.Join(filepath.Dir(rootfsCacheDir()), "engine-images.lock")
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	t.Logf("waiting for the lock on %s", lockPath)
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("flock %s: %v", lockPath, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck

	// Every engine's image is built here, not only the one asked for: the
	// thin layers take seconds, and an outdated base can only be removed
	// once no image is made from it.
	var outdated []string
	oldBase := ensureEngineBase(t, cli)
	if oldBase != "" {
		outdated = append(outdated, oldBase)
	}
	for _, name := range Engines() {
		s := engineSpecs[name]
		dockerfile, entrypoint, want := engineDockerfile(t, s)
		id, recipe := imageRecipe(t, cli, s.ref)
		if recipe == want {
			continue // built meanwhile by another test
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), engineBuildTimeout)
		img, err := buildImage(ctx, cli, s.ref, dockerfile, map[string][]byte{"entrypoint": entrypoint})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("built %s (%s) in %s", s.ref, img.ID, time.Since(start).Round(time.Millisecond))
		if id != "" && id != img.ID {
			outdated = append([]string{id}, outdated...)
		}
	}
	for _, id := range outdated {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := cli.ImageRemove(ctx, id, client.ImageRemoveOptions{PruneChildren: true})
		cancel()
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("keeping the outdated image %s: %v", id, err)
		}
	}
	return spec.ref
}

// ensureEngineBase imports the Debian tree with the engines as
// engineBaseRef unless an image of the current recipe is tagged so. It
// returns the ID of the image it replaced, if any. The caller holds the
// build lock.
func ensureEngineBase(t testing.TB, cli *client.Client) (replaced string) {
	t.Helper()
	want := engineBaseRecipe()
	id, recipe := imageRecipe(t, cli, engineBaseRef)
	if recipe == want {
		return ""
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, bin := range []string{"debootstrap", "unshare", "chroot", "tar"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		Require(t, "building the database engine images ("+engineBaseRef+" is not built) needs "+
			strings.Join(missing, ", ")+" (as root: apt-get install debootstrap)")
	}

	parent := filepath.Dir(rootfsCacheDir())
	// Leftovers of interrupted builds: nobody else builds while we hold
	// the lock.
	if old, _ := filepath.Glob(filepath.Join(parent, "engine-base.tmp-*")); len(old) > 0 {
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	root, err := os.MkdirTemp(parent, "engine-base.tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineBuildTimeout)
	defer cancel()

	start := time.Now()
	t.Logf("building %s with debootstrap and apt (once per machine; a minute or two)", engineBaseRef)
	debootstrap := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", rootfsSuite, root, debianMirror())
	debootstrap.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := debootstrap.CombinedOutput(); err != nil {
		msg := fmt.Sprintf("debootstrap %s %s %s: %v\n%s", rootfsSuite, root, debianMirror(), err, Tail(string(out), 40))
		if b, rerr := os.ReadFile(filepath.Join(root, "debootstrap", "debootstrap.log")); rerr == nil {
			msg += "\ndebootstrap.log:\n" + Tail(string(b), 60)
		}
		t.Fatal(msg)
	}
	bootstrapped := time.Since(start)

	// The tree's own /proc is mounted in a private mount namespace, so it
	// is gone with the last process of the script and never seen (or
	// removed through) from outside.
	install := exec.CommandContext(ctx, "unshare", "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(root, "proc"),
		"chroot", root, "/usr/bin/env", "-i", "PATH="+hostPath, "HOME=/root", "LANG=C.UTF-8",
		"DEBIAN_FRONTEND=noninteractive", "/bin/sh", "-c", engineBaseScript)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("installing %s in the tree: %v\n%s", enginePackages, err, Tail(string(out), 60))
	}
	installed := time.Since(start)

	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", root, "-c", ".")
	var tarErr bytes.Buffer
	tarCmd.Stderr = &tarErr
	tarOut, err := tarCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tarCmd.Start(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: tarOut, SourceName: "-"}, engineBaseRef,
		client.ImageImportOptions{Changes: []string{
			"ENV PATH=" + hostPath,
			"ENV LANG=C.UTF-8",
			"LABEL " + engineRecipeLabel + "=" + want,
			`CMD ["/bin/bash"]`,
		}})
	if err != nil {
		tarCmd.Process.Kill() //nolint:errcheck
		tarCmd.Wait()         //nolint:errcheck
		t.Fatalf("importing %s: %v", engineBaseRef, err)
	}
	readErr := readJSONStream(res)
	res.Close()
	if err := tarCmd.Wait(); err != nil {
		t.Fatalf("tar of %s: %v\n%s", root, err, tarErr.String())
	}
	if readErr != nil {
		t.Fatalf("importing %s: %v", engineBaseRef, readErr)
	}
	newID, recipe := imageRecipe(t, cli, engineBaseRef)
	if recipe != want {
		t.Fatalf("imported %s has recipe %q, want %q", engineBaseRef, recipe, want)
	}
	t.Logf("built %s (%s) in %s: debootstrap %s, apt %s, import %s", engineBaseRef, newID,
		time.Since(start).Round(time.Second), bootstrapped.Round(time.Second),
		(installed - bootstrapped).Round(time.Second), (time.Since(start) - installed).Round(time.Second))
	if id == newID {
		return ""
	}
	return id
}

// readJSONStream reads a stream of Docker's JSON messages to its end and
// returns the error it reported, if any.
func readJSONStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
	}
}

// EngineOptions configure StartEngine.
type EngineOptions struct {
	// Env is the container's environment, NAME=value each: the official
	// image's variables (POSTGRES_PASSWORD, MARIADB_ROOT_PASSWORD…).
	Env []string
	// Cmd, if set, replaces the image's command (redis-server
	// --requirepass …).
	Cmd []string
	// Binds are bind mounts, "HOSTPATH:PATH[:ro]" each (an ACL file).
	Binds []string
}

// EngineContainer is a container of an engine image started by
// StartEngine.
type EngineContainer struct {
	// Name is the container's name, which other containers on Network
	// reach it by.
	Name string
	// Network is the user-defined bridge network the container is on,
	// made for the test.
	Network string
	// Volume is the named volume holding the engine's data directory.
	Volume string

	engine string
	spec   engineSpec
	cli    *client.Client
}

// StartEngine runs a container of engine's image (see EngineImage) on a
// new network with a new named volume for its data and the engine's port
// published on an ephemeral port of 127.0.0.1, and waits until the engine
// accepts clients there. The container, the volume and the network are
// removed when the test ends; the container's output is logged if the
// test failed.
func StartEngine(t testing.TB, engine string, opts EngineOptions) *EngineContainer {
	t.Helper()
	ref := EngineImage(t, engine)
	cli := Docker(t)
	c := &EngineContainer{
		Name:    UniqueName("capstan-test-" + engine + "-"),
		Network: UniqueName("capstan-test-net-"),
		Volume:  UniqueName("capstan-test-vol-"),
		engine:  engine,
		spec:    engineSpecs[engine],
		cli:     cli,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.NetworkCreate(ctx, c.Network, client.NetworkCreateOptions{Driver: "bridge"}); err != nil {
		t.Fatalf("creating network %s: %v", c.Network, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.NetworkRemove(ctx, c.Network, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing network %s: %v", c.Network, err)
		}
	})
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: c.Volume}); err != nil {
		t.Fatalf("creating volume %s: %v", c.Volume, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.VolumeRemove(ctx, c.Volume, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing volume %s: %v", c.Volume, err)
		}
	})
	port := network.MustParsePort(c.spec.port)
	stop := engineStopSeconds
	CreateContainer(t, cli, client.ContainerCreateOptions{
		Name: c.Name,
		Config: &container.Config{
			Image: ref, Env: opts.Env, Cmd: opts.Cmd,
			ExposedPorts: network.PortSet{port: {}},
			StopTimeout:  &stop,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:  container.NetworkMode(c.Network),
			PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: ""}}},
			Mounts:       []mount.Mount{{Type: mount.TypeVolume, Source: c.Volume, Target: c.spec.dataDir}},
			Binds:        opts.Binds,
		},
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("output of %s:\n%s", c.Name, c.Logs(t))
		}
	})
	StartContainer(t, cli, c.Name)
	c.WaitReady(t)
	return c
}

// Addr is the engine's address on 127.0.0.1, "127.0.0.1:PORT". The port
// is chosen anew each time the container starts.
func (c *EngineContainer) Addr(t testing.TB) string {
	t.Helper()
	addr, _ := c.addr(t)
	if addr == "" {
		t.Fatalf("container %s publishes no port for %s:\n%s", c.Name, c.spec.port, c.Logs(t))
	}
	return addr
}

// addr returns the published address ("" if none) and the container's
// state.
func (c *EngineContainer) addr(t testing.TB) (addr string, state *container.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.cli.ContainerInspect(ctx, c.Name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspecting container %s: %v", c.Name, err)
	}
	state = res.Container.State
	if res.Container.NetworkSettings == nil {
		return "", state
	}
	for _, b := range res.Container.NetworkSettings.Ports[network.MustParsePort(c.spec.port)] {
		if b.HostIP.String() == "127.0.0.1" && b.HostPort != "" {
			return net.JoinHostPort("127.0.0.1", b.HostPort), state
		}
	}
	return "", state
}

// WaitReady waits until the engine accepts clients on its published port:
// it speaks the engine's protocol, as the server ends its first-start
// initialisation on a local socket only.
func (c *EngineContainer) WaitReady(t testing.TB) {
	t.Helper()
	start := time.Now()
	EventuallyReport(t, engineReadyTimeout, c.engine+" in container "+c.Name+" accepting clients", func() (bool, string) {
		addr, state := c.addr(t)
		if state != nil && !state.Running && !state.Restarting && state.Status != container.StateCreated {
			t.Fatalf("container %s is %s (exit code %d):\n%s", c.Name, state.Status, state.ExitCode, c.Logs(t))
		}
		if addr == "" {
			return false, "no published port yet"
		}
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		return c.spec.probe(conn)
	})
	t.Logf("%s in %s ready in %s", c.engine, c.Name, time.Since(start).Round(time.Millisecond))
}

// Restart restarts the container (its engine stops cleanly) and waits
// until the engine accepts clients again, at its new Addr.
func (c *EngineContainer) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := engineStopSeconds
	if _, err := c.cli.ContainerRestart(ctx, c.Name, client.ContainerRestartOptions{Timeout: &stop}); err != nil {
		t.Fatalf("restarting container %s: %v", c.Name, err)
	}
	c.WaitReady(t)
}

// Logs is what the container wrote to its standard output and error.
func (c *EngineContainer) Logs(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := c.cli.ContainerLogs(ctx, c.Name, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fmt.Sprintf("(reading the logs of %s: %v)", c.Name, err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		fmt.Fprintf(&out, "\n(reading the logs of %s: %v)", c.Name, err)
	}
	return out.String()
}

// probePostgres sends a startup message for a user that does not exist:
// a server that accepts clients asks for a password or refuses the user,
// one still starting up says so (SQLSTATE 57P03).
func probePostgres(conn net.Conn) (bool, string) {
	var msg []byte
	msg = binary.BigEndian.AppendUint32(msg, 0) // length, set below
	msg = binary.BigEndian.AppendUint32(msg, 3<<16)
	for _, s := range []string{"user", "capstan_probe", "database", "capstan_probe", ""} {
		msg = append(msg, s...)
		msg = append(msg, 0)
	}
	binary.BigEndian.PutUint32(msg, uint32(len(msg)))
	if _, err := conn.Write(msg); err != nil {
		return false, err.Error()
	}
	var hdr [5]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return false, "reading the answer to a startup message: " + err.Error()
	}
	switch hdr[0] {
	case 'R':
		return true, ""
	case 'E':
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 1<<16 {
			return false, fmt.Sprintf("error message of %d bytes", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(conn, body); err != nil {
			return false, err.Error()
		}
		var code, text string
		for _, f := range bytes.Split(body, []byte{0}) {
			if len(f) > 1 && f[0] == 'C' {
				code = string(f[1:])
			}
			if len(f) > 1 && f[0] == 'M' {
				text = string(f[1:])
			}
		}
		return code != "57P03", code + " " + text
	}
	return false, fmt.Sprintf("answer of type %q to a startup message", hdr[0])
}

// probeMariaDB reads the server's greeting: protocol version 10 when it
// accepts clients (the proxy in front of a server still initialising
// closes the connection).
func probeMariaDB(conn net.Conn) (bool, string) {
	var hdr [5]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return false, "reading the greeting: " + err.Error()
	}
	if hdr[4] == 10 {
		return true, ""
	}
	rest, _ := io.ReadAll(io.LimitReader(conn, 512))
	return false, fmt.Sprintf("greeting starting with %#x: %q", hdr[4], rest)
}

// probeRedis sends PING: a server that accepts clients answers PONG or
// asks for authentication; one loading its data says LOADING.
func probeRedis(conn net.Conn) (bool, string) {
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false, err.Error()
	}
	line := make([]byte, 256)
	n, err := conn.Read(line)
	if n == 0 {
		return false, fmt.Sprintf("no answer to PING: %v", err)
	}
	reply := strings.TrimSpace(string(line[:n]))
	return reply == "+PONG" || strings.HasPrefix(reply, "-NOAUTH"), reply
}
