package testlab

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// DockerHost is the engine under test: CAPSTAN_TEST_DOCKER_HOST (from
// scripts/testenv.sh), else DOCKER_HOST, else "" (the default socket).
func DockerHost() string {
	if h := os.Getenv("CAPSTAN_TEST_DOCKER_HOST"); h != "" {
		return h
	}
	return os.Getenv("DOCKER_HOST")
}

// DockerEnv is the environment that points a child process (an agent) at
// the engine under test: DOCKER_HOST from DockerHost, or nothing when the
// default socket is that engine.
func DockerEnv() []string {
	if h := DockerHost(); h != "" {
		return []string{"DOCKER_HOST=" + h}
	}
	return nil
}

// Docker returns a client of the engine under test, closed when the test
// ends. Without an engine the test is skipped, or fails when CI=true.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	opts := []client.Opt{client.FromEnv}
	if h := DockerHost(); h != "" {
		opts = append(opts, client.WithHost(h))
	}
	cli, err := client.New(opts...)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		if cli != nil {
			cli.Close()
		}
		Require(t, fmt.Sprintf("a Docker engine at %q (scripts/testenv.sh up starts one): %v", DockerHost(), err))
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// programs caches GoProgram's builds per directory for the test process.
var programs = struct {
	sync.Mutex
	built map[string]*programBuild
}{built: map[string]*programBuild{}}

type programBuild struct {
	once sync.Once
	bin  []byte
	err  error
}

// GoProgram builds the Go main package in dir (relative to the test's
// working directory, which go test sets to the package's directory) as a
// static Linux executable for this machine's architecture and returns it.
// dir may be a package of this module or a module of its own. Each
// directory is built once per test process.
func GoProgram(t testing.TB, dir string) []byte {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	programs.Lock()
	b := programs.built[abs]
	if b == nil {
		b = &programBuild{}
		programs.built[abs] = b
	}
	programs.Unlock()
	b.once.Do(func() {
		out, err := os.MkdirTemp("", "capstan-testlab-program-")
		if err != nil {
			b.err = err
			return
		}
		defer os.RemoveAll(out)
		bin := filepath.Join(out, filepath.Base(abs))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
		cmd.Dir = abs
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off", "GOFLAGS=")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build in %s: %v\n%s", abs, err, msg)
			return
		}
		b.bin, b.err = os.ReadFile(bin)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// Image is an image built by BuildImage.
type Image struct {
	Ref string
	ID  string
}

// BuildImage builds an image tagged ref from a Dockerfile and files
// (name → content, all executable) with the legacy builder, which needs
// no registry for FROM scratch. The image is removed when the test ends,
// unless something else removed it first.
func BuildImage(t testing.TB, cli *client.Client, ref, dockerfile string, files map[string][]byte) Image {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing image %s: %v", ref, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := buildImage(ctx, cli, ref, dockerfile, files)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// buildImage is BuildImage without the removal.
func buildImage(ctx context.Context, cli *client.Client, ref, dockerfile string, files map[string][]byte) (Image, error) {
	var buildCtx bytes.Buffer
	tw := tar.NewWriter(&buildCtx)
	write := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), ModTime: time.Now()}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := write("Dockerfile", 0o644, []byte(dockerfile)); err != nil {
		return Image{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := write(name, 0o755, files[name]); err != nil {
			return Image{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Image{}, err
	}
	res, err := cli.ImageBuild(ctx, &buildCtx, client.ImageBuildOptions{
		Tags: []string{ref}, Remove: true, ForceRemove: true, Version: build.BuilderV1,
	})
	if err != nil {
		return Image{}, fmt.Errorf("building image %s: %w", ref, err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	var out strings.Builder
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Image{}, fmt.Errorf("reading the build output of %s: %w\n%s", ref, err, out.String())
		}
		out.WriteString(m.Stream)
		if m.Error != nil {
			return Image{}, fmt.Errorf("building image %s: %s\n%s", ref, m.Error.Message, out.String())
		}
	}
	insp, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		return Image{}, fmt.Errorf("inspecting image %s: %w", ref, err)
	}
	return Image{Ref: ref, ID: insp.ID}, nil
}

// ProgramImage builds an image tagged ref FROM scratch holding the Go
// program in dir (see GoProgram) as its entrypoint, /NAME after the
// directory's name, followed by the Dockerfile lines in extra (ENV,
// LABEL…).
func ProgramImage(t testing.TB, cli *client.Client, ref, dir string, extra ...string) Image {
	t.Helper()
	prog := GoProgram(t, dir)
	name := filepath.Base(dir)
	dockerfile := fmt.Sprintf("FROM scratch\nCOPY %s /%s\nENTRYPOINT [\"/%s\"]\n", name, name, name)
	for _, l := range extra {
		dockerfile += l + "\n"
	}
	return BuildImage(t, cli, ref, dockerfile, map[string][]byte{name: prog})
}

// UniqueName returns prefix followed by a suffix no other test of any
// process on this machine uses: names of images and containers on a
// shared engine.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s%d-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

var nameSeq atomic.Int64

// CreateContainer creates (does not start) a container and force-removes
// it when the test ends. Without a name in opts it gets a unique one. It
// returns the container's name.
func CreateContainer(t testing.TB, cli *client.Client, opts client.ContainerCreateOptions) string {
	t.Helper()
	if opts.Name == "" {
		opts.Name = UniqueName("capstan-test-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ContainerCreate(ctx, opts); err != nil {
		t.Fatalf("creating container %s: %v", opts.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.ContainerRemove(ctx, opts.Name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing container %s: %v", opts.Name, err)
		}
	})
	return opts.Name
}

// StartContainer starts a created container.
func StartContainer(t testing.TB, cli *client.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("starting container %s: %v", name, err)
	}
}

// ContainerFile reads a file of a container, running or not.
func ContainerFile(t testing.TB, cli *client.Client, container, path string) string {
	t.Helper()
	cp, err := cli.CopyFromContainer(context.Background(), container, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		t.Fatalf("reading %s of %s: %v", path, container, err)
	}
	defer cp.Content.Close()
	tr := tar.NewReader(cp.Content)
	if _, err := tr.Next(); err != nil {
		t.Fatalf("reading %s of %s: %v", path, container, err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatalf("reading %s of %s: %v", path, container, err)
	}
	return string(b)
}

// WriteContainerFile writes a file named name into a container's
// directory dir, owned by root with mode 0644.
func WriteContainerFile(t testing.TB, cli *client.Client, container, dir, name, content string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CopyToContainer(context.Background(), container, client.CopyToContainerOptions{DestinationPath: dir, Content: &buf}); err != nil {
		t.Fatalf("writing %s/%s of %s: %v", dir, name, container, err)
	}
}
