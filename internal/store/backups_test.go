package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// TestStoreBackupSettings: one row, saved at a revision; of concurrent
// saves at the same revision exactly one applies.
func TestStoreBackupSettings(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if _, err := s.BackupSettings(ctx); !fault.Is(err, fault.NotFound) {
			t.Fatalf("settings before any save: %v, want not found", err)
		}
		want := backups.Settings{Provider: "s3", Endpoint: "s3.example.net:9000", Region: "eu-1", Bucket: "b", Prefix: "p/",
			PathStyle: true, TLS: true, CA: "ca", SealedAccessKeyID: "v1:k:a", SealedSecretAccessKey: "v1:k:s", Revision: 1,
			UpdatedBy: "usr_a", UpdatedAt: t0}
		// The second round finds the row there: no save at revision 0 applies.
		for round, prev := range []int64{0, 0} {
			n := countApplied(t, 8, func(i int) (bool, error) {
				b := want
				b.Revision = prev + 1
				b.Bucket = fmt.Sprintf("bucket-%d", i)
				return s.PutBackupSettings(ctx, b, prev)
			})
			if want := 1 - round; n != want {
				t.Fatalf("round %d: %d of 8 concurrent first saves applied, want %d", round, n, want)
			}
		}
		got, err := s.BackupSettings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Revision != 1 {
			t.Fatalf("revision %d after the first save, want 1", got.Revision)
		}
		next := want
		next.Revision = 2
		n := countApplied(t, 8, func(int) (bool, error) { return s.PutBackupSettings(ctx, next, 1) })
		if n != 1 {
			t.Fatalf("%d of 8 concurrent saves at revision 1 applied, want 1", n)
		}
		got, err = s.BackupSettings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != next {
			t.Fatalf("got %+v\nwant %+v", got, next)
		}
	})
}

// TestStoreBackupRuns: a run finishes once (of concurrent finishes one
// applies), lists newest first with filters and a cursor, and the summary
// counts succeeded and failed runs per instance.
func TestStoreBackupRuns(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := []string{"run_01", "run_02", "run_03"}
		for i, id := range ids {
			inst := "db_a"
			if i == 2 {
				inst = "db_b"
			}
			if err := s.InsertBackupRun(ctx, backups.Run{ID: id, InstanceID: inst, ServerID: "srv_x", Engine: "postgres", Database: "app",
				Trigger: backups.TriggerManual, JobID: "job_" + id, Status: backups.StatusQueued, RemoteKey: "k/" + id, CreatedAt: t0}); err != nil {
				t.Fatal(err)
			}
		}
		manifest := &agentproto.BackupManifest{Kind: "sql", Tables: []agentproto.BackupTable{{Name: "public.t", Rows: 3, Checksum: "9"}}}
		n := countApplied(t, 8, func(i int) (bool, error) {
			f := backups.RunFinish{Status: backups.StatusSucceeded, Size: 100, SHA256: "ab", Manifest: manifest, FinishedAt: t0}
			if i%2 == 1 {
				f = backups.RunFinish{Status: backups.StatusFailed, Error: "boom", FinishedAt: t0}
			}
			return s.FinishBackupRun(ctx, "run_01", f)
		})
		if n != 1 {
			t.Fatalf("%d of 8 concurrent finishes applied, want 1", n)
		}
		r1, err := s.BackupRun(ctx, "run_01")
		if err != nil {
			t.Fatal(err)
		}
		if r1.Status == backups.StatusSucceeded && (r1.Manifest == nil || r1.Manifest.Tables[0].Rows != 3 || r1.Size != 100) ||
			r1.Status == backups.StatusFailed && r1.Error != "boom" {
			t.Fatalf("run_01 after its finish: %+v", r1)
		}
		if ok, err := s.FinishBackupRun(ctx, "run_03", backups.RunFinish{Status: backups.StatusFailed, Error: "cut", FinishedAt: t0}); err != nil || !ok {
			t.Fatalf("finishing run_03: %v %v", ok, err)
		}
		if got, err := s.BackupRunByJob(ctx, "job_run_02"); err != nil || got.ID != "run_02" || got.Status != backups.StatusQueued {
			t.Fatalf("by job: %+v %v", got, err)
		}
		list, err := s.BackupRuns(ctx, backups.RunQuery{Limit: 10})
		if err != nil || len(list) != 3 || list[0].ID != "run_03" || list[2].ID != "run_01" {
			t.Fatalf("list: %+v %v", list, err)
		}
		list, _ = s.BackupRuns(ctx, backups.RunQuery{InstanceID: "db_a", Before: "run_02", Limit: 10})
		if len(list) != 1 || list[0].ID != "run_01" {
			t.Fatalf("db_a before run_02: %+v", list)
		}
		list, _ = s.BackupRuns(ctx, backups.RunQuery{Status: backups.StatusQueued, Limit: 10})
		if len(list) != 1 || list[0].ID != "run_02" {
			t.Fatalf("queued: %+v", list)
		}
		no := false
		list, _ = s.BackupRuns(ctx, backups.RunQuery{Verified: &no, Limit: 10})
		if len(list) != 3 {
			t.Fatalf("not verified: %+v", list)
		}
		sum, failed, err := s.BackupSummary(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		wantCount, wantFailed := int64(1), 1
		if r1.Status == backups.StatusFailed {
			wantCount, wantFailed = 0, 2
		}
		if sum.Count != wantCount || sum.UnverifiedCount != wantCount || sum.VerifiedCount != 0 || len(failed) != wantFailed ||
			len(sum.Instances) != 2 || sum.Instances[1].Failures != 1 {
			t.Fatalf("summary %+v, failures %d", sum, len(failed))
		}
	})
}
