package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
)

// registerOn registers an external instance on serverID (another server
// of the rig's fleet) and waits for its connection test.
func (r *dbRig) registerOn(t testing.TB, serverID string, body map[string]any) DatabaseInfo {
	t.Helper()
	other := *r
	other.serverID = serverID
	return other.register(t, body)
}

// jobSecrets claims, with an agent's token, jobs of its server until
// jobID comes and returns that job's secrets as an agent fetches them.
func (f *Fleet) jobSecrets(t testing.TB, agentToken, jobID string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		j := f.claim(t, agentToken, 5)
		if j == nil || j.ID != jobID {
			continue
		}
		var s agentproto.SecretsResponse
		expectJSON(t, f.agentCall(t, agentToken, http.MethodGet, "/jobs/"+jobID+"/secrets", nil), http.StatusOK, &s)
		return s.Secrets
	}
	t.Fatalf("job %s was not claimed within a minute", jobID)
	return nil
}

// TestBackupKeysPerInstance: two servers, each with an instance and its
// own agent, back up. Each backup is encrypted to its instance's key and
// records it; the identity server A receives in a verification job of its
// backup (fetched as its agent fetches a job's secrets) decrypts A's
// backup and not B's.
func TestBackupKeysPerInstance(t *testing.T) {
	r := newBackupRig(t, store.SQLite)
	expectStatus(t, r.putSettings(t, r.storageSettings("")), http.StatusOK)
	configA := r.agent.Config
	e, configB := r.enrollServer(t, "db-host-b")
	agentB := startAgent(t, configB)

	pg := func(serverID, name string) DatabaseInfo {
		host, port, user, password, database := postgresTarget(t)
		inst := r.registerOn(t, serverID, map[string]any{"name": name, "engine": "postgres", "host": host, "port": port,
			"username": user, "password": password, "database": database, "tls_mode": "disable"})
		var w struct{}
		r.call(t, inst.ID, "query", map[string]any{"readonly": false,
			"sql": "CREATE TABLE secrets_of_" + name + " AS SELECT 'row of " + name + "' AS v"}).result(t, &w)
		return inst
	}
	a, b := pg(r.serverID, "a"), pg(e.Server.ID, "b")
	runA, j := r.backup(t, a.ID, "")
	if runA.Status != "succeeded" {
		t.Fatalf("backup of a: %s: %s\n%s", j.Status, deref(j.Error), r.agent.Logs())
	}
	runB, j := r.backup(t, b.ID, "")
	if runB.Status != "succeeded" {
		t.Fatalf("backup of b: %s: %s\n%s", j.Status, deref(j.Error), agentB.Logs())
	}
	for _, c := range []struct {
		run  BackupRun
		inst DatabaseInfo
	}{{runA, a}, {runB, b}} {
		if want := "inst-v1:" + c.inst.ID; c.run.KeyID != want {
			t.Errorf("run of %s: key_id %q, want %q", c.inst.ID, c.run.KeyID, want)
		}
	}

	// Server A's agent stops; the test takes its place with its token.
	r.agent.Terminate(t)
	var queued Accepted
	expectJSON(t, r.Post(t, "/api/v1/backups/"+runA.ID+"/verify", r.Token, nil), http.StatusAccepted, &queued)
	secrets := r.jobSecrets(t, readAgentConfig(t, configA).AgentToken, queued.JobID)
	identity, err := age.ParseX25519Identity(secrets[agentproto.SecretBackupIdentity])
	if err != nil {
		t.Fatalf("the verification job's identity: %v", err)
	}
	plain := func(run BackupRun) ([]byte, error) {
		dec, err := age.Decrypt(bytes.NewReader(r.s3.Object(t, run.Locations.Remote)), identity)
		if err != nil {
			return nil, err
		}
		gz, err := gzip.NewReader(dec)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(gz)
	}
	if dump, err := plain(runA); err != nil || !bytes.Contains(dump, []byte("row of a")) {
		t.Fatalf("server A's identity on its own backup: %v (%d bytes)", err, len(dump))
	}
	_, err = plain(runB)
	var noMatch *age.NoIdentityMatchError
	if !errors.As(err, &noMatch) {
		t.Fatalf("server A's identity on server B's backup: %v, want no identity match", err)
	}
}

// forgedBackup is an age file of exactly size bytes, encrypted to
// recipient, whose gzip'd SQL leaves the load's transaction, connects to
// database and creates forged_marker there: what a writer of the bucket
// could put in place of a backup, of the same size so that only its
// content differs.
func forgedBackup(t *testing.T, recipient, database string, size int64) []byte {
	t.Helper()
	rcpt, err := age.ParseX25519Recipient(recipient)
	if err != nil {
		t.Fatal(err)
	}
	build := func(pad int) []byte {
		var sql bytes.Buffer
		fmt.Fprintf(&sql, "COMMIT;\n\\connect %s\nCREATE TABLE forged_marker (x int);\n-- %s\n", database, strings.Repeat("x", pad))
		var out bytes.Buffer
		w, err := age.Encrypt(&out, rcpt)
		if err != nil {
			t.Fatal(err)
		}
		// Stored, not compressed: the size grows with the padding byte
		// for byte.
		gz, _ := gzip.NewWriterLevel(w, gzip.NoCompression)
		if _, err := gz.Write(sql.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := gz.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	pad := 0
	for range 10 {
		b := build(pad)
		diff := size - int64(len(b))
		if diff == 0 {
			return b
		}
		pad += int(diff)
		if pad < 0 {
			t.Fatalf("the backup (%d bytes) is smaller than a forged one can be", size)
		}
	}
	t.Fatalf("no forged backup of exactly %d bytes", size)
	return nil
}

// TestBackupForgedObjectRefused: a writer of the bucket replaces a
// PostgreSQL backup with a dump of the same size, encrypted to the same
// recipient, and leaves the checksum sidecar beside it matching the
// backup's record. Verification and restore refuse it before a statement
// runs: the table the forged dump creates does not exist afterwards.
func TestBackupForgedObjectRefused(t *testing.T) {
	r := newRestoreRig(t)
	expectStatus(t, r.putSettings(t, r.storageSettings("")), http.StatusOK)
	pg, database := r.registerPostgres(t, "pg",
		`CREATE TABLE items (id int PRIMARY KEY, name text)`,
		`INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 2000) g`)
	run, j := r.backup(t, pg.ID, "")
	if run.Status != "succeeded" {
		t.Fatalf("backup: %s: %s", j.Status, deref(j.Error))
	}
	var p struct {
		Recipient string `json:"recipient"`
	}
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.Recipient == "" {
		t.Fatalf("backup job payload: %v: %s", err, j.Payload)
	}
	key := run.Locations.Remote
	r.s3.Put(t, key, forgedBackup(t, p.Recipient, database, run.Size))
	if side := r.s3.Object(t, key+".sha256"); !bytes.Contains(side, []byte(run.SHA256)) {
		t.Fatalf("the sidecar %q does not match the backup's record %s", side, run.SHA256)
	}
	marker := func() string {
		t.Helper()
		var res struct {
			Rows [][]any `json:"rows"`
		}
		r.call(t, pg.ID, "query", map[string]any{"database": database,
			"sql": `SELECT count(*) FROM pg_tables WHERE tablename = 'forged_marker'`}).result(t, &res)
		return jsonString(res.Rows[0][0])
	}
	vj := r.post(t, "/api/v1/backups/"+run.ID+"/verify", nil)
	if vj.Status != "failed" || !strings.Contains(deref(vj.Error), "checksum mismatch") {
		t.Fatalf("verify of a forged object: %s: %s", vj.Status, deref(vj.Error))
	}
	if n := marker(); n != "0" {
		t.Fatalf("the forged dump ran on verification: forged_marker exists (%s)", n)
	}
	rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "new", "into": strings.ToLower(pg.ID) + "_copy"})
	if rj.Status != "failed" || !strings.Contains(deref(rj.Error), "checksum mismatch") {
		t.Fatalf("restore of a forged object: %s: %s", rj.Status, deref(rj.Error))
	}
	if n := marker(); n != "0" {
		t.Fatalf("the forged dump ran on restore: forged_marker exists (%s)", n)
	}
}
