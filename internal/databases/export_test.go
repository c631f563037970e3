package databases_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/artifacts"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// newArtifactRig is newRig with exports and imports on, their files in
// the directory it returns.
func newArtifactRig(t *testing.T, maxImport int64) (*rig, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "artifacts")
	dir, err := artifacts.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, func(d *databases.Deps) { d.Artifacts = databases.ArtifactOptions{Dir: dir, MaxImportBytes: maxImport} })
	return r, path
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func wantKind(t *testing.T, err error, k fault.Kind, code string) {
	t.Helper()
	if fe := fault.As(err); fe == nil || fe.Kind != k || code != "" && fe.Code != code {
		t.Fatalf("got %v, want kind %d %s", err, k, code)
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestExport: the export is queued with where its tools run; its upload
// is taken only from its server while it runs, once (of concurrent
// uploads one is stored); the download is audited, refused while it runs
// or once it failed or expired; the reaper deletes expired files.
func TestExport(t *testing.T) {
	r, dir := newArtifactRig(t, 0)
	inst := r.ready("main", agentproto.EnginePostgres, "15.4")

	_, err := r.dbs.Export(r.ctx, r.admin, inst.ID, "-Fc")
	wantInvalid(t, err, "database")
	_, err = r.dbs.Export(r.ctx, r.admin, inst.ID, "app db")
	wantInvalid(t, err, "database")
	r.noJob()

	queued, err := r.dbs.Export(r.ctx, r.admin, inst.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var p agentproto.DBExportPayload
	if err := json.Unmarshal(queued.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Database != "app" || !reflect.DeepEqual(p.Source, agentproto.DBArtifactSource{Image: "postgres:15", ImageVersion: "15", Version: "15"}) || p.Target.InstanceID != inst.ID {
		t.Fatalf("payload %+v", p)
	}
	dump := []byte("-- a dump\n")
	_, err = r.dbs.ReceiveExport(r.ctx, r.serverID, queued.ID, bytes.NewReader(dump))
	wantKind(t, err, fault.Forbidden, "job-not-running")
	_, err = r.dbs.Download(r.ctx, r.admin, inst.ID, queued.ID)
	wantConflict(t, err, "export-running")
	j := r.claim(agentproto.JobDBExport)
	_, err = r.dbs.ReceiveExport(r.ctx, "srv_other", j.ID, bytes.NewReader(dump))
	wantKind(t, err, fault.Forbidden, "not-your-job")

	var wg sync.WaitGroup
	results := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := r.dbs.ReceiveExport(r.ctx, r.serverID, j.ID, bytes.NewReader(dump))
			if err == nil && (rc.Bytes != int64(len(dump)) || rc.SHA256 != sum(dump)) {
				t.Errorf("receipt %+v", rc)
			}
			results <- err
		}()
	}
	wg.Wait()
	close(results)
	stored := 0
	for err := range results {
		if err == nil {
			stored++
		} else if !fault.Is(err, fault.Conflict) {
			t.Fatalf("concurrent upload: %v", err)
		}
	}
	if stored != 1 || len(files(t, dir)) != 1 {
		t.Fatalf("%d concurrent uploads stored, files %v; want one", stored, files(t, dir))
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DBExportResult{Tool: agentproto.DBToolHost, Bytes: int64(len(dump)),
		SHA256: sum(dump)}, "")
	d, err := r.dbs.Download(r.ctx, r.admin, inst.ID, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(d)
	d.Close()
	if !bytes.Equal(got, dump) || !strings.HasPrefix(d.Name, "main-app-") || !strings.HasSuffix(d.Name, ".sql.gz") {
		t.Fatalf("download %q named %s", got, d.Name)
	}
	if want := secrets.InstanceKeyID(inst.ID); d.Artifact.KeyID != want {
		t.Fatalf("export key id %q, want %q", d.Artifact.KeyID, want)
	}
	if e := r.auditActions(databases.ActionExportDownloaded); len(e) != 1 || e[0].IP != r.admin.IP || e[0].Actor.ID != r.admin.Actor.ID {
		t.Fatalf("audit entries of the download: %+v", e)
	}
	// A job of another instance, or not an export, is not found.
	other := r.ready("other", agentproto.EnginePostgres, "15.4")
	_, err = r.dbs.Download(r.ctx, r.admin, other.ID, j.ID)
	wantKind(t, err, fault.NotFound, "")
	_, err = r.dbs.Download(r.ctx, r.admin, inst.ID, inst.CheckJobID)
	wantKind(t, err, fault.NotFound, "")

	// An export whose agent reports other bytes than were stored keeps
	// nothing; so does a failed one.
	for _, c := range []struct {
		status string
		res    agentproto.DBExportResult
		code   string
	}{
		{agentproto.StatusSucceeded, agentproto.DBExportResult{Bytes: int64(len(dump)), SHA256: sum([]byte("other"))}, "export-expired"},
		{agentproto.StatusFailed, agentproto.DBExportResult{}, "export-failed"},
	} {
		if _, err := r.dbs.Export(r.ctx, r.admin, inst.ID, "app"); err != nil {
			t.Fatal(err)
		}
		j := r.claim(agentproto.JobDBExport)
		if _, err := r.dbs.ReceiveExport(r.ctx, r.serverID, j.ID, bytes.NewReader(dump)); err != nil {
			t.Fatal(err)
		}
		r.complete(j, c.status, c.res, map[string]string{agentproto.StatusFailed: "pg_dump: error"}[c.status])
		_, err := r.dbs.Download(r.ctx, r.admin, inst.ID, j.ID)
		if c.code == "export-expired" {
			wantKind(t, err, fault.Gone, c.code)
		} else {
			wantConflict(t, err, c.code)
		}
		_, err = r.dbs.ReceiveExport(r.ctx, r.serverID, j.ID, bytes.NewReader(dump))
		wantKind(t, err, fault.Forbidden, "job-not-running")
	}
	if n := len(files(t, dir)); n != 1 {
		t.Fatalf("files after a mismatched and a failed export: %v", files(t, dir))
	}

	// Expiry: gone for downloads at once, deleted by the reaper.
	if n, err := r.dbs.ReapArtifacts(r.ctx); err != nil || n != 0 {
		t.Fatalf("reaped %d (%v) before expiry", n, err)
	}
	r.clock.Advance(databases.DefaultArtifactTTL + time.Second)
	_, err = r.dbs.Download(r.ctx, r.admin, inst.ID, j.ID)
	wantKind(t, err, fault.Gone, "export-expired")
	if n, err := r.dbs.ReapArtifacts(r.ctx); err != nil || n != 1 || len(files(t, dir)) != 0 {
		t.Fatalf("reaped %d (%v); files %v", n, err, files(t, dir))
	}
	if _, err := r.st.DatabaseArtifact(r.ctx, j.ID); !fault.Is(err, fault.NotFound) {
		t.Fatalf("the expired artifact's record: %v", err)
	}
}

// TestLoadSource: a dump runs in the image of the instance's own version
// or in none; a load (a backup's verification or restore, an import) in
// the image of that version, or when it has none, of the newest one
// above it, never an older one: with none at or above, no image and the
// versions there are.
func TestLoadSource(t *testing.T) {
	r, _ := newArtifactRig(t, 0)
	pgVersions := []string{"17", "16", "15", "14", "13"}
	for _, c := range []struct {
		name, engine, reported string
		dump, load             agentproto.DBArtifactSource
	}{
		{"exact", agentproto.EnginePostgres, "15.4",
			agentproto.DBArtifactSource{Version: "15", Image: "postgres:15", ImageVersion: "15"},
			agentproto.DBArtifactSource{Version: "15", Image: "postgres:15", ImageVersion: "15", Versions: pgVersions}},
		{"older than every image", agentproto.EnginePostgres, "12.3",
			agentproto.DBArtifactSource{Version: "12"},
			agentproto.DBArtifactSource{Version: "12", Image: "postgres:17", ImageVersion: "17", Versions: pgVersions}},
		{"newer than every image", agentproto.EnginePostgres, "18.1",
			agentproto.DBArtifactSource{Version: "18"},
			agentproto.DBArtifactSource{Version: "18", Versions: pgVersions}},
		{"mariadb between two", agentproto.EngineMariaDB, "10.8.3-MariaDB",
			agentproto.DBArtifactSource{Version: "10.8"},
			agentproto.DBArtifactSource{Version: "10.8", Image: "mariadb:11.4", ImageVersion: "11.4", Versions: []string{"11.4", "10.11", "10.6"}}},
		{"debian redis", agentproto.EngineRedis, "7.0.15",
			agentproto.DBArtifactSource{Version: "7.0"},
			agentproto.DBArtifactSource{Version: "7.0", Image: "redis:7.4", ImageVersion: "7.4", Versions: []string{"7.4", "7.2"}}},
	} {
		inst := r.ready("db-"+strings.ReplaceAll(c.name, " ", "-"), c.engine, c.reported)
		src, err := r.dbs.BackupSource(r.ctx, inst.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(src.Tools, c.dump) || !reflect.DeepEqual(src.Load, c.load) {
			t.Errorf("%s: dump %+v, load %+v; want %+v, %+v", c.name, src.Tools, src.Load, c.dump, c.load)
		}
		if agentproto.EngineKind(c.engine) != agentproto.EngineKindSQL {
			continue
		}
		j, err := r.dbs.Import(r.ctx, r.admin, inst.ID, databases.ImportRequest{Body: strings.NewReader("SELECT 1;"), DeclaredSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		var p agentproto.DBImportPayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.Source, c.load) {
			t.Errorf("%s: import from %+v, want %+v", c.name, p.Source, c.load)
		}
		r.complete(r.claim(agentproto.JobDBImport), agentproto.StatusSucceeded, agentproto.DBImportResult{}, "")
	}
}

// TestImport: the upload limit (declared or counted), empty bodies and a
// custom-format dump for MariaDB are refused with nothing stored or
// queued; the format is detected; the file is served only to the job's
// server while the job runs, and deleted when it ends.
func TestImport(t *testing.T) {
	r, dir := newArtifactRig(t, 1000)
	pg := r.ready("pg", agentproto.EnginePostgres, "15.4")
	maria := r.ready("maria", agentproto.EngineMariaDB, "10.11.6-MariaDB")
	kv := r.ready("kv", agentproto.EngineRedis, "7.2.4")

	imp := func(id string, body []byte, declared int64) (jobs.Job, error) {
		return r.dbs.Import(r.ctx, r.admin, id, databases.ImportRequest{Body: bytes.NewReader(body), DeclaredSize: declared})
	}
	_, err := imp(pg.ID, make([]byte, 10), 1001)
	wantKind(t, err, fault.TooLarge, "upload-too-large")
	_, err = imp(pg.ID, bytes.Repeat([]byte("x"), 1001), -1)
	wantKind(t, err, fault.TooLarge, "upload-too-large")
	_, err = imp(pg.ID, nil, 0)
	wantInvalid(t, err, "body")
	_, err = imp(maria.ID, []byte("PGDMP\x01\x0e"), -1)
	wantInvalid(t, err, "body")
	_, err = imp(kv.ID, []byte("SET a 1"), -1)
	wantInvalid(t, err, "id")
	_, err = r.dbs.Import(r.ctx, r.admin, pg.ID, databases.ImportRequest{Database: "a;b", Body: strings.NewReader("SELECT 1;"), DeclaredSize: -1})
	wantInvalid(t, err, "database")
	r.noJob()
	if f := files(t, dir); len(f) != 0 {
		t.Fatalf("refused uploads left files: %v", f)
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("CREATE TABLE t (x int);\n"))
	_ = zw.Close()
	for _, c := range []struct {
		body   []byte
		format string
	}{{gz.Bytes(), agentproto.DBFormatSQLGzip}, {[]byte("PGDMP\x01\x0e\x00"), agentproto.DBFormatPGCustom}, {[]byte("SELECT 1;"), agentproto.DBFormatSQL}} {
		queued, err := imp(pg.ID, c.body, int64(len(c.body)))
		if err != nil {
			t.Fatal(err)
		}
		var p agentproto.DBImportPayload
		if err := json.Unmarshal(queued.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Format != c.format || p.Database != "app" || p.Bytes != int64(len(c.body)) || p.SHA256 != sum(c.body) {
			t.Fatalf("payload %+v, want format %s", p, c.format)
		}
		_, _, err = r.dbs.SendImport(r.ctx, r.serverID, queued.ID)
		wantKind(t, err, fault.Forbidden, "job-not-running")
		j := r.claim(agentproto.JobDBImport)
		_, _, err = r.dbs.SendImport(r.ctx, "srv_other", j.ID)
		wantKind(t, err, fault.Forbidden, "not-your-job")
		rc, a, err := r.dbs.SendImport(r.ctx, r.serverID, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, c.body) || a.Size != int64(len(c.body)) {
			t.Fatalf("sent %q (%+v)", got, a)
		}
		// The file is encrypted to the instance's own identity, and no
		// other opens it.
		if want := secrets.InstanceKeyID(pg.ID); a.KeyID != want {
			t.Fatalf("key id %q, want %q", a.KeyID, want)
		}
		stored, err := os.ReadFile(filepath.Join(dir, a.File))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := age.Decrypt(bytes.NewReader(stored), r.key.InstanceIdentity(pg.ID)); err != nil {
			t.Fatalf("the instance's identity does not open its import: %v", err)
		}
		for what, other := range map[string]*age.X25519Identity{"the fleet-wide": r.key.ArtifactIdentity(),
			"another instance's": r.key.InstanceIdentity(maria.ID)} {
			if _, err := age.Decrypt(bytes.NewReader(stored), other); err == nil {
				t.Fatalf("%s identity opens the import of %s", what, pg.ID)
			}
		}
		r.complete(j, agentproto.StatusSucceeded, agentproto.DBImportResult{Format: c.format}, "")
		if f := files(t, dir); len(f) != 0 {
			t.Fatalf("files after the import ended: %v", f)
		}
	}
	if e := r.auditActions(databases.ActionImportQueued); len(e) != 3 {
		t.Fatalf("audit entries of imports: %d, want 3", len(e))
	}
}
