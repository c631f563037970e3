package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
)

// BackupRun is a run as GET /api/v1/backups lists it.
type BackupRun struct {
	ID         string `json:"id"`
	InstanceID string `json:"instance_id"`
	Database   string `json:"database"`
	Trigger    string `json:"trigger"`
	JobID      string `json:"job_id"`
	Status     string `json:"status"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	KeyID      string `json:"key_id"`
	Manifest   *struct {
		Kind   string           `json:"kind"`
		Keys   map[string]int64 `json:"keys"`
		Tables []struct {
			Name     string `json:"name"`
			Rows     int64  `json:"rows"`
			Checksum string `json:"checksum"`
		} `json:"tables"`
	} `json:"manifest"`
	Locations struct {
		Local  string `json:"local"`
		Remote string `json:"remote"`
	} `json:"locations"`
	Verified      json.RawMessage `json:"verified"`
	Error         string          `json:"error"`
	DeletePending bool            `json:"delete_pending"`
	DeleteError   string          `json:"delete_error"`
}

// BackupSummary is GET /api/v1/backups/summary.
type BackupSummary struct {
	Count           int64       `json:"count"`
	TotalSize       int64       `json:"total_size"`
	VerifiedCount   int64       `json:"verified_count"`
	UnverifiedCount int64       `json:"unverified_count"`
	RecentFailures  []BackupRun `json:"recent_failures"`
	Instances       []struct {
		InstanceID    string  `json:"instance_id"`
		LastSuccessAt *string `json:"last_success_at"`
		Failures      int64   `json:"failures"`
	} `json:"instances"`
}

// backup runs a manual backup and waits for its job.
func (r *backupRig) backup(t testing.TB, instanceID, database string) (BackupRun, JobInfo) {
	t.Helper()
	body := map[string]any{"instance_id": instanceID}
	if database != "" {
		body["database"] = database
	}
	resp := r.Post(t, "/api/v1/backups/run", r.Token, body)
	var a struct {
		JobID string    `json:"job_id"`
		Run   BackupRun `json:"run"`
	}
	expectJSON(t, resp, http.StatusAccepted, &a)
	// The agent may have claimed the job already.
	if a.Run.Status != "queued" && a.Run.Status != "running" || a.Run.JobID != a.JobID || a.Run.Trigger != "manual" {
		t.Fatalf("run reply: %s", resp.Body)
	}
	j := r.backupJob(t, a.JobID)
	return r.run(t, a.Run.ID), j
}

// run reads one run from the list.
func (r *backupRig) run(t testing.TB, id string) BackupRun {
	t.Helper()
	for _, run := range r.runs(t, "") {
		if run.ID == id {
			return run
		}
	}
	t.Fatalf("run %s is not listed", id)
	return BackupRun{}
}

func (r *backupRig) runs(t testing.TB, query string) []BackupRun {
	t.Helper()
	var out struct {
		Runs []BackupRun `json:"runs"`
	}
	expectJSON(t, r.Get(t, "/api/v1/backups?limit=200"+query, r.Token), http.StatusOK, &out)
	return out.Runs
}

// backupIdentity is the identity keyID names, derived from the secret
// key in the control plane's data dir as the control plane derives it
// (and capstan recovery-kit identity does from a kit).
func backupIdentity(t testing.TB, dataDir, keyID string) *age.X25519Identity {
	t.Helper()
	key, err := secrets.LoadOrCreate(dataDir, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := key.IdentityOf(keyID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// decryptBackup opens a stored backup with the identity of its key id
// and gunzips it.
func decryptBackup(t testing.TB, dataDir, keyID string, object []byte) []byte {
	t.Helper()
	ids := []age.Identity{backupIdentity(t, dataDir, keyID)}
	dec, err := age.Decrypt(bytes.NewReader(object), ids...)
	if err != nil {
		t.Fatalf("decrypting the backup: %v", err)
	}
	gz, err := gzip.NewReader(dec)
	if err != nil {
		t.Fatal(err)
	}
	sql, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	return sql
}

// copyRows counts the rows of table's COPY block in a plain dump.
func copyRows(t testing.TB, dump []byte, table string) int {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(dump))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	in, n := false, 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "COPY "+table+" "):
			in = true
		case in && line == `\.`:
			return n
		case in:
			n++
		}
	}
	t.Fatalf("no COPY block of %s in the dump", table)
	return 0
}

// TestBackupRunPostgres backs up a PostgreSQL database while rows are
// being inserted: the run succeeds once the storage read back the object;
// the object is the dump, compressed and encrypted to the data dir's
// identity (no plaintext in storage), and its rows are exactly those the
// manifest counted in the same snapshot. A local copy equal to the object
// stays on the server. An upload cut off mid-way fails the run with the
// reason, publishes backup.failed, and the summary counts it. Bad input
// is 422 and queues nothing; the storage's secret is in no log.
func TestBackupRunPostgres(t *testing.T) {
	r := newBackupRig(t, store.SQLite)
	expectStatus(t, r.putSettings(t, r.storageSettings("fleet")), http.StatusOK)
	marker := randomMarker(t)
	pg, database := r.registerPostgres(t, "pg", "CREATE TABLE orders (id serial PRIMARY KEY, item text)", "CREATE TABLE notes (body text)",
		"INSERT INTO notes VALUES ('"+marker+"')", "INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 2000) g")

	// Inserts go on while the backup runs, each one a query job (not
	// waited for here: the test's helpers may only fail the test from its
	// own goroutine).
	stopWriter := r.writer(pg.ID, "INSERT INTO orders (item) SELECT 'late' FROM generate_series(1, 50)", 50)
	defer stopWriter()
	run, j := r.backup(t, pg.ID, "")
	inserted := stopWriter()
	if j.Status != "succeeded" || run.Status != "succeeded" {
		t.Fatalf("backup: job %s (%s), run %s (%s)\nagent log:\n%s", j.Status, deref(j.Error), run.Status, run.Error, r.agent.Logs())
	}
	if run.Database != database || run.Trigger != "manual" || run.Size <= 0 || run.Verified != nil && string(run.Verified) != "null" {
		t.Fatalf("run: %+v", run)
	}
	rows := map[string]int64{}
	for _, tb := range run.Manifest.Tables {
		rows[tb.Name] = tb.Rows
		if tb.Checksum == "" {
			t.Errorf("table %s has no checksum", tb.Name)
		}
	}
	if run.Manifest.Kind != "sql" || rows["public.notes"] != 1 || rows["public.orders"] < 2000 {
		t.Fatalf("manifest: %+v", run.Manifest)
	}

	object := r.s3.Object(t, "fleet/"+run.Locations.Remote)
	sum := sha256.Sum256(object)
	if int64(len(object)) != run.Size || hex.EncodeToString(sum[:]) != run.SHA256 {
		t.Fatalf("stored object: %d bytes (sha256 %x), the run says %d (%s)", len(object), sum, run.Size, run.SHA256)
	}
	if bytes.Contains(object, []byte(marker)) || !bytes.HasPrefix(object, []byte("age-encryption.org/v1\n")) {
		t.Fatal("the stored object is not age-encrypted: it holds plaintext")
	}
	dump := decryptBackup(t, r.DataDir, run.KeyID, object)
	if !bytes.Contains(dump, []byte(marker)) {
		t.Fatal("the decrypted backup does not hold the data")
	}
	if got := copyRows(t, dump, "public.orders"); int64(got) != rows["public.orders"] {
		t.Fatalf("the dump holds %d orders, the manifest counted %d: not the same snapshot", got, rows["public.orders"])
	}
	t.Logf("%d rows queued for insertion while the backup ran; the snapshot holds %d", inserted, rows["public.orders"])
	local, err := os.ReadFile(run.Locations.Local)
	if err != nil || !bytes.Equal(local, object) || !strings.HasPrefix(run.Locations.Local, r.localDir) {
		t.Fatalf("local copy %q: %v (equal to the object: %v)", run.Locations.Local, err, bytes.Equal(local, object))
	}

	// Cut off mid-upload: failed with the reason, nothing counted.
	r.s3.FailUploadsAfter(64 << 10)
	failed, j := r.backup(t, pg.ID, database)
	r.s3.FailUploadsAfter(-1)
	if j.Status != "failed" || failed.Status != "failed" || !strings.Contains(failed.Error, "uploading the backup") {
		t.Fatalf("backup through a cut-off upload: job %s, run %s: %q", j.Status, failed.Status, failed.Error)
	}
	var sum2 BackupSummary
	resp := r.Get(t, "/api/v1/backups/summary", r.Token)
	expectJSON(t, resp, http.StatusOK, &sum2)
	if sum2.Count != 1 || sum2.TotalSize != run.Size || sum2.UnverifiedCount != 1 || sum2.VerifiedCount != 0 ||
		len(sum2.RecentFailures) != 1 || sum2.RecentFailures[0].ID != failed.ID || len(sum2.Instances) != 1 ||
		sum2.Instances[0].Failures != 1 || sum2.Instances[0].LastSuccessAt == nil {
		t.Fatalf("summary: %s", resp.Body)
	}
	resp = r.Get(t, "/api/v1/events?type=backup.failed", r.Token)
	expectStatus(t, resp, http.StatusOK)
	if !strings.Contains(string(resp.Body), failed.ID) {
		t.Fatalf("no backup.failed event of %s: %s", failed.ID, resp.Body)
	}
	if got := r.runs(t, "&status=failed"); len(got) != 1 || got[0].ID != failed.ID {
		t.Fatalf("failed runs: %+v", got)
	}
	if got := r.runs(t, "&status=succeeded&instance_id="+pg.ID); len(got) != 1 || got[0].ID != run.ID {
		t.Fatalf("succeeded runs: %+v", got)
	}

	// Bad input changes nothing.
	for _, body := range []map[string]any{{}, {"instance_id": "db_none"}, {"instance_id": pg.ID, "database": "-x"}} {
		expectProblem(t, r.Post(t, "/api/v1/backups/run", r.Token, body), http.StatusUnprocessableEntity, "validation-failed")
	}
	if got := r.runs(t, ""); len(got) != 2 {
		t.Fatalf("%d runs after refused requests, want 2", len(got))
	}
	for what, text := range map[string]string{"control plane log": r.ControlPlane.Logs(), "agent log": r.agent.Logs()} {
		if strings.Contains(text, r.s3.SecretAccessKey) {
			t.Errorf("the %s holds the storage secret", what)
		}
	}
}
