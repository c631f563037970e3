package service

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestParseJournal(t *testing.T) {
	out := strings.Join([]string{
		// A plain entry, as journalctl -o json prints it.
		`{"__CURSOR":"s=a;i=1;b=b;m=1;t=5f0;x=1","__REALTIME_TIMESTAMP":"1732269600123456","__MONOTONIC_TIMESTAMP":"1","_BOOT_ID":"b","PRIORITY":"6","MESSAGE":"hello world"}`,
		// MESSAGE that is not UTF-8: an array of bytes ("caf\xe9 ok").
		`{"__CURSOR":"s=a;i=2","__REALTIME_TIMESTAMP":"1732269600123457","PRIORITY":"3","MESSAGE":[99,97,102,233,32,111,107]}`,
		// No PRIORITY: info. A field held twice: the first value.
		`{"__CURSOR":"s=a;i=3","__REALTIME_TIMESTAMP":"1732269601000000","MESSAGE":["first","second"]}`,
		// A value journalctl did not print (null) and a bad priority.
		`{"__CURSOR":"s=a;i=4","__REALTIME_TIMESTAMP":"1732269602000000","PRIORITY":"9","MESSAGE":null}`,
		// Multiple binary values.
		`{"__CURSOR":"s=a;i=5","__REALTIME_TIMESTAMP":"1732269603000000","PRIORITY":"0","MESSAGE":[[104,105,10],[120]]}`,
		"",
	}, "\n")
	entries, err := parseJournal(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		cursor string
		at     time.Time
		prio   int
		msg    string
	}
	wants := []want{
		{"s=a;i=1;b=b;m=1;t=5f0;x=1", time.Date(2024, 11, 22, 10, 0, 0, 123456000, time.UTC), 6, "hello world"},
		{"s=a;i=2", time.Date(2024, 11, 22, 10, 0, 0, 123457000, time.UTC), 3, "caf\uFFFD ok"},
		{"s=a;i=3", time.Date(2024, 11, 22, 10, 0, 1, 0, time.UTC), 6, "first"},
		{"s=a;i=4", time.Date(2024, 11, 22, 10, 0, 2, 0, time.UTC), 6, ""},
		{"s=a;i=5", time.Date(2024, 11, 22, 10, 0, 3, 0, time.UTC), 0, "hi"},
	}
	if len(entries) != len(wants) {
		t.Fatalf("got %d entries, want %d: %+v", len(entries), len(wants), entries)
	}
	for i, w := range wants {
		e := entries[i]
		if e.cursor != w.cursor || !e.line.At.Equal(w.at) || e.line.At.Location() != time.UTC ||
			e.line.Priority != w.prio || e.line.Message != w.msg || e.line.Stream != "" {
			t.Errorf("entry %d = %+v (cursor %q), want %+v", i, e.line, e.cursor, w)
		}
	}
}

func TestParseJournalErrors(t *testing.T) {
	for _, in := range []string{
		`not json`,
		`{"__CURSOR":"c","__REALTIME_TIMESTAMP":"soon","MESSAGE":"x"}`,
		`{"__CURSOR":"c","MESSAGE":"no time"}`,
	} {
		if _, err := parseJournal(strings.NewReader(in + "\n")); err == nil {
			t.Errorf("parseJournal(%q): no error", in)
		}
	}
	entries, err := parseJournal(strings.NewReader(""))
	if err != nil || len(entries) != 0 {
		t.Errorf("empty output: %v, %v", entries, err)
	}
}

func TestParseJournalOversizedEntry(t *testing.T) {
	huge := strings.Repeat("y", maxEntryBytes+10)
	out := `{"__CURSOR":"s=big","__REALTIME_TIMESTAMP":"1732269600000000","PRIORITY":"4","MESSAGE":"` + huge + `"}` + "\n" +
		`{"__CURSOR":"s=next","__REALTIME_TIMESTAMP":"1732269600000001","MESSAGE":"after"}` + "\n"
	entries, err := parseJournal(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("got %d entries", len(entries))
	}
	big := entries[0]
	if big.cursor != "s=big" || big.line.Priority != 4 || !strings.Contains(big.line.Message, "too large") {
		t.Errorf("oversized entry = %+v, cursor %q", big.line, big.cursor)
	}
	if entries[1].cursor != "s=next" || entries[1].line.Message != "after" {
		t.Errorf("entry after the oversized one = %+v", entries[1])
	}
}

func TestParseJournalClipsLongMessages(t *testing.T) {
	msg := strings.Repeat("é", logs.MaxLineBytes) // 2 bytes each
	out := fmt.Sprintf(`{"__CURSOR":"c","__REALTIME_TIMESTAMP":"1","MESSAGE":%q}`, msg)
	entries, err := parseJournal(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := entries[0].line.Message
	if !strings.HasSuffix(got, logs.TruncatedMark) || len(got) > logs.MaxLineBytes+len(logs.TruncatedMark) {
		t.Errorf("message of %d bytes not clipped: %d bytes", len(msg), len(got))
	}
	if !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Error("clipped inside a rune")
	}
}

func TestJournalArgs(t *testing.T) {
	p := 3
	q := journalQuery{unit: "web.service", lines: 50, priority: &p, after: "s=1;i=2"}
	got := q.args(true)
	want := []string{"-u", "web.service", "-n", "51", "-o", "json", "--no-pager", "--quiet", "--all",
		"--output-fields=MESSAGE,PRIORITY", "-p", "3", "--cursor=s=1;i=2"}
	if !slices.Equal(got, want) {
		t.Errorf("args = %q, want %q", got, want)
	}
	got = journalQuery{unit: "a.service", lines: 1}.args(false)
	want = []string{"-u", "a.service", "-n", "1", "-o", "json", "--no-pager", "--quiet", "--all"}
	if !slices.Equal(got, want) {
		t.Errorf("args = %q, want %q", got, want)
	}
}

func TestValidUnit(t *testing.T) {
	for _, u := range []string{"nginx.service", "getty@tty1.service", "a-b_c:d\\x2d.service", "systemd-journald.service"} {
		if !ValidUnit(u) {
			t.Errorf("ValidUnit(%q) = false", u)
		}
	}
	for _, u := range []string{"", ".service", "nginx", "nginx.socket", "-x.service", "../x.service", "a b.service",
		"x.service;reboot", "$(id).service", "a/b.service", "x.service\n", strings.Repeat("a", 248) + ".service"} {
		if ValidUnit(u) {
			t.Errorf("ValidUnit(%q) = true", u)
		}
	}
}

func TestJournalCursorPattern(t *testing.T) {
	if !validJournalCursor("s=739ad463348b4ceca5a9e69c95a3c93f;i=4ece7;b=6c7c6013a8f14d3ab0ea5a5ec4b6f8c1;m=5c4b28fd56;t=5a6d8b1f8e6c2;x=4ba4de9b68a2ea41") {
		t.Error("a journald cursor is refused")
	}
	for _, c := range []string{"", "a b", "x\n", "$(id)", strings.Repeat("a", 1025)} {
		if validJournalCursor(c) {
			t.Errorf("cursor %q accepted", c)
		}
	}
}

// fakeJournalctl writes a journalctl that records its arguments and prints
// the given entries (or, for --output-fields, fails as systemd before 236
// does when old is set).
func fakeJournalctl(t *testing.T, old bool, entries ...string) (bin, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	out := filepath.Join(dir, "out")
	if err := os.WriteFile(out, []byte(strings.Join(entries, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$@\" >> " + argsFile + "\n"
	if old {
		script += "case \"$*\" in *--output-fields*) echo \"journalctl: unrecognized option '--output-fields=MESSAGE,PRIORITY'\" >&2; exit 1;; esac\n"
	}
	script += "cat " + out + "\n"
	bin = filepath.Join(dir, "journalctl")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, argsFile
}

func entry(cursor, msg string) string {
	return fmt.Sprintf(`{"__CURSOR":%q,"__REALTIME_TIMESTAMP":"1732269600000000","PRIORITY":"6","MESSAGE":%q}`, cursor, msg)
}

func TestReadJournalAfterCursor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /bin/sh")
	}
	ctx := context.Background()
	// The cursor's own line comes first (it matches the filters): dropped.
	bin, _ := fakeJournalctl(t, false, entry("c1", "one"), entry("c2", "two"), entry("c3", "three"))
	s := &Systemd{Journalctl: bin}
	got, err := s.readJournal(ctx, journalQuery{unit: "a.service", lines: 2, after: "c1"})
	if err != nil || len(got) != 2 || got[0].cursor != "c2" || got[1].cursor != "c3" {
		t.Errorf("after c1: %+v, %v", got, err)
	}
	// It does not (a priority filter): the first line is new; one line
	// more than asked is cut.
	got, err = s.readJournal(ctx, journalQuery{unit: "a.service", lines: 2, after: "c0"})
	if err != nil || len(got) != 2 || got[0].cursor != "c1" || got[1].cursor != "c2" {
		t.Errorf("after c0: %+v, %v", got, err)
	}
	// No cursor: all lines journalctl printed.
	got, err = s.readJournal(ctx, journalQuery{unit: "a.service", lines: 3})
	if err != nil || len(got) != 3 {
		t.Errorf("newest: %+v, %v", got, err)
	}
}

func TestReadJournalOldSystemd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /bin/sh")
	}
	bin, argsFile := fakeJournalctl(t, true, entry("c1", "one"))
	got, err := (&Systemd{Journalctl: bin}).readJournal(context.Background(), journalQuery{unit: "a.service", lines: 5})
	if err != nil || len(got) != 1 || got[0].line.Message != "one" {
		t.Fatalf("%+v, %v", got, err)
	}
	b, _ := os.ReadFile(argsFile)
	calls := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(calls) != 2 || !strings.Contains(calls[0], "--output-fields") || strings.Contains(calls[1], "--output-fields") {
		t.Errorf("calls: %q", calls)
	}
}

func TestReadJournalFails(t *testing.T) {
	_, err := (&Systemd{Journalctl: filepath.Join(t.TempDir(), "missing")}).readJournal(context.Background(), journalQuery{unit: "a.service", lines: 5})
	if err == nil || !strings.HasPrefix(err.Error(), "journalctl: ") {
		t.Errorf("err = %v", err)
	}
}

// TestReadJournalWithoutJournal: on a host whose journald keeps no file, a
// read says so instead of answering with no line; where it keeps one, no
// line is an answer. Run with the host's own journalctl.
func TestReadJournalWithoutJournal(t *testing.T) {
	bin, err := exec.LookPath("journalctl")
	if err != nil {
		testlab.Require(t, "journalctl (apt-get install systemd)")
	}
	none := t.TempDir()
	unit := "capstan-test-no-such-unit-" + strconv.Itoa(os.Getpid()) + ".service"
	s := &Systemd{Journalctl: bin, JournalDirs: []string{filepath.Join(none, "run"), filepath.Join(none, "var")}}
	_, err = s.readJournal(context.Background(), journalQuery{unit: unit, lines: 5})
	if err == nil || !strings.Contains(err.Error(), "this host keeps no systemd journal") {
		t.Fatalf("read on a host without journal files: %v, want an error saying so", err)
	}
	kept := filepath.Join(none, "var", "0123456789abcdef0123456789abcdef")
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kept, "system.journal"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := s.readJournal(context.Background(), journalQuery{unit: unit, lines: 5})
	if err != nil || len(got) != 0 {
		t.Fatalf("read of a unit with no line on a host with a journal: %+v, %v; want none, no error", got, err)
	}
}
