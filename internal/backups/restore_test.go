package backups_test

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
)

// TestRestoreKVRefusals: a Redis/Valkey backup replaces the whole
// instance's data: mode new and a named database are refused, and so is
// any restore of an external instance, whose server Capstan does not
// run; nothing is queued.
func TestRestoreKVRefusals(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		reg, err := r.dbs.RegisterExternal(r.ctx, r.admin, r.client, databases.NewExternal{Name: "cache", ServerID: r.serverID,
			Engine: agentproto.EngineRedis, Host: "127.0.0.1", Username: "default", Password: "pw", TLSMode: agentproto.DBTLSDisable})
		if err != nil {
			t.Fatal(err)
		}
		r.complete(r.claim(agentproto.JobDBConnect), agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "7.2.4"}, "")
		run, _, err := r.backups.Backup(r.ctx, r.admin, r.client, reg.Instance.ID, "", backups.TriggerManual)
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
		_, err = r.backups.Restore(r.ctx, r.admin, r.client, run.ID, agentproto.BackupRestoreNew, "copy")
		wantInvalid(t, err, "mode", "whole instance")
		_, err = r.backups.Restore(r.ctx, r.admin, r.client, run.ID, agentproto.BackupRestoreReplace, "1")
		wantInvalid(t, err, "into", "must be left out")
		_, err = r.backups.Restore(r.ctx, r.admin, r.client, run.ID, agentproto.BackupRestoreReplace, "")
		wantInvalid(t, err, "run_id", "external")
		_, err = r.backups.Restore(r.ctx, r.admin, r.client, run.ID, "sideways", "")
		wantInvalid(t, err, "mode", "new or replace")
		if queued := r.claimAll(); len(queued) != 0 {
			t.Fatalf("%d jobs queued by refused restores (first %s)", len(queued), queued[0].Type)
		}
		if _, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader); err != nil {
			t.Fatal(err)
		}
	})
}
