package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func newArtifact(jobID, file string, expires time.Time) databases.Artifact {
	return databases.Artifact{JobID: jobID, InstanceID: "db_x", Kind: databases.ArtifactExport, Database: "app", Format: "sql.gz",
		File: file, Size: 1 << 40, SHA256: "ab", CreatedBy: "usr_x", CreatedAt: t0, ExpiresAt: expires}
}

// TestStoreDatabaseArtifacts: one artifact per job (concurrent inserts:
// one wins), expired ones listed oldest first, and a delete that only one
// of concurrent reapers performs.
func TestStoreDatabaseArtifacts(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		errs := inParallel(8, func(i int) error {
			return s.InsertDatabaseArtifact(ctx, newArtifact("job_1", fmt.Sprintf("job_1-%d.age", i), t0.Add(time.Hour)))
		})
		if won := len(succeeded(t, "concurrent insert", errs)); won != 1 {
			t.Fatalf("%d concurrent inserts of one job's artifact succeeded, want 1", won)
		}
		got, err := s.DatabaseArtifact(ctx, "job_1")
		if err != nil || got.Size != 1<<40 || !got.CreatedAt.Equal(t0) || !got.ExpiresAt.Equal(t0.Add(time.Hour)) || got.Kind != "export" {
			t.Fatalf("artifact: %+v %v", got, err)
		}
		if _, err := s.DatabaseArtifact(ctx, "job_none"); !fault.Is(err, fault.NotFound) {
			t.Fatalf("no artifact: %v", err)
		}
		if err := s.InsertDatabaseArtifact(ctx, newArtifact("job_2", "job_2-a.age", t0.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		if err := s.InsertDatabaseArtifact(ctx, newArtifact("job_3", "job_3-a.age", t0.Add(2*time.Hour))); err != nil {
			t.Fatal(err)
		}
		expired, err := s.ExpiredDatabaseArtifacts(ctx, t0.Add(time.Hour), 10)
		if err != nil || len(expired) != 2 || expired[0].JobID != "job_2" || expired[1].JobID != "job_1" {
			t.Fatalf("expired: %+v %v", expired, err)
		}
		files, err := s.DatabaseArtifactFiles(ctx)
		if err != nil || len(files) != 3 || !files["job_2-a.age"] || !files[got.File] {
			t.Fatalf("files: %v %v", files, err)
		}

		// Reapers racing: one deletes.
		n := countApplied(t, 6, func(int) (bool, error) { return s.DeleteDatabaseArtifact(ctx, "job_2", "job_2-a.age") })
		if n != 1 {
			t.Fatalf("%d concurrent deletes succeeded, want 1", n)
		}
		if ok, err := s.DeleteDatabaseArtifact(ctx, "job_1", "another-file.age"); ok || err != nil {
			t.Fatalf("delete naming another file: %v %v", ok, err)
		}
	})
}
