package backup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agent/rdb"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A Redis/Valkey backup is an RDB snapshot of the whole instance, taken
// the way a replica takes one: the agent sends SYNC, the server forks,
// writes the snapshot and streams it; the agent compresses, encrypts and
// uploads it as it arrives, and reads it on the way (rdb.Parse) for the
// manifest: per database ("db0", …) the number of keys and a checksum of
// their names and types, and the keys of each type. The manifest is of
// the snapshot itself, so it is exactly what the backup holds.
//
// Verification loads the snapshot into a throwaway redis-server of the
// same or a newer version (backup_redis_server.go), on a loopback port
// of the server, and counts what it loaded the same way (SCAN and TYPE).

// redisSource dumps a Redis/Valkey instance's snapshot.
func redisSource(ctx context.Context, p agentproto.BackupRunPayload, password string, events agent.EventSink,
	res *agentproto.BackupRunResult) (*dumpSource, error) {
	c, err := engine.Connect(ctx, p.Target, password, "")
	if err != nil {
		return nil, err
	}
	res.ToolVersion = c.ServerVersion()
	c.Close()
	pr, pw := io.Pipe()
	parsed := make(chan rdbResult, 1)
	go func() {
		m, err := rdb.Parse(bufio.NewReaderSize(pr, 64<<10))
		if err != nil {
			// The dump goes on: the backup fails on the manifest.
			_, _ = io.Copy(io.Discard, pr)
		}
		parsed <- rdbResult{m, err}
	}()
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("taking an RDB snapshot of %s (SYNC)", p.Target.Engine),
		map[string]any{"server_version": res.ToolVersion})
	return &dumpSource{ext: "rdb",
		dump: func(ctx context.Context, w io.Writer) error {
			err := engine.RedisSync(ctx, p.Target, password, io.MultiWriter(w, pw))
			pw.CloseWithError(err)
			return err
		},
		manifest: func(ctx context.Context) (agentproto.BackupManifest, error) {
			select {
			case r := <-parsed:
				return r.m, r.err
			case <-ctx.Done():
				return agentproto.BackupManifest{}, ctx.Err()
			}
		},
		close: func() error { pw.CloseWithError(dump.ErrUploadEnded); return nil },
	}, nil
}

type rdbResult struct {
	m   agentproto.BackupManifest
	err error
}

// verifyKV loads a Redis/Valkey backup into a throwaway server and
// compares its keys with the manifest.
func (b *Backups) verifyKV(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string, events agent.EventSink,
	res *agentproto.BackupVerifyResult) (agentproto.BackupVerifyResult, error) {
	srv, err := b.kvServer(ctx, p)
	if err != nil {
		return b.failed(res, err)
	}
	err = b.loadThrowawayKV(ctx, srv, p, secrets, events, res, func(addr string) {
		res.Database = "a throwaway " + p.Target.Engine + " on " + addr
	}, nil)
	if err != nil {
		return b.failed(res, err)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("loaded the snapshot into %s %s and matched the manifest's %d databases",
		p.Target.Engine, res.EngineVersion, len(res.Tables)), nil)
	return *res, nil
}

// snapshotTee is how a caller of loadThrowawayKV sees the snapshot the
// throwaway server loads: given the snapshot's plaintext as it is
// decrypted, it returns the reader the server loads from instead, and a
// function that finishes its own work once the server has read it, given
// the outcome of that read (nil: the whole snapshot was read); an error
// of finish fails the load.
type snapshotTee func(snapshot io.Reader) (through io.Reader, finish func(readErr error) error)

// loadThrowawayKV fetches a Redis/Valkey backup's object, loads its
// snapshot as the data of the throwaway server srv (kvServer) on a free
// loopback port, waits until the server loaded it, and compares what it
// holds with the manifest: per database (fetchLoadCompare) and per key
// type; res says what it loaded into. The server is removed before it
// returns. started, when not nil, learns the server's address before it
// starts; tee, when not nil, sees the snapshot on its way (snapshotTee).
// Verification and in-place restore both load a snapshot this way.
func (b *Backups) loadThrowawayKV(ctx context.Context, srv throwawayKV, p agentproto.BackupRestorePayload, secrets map[string]string,
	events agent.EventSink, res *agentproto.BackupVerifyResult, started func(addr string), tee snapshotTee) error {
	port, err := agent.FreeLoopbackPort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if started != nil {
		started(addr)
	}
	srv.describe(res)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		srv.remove(rctx)
	}()
	err = b.fetchLoadCompare(ctx, p, secrets, events, res,
		func(object io.Reader, identity *age.X25519Identity) error {
			plain, check, err := plaintext(object, identity)
			if err != nil {
				return err
			}
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("loading the snapshot into a throwaway %s on %s, %s", p.Target.Engine, addr, srv),
				map[string]any{"loader": res.Loader, "loader_version": res.LoaderVersion})
			src, finish := io.Reader(plain), func(error) error { return nil }
			if tee != nil {
				src, finish = tee(plain)
			}
			err = srv.start(ctx, port, src)
			ferr := finish(err)
			// A broken object explains the rest: it is said first.
			if cerr := check(); cerr != nil {
				return cerr
			}
			if ferr != nil {
				return ferr
			}
			if err != nil {
				return err
			}
			res.EngineVersion, err = engine.WaitLoaded(ctx, addr, srv.exited)
			return err
		},
		func(ctx context.Context) (agentproto.BackupManifest, error) { return engine.RedisManifest(ctx, addr) })
	if err != nil {
		return err
	}
	return compareKeyTypes(p.Manifest, ctx, addr, res)
}

// compareKeyTypes checks the loaded keys of each type against the
// manifest's counts (the per-database counts and checksums were compared
// already).
func compareKeyTypes(want agentproto.BackupManifest, ctx context.Context, addr string, res *agentproto.BackupVerifyResult) error {
	got, err := engine.RedisManifest(ctx, addr)
	if err != nil {
		return err
	}
	for typ, n := range want.Keys {
		if got.Keys[typ] != n {
			res.OK = false
			return fmt.Errorf("the snapshot loaded %d keys of type %s, the manifest counted %d", got.Keys[typ], typ, n)
		}
	}
	return nil
}

// startThrowawayRedis starts redis-server in a container of the engine's
// image on the host's loopback port, with the snapshot read from its
// standard input as its data, and returns the container's id.
func startThrowawayRedis(ctx context.Context, cli *client.Client, p agentproto.BackupRestorePayload, port int, rdb io.Reader) (string, error) {
	server := "redis-server"
	if p.Target.Engine == agentproto.EngineValkey {
		server = "valkey-server"
	}
	script := fmt.Sprintf("cat >/tmp/capstan.rdb && exec %s --port %d --bind 127.0.0.1 --dir /tmp --dbfilename capstan.rdb "+
		"--save '' --appendonly no", server, port)
	cfg := &container.Config{Image: p.Source.Image, Entrypoint: []string{"sh", "-c", script}, User: "65534:65534",
		AttachStdin: true, OpenStdin: true, StdinOnce: true, AttachStdout: true, AttachStderr: true,
		Labels: map[string]string{agentproto.LabelDBInstance: p.Target.InstanceID, dump.LabelTool: server}}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg,
		HostConfig: &container.HostConfig{NetworkMode: "host"}})
	if err != nil {
		return "", fmt.Errorf("creating a container of %s: %w", p.Source.Image, err)
	}
	att, err := cli.ContainerAttach(ctx, created.ID, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		return created.ID, fmt.Errorf("attaching to the %s container: %w", server, err)
	}
	defer att.Close()
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return created.ID, fmt.Errorf("starting the %s container: %w", server, err)
	}
	if _, err := io.Copy(att.Conn, rdb); err != nil {
		return created.ID, fmt.Errorf("writing the snapshot into the container: %w", err)
	}
	return created.ID, att.CloseWrite()
}

// containerLogTail is the end of a container's output.
func containerLogTail(ctx context.Context, cli *client.Client, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	out := dump.NewTail(4 << 10)
	_, _ = stdcopy.StdCopy(out, out, rc)
	return strings.TrimSpace(out.String())
}
