package backups_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
)

// TestRestoreKVRefusals: a Redis/Valkey backup replaces the whole
// instance's data: mode new and a named database are refused, and so is
// any restore of an external instance, whose server Capstan does not
// run; nothing is queued.
func TestRestoreKVRefusals(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		reg, err := r.dbs.RegisterExternal(r.ctx, r.admin, databases.NewExternal{Name: "cache", ServerID: r.serverID,
			Engine: agentproto.EngineRedis, Host: "127.0.0.1", Username: "default", Password: "pw", TLSMode: agentproto.DBTLSDisable})
		if err != nil {
			t.Fatal(err)
		}
		r.complete(r.claim(agentproto.JobDBConnect), agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "7.2.4"}, "")
		run, _, err := r.backups.Backup(r.ctx, r.admin, reg.Instance.ID, "", backups.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		sum := "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
		r.complete(r.claim(agentproto.JobBackupRun), agentproto.StatusSucceeded, agentproto.BackupRunResult{Bytes: 100, SHA256: sum,
			Remote: &agentproto.BackupObject{Size: 100, SHA256: sum}, Manifest: &agentproto.BackupManifest{Kind: agentproto.BackupManifestKV,
				Tables: []agentproto.BackupTable{{Name: "db0", Rows: 3, Checksum: "1"}}}}, "")
		if v := r.runs(reg.Instance.ID); len(v) != 1 || v[0].Status != backups.StatusSucceeded {
			t.Fatalf("runs: %+v", v)
		}
		_, err = r.backups.Restore(r.ctx, r.admin, run.ID, agentproto.BackupRestoreNew, "copy")
		wantInvalid(t, err, "mode", "whole instance")
		_, err = r.backups.Restore(r.ctx, r.admin, run.ID, agentproto.BackupRestoreReplace, "1")
		wantInvalid(t, err, "into", "must be left out")
		_, err = r.backups.Restore(r.ctx, r.admin, run.ID, agentproto.BackupRestoreReplace, "")
		wantInvalid(t, err, "run_id", "external")
		_, err = r.backups.Restore(r.ctx, r.admin, run.ID, "sideways", "")
		wantInvalid(t, err, "mode", "new or replace")
		if queued := r.claimAll(); len(queued) != 0 {
			t.Fatalf("%d jobs queued by refused restores (first %s)", len(queued), queued[0].Type)
		}
		if _, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRunKeys: each instance's backups are encrypted to its own
// recipient and record its key id; a verification or restore carries
// that instance's identity only (not the fleet-wide one, not another
// instance's); a backup made before per-instance keys (key id fleet-v1)
// is refused with a conflict and nothing is queued.
func TestRunKeys(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		a, b := r.instance("a"), r.instance("b")
		runs := map[string]backups.RunView{}
		for _, inst := range []databases.Detail{a, b} {
			run, _, err := r.backups.Backup(r.ctx, r.admin, inst.ID, "", backups.TriggerManual)
			if err != nil {
				t.Fatal(err)
			}
			j := r.claim(agentproto.JobBackupRun)
			var p agentproto.BackupRunPayload
			if err := json.Unmarshal(j.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if got, want := p.Recipient, r.key.InstanceIdentity(inst.ID).Recipient().String(); got != want {
				t.Fatalf("backup of %s encrypted to %s, want its instance's %s", inst.ID, got, want)
			}
			r.backedUp(j)
			if got, want := run.KeyID, secrets.InstanceKeyID(inst.ID); got != want {
				t.Fatalf("run key id %q, want %q", got, want)
			}
			runs[inst.ID] = run
		}
		if v := r.runs(a.ID); len(v) != 1 || v[0].KeyID != secrets.InstanceKeyID(a.ID) {
			t.Fatalf("runs of %s as stored: %+v", a.ID, v)
		}
		identityOf := func(j jobs.Job) string {
			t.Helper()
			sec, err := r.jobs.Secrets(r.ctx, r.serverID, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			return sec[agentproto.SecretBackupIdentity]
		}
		if _, err := r.backups.Verify(r.ctx, r.admin, runs[a.ID].ID); err != nil {
			t.Fatal(err)
		}
		verify := r.claim(agentproto.JobBackupVerify)
		if _, err := r.backups.Restore(r.ctx, r.admin, runs[a.ID].ID, agentproto.BackupRestoreNew, "copy"); err != nil {
			t.Fatal(err)
		}
		restore := r.claim(agentproto.JobBackupRestore)
		for _, j := range []jobs.Job{verify, restore} {
			got := identityOf(j)
			if want := r.key.InstanceIdentity(a.ID).String(); got != want {
				t.Errorf("%s of a backup of %s carries another identity than its instance's", j.Type, a.ID)
			}
			if got == r.key.ArtifactIdentity().String() || got == r.key.InstanceIdentity(b.ID).String() {
				t.Errorf("%s carries the fleet-wide identity or another instance's", j.Type)
			}
		}
		r.verified(verify, true)
		r.complete(restore, agentproto.StatusSucceeded, agentproto.BackupVerifyResult{OK: true, ChecksumOK: true}, "")

		// A backup made before per-instance keys: its identity opens every
		// backup, so no server receives it.
		now := r.clock.Now()
		legacy := backups.Run{ID: "run_legacy", InstanceID: a.ID, ServerID: r.serverID, Engine: agentproto.EnginePostgres, Database: "app",
			Trigger: backups.TriggerManual, JobID: "job_legacy", Status: backups.StatusQueued, RemoteKey: a.ID + "/app/run_legacy.sql.gz.age",
			KeyID: secrets.KeyIDFleet, CreatedBy: r.admin.Actor.ID, CreatedAt: now}
		if err := r.st.InsertBackupRun(r.ctx, legacy); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.st.FinishBackupRun(r.ctx, legacy.ID, backups.RunFinish{Status: backups.StatusSucceeded, Size: 100,
			SHA256: strings.Repeat("a", 64), Manifest: &agentproto.BackupManifest{Kind: agentproto.BackupManifestSQL},
			FinishedAt: now}); err != nil || !ok {
			t.Fatalf("finishing the legacy run: %v, %v", ok, err)
		}
		if v, err := r.backups.Run(r.ctx, legacy.ID, jobs.AdminReader); err != nil || v.KeyID != secrets.KeyIDFleet {
			t.Fatalf("legacy run: %+v, %v", v, err)
		}
		_, err := r.backups.Verify(r.ctx, r.admin, legacy.ID)
		wantConflict(t, err, "backup-fleet-key")
		_, err = r.backups.Restore(r.ctx, r.admin, legacy.ID, agentproto.BackupRestoreReplace, "")
		wantConflict(t, err, "backup-fleet-key")
		if queued := r.claimAll(); len(queued) != 0 {
			t.Fatalf("%d jobs queued for a backup of the fleet-wide key (first %s)", len(queued), queued[0].Type)
		}
	})
}
