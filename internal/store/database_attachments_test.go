package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func attachedLogin(inst databases.Instance, appID, username, envKey string) (databases.Credential, databases.Attachment) {
	c := databases.Credential{ID: ids.NewAt(databases.CredentialIDPrefix, t0), InstanceID: inst.ID, Username: username, Database: "app",
		Access: agentproto.DBAccessReadWrite, State: databases.LoginCreating, JobID: ids.NewAt(ids.Job, t0), SealedPassword: "sealed",
		CreatedAt: t0, UpdatedAt: t0}
	a := databases.Attachment{ID: ids.NewAt(databases.AttachmentIDPrefix, t0), InstanceID: inst.ID, CredentialID: c.ID,
		ApplicationID: appID, EnvKey: envKey, CreatedBy: "usr_x", CreatedAt: t0}
	return c, a
}

func TestStoreDatabaseAttachments(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst := mustInsertInstance(t, s, srv, "main")
		web := mustInsertApp(t, s, srv, "web")
		api := mustInsertApp(t, s, srv, "api")

		c, a := attachedLogin(inst, web.ID, "app_web", "DATABASE_URL")
		if err := s.InsertAttachedLogin(ctx, c, a); err != nil {
			t.Fatal(err)
		}
		got, err := s.AttachmentByLoginJob(ctx, c.JobID)
		if err != nil || got != a {
			t.Fatalf("by create job: got %+v (%v), want %+v", got, err, a)
		}
		if _, err := s.AttachmentByLoginJob(ctx, "job_none"); !fault.Is(err, fault.NotFound) {
			t.Fatalf("unknown job: %v", err)
		}
		if _, err := s.FinishDatabaseLogin(ctx, c.JobID, true, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		rot := ids.NewAt(ids.Job, t0.Add(time.Minute))
		if err := s.StartDatabaseRotation(ctx, c.ID, "sealed-2", rot, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.AttachmentByLoginJob(ctx, rot); err != nil || got != a {
			t.Fatalf("by rotate job: got %+v (%v)", got, err)
		}

		// Attached already, the env key taken, or the login name in use:
		// nothing is stored.
		c2, a2 := attachedLogin(inst, web.ID, "app_web2", "OTHER_URL")
		c3, a3 := attachedLogin(inst, api.ID, "app_web", "DATABASE_URL")
		c4, a4 := attachedLogin(inst, "app_none", "app_none", "DATABASE_URL")
		for _, tc := range []struct {
			c    databases.Credential
			a    databases.Attachment
			kind fault.Kind
		}{{c2, a2, fault.Conflict}, {c3, a3, fault.Conflict}, {c4, a4, fault.NotFound}} {
			if err := s.InsertAttachedLogin(ctx, tc.c, tc.a); !fault.Is(err, tc.kind) {
				t.Fatalf("insert %s for %s: got %v, want %v", tc.c.Username, tc.a.ApplicationID, err, tc.kind)
			}
		}
		creds, err := s.DatabaseCredentials(ctx, inst.ID)
		if err != nil || len(creds) != 2 {
			t.Fatalf("logins after refused inserts: %d (%v), want 2", len(creds), err)
		}
		if l, err := s.ApplicationAttachments(ctx, web.ID); err != nil || len(l) != 1 || l[0] != a {
			t.Fatalf("web's attachments: %+v (%v)", l, err)
		}
		if l, err := s.InstanceAttachments(ctx, inst.ID); err != nil || len(l) != 1 {
			t.Fatalf("instance's attachments: %+v (%v)", l, err)
		}

		// Deleting the application forgets its attachments; deleting the
		// instance forgets the instance's.
		ca, aa := attachedLogin(inst, api.ID, "app_api", "DATABASE_URL")
		if err := s.InsertAttachedLogin(ctx, ca, aa); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteApp(ctx, web.ID); err != nil {
			t.Fatal(err)
		}
		if l, err := s.ApplicationAttachments(ctx, web.ID); err != nil || len(l) != 0 {
			t.Fatalf("deleted app's attachments: %+v (%v)", l, err)
		}
		if err := s.DeleteDatabaseInstance(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		if l, err := s.ApplicationAttachments(ctx, api.ID); err != nil || len(l) != 0 {
			t.Fatalf("attachments of a deleted instance: %+v (%v)", l, err)
		}
		if _, err := s.App(ctx, api.ID); err != nil {
			t.Fatalf("the application outlives the instance: %v", err)
		}
	})
}

// TestStoreDatabaseAttachConcurrent attaches one application to one
// instance many times at once: exactly one attachment and one login are
// stored.
func TestStoreDatabaseAttachConcurrent(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-host")
		inst := mustInsertInstance(t, s, srv, "main")
		app := mustInsertApp(t, s, srv, "web")
		errs := inParallel(8, func(i int) error {
			c, a := attachedLogin(inst, app.ID, fmt.Sprintf("app_web_%d", i), fmt.Sprintf("KEY_%d", i))
			return s.InsertAttachedLogin(ctx, c, a)
		})
		ok := len(succeeded(t, "concurrent attach", errs))

		creds, err := s.DatabaseCredentials(ctx, inst.ID)
		if ok != 1 || err != nil || len(creds) != 2 {
			t.Fatalf("concurrent attaches: %d succeeded, %d logins (%v); want 1 and 2", ok, len(creds), err)
		}
	})
}

// TestStoreReplaceAppEnv replaces an application's env only if it did
// not change since it was read.
func TestStoreReplaceAppEnv(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "app-host")
		a := mustInsertApp(t, s, srv, "web")
		if err := s.ReplaceAppEnv(ctx, a.ID, "stale", "new", []string{"A"}, t0.Add(time.Minute)); fault.As(err) == nil || fault.As(err).Code != "env-changed" {
			t.Fatalf("stale env: got %v, want env-changed", err)
		}
		if err := s.ReplaceAppEnv(ctx, a.ID, "sealed-env", "new", []string{"A"}, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if env, err := s.AppEnv(ctx, a.ID); err != nil || env != "new" {
			t.Fatalf("env: %q (%v)", env, err)
		}
		if got, err := s.App(ctx, a.ID); err != nil || len(got.EnvKeys) != 1 || got.EnvKeys[0] != "A" {
			t.Fatalf("env keys: %+v (%v)", got.EnvKeys, err)
		}
		if err := s.ReplaceAppEnv(ctx, "app_none", "", "x", nil, t0.Add(time.Minute)); !fault.Is(err, fault.NotFound) {
			t.Fatalf("unknown app: %v", err)
		}
	})
}
