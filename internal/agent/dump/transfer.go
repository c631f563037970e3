// Package dump runs exports and imports of databases (db.export,
// db.import): where the engine's dump and load tools run, and the streams
// between them and the control plane. Backups dump and load through it.
package dump

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agent/managed"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Artifacts moves a job's file between the agent and the control plane.
type Artifacts interface {
	// UploadArtifact streams body as the job's file and returns what the
	// control plane stored.
	UploadArtifact(ctx context.Context, jobID string, body io.Reader) (agentproto.ArtifactReceipt, error)
	// DownloadArtifact opens the job's file with its size.
	DownloadArtifact(ctx context.Context, jobID string) (io.ReadCloser, int64, error)
}

// Transfer runs db.export and db.import: the engine's dump tool streams
// through gzip to the control plane, and a downloaded file streams into
// the engine's load tool, neither ever written to the server's disk.
//
// Where the tools run: in a managed instance's own container (docker
// exec), so their version is the engine's. For an external instance the
// dump uses a client of the engine's major version installed on the
// server if there is one, else the engine's image in a throwaway
// container on the host's network; the load always runs in such a
// container, so client commands an uploaded file may hold (psql's \!)
// are confined to it and never reach the server.
type Transfer struct {
	// Artifacts is the control plane; it must be set before a job runs.
	Artifacts Artifacts
	// Docker is the Docker engine of managed instances.
	Docker *managed.Managed
	// ToolDirs are searched for host clients before PATH; "{major}" is
	// replaced by the engine's major version. Nil means Debian's
	// PostgreSQL layout, /usr/lib/postgresql/{major}/bin.
	ToolDirs []string
}

// Register adds db.export and db.import to r.
func (t *Transfer) Register(r agent.Registry) {
	engine.Handle(r, agentproto.DBExport, t.export)
	engine.Handle(r, agentproto.DBImport, t.load)
}

// GzipLevel trades size for speed: the dump streams through one
// compressor, which is what bounds an export's throughput.
const GzipLevel = gzip.BestSpeed

// StderrKeep is how much of a tool's standard error is kept (its end).
const StderrKeep = 16 << 10

// ErrUploadEnded ends a dump whose upload stopped reading.
var ErrUploadEnded = errors.New("the upload ended")

// toolError is a tool that exited with a failure status.
type toolError struct {
	Tool   string
	Status int
	Stderr string
}

func (e *toolError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		return fmt.Sprintf("%s exited with status %d", e.Tool, e.Status)
	}
	return msg
}

// runner runs a tool somewhere.
type Runner interface {
	// run runs call with stdin (nil: none) and its standard output to
	// stdout; a failure status is a *toolError with its standard error.
	Run(ctx context.Context, call engine.ToolCall, stdin io.Reader, stdout io.Writer) error
	// kind is agentproto.DBTool*.
	Kind() string
	// String says where it runs, for events.
	String() string
}

func CheckSQLJob(engine, database string) error {
	if agentproto.EngineKind(engine) != agentproto.EngineKindSQL {
		return fmt.Errorf("%s is not a SQL engine: it has no export or import", engine)
	}
	if database == "" || strings.HasPrefix(database, "-") || strings.ContainsAny(database, "= \t\n/\\'\"") {
		return fmt.Errorf("invalid database name %q", database)
	}
	return nil
}

// managedConn is how a tool in a managed instance's container reaches its
// engine.
func managedConn(target agentproto.DBTarget, password string) engine.ToolConn {
	return engine.ToolConn{Host: "127.0.0.1", Port: managed.EngineSpecs[target.Engine].Port, Username: target.Username, Password: password,
		TLSMode: agentproto.DBTLSDisable}
}

// externalConn is how a tool on the server's network reaches an external
// instance; caFile is the CA bundle's path where the tool runs.
func externalConn(target agentproto.DBTarget, password, caFile string) engine.ToolConn {
	c := engine.ToolConn{Host: target.Host, Port: target.Port, Username: target.Username, Password: password, TLSMode: target.TLSMode}
	if target.CA != "" {
		c.CAFile = caFile
	}
	return c
}

// containerOf returns the runner in a managed instance's container.
func (t *Transfer) containerOf(ctx context.Context, target agentproto.DBTarget, name string) (Runner, error) {
	if t.Docker == nil {
		return nil, errors.New("this agent has no Docker engine for managed instances")
	}
	cli, err := t.Docker.Client()
	if err != nil {
		return nil, err
	}
	id, err := managed.ExistingContainer(ctx, cli, name, target.InstanceID)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("the instance's container %s does not exist", name)
	}
	return &containerRunner{cli: cli, id: id, name: name}, nil
}

// imageOf returns a runner in throwaway containers of the engine's image.
func (t *Transfer) imageOf(target agentproto.DBTarget, src agentproto.DBArtifactSource, events agent.EventSink) (Runner, error) {
	if src.Image == "" {
		return nil, fmt.Errorf("no image of %s %s to run its tools in", target.Engine, src.Version)
	}
	if t.Docker == nil {
		return nil, errors.New("this agent has no Docker engine to run the engine's tools in")
	}
	cli, err := t.Docker.Client()
	if err != nil {
		return nil, err
	}
	return &imageRunner{cli: cli, image: src.Image, instanceID: target.InstanceID, ca: target.CA, events: events}, nil
}

// hostTool returns the path and --version output of the engine's dump
// tool on the server if its major version is the instance's.
func (t *Transfer) hostTool(ctx context.Context, eng, version string) (path, out string, ok bool) {
	if version == "" {
		return "", "", false
	}
	name := engine.VersionCall(eng)[0]
	dirs := t.ToolDirs
	if dirs == nil {
		dirs = []string{"/usr/lib/postgresql/{major}/bin"}
	}
	var candidates []string
	for _, d := range dirs {
		candidates = append(candidates, filepath.Join(strings.ReplaceAll(d, "{major}", version), name))
	}
	if p, err := exec.LookPath(name); err == nil {
		candidates = append(candidates, p)
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err != nil || st.IsDir() {
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		b, err := exec.CommandContext(vctx, c, "--version").Output()
		cancel()
		if err == nil && engine.ToolMajor(eng, string(b)) == version {
			return c, strings.TrimSpace(string(b)), true
		}
	}
	return "", "", false
}

// dumper picks where the dump of p runs: the managed instance's
// container, a host client of the same major version, or the engine's
// image. cleanup removes what it made for the tool (a CA file).
func (t *Transfer) Dumper(ctx context.Context, p agentproto.DBExportPayload, password string, events agent.EventSink) (Runner, engine.ToolConn, func(), error) {
	nop := func() {}
	if p.Source.ContainerName != "" {
		r, err := t.containerOf(ctx, p.Target, p.Source.ContainerName)
		return r, managedConn(p.Target, password), nop, err
	}
	if path, version, ok := t.hostTool(ctx, p.Target.Engine, p.Source.Version); ok {
		caFile, cleanup := "", nop
		if p.Target.CA != "" {
			f, err := os.CreateTemp("", "capstan-db-ca-*.pem")
			if err != nil {
				return nil, engine.ToolConn{}, nop, err
			}
			caFile, cleanup = f.Name(), func() { os.Remove(f.Name()) }
			_, werr := f.WriteString(p.Target.CA)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				cleanup()
				return nil, engine.ToolConn{}, nop, werr
			}
		}
		return &hostRunner{path: path, version: version}, externalConn(p.Target, password, caFile), cleanup, nil
	}
	r, err := t.imageOf(p.Target, p.Source, events)
	return r, externalConn(p.Target, password, engine.CAPath), nop, err
}

// loader picks where the load of p runs: the managed instance's
// container, or a throwaway container of the image the control plane
// chose, of the instance's version or a newer one (agentproto
// LoadVersion).
func (t *Transfer) Loader(ctx context.Context, p agentproto.DBImportPayload, password string, events agent.EventSink) (Runner, engine.ToolConn, error) {
	if p.Source.ContainerName != "" {
		r, err := t.containerOf(ctx, p.Target, p.Source.ContainerName)
		return r, managedConn(p.Target, password), err
	}
	if p.Source.Image == "" {
		return nil, engine.ToolConn{}, NoLoadImage(p.Target.Engine, p.Source, "run its load tool in")
	}
	r, err := t.imageOf(p.Target, p.Source, events)
	return r, externalConn(p.Target, password, engine.CAPath), err
}

// NoLoadImage is the error of a load of src that has no image at or
// above its version: it names the versions that have one.
func NoLoadImage(engine string, src agentproto.DBArtifactSource, what string) error {
	if src.Version == "" {
		return fmt.Errorf("no image of %s to %s: the instance's version is not known", engine, what)
	}
	if len(src.Versions) == 0 {
		return fmt.Errorf("no image of %s %s or newer to %s", engine, src.Version, what)
	}
	return fmt.Errorf("no image of %s %s or newer to %s: there are images of %s %s, none at or above %s", engine, src.Version,
		what, engine, strings.Join(src.Versions, ", "), src.Version)
}

func (t *Transfer) export(ctx context.Context, jc agent.Call[agentproto.DBExportPayload]) (agentproto.DBExportResult, error) {
	p, secrets, events, job := jc.Payload, jc.Secrets, jc.Events, jc.Job
	if err := CheckSQLJob(p.Target.Engine, p.Database); err != nil {
		return agentproto.DBExportResult{}, err
	}
	if t.Artifacts == nil {
		return agentproto.DBExportResult{}, errors.New("this agent cannot upload artifacts")
	}
	r, c, cleanup, err := t.Dumper(ctx, p, secrets[agentproto.SecretDBPassword], events)
	if err != nil {
		return agentproto.DBExportResult{}, err
	}
	defer cleanup()
	call := engine.DumpCall(p.Target.Engine, p.Database, c)
	version := ToolVersion(ctx, r, p.Target.Engine)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("dumping %s with %s %s", p.Database, call.Args[0], r),
		map[string]any{"tool": r.Kind(), "tool_version": version})

	pr, pipe := io.Pipe()
	pw := &CutWriter{W: pipe}
	dumped := &ByteCounter{}
	done := make(chan error, 1)
	go func() {
		gz, _ := gzip.NewWriterLevel(pw, GzipLevel)
		err := r.Run(ctx, call, nil, io.MultiWriter(gz, dumped))
		if err == nil {
			err = gz.Close()
		}
		// An error reaches the upload as a broken body: the control
		// plane keeps nothing of it.
		pipe.CloseWithError(err)
		done <- err
	}()
	sent := NewHasher(pr)
	receipt, uerr := t.Artifacts.UploadArtifact(ctx, job.ID, sent)
	// Ends a dump still writing (the upload stopped reading).
	pr.CloseWithError(ErrUploadEnded)
	derr := <-done
	switch {
	case derr != nil && !pw.Cut:
		return agentproto.DBExportResult{}, derr // the dump failed on its own: its error says why
	case uerr != nil:
		return agentproto.DBExportResult{}, fmt.Errorf("uploading the export: %w", uerr)
	case derr != nil:
		return agentproto.DBExportResult{}, derr
	}
	if receipt.Bytes != sent.N || receipt.SHA256 != sent.Sum() {
		return agentproto.DBExportResult{}, fmt.Errorf("the control plane stored %d bytes (sha256 %s) of the %d sent (sha256 %s)", receipt.Bytes,
			receipt.SHA256, sent.N, sent.Sum())
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("uploaded %d bytes (%d before compression)", sent.N, dumped.N), nil)
	return agentproto.DBExportResult{Tool: r.Kind(), ToolVersion: version, Bytes: sent.N, SHA256: sent.Sum(), DumpBytes: dumped.N}, nil
}

// ToolVersion is what the dump tool says of its version; for a throwaway
// container, its image.
func ToolVersion(ctx context.Context, r Runner, eng string) string {
	switch r := r.(type) {
	case *hostRunner:
		return r.version
	case *imageRunner:
		return r.image
	}
	var out bytes.Buffer
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.Run(vctx, engine.ToolCall{Args: engine.VersionCall(eng)}, nil, &out); err != nil {
		return ""
	}
	return strings.TrimSpace(out.String())
}

func (t *Transfer) load(ctx context.Context, jc agent.Call[agentproto.DBImportPayload]) (agentproto.DBImportResult, error) {
	p, secrets, events, job := jc.Payload, jc.Secrets, jc.Events, jc.Job
	if err := CheckSQLJob(p.Target.Engine, p.Database); err != nil {
		return agentproto.DBImportResult{}, err
	}
	if t.Artifacts == nil {
		return agentproto.DBImportResult{}, errors.New("this agent cannot download artifacts")
	}
	r, c, err := t.Loader(ctx, p, secrets[agentproto.SecretDBPassword], events)
	if err != nil {
		return agentproto.DBImportResult{}, err
	}
	body, _, err := t.Artifacts.DownloadArtifact(ctx, job.ID)
	if err != nil {
		return agentproto.DBImportResult{}, fmt.Errorf("downloading the file: %w", err)
	}
	defer body.Close()
	file := &verifier{Hasher: NewHasher(body), size: p.Bytes, sha: p.SHA256}
	src := &SourceReader{R: bufio.NewReaderSize(file, 256<<10)}
	var in io.Reader = src
	unzipped := &SourceReader{}
	if p.Format == agentproto.DBFormatSQLGzip {
		gz, err := gzip.NewReader(src)
		if err != nil {
			return agentproto.DBImportResult{}, fmt.Errorf("the file is not valid gzip: %w", err)
		}
		unzipped.R = gz
		in = unzipped
	}
	br := bufio.NewReaderSize(in, 256<<10)
	format := agentproto.DBFormatSQL
	if head, _ := br.Peek(5); string(head) == "PGDMP" {
		format = agentproto.DBFormatPGCustom
	}
	if format == agentproto.DBFormatPGCustom && p.Target.Engine != agentproto.EnginePostgres {
		return agentproto.DBImportResult{}, fmt.Errorf("the file is a PostgreSQL custom-format dump; %s loads SQL", p.Target.Engine)
	}
	if p.Target.Engine == agentproto.EngineMySQL {
		if head, _ := br.Peek(len(engine.MariaDBSandbox)); string(head) == engine.MariaDBSandbox {
			if _, err := br.ReadString('\n'); err != nil && !errors.Is(err, io.EOF) {
				return agentproto.DBImportResult{}, err
			}
			events.Emit(agentproto.LevelInfo, "left out the MariaDB sandbox-mode line MySQL's client rejects", nil)
		}
	}
	var stdin io.Reader = br
	atomic := p.Target.Engine == agentproto.EnginePostgres
	if format == agentproto.DBFormatSQL && atomic {
		// One transaction: COMMIT is sent only after the whole file
		// arrived intact, so a broken download commits nothing.
		stdin = io.MultiReader(strings.NewReader("BEGIN;\n"), br, strings.NewReader("\n;\nCOMMIT;\n"))
	}
	call := engine.LoadCall(p.Target.Engine, format, p.Database, c)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("loading %s (%s) into %s with %s %s", agent.HumanBytes(p.Bytes), format, p.Database,
		call.Args[0], r), map[string]any{"tool": r.Kind(), "atomic": atomic})
	out := NewTail(StderrKeep)
	err = r.Run(ctx, call, stdin, out)
	if src.Err != nil {
		return agentproto.DBImportResult{}, fmt.Errorf("reading the file: %w", src.Err)
	}
	if unzipped.Err != nil {
		return agentproto.DBImportResult{}, fmt.Errorf("the file is not valid gzip: %w", unzipped.Err)
	}
	if err != nil {
		return agentproto.DBImportResult{}, err
	}
	if file.N != p.Bytes {
		return agentproto.DBImportResult{}, fmt.Errorf("the load tool stopped after %d of the file's %d bytes", file.N, p.Bytes)
	}
	return agentproto.DBImportResult{Format: format, Tool: r.Kind(), Atomic: atomic, Bytes: file.N,
		Output: strings.TrimSpace(out.String())}, nil
}

// containerRunner runs tools in a running container with docker exec.
type containerRunner struct {
	cli  *client.Client
	id   string
	name string
}

func (r *containerRunner) Kind() string   { return agentproto.DBToolContainer }
func (r *containerRunner) String() string { return "in the instance's container " + r.name }

func (r *containerRunner) Run(ctx context.Context, call engine.ToolCall, stdin io.Reader, stdout io.Writer) error {
	ex, err := r.cli.ExecCreate(ctx, r.id, client.ExecCreateOptions{Cmd: call.Args, Env: call.Env, AttachStdout: true, AttachStderr: true,
		AttachStdin: stdin != nil})
	if err != nil {
		return fmt.Errorf("docker exec %s: %w", call.Args[0], err)
	}
	att, err := r.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("docker exec %s: %w", call.Args[0], err)
	}
	stderr, err := Stream(ctx, att.HijackedResponse, stdin, stdout, call.Args[0])
	if err != nil {
		return err
	}
	for {
		insp, err := r.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return fmt.Errorf("docker exec %s: %w", call.Args[0], err)
		}
		if !insp.Running {
			return ExitError(call.Args[0], insp.ExitCode, stderr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ExitError is the error of a tool's exit status, with its standard
// error.
func ExitError(tool string, status int, stderr string) error {
	if status == 0 {
		return nil
	}
	return &toolError{Tool: tool, Status: status, Stderr: stderr}
}

// stream copies stdin (nil: none) into a hijacked connection and its
// multiplexed output to stdout, and returns the end of the standard error
// once the process's output ended; ctx ending closes the connection.
func Stream(ctx context.Context, h client.HijackedResponse, stdin io.Reader, stdout io.Writer, tool string) (string, error) {
	defer h.Close()
	stop := context.AfterFunc(ctx, h.Close)
	defer stop()
	stdinDone := make(chan struct{})
	if stdin != nil {
		go func() {
			defer close(stdinDone)
			if _, err := io.Copy(h.Conn, stdin); err != nil {
				// A broken source closes the whole stream: the tool sees
				// its input end without the rest (and without COMMIT).
				h.Close()
				return
			}
			_ = h.CloseWrite()
		}()
	} else {
		close(stdinDone)
	}
	errTail := NewTail(StderrKeep)
	_, cerr := stdcopy.StdCopy(stdout, errTail, h.Reader)
	h.Close()
	<-stdinDone
	if ctx.Err() != nil {
		return errTail.String(), ctx.Err()
	}
	if cerr != nil && !errors.Is(cerr, io.EOF) {
		return errTail.String(), fmt.Errorf("%s: %w", tool, cerr)
	}
	return errTail.String(), nil
}

// imageRunner runs tools in throwaway containers of an image, on the
// host's network, as nobody.
type imageRunner struct {
	cli        *client.Client
	image      string
	instanceID string
	ca         string
	events     agent.EventSink
}

func (r *imageRunner) Kind() string   { return agentproto.DBToolImage }
func (r *imageRunner) String() string { return "in a throwaway container of " + r.image }

func (r *imageRunner) Run(ctx context.Context, call engine.ToolCall, stdin io.Reader, stdout io.Writer) error {
	cfg := &container.Config{Image: r.image, Cmd: call.Args, Env: call.Env, User: "65534:65534", AttachStdout: true, AttachStderr: true,
		AttachStdin: stdin != nil, OpenStdin: stdin != nil, StdinOnce: stdin != nil,
		Labels: map[string]string{agentproto.LabelDBInstance: r.instanceID, LabelTool: call.Args[0]}}
	opts := client.ContainerCreateOptions{Config: cfg, HostConfig: &container.HostConfig{NetworkMode: "host"}}
	res, err := r.cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsNotFound(err) {
		r.events.Emit(agentproto.LevelInfo, "pulling image "+r.image, nil)
		pull, perr := r.cli.ImagePull(ctx, r.image, client.ImagePullOptions{})
		if perr == nil {
			perr = pull.Wait(ctx)
		}
		if perr != nil {
			return fmt.Errorf("image %s is not on the server and could not be pulled: %w", r.image, perr)
		}
		res, err = r.cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		return fmt.Errorf("creating a container of %s: %w", r.image, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = r.cli.ContainerRemove(rctx, res.ID, client.ContainerRemoveOptions{Force: true})
	}()
	if r.ca != "" {
		if err := dockerc.CopyFile(ctx, r.cli, res.ID, filepath.Dir(engine.CAPath), filepath.Base(engine.CAPath), []byte(r.ca), publicFile); err != nil {
			return err
		}
	}
	att, err := r.cli.ContainerAttach(ctx, res.ID, client.ContainerAttachOptions{Stream: true, Stdin: stdin != nil, Stdout: true, Stderr: true})
	if err != nil {
		return fmt.Errorf("attaching to the %s container: %w", call.Args[0], err)
	}
	wait := r.cli.ContainerWait(ctx, res.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := r.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		att.Close()
		return fmt.Errorf("starting the %s container: %w", call.Args[0], err)
	}
	stderr, err := Stream(ctx, att.HijackedResponse, stdin, stdout, call.Args[0])
	if err != nil {
		return err
	}
	select {
	case w := <-wait.Result:
		if w.Error != nil && w.Error.Message != "" {
			return fmt.Errorf("%s: %s", call.Args[0], w.Error.Message)
		}
		return ExitError(call.Args[0], int(w.StatusCode), stderr)
	case err := <-wait.Error:
		return fmt.Errorf("waiting for the %s container: %w", call.Args[0], err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LabelTool marks a throwaway container of a dump or load tool.
const LabelTool = "dev.capstan.database.tool"

// publicFile makes a copied file world-readable.
var publicFile = &tar.Header{Mode: 0o644}

// hostRunner runs a tool installed on the server.
type hostRunner struct {
	path    string
	version string
}

func (r *hostRunner) Kind() string   { return agentproto.DBToolHost }
func (r *hostRunner) String() string { return "on the server (" + r.path + ")" }

func (r *hostRunner) Run(ctx context.Context, call engine.ToolCall, stdin io.Reader, stdout io.Writer) error {
	cmd := exec.CommandContext(ctx, r.path, call.Args[1:]...)
	cmd.Env = append(os.Environ(), call.Env...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	errTail := NewTail(StderrKeep)
	cmd.Stderr = errTail
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return &toolError{Tool: call.Args[0], Status: ee.ExitCode(), Stderr: errTail.String()}
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// tail keeps the last max bytes written to it.
type Tail struct {
	max int
	buf []byte
}

func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *Tail) String() string { return string(t.buf) }

// CutWriter remembers whether a write failed because the upload stopped
// reading: the dump's failure is then a consequence, not the cause.
type CutWriter struct {
	W   io.Writer
	Cut bool
}

func (c *CutWriter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	if errors.Is(err, ErrUploadEnded) {
		c.Cut = true
	}
	return n, err
}

// ByteCounter counts what is written to it.
type ByteCounter struct{ N int64 }

func (c *ByteCounter) Write(p []byte) (int, error) {
	c.N += int64(len(p))
	return len(p), nil
}

// hasher counts and hashes (SHA-256) what is read through it.
type Hasher struct {
	r io.Reader
	h hash.Hash
	N int64
}

func NewHasher(r io.Reader) *Hasher { return &Hasher{r: r, h: sha256.New()} }

func (h *Hasher) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.N += int64(n)
	return n, err
}

func (h *Hasher) Sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// verifier ends a download with an error instead of EOF when what
// arrived is not the file the job names.
type verifier struct {
	*Hasher
	size int64
	sha  string
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.Hasher.Read(p)
	if errors.Is(err, io.EOF) && (v.N != v.size || v.Sum() != v.sha) {
		return n, fmt.Errorf("the file arrived altered: %d bytes (sha256 %s), want %d (sha256 %s)", v.N, v.Sum(), v.size, v.sha)
	}
	return n, err
}

// SourceReader remembers the first error other than EOF of the file being
// loaded, which the load tool only sees as its input ending.
type SourceReader struct {
	R   io.Reader
	Err error
}

func (s *SourceReader) Read(p []byte) (int, error) {
	n, err := s.R.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && s.Err == nil {
		s.Err = err
	}
	return n, err
}
