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

// TestStoreManagedOperations: an operation starts only from the states
// it names and only for a managed instance (of operations started at
// once exactly one wins); only the latest operation's outcome is
// recorded, and a removal deletes the record only as the latest.
func TestStoreManagedOperations(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst, cred := newInstance(srv, "managed")
		inst.Managed, inst.State = true, databases.StateCreating
		if err := s.InsertDatabaseInstance(ctx, inst, cred); err != nil {
			t.Fatal(err)
		}
		ext, extCred := newInstance(srv, "external")
		if err := s.InsertDatabaseInstance(ctx, ext, extCred); err != nil {
			t.Fatal(err)
		}
		from := []string{databases.StateReady, databases.StateStopped, databases.StateFailed}
		t1 := t0.Add(time.Minute)

		// Not while creating; not for an external instance.
		if err := s.BeginDatabaseOperation(ctx, inst.ID, from, databases.StateStopping, "job_a", t1); !fault.Is(err, fault.Conflict) {
			t.Fatalf("begin while creating: %v", err)
		}
		if err := s.BeginDatabaseOperation(ctx, ext.ID, from, databases.StateStopping, "job_a", t1); !fault.Is(err, fault.Conflict) {
			t.Fatalf("begin on an external instance: %v", err)
		}
		if err := s.BeginDatabaseOperation(ctx, "db_none", from, databases.StateStopping, "job_a", t1); !fault.Is(err, fault.NotFound) {
			t.Fatalf("begin on no instance: %v", err)
		}

		ok, err := s.FinishDatabaseOperation(ctx, inst.ID, inst.CheckJobID, databases.OperationResult{State: databases.StateReady,
			Port: 40001, ServerVersion: "16.4"}, t1)
		if err != nil || !ok {
			t.Fatalf("finish the creation: %v, %v", ok, err)
		}
		got, _ := s.DatabaseInstance(ctx, inst.ID)
		if got.State != databases.StateReady || got.Port != 40001 || got.ServerVersion != "16.4" {
			t.Fatalf("after the creation: %+v", got)
		}

		// Of operations begun at once, one wins.
		errs := inParallel(8, func(i int) error {
			return s.BeginDatabaseOperation(ctx, inst.ID, from, databases.StateStopping, fmt.Sprintf("job_%d", i), t1)
		})
		won := succeeded(t, "begin", errs)
		if len(won) != 1 {
			t.Fatalf("operations that began: %v, want exactly one", won)
		}
		winner := fmt.Sprintf("job_%d", won[0])

		// Another job's outcome changes nothing; the latest is recorded.
		if ok, err := s.FinishDatabaseOperation(ctx, inst.ID, "job_other", databases.OperationResult{State: databases.StateFailed}, t1); err != nil || ok {
			t.Fatalf("finish another job: %v, %v", ok, err)
		}
		if ok, err := s.FinishDatabaseOperation(ctx, inst.ID, winner, databases.OperationResult{State: databases.StateStopped}, t1); err != nil || !ok {
			t.Fatalf("finish the stop: %v, %v", ok, err)
		}
		if got, _ := s.DatabaseInstance(ctx, inst.ID); got.State != databases.StateStopped || got.Port != 40001 {
			t.Fatalf("after the stop: %+v", got)
		}

		// Removal: only the latest operation deletes the record.
		if err := s.BeginDatabaseOperation(ctx, inst.ID, from, databases.StateRemoving, "job_rm", t1); err != nil {
			t.Fatal(err)
		}
		if gone, err := s.DeleteRemovedDatabaseInstance(ctx, inst.ID, winner); err != nil || gone {
			t.Fatalf("delete by an older job: %v, %v", gone, err)
		}
		if gone, err := s.DeleteRemovedDatabaseInstance(ctx, inst.ID, "job_rm"); err != nil || !gone {
			t.Fatalf("delete by the removal: %v, %v", gone, err)
		}
		if _, err := s.DatabaseInstance(ctx, inst.ID); !fault.Is(err, fault.NotFound) {
			t.Fatalf("after the removal: %v", err)
		}
		if creds, _ := s.DatabaseCredentials(ctx, inst.ID); len(creds) != 0 {
			t.Fatalf("logins left: %+v", creds)
		}
	})
}
