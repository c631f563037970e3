package store_test

import (
	"context"
	"testing"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// TestStoreDatabaseLogins: a login is creating until its job's outcome
// (forgotten on failure); a rotation replaces the password only on
// success and one at a time, also when started in parallel; a drop
// forgets the login only on success.
func TestStoreDatabaseLogins(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst := mustInsertInstance(t, s, srv, "main")
		login := func(name string) databases.Credential {
			return databases.Credential{ID: ids.New(databases.CredentialIDPrefix), InstanceID: inst.ID, Username: name, Database: "app",
				Access: "readonly", State: databases.LoginCreating, JobID: ids.New(ids.Job), SealedPassword: "sealed-" + name,
				CreatedAt: t0, UpdatedAt: t0}
		}
		byName := func(name string) (databases.Credential, bool) {
			creds, err := s.DatabaseCredentials(ctx, inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range creds {
				if c.Username == name {
					return c, true
				}
			}
			return databases.Credential{}, false
		}
		ok, failed := login("ok"), login("failed")
		for _, c := range []databases.Credential{ok, failed} {
			if err := s.InsertDatabaseLogin(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.InsertDatabaseLogin(ctx, login("ok")); !fault.Is(err, fault.Conflict) {
			t.Fatalf("a second login named ok: %v, want a conflict", err)
		}
		if err := s.InsertDatabaseLogin(ctx, login("admin")); !fault.Is(err, fault.Conflict) {
			t.Fatalf("a login named as the admin login: %v, want a conflict", err)
		}
		if changed, err := s.FinishDatabaseLogin(ctx, ok.JobID, true, t0); err != nil || !changed {
			t.Fatalf("finish ok: %v %v", changed, err)
		}
		if changed, err := s.FinishDatabaseLogin(ctx, ok.JobID, false, t0); err != nil || changed {
			t.Fatalf("a second outcome of the same job changed the login: %v %v", changed, err)
		}
		if changed, err := s.FinishDatabaseLogin(ctx, failed.JobID, false, t0); err != nil || !changed {
			t.Fatalf("finish failed: %v %v", changed, err)
		}
		if c, found := byName("ok"); !found || c.State != databases.LoginReady {
			t.Fatalf("ok after its job: %+v %v", c, found)
		}
		if _, found := byName("failed"); found {
			t.Fatal("a login whose job failed is still stored")
		}

		// Rotations started in parallel: exactly one starts.
		jobIDs := make([]string, 8)
		for i := range jobIDs {
			jobIDs[i] = ids.New(ids.Job)
		}
		errs := inParallel(len(jobIDs), func(i int) error {
			return s.StartDatabaseRotation(ctx, ok.ID, "sealed-new-"+jobIDs[i], jobIDs[i], t0)
		})
		won := succeeded(t, "rotation", errs)
		if len(won) != 1 {
			t.Fatalf("rotations that started: %v, want exactly one", won)
		}
		started := jobIDs[won[0]]

		if err := s.StartDatabaseLoginDrop(ctx, ok.ID, ids.New(ids.Job), t0); !fault.Is(err, fault.Conflict) {
			t.Fatalf("drop during a rotation: %v, want a conflict", err)
		}
		if c, _ := byName("ok"); c.SealedPassword != "sealed-ok" || c.RotateJobID != started {
			t.Fatalf("during the rotation: %+v", c)
		}
		// A failed rotation keeps the old password.
		if changed, err := s.FinishDatabaseRotation(ctx, started, false, t0); err != nil || !changed {
			t.Fatalf("finish rotation: %v %v", changed, err)
		}
		if c, _ := byName("ok"); c.SealedPassword != "sealed-ok" || c.RotateJobID != "" {
			t.Fatalf("after a failed rotation: %+v", c)
		}
		again := ids.New(ids.Job)
		if err := s.StartDatabaseRotation(ctx, ok.ID, "sealed-2", again, t0); err != nil {
			t.Fatal(err)
		}
		if changed, err := s.FinishDatabaseRotation(ctx, again, true, t0); err != nil || !changed {
			t.Fatalf("finish rotation: %v %v", changed, err)
		}
		if c, _ := byName("ok"); c.SealedPassword != "sealed-2" {
			t.Fatalf("after a rotation that succeeded: %+v", c)
		}
		if err := s.StartDatabaseRotation(ctx, "dbc_missing", "x", ids.New(ids.Job), t0); !fault.Is(err, fault.NotFound) {
			t.Fatalf("rotation of a missing login: %v", err)
		}

		// A failed drop leaves the login ready; a drop that succeeded
		// forgets it.
		for _, success := range []bool{false, true} {
			jobID := ids.New(ids.Job)
			if err := s.StartDatabaseLoginDrop(ctx, ok.ID, jobID, t0); err != nil {
				t.Fatal(err)
			}
			if c, _ := byName("ok"); c.State != databases.LoginDropping {
				t.Fatalf("while dropping: %+v", c)
			}
			if changed, err := s.FinishDatabaseLoginDrop(ctx, jobID, success, t0); err != nil || !changed {
				t.Fatalf("finish drop: %v %v", changed, err)
			}
			c, found := byName("ok")
			if success && found || !success && (!found || c.State != databases.LoginReady) {
				t.Fatalf("after a drop (success %v): %+v %v", success, c, found)
			}
		}
	})
}
