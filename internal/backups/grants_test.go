package backups_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
)

func wantForbidden(t *testing.T, err error, code string) {
	t.Helper()
	if fe := fault.As(err); fe == nil || fe.Kind != fault.Forbidden || fe.Code != code {
		t.Fatalf("got %v, want a %s refusal (403)", err, code)
	}
}

// TestStorageGrants: a backup job carries no storage credential, and its
// agent gets presigned requests for its own object only, for what its
// job type does, while it runs, valid until a little after its
// deadline; an agent that cannot take grants gets no job at all.
func TestStorageGrants(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		pg := r.instance("main")
		run, _, err := r.backups.Backup(r.ctx, r.admin, pg.ID, "", backups.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		key := run.Locations.Remote
		queued, _, err := r.jobs.Get(r.ctx, run.JobID)
		if err != nil {
			t.Fatal(err)
		}
		// Queued, not yet running: nothing is granted.
		_, err = r.backups.GrantStorage(r.ctx, r.serverID, queued.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: key})
		wantForbidden(t, err, "job-not-running")

		j := r.claim(agentproto.JobBackupRun)
		var p agentproto.BackupRunPayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Storage.GrantJobID != j.ID || p.Key != key {
			t.Fatalf("payload storage %+v key %s, want grants of job %s for %s", p.Storage, p.Key, j.ID, key)
		}
		sec, err := r.jobs.Secrets(r.ctx, r.serverID, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range sec {
			if v == "secret-of-the-test" || v == "AKTEST" || strings.HasPrefix(k, "s3_") {
				t.Fatalf("the job's secrets hold the storage credential %s", k)
			}
		}

		g, err := r.backups.GrantStorage(r.ctx, r.serverID, j.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpUploadPart,
			Key: key, UploadID: "up-1", Part: 3})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(g.URL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if g.Method != http.MethodPut || u.Host != "127.0.0.1:9000" || u.Path != "/capstan-backups/"+key ||
			q.Get("partNumber") != "3" || q.Get("uploadId") != "up-1" || q.Get("X-Amz-Signature") == "" ||
			!strings.HasPrefix(q.Get("X-Amz-Credential"), "AKTEST/") || strings.Contains(g.URL, "secret-of-the-test") {
			t.Fatalf("grant of a part: %s %s", g.Method, g.URL)
		}
		// Valid until the job's deadline (its 6 h timeout) and the margin.
		if want := r.clock.Now().Add(6*time.Hour + backups.GrantMargin); g.ExpiresAt.Sub(want).Abs() > 2*time.Second {
			t.Fatalf("grant expires at %s, want about %s", g.ExpiresAt, want)
		}
		if q.Get("X-Amz-Expires") != "21900" {
			t.Fatalf("X-Amz-Expires %s, want 21900 (6 h 5 min)", q.Get("X-Amz-Expires"))
		}
		if _, err := r.backups.GrantStorage(r.ctx, r.serverID, j.ID,
			agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: key + agentproto.BackupSidecarSuffix}); err != nil {
			t.Fatalf("the sidecar: %v", err)
		}

		// Another key, another job's operation, another server's job.
		for _, bad := range []agentproto.StorageGrantRequest{
			{Op: agentproto.StorageOpGet, Key: strings.Replace(key, run.ID, "bak_other", 1)},
			{Op: agentproto.StorageOpPut, Key: pg.ID + "/"},
			{Op: agentproto.StorageOpHead, Key: agentproto.BackupProbePrefix + j.ID},
		} {
			_, err := r.backups.GrantStorage(r.ctx, r.serverID, j.ID, bad)
			wantForbidden(t, err, "storage-key-not-granted")
		}
		_, err = r.backups.GrantStorage(r.ctx, r.serverID, j.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpDelete, Key: key})
		wantForbidden(t, err, "storage-op-not-granted")
		_, err = r.backups.GrantStorage(r.ctx, r.serverID, j.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpUploadPart,
			Key: key, UploadID: "up-1", Part: 10001})
		if fe := fault.As(err); fe == nil || fe.Kind != fault.Invalid {
			t.Fatalf("part 10001: %v, want a field error", err)
		}

		other := r.enroll("other-host", []string{agentproto.CapabilityStorageGrants})
		_, err = r.backups.GrantStorage(r.ctx, other, j.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: key})
		wantForbidden(t, err, "not-your-job")

		// Once the job ended nothing more is granted.
		r.backedUp(j)
		_, err = r.backups.GrantStorage(r.ctx, r.serverID, j.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpHead, Key: key})
		wantForbidden(t, err, "job-not-running")

		// A verification reads; it neither writes nor deletes.
		if _, err := r.backups.Verify(r.ctx, r.admin, run.ID); err != nil {
			t.Fatal(err)
		}
		vj := r.claim(agentproto.JobBackupVerify)
		if _, err := r.backups.GrantStorage(r.ctx, r.serverID, vj.ID, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet,
			Key: key}); err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{agentproto.StorageOpPut, agentproto.StorageOpDelete, agentproto.StorageOpCreateUpload} {
			_, err := r.backups.GrantStorage(r.ctx, r.serverID, vj.ID, agentproto.StorageGrantRequest{Op: op, Key: key})
			wantForbidden(t, err, "storage-op-not-granted")
		}
		r.verified(vj, true)

		// An agent that does not announce grants gets no backup job.
		old := r.enroll("old-host", nil)
		before := len(r.runs(""))
		_, err = r.backups.TestStorage(r.ctx, r.admin, old)
		wantConflict(t, err, "agent-upgrade-required")
		if got := len(r.runs("")); got != before {
			t.Fatalf("%d runs after the refusal, want %d", got, before)
		}
		if _, ok, err := r.jobs.Claim(r.ctx, old, 0); err != nil || ok {
			t.Fatalf("the old agent claimed a job (%v, %v)", ok, err)
		}
	})
}

// enroll enrolls another server whose agent announces capabilities.
func (r *rig) enroll(name string, capabilities []string) string {
	r.t.Helper()
	srvs := r.servers
	e, err := srvs.CreateEnrollment(r.ctx, r.admin, name, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	res, err := srvs.Enroll(r.ctx, r.admin, agentproto.EnrollRequest{Token: e.Token,
		Facts: agentproto.Facts{Hostname: name, AgentVersion: "0.9", Capabilities: capabilities}})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.ServerID
}
