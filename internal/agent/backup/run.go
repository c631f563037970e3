package backup

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Backups runs backup.run: the dump of an export (the same tools, run
// the same way) with its manifest taken in the dump's snapshot,
// compressed, encrypted to the control plane's recipient, written to a
// local copy and uploaded at once, then read back from the storage.
// Nothing unencrypted leaves the dump tool's pipe.
type Backups struct {
	// Transfer picks and runs the dump tools.
	Transfer *dump.Transfer
	// OpenStore opens a job's storage; nil means objstore.Open (which
	// takes no job whose storage requests are granted).
	OpenStore func(context.Context, agentproto.BackupStorage, map[string]string) (objstore.Store, error)
	// DefaultLocalDir is where local copies go when a job names no
	// directory.
	DefaultLocalDir string
	// StagingDir is where a verification or restore fetches its object
	// to, to check it before anything loads it; "" means
	// DefaultStagingDir.
	StagingDir string

	// restoring holds the ids of the instances a restore swaps the data
	// of now: one at a time each.
	restoring sync.Map
}

// DefaultBackupDir is Backups.DefaultLocalDir when it is not set: under
// the agent's systemd state directory.
const DefaultBackupDir = "/var/lib/capstan-agent/backups"

// Register adds backup.run to r.
func (b *Backups) Register(r agent.Registry) {
	agent.Handle(r, agentproto.BackupRun, b.run, agent.PayloadFailure(agentproto.BackupRunResult{Step: backupStepDump}))
}

// Steps of a backup, named in a failed run's result.
const (
	backupStepDump     = "dump"
	backupStepUpload   = "upload"
	backupStepReadBack = "read_back"
)

// run runs backup.run. A failed run reports the step it failed at.
func (b *Backups) run(ctx context.Context, c agent.Call[agentproto.BackupRunPayload]) (agentproto.BackupRunResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	res := agentproto.BackupRunResult{Step: backupStepDump}
	fail := func(err error) (agentproto.BackupRunResult, error) { return res, err }
	recipient, err := age.ParseX25519Recipient(p.Recipient)
	if err != nil {
		return fail(fmt.Errorf("invalid recipient: %w", err))
	}
	open := b.OpenStore
	if open == nil {
		open = objstore.Open
	}
	st, err := open(ctx, p.Storage, secrets)
	if err != nil {
		return fail(err)
	}
	password := secrets[agentproto.SecretDBPassword]

	var src *dumpSource
	switch agentproto.EngineKind(p.Target.Engine) {
	case agentproto.EngineKindSQL:
		src, err = b.sqlSource(ctx, p, password, events, &res)
	case agentproto.EngineKindKV:
		src, err = redisSource(ctx, p, password, events, &res)
	default:
		err = fmt.Errorf("%s backups are not supported by this agent", p.Target.Engine)
	}
	if err != nil {
		return fail(err)
	}
	defer src.close()

	local, err := b.localFile(p, src.ext)
	if err != nil {
		return fail(err)
	}
	keepLocal := false
	defer func() {
		if local != nil && !keepLocal {
			local.Close()
			os.Remove(local.Name())
		}
	}()

	pr, pipe := io.Pipe()
	pw := &dump.CutWriter{W: pipe}
	dumped := &dump.ByteCounter{}
	done := make(chan error, 1)
	go func() {
		var sink io.Writer = pw
		if local != nil {
			sink = io.MultiWriter(pw, local)
		}
		err := func() error {
			enc, err := age.Encrypt(sink, recipient)
			if err != nil {
				return err
			}
			gz, _ := gzip.NewWriterLevel(enc, dump.GzipLevel)
			if err := src.dump(ctx, io.MultiWriter(gz, dumped)); err != nil {
				return err
			}
			if err := gz.Close(); err != nil {
				return err
			}
			return enc.Close()
		}()
		pipe.CloseWithError(err)
		done <- err
	}()
	// The manifest is counted while the dump streams, on its own
	// connection in the same snapshot.
	type counted struct {
		m   agentproto.BackupManifest
		err error
	}
	mctx, stopCount := context.WithCancel(ctx)
	defer stopCount()
	manifestDone := make(chan counted, 1)
	go func() {
		m, err := src.manifest(mctx)
		manifestDone <- counted{m, err}
	}()
	sent := dump.NewHasher(pr)
	res.Step = backupStepUpload
	obj, uerr := st.Put(ctx, p.Key, sent, -1)
	pr.CloseWithError(dump.ErrUploadEnded)
	derr := <-done
	if derr != nil || uerr != nil {
		stopCount()
	}
	mc := <-manifestDone
	res.Bytes, res.SHA256, res.DumpBytes = sent.N, sent.Sum(), dumped.N
	switch {
	case derr != nil && !pw.Cut:
		res.Step = backupStepDump
		return fail(derr)
	case uerr != nil:
		return fail(fmt.Errorf("uploading the backup: %w", uerr))
	case derr != nil:
		res.Step = backupStepDump
		return fail(derr)
	}
	if mc.err != nil {
		return fail(fmt.Errorf("counting the tables: %w", mc.err))
	}
	manifest := mc.m
	res.Manifest = &manifest
	if err := src.close(); err != nil {
		return fail(fmt.Errorf("ending the snapshot: %w", err))
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("manifest of %d %s taken in the dump's snapshot", len(manifest.Tables),
		map[string]string{agentproto.BackupManifestSQL: "tables", agentproto.BackupManifestKV: "databases"}[manifest.Kind]), nil)
	res.Step = backupStepReadBack
	res.Remote = &agentproto.BackupObject{Key: obj.Key, Size: obj.Size, SHA256: obj.SHA256}
	if obj.Size != sent.N || obj.SHA256 != sent.Sum() {
		return fail(fmt.Errorf("read back %d bytes (sha256 %s) from the storage, %d were sent (sha256 %s)", obj.Size, obj.SHA256,
			sent.N, sent.Sum()))
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("uploaded %s (%s before compression) and read back its size and sha256",
		agent.HumanBytes(sent.N), agent.HumanBytes(dumped.N)), nil)
	if local != nil {
		removed, err := b.keepLocal(local, p)
		res.LocalRemoved = removed
		if err != nil {
			events.Emit(agentproto.LevelWarn, "keeping the local copy: "+err.Error(), nil)
		} else {
			keepLocal = true
			res.Local = strings.TrimSuffix(local.Name(), partialSuffix)
		}
		if len(removed) > 0 {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed the local copies of %s beyond the newest %d",
				strings.Join(removed, ", "), p.LocalKeep), nil)
		}
	}
	res.Step = ""
	return res, nil
}

// dumpSource is what a backup dumps: dump writes the dump, manifest
// describes it (it may run while dump does, and waits for what it needs),
// close ends what they share (more than once is fine).
type dumpSource struct {
	dump     func(ctx context.Context, w io.Writer) error
	manifest func(ctx context.Context) (agentproto.BackupManifest, error)
	close    func() error
	// ext names the object's content: "sql" or "rdb".
	ext string
}

// sqlSource dumps a SQL database with its engine's dump tool in the
// snapshot its manifest is taken in.
func (b *Backups) sqlSource(ctx context.Context, p agentproto.BackupRunPayload, password string, events agent.EventSink,
	res *agentproto.BackupRunResult) (*dumpSource, error) {
	if err := dump.CheckSQLJob(p.Target.Engine, p.Database); err != nil {
		return nil, err
	}
	exp := agentproto.DBExportPayload{Target: p.Target, Source: p.Source, Database: p.Database}
	r, c, cleanup, err := b.Transfer.Dumper(ctx, exp, password, events)
	if err != nil {
		return nil, err
	}
	call := engine.DumpCall(p.Target.Engine, p.Database, c)
	res.Tool, res.ToolVersion = r.Kind(), dump.ToolVersion(ctx, r, p.Target.Engine)
	// The manifest is taken in a snapshot the dump shares.
	snap, err := engine.OpenSnapshot(ctx, p.Target, password, p.Database)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("taking the snapshot: %w", err)
	}
	call = snap.DumpCall(call)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("dumping %s with %s %s", p.Database, call.Args[0], r),
		map[string]any{"tool": r.Kind(), "tool_version": res.ToolVersion})
	return &dumpSource{ext: "sql",
		dump: func(ctx context.Context, w io.Writer) error {
			out := snap.Watch(w)
			err := r.Run(ctx, call, nil, out)
			if w, ok := out.(*engine.SnapshotWatch); ok {
				w.End()
			}
			return err
		},
		manifest: snap.Manifest,
		close: func() error {
			err := snap.Close()
			cleanup()
			return err
		},
	}, nil
}

const partialSuffix = ".partial"

// localFile creates the local copy's file, or nil when none is kept.
func (b *Backups) localFile(p agentproto.BackupRunPayload, ext string) (*os.File, error) {
	if p.LocalKeep <= 0 {
		return nil, nil
	}
	dir := b.localDir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the local backup directory: %w", err)
	}
	name := filepath.Join(dir, filepath.Base(p.RunID)+"."+ext+".gz.age"+partialSuffix)
	return os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
}

// localDir is the directory of p's instance's local copies.
func (b *Backups) localDir(p agentproto.BackupRunPayload) string {
	root := p.LocalDir
	if root == "" {
		root = b.DefaultLocalDir
	}
	if root == "" {
		root = DefaultBackupDir
	}
	return filepath.Join(root, filepath.Base(p.Target.InstanceID), filepath.Base(p.Database))
}

// keepLocal completes the local copy and removes the copies beyond the
// newest p.LocalKeep, except those of p.LocalProtect (the control plane's
// newest verified backup); it returns the runs whose copies it removed.
// It bounds the disk the copies take; the control plane deletes the
// local copies of the backups it prunes itself.
func (b *Backups) keepLocal(f *os.File, p agentproto.BackupRunPayload) ([]string, error) {
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(f.Name(), strings.TrimSuffix(f.Name(), partialSuffix)); err != nil {
		return nil, err
	}
	return pruneLocal(filepath.Dir(f.Name()), p.LocalKeep, p.LocalProtect)
}

// pruneLocal removes the local copies in dir beyond the newest keep,
// except those of the runs protect, and returns the runs whose copies it
// removed.
func pruneLocal(dir string, keep int, protect []string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var copies []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".gz.age") {
			copies = append(copies, e.Name())
		}
	}
	// Run ids sort by time: newest first.
	slices.Sort(copies)
	slices.Reverse(copies)
	var removed []string
	for i, name := range copies {
		run, _, _ := strings.Cut(name, ".")
		if i < keep || slices.Contains(protect, run) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return removed, err
		}
		removed = append(removed, run)
	}
	return removed, nil
}
