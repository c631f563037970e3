package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// ExportResult is the data of a finished db.export.
type ExportResult struct {
	Tool        string `json:"tool"`
	ToolVersion string `json:"tool_version"`
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"`
	DumpBytes   int64  `json:"dump_bytes"`
}

// ImportResult is the data of a finished db.import.
type ImportResult struct {
	Format string `json:"format"`
	Tool   string `json:"tool"`
	Atomic bool   `json:"atomic"`
	Bytes  int64  `json:"bytes"`
}

// export queues an export of database and waits for its job.
func (r *dbRig) export(t *testing.T, id, database string) (string, DatabaseJob) {
	t.Helper()
	var a Accepted
	expectJSON(t, r.Post(t, "/api/v1/databases/"+id+"/export", r.Token, map[string]any{"database": database}), http.StatusAccepted, &a)
	return a.JobID, r.wait(t, id, a.JobID)
}

// download fetches an export as an administrator and checks what the
// reply says of it.
func (r *dbRig) download(t *testing.T, id, jobID string, res ExportResult) []byte {
	t.Helper()
	resp := r.Get(t, "/api/v1/databases/"+id+"/exports/"+jobID, r.Token)
	expectStatus(t, resp, http.StatusOK)
	sum := sha256.Sum256(resp.Body)
	if got := resp.Header.Get("Content-Type"); got != "application/gzip" {
		t.Errorf("Content-Type %q", got)
	}
	if got, want := resp.Header.Get("Repr-Digest"), "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":"; got != want {
		t.Errorf("Repr-Digest %q, want %q", got, want)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment; filename=") ||
		!strings.HasSuffix(resp.Header.Get("Content-Disposition"), `.sql.gz"`) {
		t.Errorf("Content-Disposition %q", resp.Header.Get("Content-Disposition"))
	}
	if int64(len(resp.Body)) != res.Bytes || hex.EncodeToString(sum[:]) != res.SHA256 {
		t.Fatalf("downloaded %d bytes (sha256 %x), the agent sent %d (%s)", len(resp.Body), sum, res.Bytes, res.SHA256)
	}
	return resp.Body
}

// load uploads body as an import into database and waits for its job.
func (r *dbRig) load(t *testing.T, id, database string, body []byte) DatabaseJob {
	t.Helper()
	resp := r.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/databases/" + id + "/import?database=" + database, Token: r.Token,
		Body: body, ContentType: "application/octet-stream"})
	var a Accepted
	expectJSON(t, resp, http.StatusAccepted, &a)
	return r.wait(t, id, a.JobID)
}

// checksums returns each table's checksum in database, by a query the
// test passes per engine.
func (r *dbRig) checksums(t *testing.T, id, database string, queries map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for table, q := range queries {
		var res struct {
			Rows [][]any `json:"rows"`
		}
		r.call(t, id, "query", map[string]any{"sql": q, "database": database}).result(t, &res)
		if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
			t.Fatalf("checksum of %s: %+v", table, res.Rows)
		}
		out[table] = jsonString(res.Rows[0][0])
	}
	return out
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// dataDirHolds returns the files under dir that hold needle.
func dataDirHolds(t *testing.T, dir string, needles ...[]byte) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, n) {
				found = append(found, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func randomMarker(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "seed-" + hex.EncodeToString(b[:])
}

// TestDatabaseExportImportPostgres exports a managed PostgreSQL database
// through a real agent and Docker engine, downloads it (audited; a member
// is refused), imports it into a new database with per-table checksums
// equal to the source's, and finds no plaintext of it in the control
// plane's data dir. A bad import fails with the engine's message and
// changes nothing, also when its first statement was valid.
func TestDatabaseExportImportPostgres(t *testing.T) {
	forEachStore(t, testDatabaseExportImportPostgres)
}

func testDatabaseExportImportPostgres(t *testing.T, d store.Dialect) {
	r := newManagedRig(t, d)
	pg, j := r.create(t, map[string]any{"name": "pg-" + r.run, "engine": "postgres", "version": "15", "database": "app"})
	if j.Status != "succeeded" || pg.State != "ready" {
		t.Fatalf("created: %s %s: %+v\nagent log:\n%s", j.Status, deref(j.Error), pg, r.agent.Logs())
	}
	// The marker row's value is made by the engine, so it is in no
	// statement the control plane stores: only a dump holds it.
	seed := randomMarker(t)
	markerSum := md5.Sum([]byte(seed))
	marker := "marker-" + hex.EncodeToString(markerSum[:])
	for _, stmt := range []string{
		`CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL, price numeric(10,2), data bytea, tags text[],
			created timestamptz NOT NULL DEFAULT '2026-01-01T00:00:00Z')`,
		`INSERT INTO items (name, price, data, tags) SELECT 'item ' || g, g * 1.25, decode(md5(g::text), 'hex'), ARRAY['a', g::text]
			FROM generate_series(1, 5000) g`,
		`INSERT INTO items (name) VALUES ('marker-' || md5('` + seed + `'))`,
		`CREATE TABLE notes (id bigint PRIMARY KEY, item_id int REFERENCES items (id), body jsonb)`,
		`INSERT INTO notes SELECT g, g, jsonb_build_object('n', g, 's', repeat('x', g % 50)) FROM generate_series(1, 3000) g`,
		`CREATE VIEW expensive AS SELECT * FROM items WHERE price > 100`,
	} {
		var w struct{}
		r.call(t, pg.ID, "query", map[string]any{"sql": stmt, "readonly": false}).result(t, &w)
	}
	sums := map[string]string{
		"items": `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.id)) FROM items t`,
		"notes": `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.id)) FROM notes t`,
		"view":  `SELECT count(*)::text || ':' || md5(string_agg(t::text, E'\n' ORDER BY t.id)) FROM expensive t`,
		"seq":   `SELECT last_value FROM items_id_seq`,
	}
	source := r.checksums(t, pg.ID, "app", sums)

	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	memberToken := signInUser(t, r.ControlPlane, member).AccessToken
	expectStatus(t, r.Post(t, "/api/v1/databases/"+pg.ID+"/export", memberToken, map[string]any{}), http.StatusForbidden)

	// Export: dumped in the instance's container, uploaded gzip'd.
	jobID, ej := r.export(t, pg.ID, "app")
	var res ExportResult
	ej.result(t, &res)
	if res.Tool != "container" || !strings.Contains(res.ToolVersion, "15.") || res.Bytes == 0 || res.DumpBytes <= res.Bytes {
		t.Fatalf("export result: %+v", res)
	}
	// A member may not download it; an administrator may, audited.
	expectProblem(t, r.Get(t, "/api/v1/databases/"+pg.ID+"/exports/"+jobID, memberToken), http.StatusForbidden, "admin-required")
	gz := r.download(t, pg.ID, jobID, res)
	dump := gunzip(t, gz)
	if !bytes.Contains(dump, []byte(marker)) || !bytes.Contains(dump, []byte("CREATE TABLE public.items")) {
		t.Fatalf("the dump lacks the marker row or the table:\n%.2000s", dump)
	}
	entries := auditEntries(t, r.ControlPlane, r.Token, "database.export.downloaded")
	if len(entries) != 1 || entries[0].Actor.Email != "admin@example.com" || entries[0].IP != "127.0.0.1" ||
		entries[0].Target.ID != pg.ID || entries[0].Details["job_id"] != jobID {
		t.Fatalf("audit entries of the download: %+v", entries)
	}

	// Nothing of the dump in the clear in the data dir: not the marker
	// row, nor a piece of the .sql.gz.
	if found := dataDirHolds(t, r.DataDir, []byte(marker), gz[len(gz)/2:len(gz)/2+64]); len(found) > 0 {
		t.Fatalf("the data dir holds the dump in the clear: %v", found)
	}
	files, err := filepath.Glob(filepath.Join(r.DataDir, "artifacts", "*.age"))
	if err != nil || len(files) != 1 {
		t.Fatalf("artifact files: %v %v", files, err)
	}
	if b, _ := os.ReadFile(files[0]); !bytes.HasPrefix(b, []byte("age-encryption.org/v1\n-> X25519 ")) {
		t.Fatalf("the artifact file is not age-encrypted to an X25519 recipient: %.60q", b)
	}

	// Import into a new database: the same checksums.
	var w struct{}
	r.call(t, pg.ID, "databases", map[string]any{"name": "restored"}).result(t, &w)
	ij := r.load(t, pg.ID, "restored", gz)
	var ires ImportResult
	ij.result(t, &ires)
	if ires.Format != "sql" || ires.Tool != "container" || !ires.Atomic || ires.Bytes != int64(len(gz)) {
		t.Fatalf("import result: %+v", ires)
	}
	restored := r.checksums(t, pg.ID, "restored", sums)
	for table, sum := range source {
		if restored[table] != sum {
			t.Errorf("%s: checksum %s after the import, %s in the source", table, restored[table], sum)
		}
	}
	// The upload is deleted once its job ended.
	if files, _ := filepath.Glob(filepath.Join(r.DataDir, "artifacts", "*")); len(files) != 1 {
		t.Fatalf("artifact files after the import: %v", files)
	}

	// A bad file: the job fails with the engine's message, and its valid
	// first statement is not applied either (one transaction).
	bad := r.load(t, pg.ID, "restored", []byte("CREATE TABLE should_not_exist (x int);\nthis is not sql;\n"))
	if bad.Status != "failed" || !strings.Contains(deref(bad.Error), "syntax error at or near \"this\"") {
		t.Fatalf("bad import: %s %s: %s", bad.Status, deref(bad.Error), bad.Data)
	}
	var gone struct {
		Rows [][]any `json:"rows"`
	}
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT to_regclass('public.should_not_exist') IS NULL", "database": "restored"}).
		result(t, &gone)
	if len(gone.Rows) != 1 || gone.Rows[0][0] != true {
		t.Fatalf("the failed import's first statement was applied: %+v", gone.Rows)
	}
	garbage := make([]byte, 4096)
	_, _ = rand.Read(garbage)
	garbage[0], garbage[1] = 'x', 'y' // not gzip's magic
	if j := r.load(t, pg.ID, "restored", garbage); j.Status != "failed" || deref(j.Error) == "" {
		t.Fatalf("garbage import: %s %s", j.Status, deref(j.Error))
	}
	if after := r.checksums(t, pg.ID, "restored", sums); jsonString(after) != jsonString(restored) {
		t.Fatalf("failed imports changed the database: %v, was %v", after, restored)
	}

	// Bad input: 422, nothing queued or stored.
	for _, path := range []string{"import?database=-h", "import?database=a%22%3B%20DROP", "import?database=" + strings.Repeat("a", 64)} {
		resp := r.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/databases/" + pg.ID + "/" + path, Token: r.Token, Body: []byte("SELECT 1;"),
			ContentType: "application/octet-stream"})
		expectStatus(t, resp, http.StatusUnprocessableEntity)
	}
	expectStatus(t, r.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/databases/" + pg.ID + "/import", Token: r.Token,
		ContentType: "application/octet-stream"}), http.StatusUnprocessableEntity)
	expectStatus(t, r.Post(t, "/api/v1/databases/"+pg.ID+"/export", r.Token, map[string]any{"database": "--file=/etc/passwd"}),
		http.StatusUnprocessableEntity)
	expectStatus(t, r.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/databases/" + pg.ID + "/import", Token: memberToken,
		Body: []byte("SELECT 1;"), ContentType: "application/octet-stream"}), http.StatusForbidden)
	if files, _ := filepath.Glob(filepath.Join(r.DataDir, "artifacts", "*")); len(files) != 1 {
		t.Fatalf("artifact files after bad input: %v", files)
	}
}

// TestDatabaseExportImportExternalPostgres exports an external
// PostgreSQL database with the server's own pg_dump of the same major
// version, and imports it, and a custom-format dump, into other databases
// with the engine's image in a throwaway container: per-table checksums
// equal the source's.
func TestDatabaseExportImportExternalPostgres(t *testing.T) {
	r := newManagedRig(t, store.SQLite)
	host, port, user, password, database := postgresTarget(t)
	pg := r.register(t, map[string]any{"name": "pg-" + r.run, "engine": "postgres", "host": host, "port": port, "username": user,
		"password": password, "database": database, "tls_mode": "disable"})
	if pg.State != "ready" || pg.Version != "15" {
		t.Fatalf("instance after its test: %+v (%s)", pg, deref(pg.LastError))
	}
	for _, stmt := range []string{
		`CREATE TABLE items (id int PRIMARY KEY, name text, at timestamptz)`,
		`INSERT INTO items SELECT g, 'item ' || g, '2026-01-01T00:00:00Z'::timestamptz + g * interval '1 hour' FROM generate_series(1, 2000) g`,
		`CREATE TABLE tags (item_id int REFERENCES items (id), tag text)`,
		`INSERT INTO tags SELECT g, 'tag ' || (g % 7) FROM generate_series(1, 2000) g`,
	} {
		var w struct{}
		r.call(t, pg.ID, "query", map[string]any{"sql": stmt, "readonly": false}).result(t, &w)
	}
	sums := map[string]string{
		"items": `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.id)) FROM items t`,
		"tags":  `SELECT md5(string_agg(t::text, E'\n' ORDER BY t.item_id)) FROM tags t`,
	}
	source := r.checksums(t, pg.ID, database, sums)

	jobID, ej := r.export(t, pg.ID, database)
	var res ExportResult
	ej.result(t, &res)
	if res.Tool != "host" || !strings.Contains(res.ToolVersion, "pg_dump (PostgreSQL) 15.") {
		t.Fatalf("export result: %+v", res)
	}
	gz := r.download(t, pg.ID, jobID, res)

	check := func(db string) {
		t.Helper()
		for table, sum := range r.checksums(t, pg.ID, db, sums) {
			if sum != source[table] {
				t.Errorf("%s in %s: checksum %s, source %s", table, db, sum, source[table])
			}
		}
	}
	_, _, _, _, plain := postgresTarget(t)
	ij := r.load(t, pg.ID, plain, gz)
	var ires ImportResult
	ij.result(t, &ires)
	if ires.Tool != "image" || ires.Format != "sql" || !ires.Atomic {
		t.Fatalf("import result: %+v", ires)
	}
	check(plain)

	// A custom-format dump, made by the real pg_dump.
	custom, err := exec.Command("/usr/lib/postgresql/15/bin/pg_dump", "--format=custom", "--no-owner",
		(&url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: net.JoinHostPort(host, strconv.Itoa(port)),
			Path: "/" + database, RawQuery: "sslmode=disable"}).String()).Output()
	if err != nil {
		t.Fatalf("pg_dump --format=custom: %v", err)
	}
	_, _, _, _, fromCustom := postgresTarget(t)
	ij = r.load(t, pg.ID, fromCustom, custom)
	ij.result(t, &ires)
	if ires.Format != "pgdump" || !ires.Atomic {
		t.Fatalf("custom-format import result: %+v", ires)
	}
	check(fromCustom)
}

// TestDatabaseExportImportMariaDB exports a managed MariaDB database
// (its dump starts with the sandbox-mode line, kept for MariaDB) and
// imports it into a new database with equal checksums; a garbage import
// fails with the engine's message and changes nothing.
func TestDatabaseExportImportMariaDB(t *testing.T) {
	r := newManagedRig(t, store.SQLite)
	m, j := r.create(t, map[string]any{"name": "maria-" + r.run, "engine": "mariadb", "version": "10.11", "database": "shop"})
	if j.Status != "succeeded" || m.State != "ready" {
		t.Fatalf("created: %s %s: %+v\nagent log:\n%s", j.Status, deref(j.Error), m, r.agent.Logs())
	}
	seed := randomMarker(t)
	markerSum := md5.Sum([]byte(seed))
	marker := hex.EncodeToString(markerSum[:])
	for _, stmt := range []string{
		`CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(10,2), data BLOB)`,
		`INSERT INTO items SELECT seq, CONCAT('item ', seq), seq * 1.25, UNHEX(MD5(seq)) FROM seq_1_to_3000`,
		`INSERT INTO items VALUES (0, MD5('` + seed + `'), NULL, NULL)`,
		`CREATE TABLE notes (id INT PRIMARY KEY AUTO_INCREMENT, item_id INT, body TEXT, FOREIGN KEY (item_id) REFERENCES items (id))`,
		`INSERT INTO notes (item_id, body) SELECT seq, REPEAT('n', seq % 40) FROM seq_1_to_1000`,
	} {
		var w struct{}
		r.call(t, m.ID, "query", map[string]any{"sql": stmt, "readonly": false}).result(t, &w)
	}
	sums := map[string]string{
		"items": `SELECT MD5(GROUP_CONCAT(CONCAT_WS('|', id, name, price, HEX(data)) ORDER BY id SEPARATOR ',')) FROM items`,
		"notes": `SELECT MD5(GROUP_CONCAT(CONCAT_WS('|', id, item_id, body) ORDER BY id SEPARATOR ',')) FROM notes`,
	}
	source := r.checksums(t, m.ID, "shop", sums)

	jobID, ej := r.export(t, m.ID, "shop")
	var res ExportResult
	ej.result(t, &res)
	if res.Tool != "container" || !strings.Contains(res.ToolVersion, "10.11") {
		t.Fatalf("export result: %+v", res)
	}
	gz := r.download(t, m.ID, jobID, res)
	dump := gunzip(t, gz)
	if !bytes.Contains(dump, []byte(marker)) || !bytes.HasPrefix(dump, []byte(`/*M!999999\- enable the sandbox mode */`)) {
		t.Fatalf("the dump lacks the marker or the sandbox line:\n%.500s", dump)
	}
	if found := dataDirHolds(t, r.DataDir, []byte(marker), gz[len(gz)/2:len(gz)/2+64]); len(found) > 0 {
		t.Fatalf("the data dir holds the dump in the clear: %v", found)
	}

	var w struct{}
	r.call(t, m.ID, "databases", map[string]any{"name": "restored"}).result(t, &w)
	ij := r.load(t, m.ID, "restored", gz)
	var ires ImportResult
	ij.result(t, &ires)
	if ires.Tool != "container" || ires.Format != "sql" || ires.Atomic {
		t.Fatalf("import result: %+v", ires)
	}
	restored := r.checksums(t, m.ID, "restored", sums)
	if jsonString(restored) != jsonString(source) {
		t.Fatalf("checksums after the import %v, source %v", restored, source)
	}
	bad := r.load(t, m.ID, "restored", []byte("this is not sql;\nDROP TABLE notes;\n"))
	if bad.Status != "failed" || !strings.Contains(deref(bad.Error), "You have an error in your SQL syntax") {
		t.Fatalf("garbage import: %s %s: %s", bad.Status, deref(bad.Error), bad.Data)
	}
	if after := r.checksums(t, m.ID, "restored", sums); jsonString(after) != jsonString(restored) {
		t.Fatalf("a failed import changed the database: %v, was %v", after, restored)
	}
}

// TestDatabaseImportLimitAndArtifactAccess runs the control plane with a
// 1 KiB import limit and plays the agents: an upload over the limit is
// 413 whether Content-Length says so or a chunked body passes it, and
// leaves nothing; the import's file is served only to its own server's
// agent and only while the job runs, and is deleted when it ends.
func TestDatabaseImportLimitAndArtifactAccess(t *testing.T) {
	f := newFleet(t, Options{Dialect: store.SQLite, Args: []string{"--database-import-max-size", "1KiB"}})
	enroll := func(name string) agentproto.EnrollResponse {
		return f.enrollHTTP(t, f.createEnrollment(t, name).Token)
	}
	own, other := enroll("db-host"), enroll("other-host")
	resp := f.Post(t, "/api/v1/databases/external", f.Token, map[string]any{"name": "main", "server_id": own.ServerID,
		"engine": "postgres", "host": "127.0.0.1", "port": 5432, "username": "app", "password": "pw", "database": "app", "tls_mode": "disable"})
	var reg struct {
		Instance DatabaseInfo `json:"instance"`
	}
	expectJSON(t, resp, http.StatusAccepted, &reg)
	id := reg.Instance.ID
	j := f.claim(t, own.AgentToken, 5)
	expectStatus(t, f.agentCall(t, own.AgentToken, http.MethodPost, "/jobs/"+j.ID+"/complete", agentproto.CompleteRequest{
		Status: agentproto.StatusSucceeded, Data: json.RawMessage(`{"server_version":"15.4"}`)}), http.StatusOK)
	testlab.Eventually(t, time.Minute, "the instance is ready", func() bool {
		var in DatabaseInfo
		f.Get(t, "/api/v1/databases/"+id, f.Token).JSON(t, &in)
		return in.State == "ready"
	})
	artifactFiles := func() []string {
		files, _ := filepath.Glob(filepath.Join(f.DataDir, "artifacts", "*"))
		return files
	}

	// Over the limit: by Content-Length, and counted in a chunked body.
	over := bytes.Repeat([]byte("-- x\n"), 205) // 1025 bytes
	expectProblem(t, f.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/databases/" + id + "/import", Token: f.Token, Body: over,
		ContentType: "application/octet-stream"}), http.StatusRequestEntityTooLarge, "upload-too-large")
	req, err := http.NewRequest(http.MethodPost, f.URL+"/api/v1/databases/"+id+"/import", io.MultiReader(bytes.NewReader(over)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // sent chunked: the size is not said up front
	req.Header.Set("Authorization", "Bearer "+f.Token)
	chunked, err := f.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	chunked.Body.Close()
	if chunked.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked upload over the limit: %d", chunked.StatusCode)
	}
	if got := artifactFiles(); len(got) != 0 {
		t.Fatalf("refused uploads left files: %v", got)
	}
	if j := f.claim(t, own.AgentToken, 0); j != nil {
		t.Fatalf("a refused upload queued %s", j.Type)
	}

	// At the limit: taken; its file only for its server, while it runs.
	body := bytes.Repeat([]byte("-- y\n"), 204)
	resp = f.Do(t, Req{Method: http.MethodPost, Path: "/api/v1/databases/" + id + "/import?database=app", Token: f.Token, Body: body,
		ContentType: "application/octet-stream"})
	var a Accepted
	expectJSON(t, resp, http.StatusAccepted, &a)
	path := "/jobs/" + a.JobID + "/artifact"
	expectProblem(t, f.agentCall(t, own.AgentToken, http.MethodGet, path, nil), http.StatusForbidden, "job-not-running")
	j = f.claim(t, own.AgentToken, 5)
	if j == nil || j.ID != a.JobID || j.Type != agentproto.JobDBImport {
		t.Fatalf("claimed %+v, want the import", j)
	}
	expectProblem(t, f.agentCall(t, other.AgentToken, http.MethodGet, path, nil), http.StatusForbidden, "not-your-job")
	got := f.agentCall(t, own.AgentToken, http.MethodGet, path, nil)
	expectStatus(t, got, http.StatusOK)
	if !bytes.Equal(got.Body, body) {
		t.Fatalf("the agent got %d bytes, want the %d uploaded", len(got.Body), len(body))
	}
	expectStatus(t, f.Do(t, Req{Method: http.MethodPut, Path: "/agent/v1" + path, Token: own.AgentToken, Body: []byte("x"),
		ContentType: agentproto.ArtifactContentType}), http.StatusConflict)
	expectStatus(t, f.agentCall(t, own.AgentToken, http.MethodPost, "/jobs/"+j.ID+"/complete", agentproto.CompleteRequest{
		Status: agentproto.StatusSucceeded, Data: json.RawMessage(`{"format":"sql","atomic":true}`)}), http.StatusOK)
	expectProblem(t, f.agentCall(t, own.AgentToken, http.MethodGet, path, nil), http.StatusForbidden, "job-not-running")
	if got := artifactFiles(); len(got) != 0 {
		t.Fatalf("the import's file is kept after its job: %v", got)
	}
}
