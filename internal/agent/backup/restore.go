package backup

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// RegisterRestores adds backup.verify and backup.restore to r.
func (b *Backups) RegisterRestores(r agent.Registry) {
	// A job whose payload is invalid reports the result of a restore
	// that compared nothing.
	invalid := agent.PayloadFailure(agentproto.BackupVerifyResult{Tables: []agentproto.BackupCompared{}})
	agent.Handle(r, agentproto.BackupVerify, b.verify, invalid)
	agent.Handle(r, agentproto.BackupRestore, b.restore, invalid)
}

// errChecksum is a fetched object that is not the backup's.
var errChecksum = errors.New("checksum mismatch")

// scratchName is the name of a database a verification or restore makes;
// the run id keeps it apart from others'.
func scratchName(kind, runID string) string {
	id := strings.TrimPrefix(runID, "run_")
	if len(id) > 26 {
		id = id[:26]
	}
	return "capstan_" + kind + "_" + strings.ToLower(id)
}

func (b *Backups) verify(ctx context.Context, c agent.Call[agentproto.BackupRestorePayload]) (agentproto.BackupVerifyResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	res := &agentproto.BackupVerifyResult{Tables: []agentproto.BackupCompared{}}
	if agentproto.EngineKind(p.Target.Engine) == agentproto.EngineKindKV {
		return b.verifyKV(ctx, p, secrets, events, res)
	}
	admin, err := b.adminConn(ctx, p, secrets)
	if err != nil {
		return b.failed(res, err)
	}
	defer admin.Close()
	res.EngineVersion = admin.ServerVersion()
	res.Database = scratchName("verify", p.RunID)
	if _, _, err := admin.DropDatabase(ctx, res.Database); err != nil {
		return b.failed(res, fmt.Errorf("dropping a leftover %s: %w", res.Database, err))
	}
	if _, err := admin.CreateDatabase(ctx, res.Database, ""); err != nil {
		return b.failed(res, fmt.Errorf("creating the throwaway database: %w", err))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, _, err := admin.DropDatabase(dctx, res.Database); err != nil {
			events.Emit(agentproto.LevelWarn, "dropping the throwaway database: "+err.Error(), nil)
		}
	}()
	if err := b.loadAndCompare(ctx, p, secrets, events, res.Database, res); err != nil {
		return b.failed(res, err)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("restored into %s and matched the manifest's %d tables; dropping it", res.Database,
		len(res.Tables)), nil)
	return *res, nil
}

func (b *Backups) restore(ctx context.Context, c agent.Call[agentproto.BackupRestorePayload]) (agentproto.BackupVerifyResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	res := &agentproto.BackupVerifyResult{Tables: []agentproto.BackupCompared{}}
	if agentproto.EngineKind(p.Target.Engine) == agentproto.EngineKindKV {
		return b.restoreKV(ctx, p, secrets, events, res)
	}
	if err := dump.CheckSQLJob(p.Target.Engine, p.Into); err != nil {
		return b.failed(res, err)
	}
	admin, err := b.adminConn(ctx, p, secrets)
	if err != nil {
		return b.failed(res, err)
	}
	defer admin.Close()
	res.EngineVersion = admin.ServerVersion()
	exists, err := admin.Exists(ctx, p.Into)
	if err != nil {
		return b.failed(res, err)
	}
	switch p.Mode {
	case agentproto.BackupRestoreNew:
		if exists {
			return b.failed(res, fmt.Errorf("database %s exists; restore into a new name, or use mode replace", p.Into))
		}
		res.Database = p.Into
	case agentproto.BackupRestoreReplace:
		if !exists {
			return b.failed(res, fmt.Errorf("database %s does not exist; restore it with mode new", p.Into))
		}
		res.Database = scratchName("restore", p.RunID)
		if _, _, err := admin.DropDatabase(ctx, res.Database); err != nil {
			return b.failed(res, err)
		}
	default:
		return b.failed(res, fmt.Errorf("invalid mode %q", p.Mode))
	}
	if _, err := admin.CreateDatabase(ctx, res.Database, ""); err != nil {
		return b.failed(res, fmt.Errorf("creating %s: %w", res.Database, err))
	}
	done := false
	defer func() {
		if done {
			return
		}
		// A failed restore leaves nothing behind: the new database, or
		// the temporary one (the target was not touched).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, _, err := admin.DropDatabase(dctx, res.Database); err != nil {
			events.Emit(agentproto.LevelWarn, "dropping "+res.Database+": "+err.Error(), nil)
		}
	}()
	if err := b.loadAndCompare(ctx, p, secrets, events, res.Database, res); err != nil {
		return b.failed(res, err)
	}
	if p.Mode == agentproto.BackupRestoreReplace {
		old := scratchName("replaced", p.RunID)
		if err := admin.Swap(ctx, p.Into, res.Database, old); err != nil {
			return b.failed(res, fmt.Errorf("swapping the restored database in: %w", err))
		}
		res.Database = p.Into
		if err := dropReplaced(ctx, admin, old); err != nil {
			events.Emit(agentproto.LevelWarn, "dropping the replaced database "+old+": "+err.Error(), nil)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("replaced %s with the restored backup", p.Into), nil)
	}
	done = true
	return *res, nil
}

// dropReplaced drops the database a restore replaced. The drop ends the
// database's sessions first, but on a loaded server they may not have
// gone by the time the engine gives up (PostgreSQL's DROP … WITH (FORCE)
// waits 5 s for them): it is tried again a few times rather than leave a
// whole copy of the old data behind.
func dropReplaced(ctx context.Context, admin engine.RestoreAdmin, name string) error {
	var err error
	for try := 1; ; try++ {
		if _, _, err = admin.DropDatabase(context.WithoutCancel(ctx), name); err == nil || try == 5 {
			return err
		}
		select {
		case <-time.After(time.Duration(try) * time.Second):
		case <-ctx.Done():
			return err
		}
	}
}

// failed records err in res and returns res as the data of the failed
// job.
func (b *Backups) failed(res *agentproto.BackupVerifyResult, err error) (agentproto.BackupVerifyResult, error) {
	res.OK = false
	res.Error = err.Error()
	return *res, err
}

// adminConn connects as the instance's admin login to a database that
// is always there (PostgreSQL's maintenance database, MySQL's
// information_schema), from which databases are made, dropped and
// swapped.
func (b *Backups) adminConn(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string) (engine.RestoreAdmin, error) {
	var database string
	switch p.Target.Engine {
	case agentproto.EnginePostgres:
		database = "postgres"
	case agentproto.EngineMySQL, agentproto.EngineMariaDB:
		database = "information_schema"
	default:
		return nil, fmt.Errorf("%s backups are not restored into databases", p.Target.Engine)
	}
	c, err := engine.Connect(ctx, p.Target, secrets[agentproto.SecretDBPassword], database)
	if err != nil {
		return nil, err
	}
	return c.(engine.RestoreAdmin), nil
}

// loadAndCompare fetches the object from the storage and checks it
// (fetchChecked), loads it into database (decrypted and decompressed as
// it streams) and compares the database with the manifest.
func (b *Backups) loadAndCompare(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string,
	events agent.EventSink, database string, res *agentproto.BackupVerifyResult) error {
	return b.fetchLoadCompare(ctx, p, secrets, events, res,
		func(object io.Reader, identity *age.X25519Identity) error {
			return b.load(ctx, p, secrets, events, database, object, identity, res)
		},
		func(ctx context.Context) (agentproto.BackupManifest, error) {
			return engine.SQLManifest(ctx, p.Target, secrets[agentproto.SecretDBPassword], database)
		})
}

// fetchLoadCompare fetches the object from the storage to the agent's
// disk and checks its size and SHA-256 against the job's (fetchChecked);
// only then it loads it (load decrypts and decompresses it as it
// streams), and compares what loaded (loaded describes it) with the
// manifest. An object that is not the backup's is errChecksum and never
// reaches the engine.
func (b *Backups) fetchLoadCompare(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string,
	events agent.EventSink, res *agentproto.BackupVerifyResult, load func(io.Reader, *age.X25519Identity) error,
	loaded func(context.Context) (agentproto.BackupManifest, error)) error {
	identity, err := age.ParseX25519Identity(secrets[agentproto.SecretBackupIdentity])
	if err != nil {
		return errors.New("the job carries no valid decryption identity")
	}
	open := b.OpenStore
	if open == nil {
		open = objstore.Open
	}
	st, err := open(ctx, p.Storage, secrets)
	if err != nil {
		return err
	}
	object, err := b.fetchChecked(ctx, st, p, res)
	if err != nil {
		return err
	}
	defer removeStaged(object)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("fetched %d bytes; size and sha256 match the backup's record", res.Bytes), nil)
	if err := load(bufio.NewReaderSize(object, 256<<10), identity); err != nil {
		return fmt.Errorf("restoring: %w", err)
	}
	got, err := loaded(ctx)
	if err != nil {
		return fmt.Errorf("counting what was restored: %w", err)
	}
	return compareManifest(p.Manifest, got, res)
}

// load streams the object into database with the engine's load tool;
// res says which tool.
func (b *Backups) load(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string, events agent.EventSink,
	database string, object io.Reader, identity *age.X25519Identity, res *agentproto.BackupVerifyResult) error {
	unzipped, check, err := plaintext(object, identity)
	if err != nil {
		return err
	}
	r, c, err := b.Transfer.Loader(ctx, agentproto.DBImportPayload{Target: p.Target, Source: p.Source, Database: database},
		secrets[agentproto.SecretDBPassword], events)
	if err != nil {
		return err
	}
	res.Loader, res.LoaderVersion, res.LoaderRef = r.Kind(), p.Source.Version, p.Source.ContainerName
	if r.Kind() == agentproto.DBToolImage {
		res.LoaderRef = p.Source.Image
		if p.Source.ImageVersion != "" {
			res.LoaderVersion = p.Source.ImageVersion
		}
	}
	br := bufio.NewReaderSize(unzipped, 256<<10)
	var stdin io.Reader = br
	switch p.Target.Engine {
	case agentproto.EnginePostgres:
		// One transaction: a backup cut short commits nothing.
		stdin = io.MultiReader(strings.NewReader("BEGIN;\n"), br, strings.NewReader("\n;\nCOMMIT;\n"))
	case agentproto.EngineMySQL:
		// A MariaDB dump's first line is refused by MySQL's client.
		if head, _ := br.Peek(len(engine.MariaDBSandbox)); string(head) == engine.MariaDBSandbox {
			if _, err := br.ReadString('\n'); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("decompressing: %w", err)
			}
		}
	}
	call := engine.LoadCall(p.Target.Engine, agentproto.DBFormatSQL, database, c)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("loading the backup into %s with %s %s", database, call.Args[0], r), nil)
	err = r.Run(ctx, call, stdin, dump.NewTail(dump.StderrKeep))
	if cerr := check(); cerr != nil {
		return cerr
	}
	return err
}

// plaintext decrypts and decompresses an object as it is read; check
// returns the decryption's or the decompression's error, if one failed,
// which a tool reading the plaintext sees only as its input ending.
func plaintext(object io.Reader, identity *age.X25519Identity) (io.Reader, func() error, error) {
	dec, err := age.Decrypt(object, identity)
	if err != nil {
		return nil, nil, fmt.Errorf("decrypting: %w", err)
	}
	src := &dump.SourceReader{R: dec}
	gz, err := gzip.NewReader(src)
	if err != nil {
		return nil, nil, fmt.Errorf("decompressing: %w", err)
	}
	unzipped := &dump.SourceReader{R: gz}
	return unzipped, func() error {
		switch {
		case src.Err != nil:
			return fmt.Errorf("decrypting: %w", src.Err)
		case unzipped.Err != nil:
			return fmt.Errorf("decompressing: %w", unzipped.Err)
		}
		return nil
	}, nil
}

// compareManifest fills res.Tables and fails when a table differs.
func compareManifest(want, got agentproto.BackupManifest, res *agentproto.BackupVerifyResult) error {
	have := map[string]agentproto.BackupTable{}
	for _, t := range got.Tables {
		have[t.Name] = t
	}
	var bad []string
	for _, w := range want.Tables {
		g, ok := have[w.Name]
		c := agentproto.BackupCompared{Name: w.Name, Rows: g.Rows, WantRows: w.Rows, Checksum: g.Checksum, WantChecksum: w.Checksum,
			OK: ok && g.Rows == w.Rows && g.Checksum == w.Checksum}
		if !ok {
			c.Rows = -1
		}
		res.Tables = append(res.Tables, c)
		if !c.OK {
			bad = append(bad, w.Name)
		}
		delete(have, w.Name)
	}
	for name := range have {
		bad = append(bad, name+" (not in the manifest)")
	}
	if len(bad) > 0 {
		return fmt.Errorf("the restored tables differ from the manifest: %s", strings.Join(bad, ", "))
	}
	res.OK = true
	return nil
}
