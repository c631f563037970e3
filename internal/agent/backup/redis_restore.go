package backup

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agent/managed"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Restoring a Redis/Valkey backup in place (mode replace) puts the
// snapshot under the managed instance's server and restarts it there:
//
//  1. The object is fetched from the storage once; as it is decrypted
//     and decompressed, the snapshot goes both into a throwaway server
//     (as a verification loads it) and into a staging file in the
//     instance's volume (/data/.capstan-restore/restored.rdb, written by
//     a short-lived container of the instance's image). The throwaway
//     must load it and match the manifest, the object's size and SHA-256
//     must be the backup's, and the staged file's SHA-256 must be the
//     snapshot's; otherwise the staging file is removed and the instance
//     was never touched.
//  2. The instance's container is stopped (the server saves its data as
//     it shuts down); its snapshot file and append-only directory are
//     moved aside into /data/.capstan-restore/old, and the staged
//     snapshot takes the snapshot file's place.
//  3. With appendonly yes in the instance's configuration (as Capstan
//     writes it), a server starting with no append-only files would
//     start empty and ignore the snapshot. So the server starts once on
//     its configuration with appendonly no, loads the snapshot, and then
//     switches the append-only file on at runtime (CONFIG SET appendonly
//     yes), which writes a new one from the loaded data; the original
//     configuration is written back after that rewrite finished.
//  4. The server must answer with its data loaded and with as many keys
//     loaded from the snapshot (INFO persistence: loaded plus expired at
//     load) as the manifest counts. Only then is the previous data in
//     .capstan-restore/old removed; any failure from step 2 on stops the
//     server again, moves the previous data and configuration back and
//     starts it on them.
//
// The instance's ACL users are in its ACL file (redisACL), which the
// swap leaves where it is: the server starts with the same logins on the
// restored data, or on its previous data after a failure. An instance
// without one gets it first (EnsureACLFile), from its running server's
// users. Writes made after the backup was taken are lost, as are
// writes made while the server runs on the restored snapshot if the
// restore then fails and puts the previous data back.

// restoreDir is the directory, in a managed Redis/Valkey instance's
// volume, of a restore's staged snapshot and of the data it replaces.
const restoreDir = ".capstan-restore"

// kvInstance is a managed Redis/Valkey instance's container as a restore
// sees it.
type kvInstance struct {
	id, name string
	// image is the container's image id; volume is the named volume at
	// dataDir.
	image, volume, dataDir string
	// conf is the configuration file (its tar header and content).
	confHeader *tar.Header
	conf       []byte
	// appendOnly, dbFilename and aofDir are what conf says.
	appendOnly         bool
	dbFilename, aofDir string
}

// restoreKV restores a Redis/Valkey backup in place of a managed
// instance's data (see above).
func (b *Backups) restoreKV(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string, events agent.EventSink,
	res *agentproto.BackupVerifyResult) (agentproto.BackupVerifyResult, error) {
	switch {
	case p.Mode != agentproto.BackupRestoreReplace:
		return b.failed(res, fmt.Errorf("a %s backup is restored with mode replace only: it is a snapshot of the whole instance",
			p.Target.Engine))
	case p.Source.ContainerName == "":
		return b.failed(res, fmt.Errorf("the instance is external: this agent does not run its server, so it cannot restart it on the snapshot"))
	case b.Transfer == nil || b.Transfer.Docker == nil:
		return b.failed(res, errors.New("this agent has no Docker engine"))
	}
	if _, busy := b.restoring.LoadOrStore(p.Target.InstanceID, true); busy {
		return b.failed(res, errors.New("another restore of this instance is running on the server"))
	}
	defer b.restoring.Delete(p.Target.InstanceID)
	cli, err := b.Transfer.Docker.Client()
	if err != nil {
		return b.failed(res, err)
	}
	inst, err := kvInstanceOf(ctx, cli, p)
	if err != nil {
		return b.failed(res, err)
	}
	srv, err := b.kvServer(ctx, p)
	if err != nil {
		return b.failed(res, err)
	}
	password := secrets[agentproto.SecretDBPassword]
	if changed, err := managed.EnsureACLFile(ctx, cli, inst.id, inst.dataDir, p.Target, password, events); err != nil {
		return b.failed(res, fmt.Errorf("keeping the instance's users across its restart: %w", err))
	} else if changed {
		if inst, err = kvInstanceOf(ctx, cli, p); err != nil {
			return b.failed(res, err)
		}
	}

	// 1: prove the snapshot and stage it, the instance untouched.
	if _, err := volumeScript(ctx, cli, inst, prepareScript, nil); err != nil {
		return b.failed(res, fmt.Errorf("preparing the instance's volume: %w", err))
	}
	staged := true
	defer func() {
		if !staged {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := volumeScript(cctx, cli, inst, discardScript, nil); err != nil {
			events.Emit(agentproto.LevelWarn, "removing the staged snapshot: "+err.Error(), nil)
		}
	}()
	if err := b.stageKV(ctx, cli, srv, p, secrets, inst, events, res); err != nil {
		return b.failed(res, err)
	}

	// 2 to 4: the swap.
	s := &kvSwap{cli: cli, inst: inst, target: p.Target, password: password, events: events}
	staged = false // the swap owns the staging directory from here
	loaded, err := s.run(ctx, manifestKeys(p.Manifest))
	if err != nil {
		return b.failed(res, err)
	}
	res.Database = "the instance (container " + inst.name + ")"
	res.OK = true
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("%s runs on the restored snapshot: %d keys loaded, as the manifest counts", inst.name,
		loaded), nil)
	return *res, nil
}

// manifestKeys is the number of keys a kv manifest counts.
func manifestKeys(m agentproto.BackupManifest) int64 {
	var n int64
	for _, t := range m.Tables {
		n += t.Rows
	}
	return n
}

// stageKV loads the snapshot into the throwaway server srv and into the
// instance's staging file at once (loadThrowawayKV), and checks the
// staged file's checksum against the snapshot's.
func (b *Backups) stageKV(ctx context.Context, cli *client.Client, srv throwawayKV, p agentproto.BackupRestorePayload,
	secrets map[string]string, inst kvInstance, events agent.EventSink, res *agentproto.BackupVerifyResult) error {
	err := b.loadThrowawayKV(ctx, srv, p, secrets, events, res, nil, func(snapshot io.Reader) (io.Reader, func(error) error) {
		events.Emit(agentproto.LevelInfo, "staging the snapshot in the volume of "+inst.name, nil)
		pr, pw := io.Pipe()
		type stagedFile struct {
			out string
			err error
		}
		stage := make(chan stagedFile, 1)
		go func() {
			out, err := volumeScript(ctx, cli, inst, stageScript, pr)
			// Whatever is still written after the script ended fails.
			pr.CloseWithError(errors.Join(err, errStagingEnded))
			stage <- stagedFile{out, err}
		}()
		sum := sha256.New()
		count := &dump.ByteCounter{}
		return io.TeeReader(snapshot, io.MultiWriter(pw, sum, count)), func(readErr error) error {
			pw.CloseWithError(readErr)
			st := <-stage
			switch {
			case st.err != nil:
				return fmt.Errorf("staging the snapshot in the instance's volume: %w", st.err)
			case readErr != nil:
				return nil // the load's own error
			}
			if want := hex.EncodeToString(sum.Sum(nil)); !strings.HasPrefix(st.out, want+" ") {
				return fmt.Errorf("the staged snapshot's sha256 is %.64s, the snapshot's (%d bytes) is %s", st.out, count.N, want)
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("the snapshot loaded in the throwaway server matches the manifest's %d databases; "+
		"it is staged in the instance's volume", len(res.Tables)), nil)
	return nil
}

// safeName is a file name a restore script may use unquoted.
var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// kvInstanceOf inspects the instance's container and reads its
// configuration file.
func kvInstanceOf(ctx context.Context, cli *client.Client, p agentproto.BackupRestorePayload) (kvInstance, error) {
	spec, ok := managed.EngineSpecs[p.Target.Engine]
	if !ok || agentproto.EngineKind(p.Target.Engine) != agentproto.EngineKindKV {
		return kvInstance{}, fmt.Errorf("%s is not a key-value engine", p.Target.Engine)
	}
	id, err := managed.ExistingContainer(ctx, cli, p.Source.ContainerName, p.Target.InstanceID)
	if err != nil {
		return kvInstance{}, err
	}
	if id == "" {
		return kvInstance{}, fmt.Errorf("the instance's container %s does not exist", p.Source.ContainerName)
	}
	insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return kvInstance{}, fmt.Errorf("inspecting %s: %w", p.Source.ContainerName, err)
	}
	c := insp.Container
	inst := kvInstance{id: id, name: p.Source.ContainerName, image: c.Image, dataDir: spec.DataDir}
	if c.State == nil || !c.State.Running {
		return kvInstance{}, fmt.Errorf("the instance's container %s is not running; start the instance first", inst.name)
	}
	for _, m := range c.Mounts {
		if m.Type == mount.TypeVolume && m.Destination == spec.DataDir {
			inst.volume = m.Name
		}
	}
	if inst.volume == "" {
		return kvInstance{}, fmt.Errorf("the container %s has no volume at %s", inst.name, spec.DataDir)
	}
	confPath := spec.DataDir + "/" + managed.RedisConf
	if c.Config == nil || len(c.Config.Cmd) < 2 || c.Config.Cmd[len(c.Config.Cmd)-1] != confPath {
		return kvInstance{}, fmt.Errorf("the container %s does not run its server on %s", inst.name, confPath)
	}
	if inst.confHeader, inst.conf, err = dockerc.ReadFile(ctx, cli, id, confPath); err != nil {
		return kvInstance{}, err
	}
	return inst, inst.parseConf()
}

// parseConf reads what a restore needs from the configuration: where
// the data is, and whether the append-only file is on.
func (inst *kvInstance) parseConf() error {
	inst.dbFilename, inst.aofDir = "dump.rdb", "appendonlydir"
	dir := ""
	for _, line := range strings.Split(string(inst.conf), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v := strings.Trim(f[1], `"'`)
		switch strings.ToLower(f[0]) {
		case "dir":
			dir = v
		case "dbfilename":
			inst.dbFilename = v
		case "appenddirname":
			inst.aofDir = v
		case "appendonly":
			inst.appendOnly = strings.EqualFold(v, "yes")
		case "include":
			return fmt.Errorf("the configuration includes %s; a restore handles a single configuration file only", v)
		}
	}
	if strings.TrimSuffix(dir, "/") != inst.dataDir {
		return fmt.Errorf("the configuration keeps the data in %q, not in the volume at %s", dir, inst.dataDir)
	}
	if !safeName.MatchString(inst.dbFilename) || !safeName.MatchString(inst.aofDir) {
		return fmt.Errorf("unexpected file names in the configuration: %q, %q", inst.dbFilename, inst.aofDir)
	}
	return nil
}

// confWithAppendOnly is the configuration with appendonly set to v.
func (inst kvInstance) confWithAppendOnly(v string) []byte {
	lines := strings.Split(string(inst.conf), "\n")
	for i, line := range lines {
		if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "appendonly") {
			lines[i] = "appendonly " + v
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// writeConf writes content as the configuration file, with the original
// file's owner and mode.
func (inst kvInstance) writeConf(ctx context.Context, cli *client.Client, content []byte) error {
	return dockerc.CopyFile(ctx, cli, inst.id, inst.dataDir, managed.RedisConf, content, inst.confHeader)
}

// The scripts run in the instance's volume by volumeScript. Each starts
// in the data directory with $d the restore directory, $db the snapshot
// file and $aof the append-only directory.
const (
	// prepareScript refuses to go on over the data an earlier restore
	// moved aside and could not put back, and makes the directory.
	prepareScript = `if [ -e "$d/old" ]; then
	echo "$PWD/$d/old holds the data an earlier restore replaced and could not put back; move it back or remove it first" >&2
	exit 3
fi
rm -rf "$d"
mkdir -m 700 "$d"
chown "$(stat -c %u:%g .)" "$d"`
	// stageScript writes the snapshot from its standard input and prints
	// its SHA-256.
	stageScript = `cat >"$d/restored.rdb.partial"
chown "$(stat -c %u:%g .)" "$d/restored.rdb.partial"
chmod 600 "$d/restored.rdb.partial"
sync
mv "$d/restored.rdb.partial" "$d/restored.rdb"
sha256sum "$d/restored.rdb"`
	// discardScript removes a staged snapshot no swap used.
	discardScript = `if [ ! -e "$d/old" ]; then rm -rf "$d"; fi`
	// swapScript moves the data aside and the staged snapshot in.
	swapScript = `mkdir "$d/old"
for f in "$db" "$aof"; do
	if [ -e "$f" ]; then mv "$f" "$d/old/"; fi
done
mv "$d/restored.rdb" "$db"
sync`
	// rollbackScript puts the data moved aside back.
	rollbackScript = `if [ -d "$d/old" ]; then
	rm -rf "$db" "$aof"
	for f in "$db" "$aof"; do
		if [ -e "$d/old/$f" ]; then mv "$d/old/$f" "$f"; fi
	done
	sync
fi
rm -rf "$d"`
	// commitScript removes the data replaced.
	commitScript = `rm -rf "$d"`
)

// volumeScript runs a script (with set -eu) as root in a short-lived
// container of the instance's image, with no network and the instance's
// volume at its data directory, stdin (nil: none) as its standard input,
// and returns its standard output.
func volumeScript(ctx context.Context, cli *client.Client, inst kvInstance, script string, stdin io.Reader) (string, error) {
	full := fmt.Sprintf("set -eu\ncd %s\nd=%s db=%s aof=%s\n%s", inst.dataDir, restoreDir, inst.dbFilename, inst.aofDir, script)
	cfg := &container.Config{Image: inst.image, Entrypoint: []string{"sh", "-c", full}, User: "0:0", WorkingDir: inst.dataDir,
		AttachStdout: true, AttachStderr: true, AttachStdin: stdin != nil, OpenStdin: stdin != nil, StdinOnce: stdin != nil,
		Labels: map[string]string{agentproto.LabelDBInstance: inst.name, dump.LabelTool: "restore"}}
	hc := &container.HostConfig{NetworkMode: "none",
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: inst.volume, Target: inst.dataDir}}}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
	if err != nil {
		return "", fmt.Errorf("creating a container of the instance's image: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(rctx, created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	att, err := cli.ContainerAttach(ctx, created.ID, client.ContainerAttachOptions{Stream: true, Stdin: stdin != nil, Stdout: true,
		Stderr: true})
	if err != nil {
		return "", fmt.Errorf("attaching to the restore's container: %w", err)
	}
	wait := cli.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		att.Close()
		return "", fmt.Errorf("starting the restore's container: %w", err)
	}
	out := dump.NewTail(4 << 10)
	stderr, err := dump.Stream(ctx, att.HijackedResponse, stdin, out, "sh")
	if err != nil {
		return "", err
	}
	select {
	case w := <-wait.Result:
		if w.Error != nil && w.Error.Message != "" {
			return "", errors.New(w.Error.Message)
		}
		if err := dump.ExitError("the restore's script", int(w.StatusCode), stderr); err != nil {
			return "", err
		}
		return strings.TrimSpace(out.String()), nil
	case err := <-wait.Error:
		return "", fmt.Errorf("waiting for the restore's container: %w", err)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// kvSwap is the swap of a managed Redis/Valkey instance's data for a
// staged snapshot.
type kvSwap struct {
	cli      *client.Client
	inst     kvInstance
	target   agentproto.DBTarget
	password string
	events   agent.EventSink
	// confChanged says the configuration file on the volume is not the
	// original.
	confChanged bool
}

// run swaps the data, starts the server on the snapshot and checks that
// it loaded want keys; any failure puts the previous data back. It
// returns the keys loaded.
func (s *kvSwap) run(ctx context.Context, want int64) (int64, error) {
	stop := managed.StopSeconds
	s.events.Emit(agentproto.LevelInfo, fmt.Sprintf("stopping %s to swap its data; clients are refused until it is back", s.inst.name), nil)
	if _, err := s.cli.ContainerStop(ctx, s.inst.id, client.ContainerStopOptions{Timeout: &stop}); err != nil {
		return 0, s.rollback(ctx, fmt.Errorf("stopping %s: %w", s.inst.name, err))
	}
	loaded, err := s.swap(ctx, want)
	if err != nil {
		return 0, s.rollback(ctx, err)
	}
	if _, err := volumeScript(ctx, s.cli, s.inst, commitScript, nil); err != nil {
		s.events.Emit(agentproto.LevelWarn, fmt.Sprintf("removing the replaced data (%s in volume %s): %v", restoreDir, s.inst.volume, err), nil)
	}
	return loaded, nil
}

func (s *kvSwap) swap(ctx context.Context, want int64) (int64, error) {
	if s.inst.appendOnly {
		// Started with appendonly yes and no append-only files, the
		// server would start empty: it starts without, and writes them
		// from the loaded snapshot once it runs.
		s.confChanged = true
		if err := s.inst.writeConf(ctx, s.cli, s.inst.confWithAppendOnly("no")); err != nil {
			return 0, err
		}
	}
	if _, err := volumeScript(ctx, s.cli, s.inst, swapScript, nil); err != nil {
		return 0, fmt.Errorf("moving the data aside: %w", err)
	}
	s.events.Emit(agentproto.LevelInfo, fmt.Sprintf("moved %s and %s aside into %s/old; starting %s on the restored snapshot",
		s.inst.dbFilename, s.inst.aofDir, restoreDir, s.inst.name), nil)
	c, info, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	loaded, lerr := strconv.ParseInt(info["rdb_last_load_keys_loaded"], 10, 64)
	expired, eerr := strconv.ParseInt(info["rdb_last_load_keys_expired"], 10, 64)
	if lerr != nil || eerr != nil {
		return 0, fmt.Errorf("the server does not report the keys it loaded (INFO persistence): %v", info)
	}
	if loaded+expired != want {
		return 0, fmt.Errorf("the server loaded %d keys (and %d expired ones) from the restored snapshot, the manifest counts %d",
			loaded, expired, want)
	}
	if expired > 0 {
		s.events.Emit(agentproto.LevelInfo, fmt.Sprintf("%d keys of the backup had expired since and were not loaded", expired), nil)
	}
	if s.inst.appendOnly {
		if err := s.rewriteAOF(ctx, c); err != nil {
			return 0, err
		}
		if err := s.inst.writeConf(ctx, s.cli, s.inst.conf); err != nil {
			return 0, err
		}
		s.confChanged = false
	}
	return loaded, nil
}

// start starts the container and waits until the server answers with
// its data loaded; it returns a connection and INFO persistence.
func (s *kvSwap) start(ctx context.Context) (engine.RedisAdmin, map[string]string, error) {
	insp, err := s.cli.ContainerInspect(ctx, s.inst.id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, nil, err
	}
	restarts := insp.Container.RestartCount
	if _, err := s.cli.ContainerStart(ctx, s.inst.id, client.ContainerStartOptions{}); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", s.inst.name, err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := engine.KVAdmin(attempt, s.target, s.password)
		if err == nil {
			var p map[string]string
			p, err = c.Persistence(attempt)
			if err == nil && p["loading"] == "0" {
				cancel()
				return c, p, nil
			}
			c.Close()
		}
		cancel()
		last = err
		insp, ierr := s.cli.ContainerInspect(ctx, s.inst.id, client.ContainerInspectOptions{})
		if ierr != nil {
			return nil, nil, ierr
		}
		st := insp.Container.State
		if st == nil || !st.Running && !st.Restarting || insp.Container.RestartCount > restarts {
			return nil, nil, fmt.Errorf("the server exited before it had loaded its data: %s", containerLogTail(ctx, s.cli, s.inst.id))
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("the server had not loaded its data within 10 minutes: %v", last)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rewriteAOF switches the append-only file on and waits until the server
// wrote it from its data.
func (s *kvSwap) rewriteAOF(ctx context.Context, c engine.RedisAdmin) error {
	if err := c.ConfigSet(ctx, "appendonly", "yes"); err != nil {
		return fmt.Errorf("switching the append-only file on: %w", err)
	}
	s.events.Emit(agentproto.LevelInfo, "writing a new append-only file from the restored data", nil)
	deadline := time.Now().Add(30 * time.Minute)
	for {
		p, err := c.Persistence(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the append-only file: %w", err)
		}
		switch {
		case p["aof_last_bgrewrite_status"] == "err":
			return errors.New("the server failed to write the append-only file (see its log)")
		case p["aof_enabled"] == "1" && p["aof_rewrite_in_progress"] == "0" && p["aof_rewrite_scheduled"] == "0" &&
			p["aof_rewrites"] != "" && p["aof_rewrites"] != "0":
			return nil
		case time.Now().After(deadline):
			return errors.New("the append-only file was not written within 30 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rollback puts the data moved aside and the configuration back, starts
// the server on them, and returns cause with what became of the
// instance.
func (s *kvSwap) rollback(ctx context.Context, cause error) error {
	ctx = context.WithoutCancel(ctx)
	s.events.Emit(agentproto.LevelError, "restore failed: "+cause.Error()+"; putting the previous data back", nil)
	err := func() error {
		stop := managed.StopSeconds
		if _, err := s.cli.ContainerStop(ctx, s.inst.id, client.ContainerStopOptions{Timeout: &stop}); err != nil &&
			!cerrdefs.IsNotFound(err) {
			return fmt.Errorf("stopping %s: %w", s.inst.name, err)
		}
		if s.confChanged {
			if err := s.inst.writeConf(ctx, s.cli, s.inst.conf); err != nil {
				return err
			}
			s.confChanged = false
		}
		if _, err := volumeScript(ctx, s.cli, s.inst, rollbackScript, nil); err != nil {
			return fmt.Errorf("moving the data back: %w", err)
		}
		c, _, err := s.start(ctx)
		if err == nil {
			c.Close()
		}
		return err
	}()
	if err != nil {
		return fmt.Errorf("%w; putting the previous data back failed too: %v (what was moved aside is in %s/old in volume %s)",
			cause, err, restoreDir, s.inst.volume)
	}
	s.events.Emit(agentproto.LevelInfo, s.inst.name+" runs on its previous data again", nil)
	return fmt.Errorf("%w; the instance runs on its previous data again", cause)
}

// errStagingEnded is a write to the staging script after it ended.
var errStagingEnded = errors.New("the staging script ended")
