package backup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPruneLocal: the local copies beyond the newest keep are removed,
// except the protected run's (the control plane's newest verified
// backup), and the removed runs are reported; other files stay.
func TestPruneLocal(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"run_01.sql.gz.age", "run_02.sql.gz.age", "run_03.sql.gz.age", "run_04.sql.gz.age",
		"run_05.sql.gz.age", "run_06.sql.gz.age.partial", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := pruneLocal(dir, 2, []string{"run_01"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"run_02", "run_03"}) {
		t.Fatalf("removed %v, want run_02 and run_03", removed)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"notes.txt", "run_01.sql.gz.age", "run_04.sql.gz.age", "run_05.sql.gz.age", "run_06.sql.gz.age.partial"}
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	// Without a protected run, the bound alone.
	if removed, err := pruneLocal(dir, 1, nil); err != nil || !slices.Equal(removed, []string{"run_04", "run_01"}) {
		t.Fatalf("removed %v (%v), want run_04 and run_01", removed, err)
	}
}
