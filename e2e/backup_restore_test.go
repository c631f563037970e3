package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Verified is a run's verified field.
type Verified struct {
	At      string `json:"at"`
	OK      bool   `json:"ok"`
	Details struct {
		OK         bool   `json:"ok"`
		ChecksumOK bool   `json:"checksum_ok"`
		Error      string `json:"error"`
		Database   string `json:"database"`
		// What the backup was loaded into: the server's own version,
		// and the loader (host, image or container) with its version
		// and image or path.
		EngineVersion string `json:"engine_version"`
		Loader        string `json:"loader"`
		LoaderVersion string `json:"loader_version"`
		LoaderRef     string `json:"loader_ref"`
		Tables        []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"tables"`
	} `json:"details"`
}

// newRestoreRig is a backup rig whose control plane names the test lab's
// PostgreSQL image, where restores load backups (in a throwaway
// container, as imports do).
func newRestoreRig(t *testing.T) *backupRig {
	t.Helper()
	return newRestoreRigOn(t, store.SQLite)
}

// newRestoreRigOn is newRestoreRig on the store d, with extra arguments
// for capstan serve.
func newRestoreRigOn(t *testing.T, d store.Dialect, args ...string) *backupRig {
	t.Helper()
	testlab.Docker(t)
	return newImagesRigOn(t, d, map[string]map[string]string{"postgres": {"15": testlab.EngineImage(t, "postgres")}}, args...)
}

// newImagesRig is a backup rig whose control plane names images, by
// engine and version.
func newImagesRig(t testing.TB, images map[string]map[string]string) *backupRig {
	t.Helper()
	return newImagesRigOn(t, store.SQLite, images)
}

// newImagesRigOn is newImagesRig on the store d, with extra arguments for
// capstan serve.
func newImagesRigOn(t testing.TB, d store.Dialect, images map[string]map[string]string, args ...string) *backupRig {
	t.Helper()
	return newBackupRig(t, d, append([]string{"--database-images", databaseImagesFile(t, images)}, args...)...)
}

// databaseImagesFile writes images (by engine and version) to a file for
// capstan serve --database-images.
func databaseImagesFile(t testing.TB, images map[string]map[string]string) string {
	t.Helper()
	list, err := json.Marshal(images)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "images.json")
	if err := os.WriteFile(file, list, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// post queues a verify or restore and waits for its job.
func (r *backupRig) post(t *testing.T, path string, body any) JobInfo {
	t.Helper()
	var a Accepted
	expectJSON(t, r.Post(t, path, r.Token, body), http.StatusAccepted, &a)
	return r.backupJob(t, a.JobID)
}

// scratchPattern matches the names of the scratch databases that
// verifying and restoring the runs make: capstan_verify_<id>, and so on,
// with the run id's first 26 characters after run_, lowercased.
func scratchPattern(runIDs []string) string {
	ids := make([]string, len(runIDs))
	for i, id := range runIDs {
		id = strings.TrimPrefix(id, "run_")
		ids[i] = strings.ToLower(id[:min(len(id), 26)])
	}
	return "^capstan_(verify|restore|replaced)_(" + strings.Join(ids, "|") + ")$"
}

// restoreIntoExisting restores a backup in mode new into a database that
// exists, which must be refused: by the control plane (422 on into) when
// the agent's listing of the instance's databases has reached it since the
// database was made, or else by the agent, failing the job. Either way
// the refusal says the database exists.
func (r *backupRig) restoreIntoExisting(t *testing.T, runID, into string) {
	t.Helper()
	resp := r.Post(t, "/api/v1/backups/"+runID+"/restore", r.Token, map[string]any{"mode": "new", "into": into})
	switch resp.Status {
	case http.StatusUnprocessableEntity:
		if !strings.Contains(string(resp.Body), `"field":"into"`) || !strings.Contains(string(resp.Body), "exists") {
			t.Fatalf("restore new into an existing database: 422 without saying so: %s", resp.Body)
		}
	case http.StatusAccepted:
		var a Accepted
		resp.JSON(t, &a)
		if rj := r.backupJob(t, a.JobID); rj.Status != "failed" || !strings.Contains(deref(rj.Error), "exists") {
			t.Fatalf("restore new into an existing database: %s: %s", rj.Status, deref(rj.Error))
		}
	default:
		t.Fatalf("restore new into an existing database: %d %s", resp.Status, resp.Body)
	}
}

func (r *backupRig) verified(t *testing.T, runID string) Verified {
	t.Helper()
	run := r.run(t, runID)
	var v Verified
	if len(run.Verified) == 0 || string(run.Verified) == "null" {
		t.Fatalf("run %s is not verified", runID)
	}
	if err := json.Unmarshal(run.Verified, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// verifyOK verifies the run, failing the test unless the verify job
// succeeded, and returns the run's verification.
func (r *backupRig) verifyOK(t *testing.T, runID string) Verified {
	t.Helper()
	if vj := r.post(t, "/api/v1/backups/"+runID+"/verify", nil); vj.Status != "succeeded" {
		t.Fatalf("verify: %s: %s\n%s", vj.Status, deref(vj.Error), r.agent.Logs())
	}
	return r.verified(t, runID)
}

// TestBackupVerifyRestorePostgres: backup → verify (a throwaway database,
// dropped after) → restore new, whose tables equal the source's at backup
// time; rows changed after the backup, then restore replace, and the
// database equals the backup again with nothing left behind. An object
// corrupted in storage fails verification with a checksum error; a
// backup whose content does not load fails it with the restore's error.
// Both publish backup.verify_failed.
func TestBackupVerifyRestorePostgres(t *testing.T) {
	r := newRestoreRig(t)
	expectStatus(t, r.putSettings(t, r.storageSettings("")), http.StatusOK)
	pg, database := r.registerPostgres(t, "pg")
	exec := func(db, sql string) {
		t.Helper()
		var w struct{}
		r.call(t, pg.ID, "query", map[string]any{"sql": sql, "database": db, "readonly": false}).result(t, &w)
	}
	for _, sql := range []string{
		`CREATE TABLE items (id int PRIMARY KEY, name text, at timestamptz)`,
		`INSERT INTO items SELECT g, 'item ' || g, '2026-01-01T00:00:00Z'::timestamptz + g * interval '1 hour' FROM generate_series(1, 3000) g`,
		`CREATE TABLE tags (item_id int REFERENCES items (id), tag text)`,
		`INSERT INTO tags SELECT g, 'tag ' || (g % 7) FROM generate_series(1, 3000) g`,
	} {
		exec(database, sql)
	}
	sums := map[string]string{
		"items": `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.id)) FROM items t`,
		"tags":  `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.item_id)) FROM tags t`,
	}
	source := r.checksums(t, pg.ID, database, sums)
	same := func(db string) {
		t.Helper()
		for table, sum := range r.checksums(t, pg.ID, db, sums) {
			if sum != source[table] {
				t.Errorf("%s in %s: checksum %s, at backup time %s", table, db, sum, source[table])
			}
		}
	}
	// leftovers counts the scratch databases of this test's backup runs
	// (other tests verify and restore on the same server meanwhile).
	leftovers := func(runIDs ...string) string {
		t.Helper()
		var res struct {
			Rows [][]any `json:"rows"`
		}
		r.call(t, pg.ID, "query", map[string]any{"sql": `SELECT count(*) FROM pg_database WHERE datname ~ '` + scratchPattern(runIDs) + `'`}).result(t, &res)
		return jsonString(res.Rows[0][0])
	}

	run, j := r.backup(t, pg.ID, "")
	if run.Status != "succeeded" {
		t.Fatalf("backup %s: %s", j.Status, deref(j.Error))
	}
	v := r.verifyOK(t, run.ID)
	if !v.OK || !v.Details.ChecksumOK || len(v.Details.Tables) != 2 {
		t.Fatalf("verified: %+v", v)
	}
	// Loaded into the instance's own server with psql of its version.
	if d := v.Details; !strings.HasPrefix(d.EngineVersion, "15.") || d.Loader != "image" || d.LoaderVersion != "15" ||
		d.LoaderRef != testlab.EngineImage(t, "postgres") {
		t.Fatalf("loaded into %q with %s %s %s, want PostgreSQL 15 with the image of 15", d.EngineVersion, d.Loader, d.LoaderVersion,
			d.LoaderRef)
	}
	if n := leftovers(run.ID); n != "0" {
		t.Fatalf("%s scratch databases left after the verification", n)
	}
	var sum BackupSummary
	r.Get(t, "/api/v1/backups/summary", r.Token).JSON(t, &sum)
	if sum.VerifiedCount != 1 || sum.UnverifiedCount != 0 {
		t.Fatalf("summary after the verification: %+v", sum)
	}

	// Restore new: the tables are the source's at backup time.
	copyDB := strings.ToLower(pg.ID) + "_copy"
	if rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "new", "into": copyDB}); rj.Status != "succeeded" {
		t.Fatalf("restore new: %s: %s", rj.Status, deref(rj.Error))
	}
	same(copyDB)
	r.restoreIntoExisting(t, run.ID, copyDB)
	same(copyDB)
	resp := r.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/databases/" + pg.ID + "/databases/" + copyDB, Token: r.Token})
	var dropped Accepted
	expectJSON(t, resp, http.StatusAccepted, &dropped)
	if dj := r.wait(t, pg.ID, dropped.JobID); dj.Status != "succeeded" {
		t.Fatalf("dropping %s: %s", copyDB, deref(dj.Error))
	}

	// Rows change after the backup; restore replace brings the backup back.
	exec(database, `DELETE FROM tags WHERE item_id > 2500`)
	exec(database, `UPDATE items SET name = 'changed' WHERE id < 100`)
	exec(database, `CREATE TABLE later (x int)`)
	if rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "replace"}); rj.Status != "succeeded" {
		t.Fatalf("restore replace: %s: %s\n%s", rj.Status, deref(rj.Error), r.agent.Logs())
	}
	same(database)
	if n := leftovers(run.ID); n != "0" {
		t.Fatalf("%s scratch databases left after the restore", n)
	}

	// Bad input: nothing queued.
	for _, body := range []map[string]any{{"mode": "sideways"}, {"mode": "new"}, {"mode": "new", "into": "-x"}} {
		expectProblem(t, r.Post(t, "/api/v1/backups/"+run.ID+"/restore", r.Token, body), http.StatusUnprocessableEntity, "validation-failed")
	}
	expectStatus(t, r.Post(t, "/api/v1/backups/run_none/verify", r.Token, nil), http.StatusNotFound)

	// Corrupted in storage: a checksum error.
	key := run.Locations.Remote
	r.s3.Corrupt(t, key, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
	if vj := r.post(t, "/api/v1/backups/"+run.ID+"/verify", nil); vj.Status != "failed" || !strings.Contains(deref(vj.Error), "checksum mismatch") {
		t.Fatalf("verify of a corrupted object: %s: %s", vj.Status, deref(vj.Error))
	}
	if v := r.verified(t, run.ID); v.OK || v.Details.ChecksumOK || !strings.Contains(v.Details.Error, "checksum mismatch") {
		t.Fatalf("verified after corruption: %+v", v)
	}

	// A backup whose checksum holds but whose content does not load: a
	// CHECK that reads a table loaded after the checked one.
	for _, sql := range []string{
		`CREATE TABLE z_ref (x int)`,
		`CREATE FUNCTION in_ref(int) RETURNS boolean LANGUAGE sql AS 'SELECT EXISTS (SELECT 1 FROM public.z_ref WHERE x = $1)'`,
		`CREATE TABLE a_checked (y int CHECK (public.in_ref(y)))`,
		`INSERT INTO z_ref VALUES (1)`,
		`INSERT INTO a_checked VALUES (1)`,
	} {
		exec(database, sql)
	}
	bad, _ := r.backup(t, pg.ID, "")
	if bad.Status != "succeeded" {
		t.Fatalf("backup: %+v", bad)
	}
	vj := r.post(t, "/api/v1/backups/"+bad.ID+"/verify", nil)
	if v := r.verified(t, bad.ID); vj.Status != "failed" || v.OK || !v.Details.ChecksumOK || !strings.Contains(v.Details.Error, "restoring") ||
		!strings.Contains(v.Details.Error, "a_checked") {
		t.Fatalf("verify of a backup that does not load: %s: %+v", vj.Status, v)
	}
	if n := leftovers(run.ID, bad.ID); n != "0" {
		t.Fatalf("%s scratch databases left after failed verifications", n)
	}
	resp = r.Get(t, "/api/v1/events?type=backup.verify_failed", r.Token)
	expectStatus(t, resp, http.StatusOK)
	if !strings.Contains(string(resp.Body), run.ID) || !strings.Contains(string(resp.Body), bad.ID) {
		t.Fatalf("backup.verify_failed events: %s", resp.Body)
	}
	for what, text := range map[string]string{"control plane log": r.ControlPlane.Logs(), "agent log": r.agent.Logs()} {
		if strings.Contains(text, "AGE-SECRET-KEY-1") {
			t.Errorf("the %s holds the backup identity", what)
		}
	}
}
