package e2e

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
)

// TestBackupLocalCopies: with --backup-local-keep 1 the agent removes the
// older local copies as each backup completes, but never the copy of the
// database's newest verified backup, and a backup whose copy it removed
// no longer lists a local location.
func TestBackupLocalCopies(t *testing.T) {
	r := newRestoreRigOn(t, store.SQLite, "--backup-local-keep", "1")
	expectStatus(t, r.putSettings(t, r.storageSettings("local")), http.StatusOK)
	pg, _ := r.registerPostgres(t, "pg")
	backup := func() BackupRun {
		t.Helper()
		run, j := r.backup(t, pg.ID, "")
		if j.Status != "succeeded" || run.Locations.Local == "" {
			t.Fatalf("backup: %s %s, local %q", j.Status, deref(j.Error), run.Locations.Local)
		}
		return run
	}
	exists := func(path string) bool {
		t.Helper()
		_, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	first := backup()
	if vj := r.post(t, "/api/v1/backups/"+first.ID+"/verify", nil); vj.Status != "succeeded" {
		t.Fatalf("verify: %s %s", vj.Status, deref(vj.Error))
	}
	second := backup()
	third := backup()
	if !exists(first.Locations.Local) || exists(second.Locations.Local) || !exists(third.Locations.Local) {
		t.Fatalf("local copies: verified %v, second %v, newest %v; want the verified and the newest", exists(first.Locations.Local),
			exists(second.Locations.Local), exists(third.Locations.Local))
	}
	if got := r.run(t, second.ID).Locations.Local; got != "" {
		t.Fatalf("the backup whose copy was removed lists %q", got)
	}
	if got := r.run(t, first.ID).Locations.Local; got != first.Locations.Local {
		t.Fatalf("the verified backup lists %q, want %q", got, first.Locations.Local)
	}
}
