package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func newInstance(serverID, name string) (databases.Instance, databases.Credential) {
	inst := databases.Instance{ID: ids.NewAt(databases.IDPrefix, t0), Name: name, ServerID: serverID, Engine: "postgres",
		Host: "127.0.0.1", Port: 5432, Database: "app", TLSMode: "disable", State: databases.StateChecking,
		CheckJobID: ids.NewAt(ids.Job, t0), CreatedBy: "usr_x", CreatedAt: t0, UpdatedAt: t0}
	cred := databases.Credential{ID: ids.NewAt(databases.CredentialIDPrefix, t0), InstanceID: inst.ID, Username: "admin",
		Database: "app", Access: databases.AccessAdmin, State: databases.LoginReady, SealedPassword: "sealed-" + name, CreatedAt: t0,
		UpdatedAt: t0}
	return inst, cred
}

// mustInsertInstance stores an instance named name on a server, with its
// admin login.
func mustInsertInstance(t *testing.T, s *store.Store, serverID, name string) databases.Instance {
	t.Helper()
	inst, cred := newInstance(serverID, name)
	if err := s.InsertDatabaseInstance(context.Background(), inst, cred); err != nil {
		t.Fatal(err)
	}
	return inst
}

func TestStoreDatabaseInstances(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst, cred := newInstance(srv, "main")
		if err := s.InsertDatabaseInstance(ctx, inst, cred); err != nil {
			t.Fatalf("insert: %v", err)
		}
		got, err := s.DatabaseInstance(ctx, inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got != inst {
			t.Fatalf("instance: got %+v, want %+v", got, inst)
		}
		creds, err := s.DatabaseCredentials(ctx, inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(creds) != 1 || creds[0] != cred {
			t.Fatalf("credentials: got %+v, want [%+v]", creds, cred)
		}

		// Names are unique; a server must exist.
		dup, dupCred := newInstance(srv, "main")
		if err := s.InsertDatabaseInstance(ctx, dup, dupCred); !fault.Is(err, fault.Conflict) {
			t.Fatalf("same name: got %v, want a conflict", err)
		}
		orphan, orphanCred := newInstance("srv_none", "orphan")
		if err := s.InsertDatabaseInstance(ctx, orphan, orphanCred); !fault.Is(err, fault.NotFound) {
			t.Fatalf("unknown server: got %v, want not found", err)
		}
		if list, err := s.ListDatabaseInstances(ctx); err != nil || len(list) != 1 {
			t.Fatalf("list after refused inserts: got %d (%v), want 1", len(list), err)
		}

		// A check that is not the latest changes nothing; the latest one
		// is recorded once.
		t1 := t0.Add(time.Minute)
		ok, err := s.FinishDatabaseCheck(ctx, inst.ID, "job_other", databases.CheckResult{State: databases.StateReady, ServerVersion: "16.4"}, t1)
		if err != nil || ok {
			t.Fatalf("finish another job's check: got %v, %v; want false", ok, err)
		}
		ok, err = s.FinishDatabaseCheck(ctx, inst.ID, inst.CheckJobID, databases.CheckResult{State: databases.StateReady, Version: "16", ServerVersion: "16.4"}, t1)
		if err != nil || !ok {
			t.Fatalf("finish the check: got %v, %v; want true", ok, err)
		}
		ok, err = s.FinishDatabaseCheck(ctx, inst.ID, inst.CheckJobID, databases.CheckResult{State: databases.StateUnreachable, LastError: "late"}, t1)
		if err != nil || ok {
			t.Fatalf("finish the same check again: got %v, %v; want false", ok, err)
		}
		got, _ = s.DatabaseInstance(ctx, inst.ID)
		if got.State != databases.StateReady || got.Version != "16" || got.ServerVersion != "16.4" || got.LastError != "" || !got.UpdatedAt.Equal(t1) {
			t.Fatalf("after the check: got %+v", got)
		}

		// A recheck sets TLS and checking; a failed check keeps the
		// version it had and records the error.
		t2 := t1.Add(time.Minute)
		if err := s.RecheckDatabaseInstance(ctx, inst.ID, "verify-ca", "PEM", "job_2", t2); err != nil {
			t.Fatal(err)
		}
		got, _ = s.DatabaseInstance(ctx, inst.ID)
		if got.State != databases.StateChecking || got.TLSMode != "verify-ca" || got.CA != "PEM" || got.CheckJobID != "job_2" {
			t.Fatalf("after recheck: got %+v", got)
		}
		if ok, err := s.FinishDatabaseCheck(ctx, inst.ID, "job_2", databases.CheckResult{State: databases.StateUnreachable, LastError: "certificate signed by unknown authority"}, t2); err != nil || !ok {
			t.Fatalf("finish recheck: %v, %v", ok, err)
		}
		got, _ = s.DatabaseInstance(ctx, inst.ID)
		if got.State != databases.StateUnreachable || got.LastError != "certificate signed by unknown authority" || got.ServerVersion != "16.4" {
			t.Fatalf("after a failed recheck: got %+v", got)
		}
		if err := s.RecheckDatabaseInstance(ctx, "db_none", "disable", "", "job_3", t2); !fault.Is(err, fault.NotFound) {
			t.Fatalf("recheck unknown: got %v, want not found", err)
		}

		// The server cannot be deleted while the instance refers to it,
		// and stays as it was.
		if err := s.DeleteServer(ctx, srv, t2); !fault.Is(err, fault.Conflict) {
			t.Fatalf("delete server with an instance: got %v, want a conflict", err)
		}
		if sv, err := s.Server(ctx, srv); err != nil || sv.RevokedAt != nil {
			t.Fatalf("server after the refused delete: %+v, %v; want it unrevoked", sv, err)
		}

		// Deleting the instance deletes its logins; then the server goes.
		if err := s.DeleteDatabaseInstance(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DatabaseInstance(ctx, inst.ID); !fault.Is(err, fault.NotFound) {
			t.Fatalf("deleted instance: got %v, want not found", err)
		}
		if creds, err := s.DatabaseCredentials(ctx, ""); err != nil || len(creds) != 0 {
			t.Fatalf("logins after delete: got %d (%v), want 0", len(creds), err)
		}
		if err := s.DeleteDatabaseInstance(ctx, inst.ID); !fault.Is(err, fault.NotFound) {
			t.Fatalf("delete twice: got %v, want not found", err)
		}
		if err := s.DeleteServer(ctx, srv, t2); err != nil {
			t.Fatalf("delete server without instances: %v", err)
		}
	})
}

// TestStoreDatabaseInstancesConcurrent registers one name many times at
// once (exactly one wins) and finishes one check from many callers
// (exactly one records it).
func TestStoreDatabaseInstancesConcurrent(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		errs := inParallel(12, func(int) error {
			inst, cred := newInstance(srv, "shared")
			return s.InsertDatabaseInstance(ctx, inst, cred)
		})
		if won := len(succeeded(t, "insert", errs)); won != 1 {
			t.Fatalf("inserts that won: got %d, want 1", won)
		}
		list, err := s.ListDatabaseInstances(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("instances: got %d (%v), want 1", len(list), err)
		}
		inst := list[0]
		recorded := countApplied(t, 12, func(i int) (bool, error) {
			return s.FinishDatabaseCheck(ctx, inst.ID, inst.CheckJobID,
				databases.CheckResult{State: databases.StateReady, ServerVersion: fmt.Sprintf("16.%d", i)}, t0)
		})
		if recorded != 1 {
			t.Fatalf("checks recorded: got %d, want 1", recorded)
		}
	})
}
