package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
)

// testIdentity is what the tests' files are encrypted to.
var testIdentity = func() *age.X25519Identity {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		panic(err)
	}
	return id
}()

func newDir(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dirHolds reports whether any file in d holds marker.
func dirHolds(t *testing.T, d *Dir, marker []byte) bool {
	t.Helper()
	entries, err := os.ReadDir(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(d.Path(), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, marker) {
			return true
		}
	}
	return false
}

// TestWriteOpen: what is written reads back whole, with its size and
// SHA-256; the file on disk holds no plaintext and is 0600.
func TestWriteOpen(t *testing.T) {
	d := newDir(t)
	marker := []byte("marker-row-7f3a")
	content := bytes.Repeat(append(marker, '\n'), 100_000) // 1.6 MB: many age chunks
	w, err := d.Write(context.Background(), "job_1", testIdentity.Recipient(), bytes.NewReader(content), 0)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if w.Size != int64(len(content)) || w.SHA256 != hex.EncodeToString(sum[:]) || !strings.HasPrefix(w.File, "job_1-") {
		t.Fatalf("written %+v", w)
	}
	if dirHolds(t, d, marker) {
		t.Fatal("the artifact directory holds plaintext")
	}
	st, err := os.Stat(filepath.Join(d.Path(), w.File))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", st, err)
	}
	r, err := d.Open(w.File, testIdentity)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(content))
	}
	if err := d.Remove(w.File); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Open(w.File, testIdentity); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open after remove: %v", err)
	}
	if _, err := d.Open("../secret.key", testIdentity); err == nil {
		t.Fatal("opened a file outside the directory")
	}
}

// TestWriteLimitAndCancel: content over the limit, a failing source and a
// cancelled context each leave nothing behind.
func TestWriteLimitAndCancel(t *testing.T) {
	d := newDir(t)
	if w, err := d.Write(context.Background(), "job_2", testIdentity.Recipient(), bytes.NewReader(make([]byte, 1001)), 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %+v %v", w, err)
	}
	if w, err := d.Write(context.Background(), "job_3", testIdentity.Recipient(), bytes.NewReader(make([]byte, 1000)), 1000); err != nil || w.Size != 1000 {
		t.Fatalf("at the limit: %+v %v", w, err)
	}
	boom := errors.New("client went away")
	if _, err := d.Write(context.Background(), "job_4", testIdentity.Recipient(), io.MultiReader(bytes.NewReader(make([]byte, 5000)), errReader{boom}), 0); !errors.Is(err, boom) {
		t.Fatalf("failing source: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Write(ctx, "job_5", testIdentity.Recipient(), bytes.NewReader(make([]byte, 10)), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	entries, _ := os.ReadDir(d.Path())
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "job_3-") {
		t.Fatalf("files left: %v", entries)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestSweep removes old files no artifact claims and old parts, and keeps
// claimed files and recent ones.
func TestSweep(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	kept, _ := d.Write(ctx, "kept", testIdentity.Recipient(), strings.NewReader("a"), 0)
	orphan, _ := d.Write(ctx, "orphan", testIdentity.Recipient(), strings.NewReader("b"), 0)
	fresh, _ := d.Write(ctx, "fresh", testIdentity.Recipient(), strings.NewReader("c"), 0)
	part := filepath.Join(d.Path(), "stale-0"+partSuffix)
	if err := os.WriteFile(part, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, f := range []string{kept.File, orphan.File, "stale-0" + partSuffix} {
		if err := os.Chtimes(filepath.Join(d.Path(), f), old, old); err != nil {
			t.Fatal(err)
		}
	}
	n, err := d.Sweep(time.Now().Add(-time.Hour), func(f string) bool { return f == kept.File })
	if err != nil || n != 2 {
		t.Fatalf("swept %d (%v), want 2", n, err)
	}
	for f, want := range map[string]bool{kept.File: true, orphan.File: false, fresh.File: true, "stale-0" + partSuffix: false} {
		_, err := os.Stat(filepath.Join(d.Path(), f))
		if got := err == nil; got != want {
			t.Errorf("%s exists: %t, want %t", f, got, want)
		}
	}
}
