package traffic

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

type lines []string

func (l *lines) add(b []byte) { *l = append(*l, string(b)) }

func pollInto(t *testing.T, f *follower, got *lines) {
	t.Helper()
	if err := f.poll(got.add); err != nil {
		t.Fatal(err)
	}
}

func TestFollowerPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := newFollower(path, slog.New(slog.DiscardHandler))
	defer f.close()
	var got lines
	pollInto(t, f, &got) // no file yet
	appendFile(t, path, "one\ntw")
	pollInto(t, f, &got)
	if !slices.Equal(got, lines{"one"}) || f.pos.Offset != 4 {
		t.Fatalf("got %q at %d, want [one] at 4", got, f.pos.Offset)
	}
	pollInto(t, f, &got)
	appendFile(t, path, "o\r\nthree\n")
	pollInto(t, f, &got)
	if !slices.Equal(got, lines{"one", "two", "three"}) {
		t.Fatalf("got %q", got)
	}
}

func TestFollowerRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	f := newFollower(path, slog.New(slog.DiscardHandler))
	defer f.close()
	var got lines
	appendFile(t, path, "a1\na2\n")
	pollInto(t, f, &got)
	// Written to the old file after the last poll, then it is renamed
	// away, its last line without a newline, and a new file takes its
	// place.
	appendFile(t, path, "a3\n{\"last\":1}")
	if err := os.Rename(path, filepath.Join(dir, "access-1.log")); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "b1\n")
	pollInto(t, f, &got)
	appendFile(t, path, "b2\n")
	pollInto(t, f, &got)
	want := lines{"a1", "a2", "a3", `{"last":1}`, "b1", "b2"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	// Renamed away with nothing in its place yet: the old file is still
	// read; the new one from its start once it exists.
	if err := os.Rename(path, filepath.Join(dir, "access-2.log")); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(dir, "access-2.log"), "b3\n")
	pollInto(t, f, &got)
	appendFile(t, path, "c1\n")
	pollInto(t, f, &got)
	want = append(want, "b3", "c1")
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestFollowerTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := newFollower(path, slog.New(slog.DiscardHandler))
	defer f.close()
	var got lines
	appendFile(t, path, "first line\nsecond line\n")
	pollInto(t, f, &got)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "x\n")
	pollInto(t, f, &got)
	want := lines{"first line", "second line", "x"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestFollowerLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := newFollower(path, slog.New(slog.DiscardHandler))
	defer f.close()
	var got lines
	long := make([]byte, maxLine*2+10)
	for i := range long {
		long[i] = 'x'
	}
	appendFile(t, path, "before\n"+string(long[:maxLine+5]))
	pollInto(t, f, &got)
	appendFile(t, path, string(long[maxLine+5:])+"\nafter\n")
	pollInto(t, f, &got)
	if !slices.Equal(got, lines{"before", "after"}) {
		t.Fatalf("got %d lines, want [before after]", len(got))
	}
}

// A restart resumes at the saved position; if the file was truncated and
// written again past it meanwhile, the first line tells, and it is read
// from the start.
func TestFollowerResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := newFollower(path, slog.New(slog.DiscardHandler))
	var got lines
	appendFile(t, path, "l1\nl2\n")
	pollInto(t, f, &got)
	saved := f.pos
	f.close()
	appendFile(t, path, "l3\n")

	g := newFollower(path, slog.New(slog.DiscardHandler))
	g.resume = &saved
	got = nil
	pollInto(t, g, &got)
	g.close()
	if !slices.Equal(got, lines{"l3"}) {
		t.Fatalf("resumed: got %q, want [l3]", got)
	}

	if err := os.WriteFile(path, []byte("new first\nnew second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newFollower(path, slog.New(slog.DiscardHandler))
	defer h.close()
	h.resume = &saved
	got = nil
	pollInto(t, h, &got)
	if !slices.Equal(got, lines{"new first", "new second"}) {
		t.Fatalf("rewritten: got %q", got)
	}
}
