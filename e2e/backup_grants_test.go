package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// fakeAgent is a server whose agent the test plays over the agent
// protocol with its token.
type fakeAgent struct {
	serverID, token string
}

// enrollFake enrolls a server and redeems its token as an agent that
// announces capabilities (none: an agent from before storage grants).
func (r *backupRig) enrollFake(t *testing.T, name string, capabilities ...string) fakeAgent {
	t.Helper()
	e := r.createEnrollment(t, name)
	res := r.enrollHTTP(t, e.Token)
	a := fakeAgent{serverID: res.ServerID, token: res.AgentToken}
	if len(capabilities) > 0 {
		a.announce(t, r, capabilities...)
	}
	return a
}

// announce sends a heartbeat with facts that hold capabilities, as an
// upgraded agent does when it starts.
func (a fakeAgent) announce(t *testing.T, r *backupRig, capabilities ...string) {
	t.Helper()
	expectStatus(t, r.agentCall(t, a.token, http.MethodPost, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: buildVersion,
		Facts: &agentproto.Facts{Hostname: "fake", OS: "debian", Arch: "amd64", AgentVersion: buildVersion,
			Capabilities: capabilities}}), http.StatusOK)
}

// claimType claims the fake agent's next job, which must be of type typ.
func (a fakeAgent) claimType(t *testing.T, r *backupRig, typ string) *agentproto.Job {
	t.Helper()
	j := r.claim(t, a.token, 5)
	if j == nil || j.Type != typ {
		t.Fatalf("claimed %+v, want a %s job", j, typ)
	}
	return j
}

// TestBackupStorageGrants: a backup and its verification run through
// presigned requests alone (the S3 server serves no request signed with
// the key pair), no job's secrets hold the storage credential, the
// grants of one server's job reach only that job's object (another
// server's object can neither be read nor deleted with them), and an
// agent that does not take grants gets no backup job.
func TestBackupStorageGrants(t *testing.T) {
	r := newRestoreRig(t)
	marker := r.s3.SecretAccessKey
	expectStatus(t, r.putSettings(t, r.storageSettings("fleet")), http.StatusOK)
	pg, _ := r.registerPostgres(t, "pg", `CREATE TABLE IF NOT EXISTS grant_items (id int PRIMARY KEY)`,
		`INSERT INTO grant_items SELECT g FROM generate_series(1, 500) g ON CONFLICT DO NOTHING`)

	// Server A, the real agent: backup, then verification.
	run, j := r.backup(t, pg.ID, "")
	if run.Status != "succeeded" {
		t.Fatalf("backup %s: %s\nagent log:\n%s", j.Status, deref(j.Error), r.agent.Logs())
	}
	if vj := r.post(t, "/api/v1/backups/"+run.ID+"/verify", nil); vj.Status != "succeeded" {
		t.Fatalf("verify %s: %s\nagent log:\n%s", vj.Status, deref(vj.Error), r.agent.Logs())
	}
	if st, _ := r.testStorage(t); st.Status != "succeeded" {
		t.Fatalf("storage test %s: %s", st.Status, deref(st.Error))
	}
	if r.s3.HeaderSigned() != 0 || r.s3.QuerySigned() == 0 {
		t.Fatalf("the S3 server served %d requests signed with the key pair and %d presigned ones; want presigned ones only",
			r.s3.HeaderSigned(), r.s3.QuerySigned())
	}
	objectA := "fleet/" + run.Locations.Remote
	if r.s3.Object(t, objectA) == nil {
		t.Fatalf("no object %s", objectA)
	}

	// Server B, played by the test: as an agent from before grants it
	// gets no backup job; once it announces grants it does.
	b := r.enrollFake(t, "other-host")
	expectProblem(t, r.Post(t, "/api/v1/backups/settings/test?server_id="+b.serverID, r.Token, nil), http.StatusConflict,
		"agent-upgrade-required")
	if j := r.claim(t, b.token, 0); j != nil {
		t.Fatalf("the old agent claimed %s", j.Type)
	}
	b.announce(t, r, agentproto.CapabilityStorageGrants)
	host, port, user, password, database := postgresTarget(t)
	resp := r.Post(t, "/api/v1/databases/external", r.Token, map[string]any{"name": "pg-b", "engine": "postgres", "host": host,
		"port": port, "username": user, "password": password, "database": database, "tls_mode": "disable", "server_id": b.serverID})
	var reg struct {
		Instance DatabaseInfo `json:"instance"`
	}
	expectJSON(t, resp, http.StatusAccepted, &reg)
	connect := b.claimType(t, r, agentproto.JobDBConnect)
	data, _ := json.Marshal(agentproto.DBConnectResult{ServerVersion: "16.4"})
	expectStatus(t, r.agentCall(t, b.token, http.MethodPost, "/jobs/"+connect.ID+"/complete",
		agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Data: data}), http.StatusOK)
	resp = r.Post(t, "/api/v1/backups/run", r.Token, map[string]any{"instance_id": reg.Instance.ID})
	expectStatus(t, resp, http.StatusAccepted)
	bj := b.claimType(t, r, agentproto.JobBackupRun)
	var p agentproto.BackupRunPayload
	if err := json.Unmarshal(bj.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Storage.GrantJobID != bj.ID || strings.Contains(string(bj.Payload), marker) {
		t.Fatalf("payload %s, want grants of job %s and no credential", bj.Payload, bj.ID)
	}
	sec := r.agentCall(t, b.token, http.MethodGet, "/jobs/"+bj.ID+"/secrets", nil)
	var secrets agentproto.SecretsResponse
	expectJSON(t, sec, http.StatusOK, &secrets)
	if _, ok := secrets.Secrets[agentproto.SecretDBPassword]; !ok || len(secrets.Secrets) != 1 ||
		strings.Contains(string(sec.Body), marker) || strings.Contains(string(sec.Body), r.s3.AccessKeyID) {
		t.Fatalf("the job's secrets are %v, want the database password alone and no storage credential", keysOf(secrets.Secrets))
	}

	grant := func(jobID string, req agentproto.StorageGrantRequest) *Response {
		return r.agentCall(t, b.token, http.MethodPost, "/jobs/"+jobID+"/storage", req)
	}
	ok := grant(bj.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: p.Key})
	expectStatus(t, ok, http.StatusOK)
	var put agentproto.StorageGrant
	ok.JSON(t, &put)
	if put.Method != http.MethodPut || !strings.Contains(put.URL, "X-Amz-Signature=") || strings.Contains(put.URL, marker) {
		t.Fatalf("grant: %s", ok.Body)
	}
	// B's job reaches nothing of A's: not A's object, not A's jobs.
	expectProblem(t, grant(bj.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: run.Locations.Remote}),
		http.StatusForbidden, "storage-key-not-granted")
	expectProblem(t, grant(bj.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpDelete, Key: p.Key}),
		http.StatusForbidden, "storage-op-not-granted")
	expectProblem(t, grant(run.JobID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: run.Locations.Remote}),
		http.StatusForbidden, "not-your-job")
	// A presigned URL of B's key does not work for A's key.
	for _, op := range []string{agentproto.StorageOpHead, agentproto.StorageOpGet} {
		resp := grant(bj.ID, agentproto.StorageGrantRequest{Op: op, Key: p.Key})
		expectStatus(t, resp, http.StatusOK)
		var g agentproto.StorageGrant
		resp.JSON(t, &g)
		for _, method := range []string{g.Method, http.MethodDelete} {
			status, body := s3Call(t, r, method, strings.Replace(g.URL, "/fleet/"+p.Key+"?", "/"+objectA+"?", 1))
			if status != http.StatusForbidden {
				t.Fatalf("%s of A's object with the grant of B's %s: %d %s, want 403", method, op, status, body)
			}
		}
	}
	if r.s3.Object(t, objectA) == nil {
		t.Fatal("A's object is gone")
	}
	// Once the job ended, its grants end.
	expectStatus(t, r.agentCall(t, b.token, http.MethodPost, "/jobs/"+bj.ID+"/complete",
		agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: "played by the test"}), http.StatusOK)
	expectProblem(t, grant(bj.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: p.Key}),
		http.StatusForbidden, "job-not-running")
	for what, text := range map[string]string{"control plane log": r.ControlPlane.Logs(), "agent log": r.agent.Logs()} {
		if strings.Contains(text, marker) {
			t.Errorf("the %s holds the storage secret", what)
		}
	}
}

// s3Call sends one request to the rig's S3 server, trusting its CA.
func s3Call(t *testing.T, r *backupRig, method, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.s3.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
