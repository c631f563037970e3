package e2e

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// insertRows counts the rows of a table's INSERT statements in a
// MariaDB dump, which puts each row of an extended INSERT on a line of
// its own.
func insertRows(t testing.TB, dump []byte, table string) int64 {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(dump))
	sc.Buffer(make([]byte, 16<<20), 16<<20)
	header := "INSERT INTO `" + table + "` VALUES"
	var n int64
	found, in := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == header:
			found, in = true, true
		case in && strings.HasPrefix(line, "("):
			n++
			in = !strings.HasSuffix(line, ";")
		default:
			in = false
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no INSERT of %s in the dump", table)
	}
	return n
}

// TestBackupMariaDB backs up a MariaDB database while rows are being
// inserted: the dump and the manifest see the same snapshot (the rows
// in the dump are those the manifest counted), the object holds no
// plaintext and decrypts with the data dir's identity. Verify restores
// it into a throwaway database and matches the manifest; restore new
// gives tables equal to the source's at backup time; after rows changed
// and a table was added, restore replace brings the backup back with
// nothing left behind; an object corrupted in storage fails
// verification with a checksum error.
func TestBackupMariaDB(t *testing.T) {
	testlab.Docker(t)
	r := newImagesRig(t, map[string]map[string]string{"mariadb": {"10.11": testlab.EngineImage(t, "mariadb")}})
	expectStatus(t, r.putSettings(t, r.storageSettings("maria")), http.StatusOK)
	maria := testlab.StartMariaDB(t, nil)
	database := maria.Database(t)
	m := r.register(t, map[string]any{"name": "maria", "engine": "mariadb", "host": "127.0.0.1", "port": maria.Port,
		"username": maria.User, "password": maria.Password, "database": database, "tls_mode": "disable"})
	if m.State != "ready" {
		t.Fatalf("instance: %+v", m)
	}
	exec := func(db, sql string) {
		t.Helper()
		var w struct{}
		r.call(t, m.ID, "query", map[string]any{"sql": sql, "database": db, "readonly": false}).result(t, &w)
	}
	marker := randomMarker(t)
	for _, sql := range []string{
		`CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(10,2), at TIMESTAMP NULL, data BLOB)`,
		`INSERT INTO items SELECT seq, CONCAT('item ', seq), seq * 1.25, FROM_UNIXTIME(1767225600 + seq * 3600), UNHEX(MD5(seq)) FROM seq_1_to_3000`,
		`INSERT INTO items VALUES (0, '` + marker + `', NULL, NULL, NULL)`,
		`CREATE TABLE notes (id INT PRIMARY KEY AUTO_INCREMENT, item_id INT, body TEXT, FOREIGN KEY (item_id) REFERENCES items (id))`,
		`INSERT INTO notes (item_id, body) SELECT seq, REPEAT('n', seq % 40) FROM seq_1_to_1000`,
		`CREATE TABLE orders (id INT PRIMARY KEY AUTO_INCREMENT, item VARCHAR(32))`,
		`INSERT INTO orders (item) SELECT CONCAT('item ', seq) FROM seq_1_to_2000`,
	} {
		exec(database, sql)
	}
	sums := map[string]string{
		"items": `SELECT MD5(GROUP_CONCAT(CONCAT_WS('|', id, name, price, at, HEX(data)) ORDER BY id SEPARATOR ',')) FROM items`,
		"notes": `SELECT MD5(GROUP_CONCAT(CONCAT_WS('|', id, item_id, body) ORDER BY id SEPARATOR ',')) FROM notes`,
	}
	source := r.checksums(t, m.ID, database, sums)
	same := func(db string) {
		t.Helper()
		for table, sum := range r.checksums(t, m.ID, db, sums) {
			if sum != source[table] {
				t.Errorf("%s in %s: checksum %s, at backup time %s", table, db, sum, source[table])
			}
		}
	}
	count := func(db, q string) string {
		t.Helper()
		var res struct {
			Rows [][]any `json:"rows"`
		}
		r.call(t, m.ID, "query", map[string]any{"sql": q, "database": db}).result(t, &res)
		return jsonString(res.Rows[0][0])
	}
	// leftovers counts the scratch databases of this test's backup runs
	// (other tests may verify and restore on the same server meanwhile).
	leftovers := func(runIDs ...string) string {
		t.Helper()
		return count(database, `SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name REGEXP '`+scratchPattern(runIDs)+`'`)
	}

	// Inserts go on while the backup runs.
	stop := r.writer(m.ID, "INSERT INTO orders (item) SELECT 'late' FROM seq_1_to_50", 50)
	defer stop()
	run, j := r.backup(t, m.ID, "")
	inserted := stop()
	if j.Status != "succeeded" || run.Status != "succeeded" {
		t.Fatalf("backup: job %s (%s), run %s (%s)\nagent log:\n%s", j.Status, deref(j.Error), run.Status, run.Error, r.agent.Logs())
	}
	rows := map[string]int64{}
	for _, tb := range run.Manifest.Tables {
		rows[tb.Name] = tb.Rows
		if tb.Checksum == "" || tb.Checksum == "0" {
			t.Errorf("table %s has no checksum: %+v", tb.Name, tb)
		}
	}
	if run.Manifest.Kind != "sql" || len(rows) != 3 || rows["items"] != 3001 || rows["notes"] != 1000 || rows["orders"] < 2000 {
		t.Fatalf("manifest: %+v", run.Manifest)
	}
	object := r.s3.Object(t, "maria/"+run.Locations.Remote)
	if int64(len(object)) != run.Size || bytes.Contains(object, []byte(marker)) ||
		!bytes.HasPrefix(object, []byte("age-encryption.org/v1\n")) {
		t.Fatalf("stored object: %d bytes (run %d), age header %v, plaintext %v", len(object), run.Size,
			bytes.HasPrefix(object, []byte("age-encryption.org/v1\n")), bytes.Contains(object, []byte(marker)))
	}
	dump := decryptBackup(t, r.DataDir, run.KeyID, object)
	if !bytes.Contains(dump, []byte(marker)) {
		t.Fatal("the decrypted backup does not hold the data")
	}
	if got := insertRows(t, dump, "orders"); got != rows["orders"] {
		t.Fatalf("the dump holds %d orders, the manifest counted %d: not the same snapshot", got, rows["orders"])
	}
	t.Logf("%d rows queued for insertion while the backup ran; the snapshot holds %d orders", inserted, rows["orders"])

	// Verify: a throwaway database, dropped after.
	if v := r.verifyOK(t, run.ID); !v.OK || !v.Details.ChecksumOK || len(v.Details.Tables) != 3 {
		t.Fatalf("verified: %+v", v)
	}
	if n := leftovers(run.ID); n != "0" {
		t.Fatalf("%s scratch databases left after the verification", n)
	}

	// Restore new: the tables are the source's at backup time.
	copyDB := database + "_copy"
	if rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "new", "into": copyDB}); rj.Status != "succeeded" {
		t.Fatalf("restore new: %s: %s\n%s", rj.Status, deref(rj.Error), r.agent.Logs())
	}
	same(copyDB)
	if got := count(copyDB, "SELECT COUNT(*) FROM orders"); got != jsonString(float64(rows["orders"])) {
		t.Fatalf("restored orders: %s, the manifest counted %d", got, rows["orders"])
	}
	r.restoreIntoExisting(t, run.ID, copyDB)

	// Rows change after the backup; restore replace brings the backup
	// back and the table made since goes with the replaced content.
	exec(database, `DELETE FROM notes WHERE item_id > 500`)
	exec(database, `UPDATE items SET name = 'changed' WHERE id < 100`)
	exec(database, `CREATE TABLE later (x INT)`)
	if rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "replace"}); rj.Status != "succeeded" {
		t.Fatalf("restore replace: %s: %s\n%s", rj.Status, deref(rj.Error), r.agent.Logs())
	}
	same(database)
	if got := count(database, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"); got != "3" {
		t.Fatalf("%s tables after restore replace, want the backup's 3", got)
	}
	if n := leftovers(run.ID); n != "0" {
		t.Fatalf("%s scratch databases left after the restore", n)
	}

	// A target RENAME TABLE cannot swap is refused with nothing changed.
	exec(database, `CREATE TRIGGER notes_guard BEFORE INSERT ON notes FOR EACH ROW SET NEW.body = NEW.body`)
	exec(database, `DELETE FROM notes WHERE id = 1`)
	if rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "replace"}); rj.Status != "failed" ||
		!strings.Contains(deref(rj.Error), "triggers") {
		t.Fatalf("restore replace over a table with a trigger: %s: %s", rj.Status, deref(rj.Error))
	}
	if got := count(database, "SELECT COUNT(*) FROM notes"); got != "999" {
		t.Fatalf("notes after a refused replace: %s, want the 999 left before it", got)
	}
	if n := leftovers(run.ID); n != "0" {
		t.Fatalf("%s scratch databases left after a refused restore", n)
	}

	// Corrupted in storage: a checksum error.
	r.s3.Corrupt(t, "maria/"+run.Locations.Remote, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
	if vj := r.post(t, "/api/v1/backups/"+run.ID+"/verify", nil); vj.Status != "failed" || !strings.Contains(deref(vj.Error), "checksum mismatch") {
		t.Fatalf("verify of a corrupted object: %s: %s", vj.Status, deref(vj.Error))
	}
	if v := r.verified(t, run.ID); v.OK || v.Details.ChecksumOK {
		t.Fatalf("verified after corruption: %+v", v)
	}
	for what, text := range map[string]string{"control plane log": r.ControlPlane.Logs(), "agent log": r.agent.Logs()} {
		for _, secret := range []string{r.s3.SecretAccessKey, maria.Password, "AGE-SECRET-KEY-1"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds a secret", what)
			}
		}
	}
}
