package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// maxEntryBytes bounds one line of journalctl's JSON output that is
// decoded; a longer entry is reported by its cursor and time only.
const maxEntryBytes = 1 << 20

// journalCursorPattern is what a journal cursor may hold (journald's are
// s=…;i=…;b=…;m=…;t=…;x=…). It is passed as one argument, never through a
// shell; the check is defence in depth.
var journalCursorPattern = regexp.MustCompile(`^[A-Za-z0-9=;:._+/-]+$`)

// validJournalCursor reports whether c may be a journal cursor.
func validJournalCursor(c string) bool {
	return len(c) <= 1024 && journalCursorPattern.MatchString(c)
}

// journalEntry is one entry of journalctl -o json.
type journalEntry struct {
	line   agentproto.LogLine
	cursor string
}

// journalQuery is one journalctl read.
type journalQuery struct {
	unit     string
	lines    int
	priority *int   // lines of this priority or more urgent; nil: all
	after    string // read the first entries after this cursor; "": the newest
}

// args are journalctl's arguments. A read after a cursor starts at the
// cursor (--cursor, one more line) rather than after it: journalctl's
// --after-cursor skips one line too many when the cursor's own line does
// not match the filters (e.g. a cursor of a read without -p, then a read
// with it), so readJournal drops the cursor's line itself.
func (q journalQuery) args(outputFields bool) []string {
	n := q.lines
	if q.after != "" {
		n++
	}
	args := []string{"-u", q.unit, "-n", strconv.Itoa(n), "-o", "json", "--no-pager", "--quiet",
		// --all: without it, fields of 4096 bytes or more are null in JSON.
		"--all"}
	if outputFields {
		// Only the fields used (the cursor and timestamps always come):
		// an entry can carry large fields, e.g. a core dump.
		args = append(args, "--output-fields=MESSAGE,PRIORITY")
	}
	if q.priority != nil {
		args = append(args, "-p", strconv.Itoa(*q.priority))
	}
	if q.after != "" {
		args = append(args, "--cursor="+q.after)
	}
	return args
}

// readJournal runs journalctl (an argument list, never a shell) and
// decodes its entries, oldest first.
func (s *Systemd) readJournal(ctx context.Context, q journalQuery) ([]journalEntry, error) {
	bin := s.Journalctl
	if bin == "" {
		bin = "journalctl"
	}
	entries, stderr, err := runJournalctl(ctx, bin, q.args(true))
	// systemd before 236 has no --output-fields.
	if err != nil && strings.Contains(stderr, "output-fields") {
		entries, stderr, err = runJournalctl(ctx, bin, q.args(false))
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("journalctl: %w", ctx.Err())
		}
		if msg := strings.TrimSpace(stderr); msg != "" {
			return nil, fmt.Errorf("journalctl: %v: %s", err, msg)
		}
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	if len(entries) == 0 && !s.journalKept() {
		return nil, fmt.Errorf("this host keeps no systemd journal: there is no journal file in %s (journald may be off, or "+
			"log to syslog only), so no unit's log can be read here", strings.Join(s.journalDirs(), " or "))
	}
	if q.after != "" {
		if len(entries) > 0 && entries[0].cursor == q.after {
			entries = entries[1:]
		}
		if len(entries) > q.lines {
			entries = entries[:q.lines]
		}
	}
	return entries, nil
}

func (s *Systemd) journalDirs() []string {
	if s.JournalDirs != nil {
		return s.JournalDirs
	}
	return []string{"/run/log/journal", "/var/log/journal"}
}

// journalKept reports whether journald keeps files in one of its
// directories (directly, or in a machine's directory under it).
func (s *Systemd) journalKept() bool {
	for _, dir := range s.journalDirs() {
		for _, pattern := range []string{"*.journal", "*/*.journal", "*.journal~", "*/*.journal~"} {
			if m, _ := filepath.Glob(filepath.Join(dir, pattern)); len(m) > 0 {
				return true
			}
		}
	}
	return false
}

func runJournalctl(ctx context.Context, bin string, args []string) ([]journalEntry, string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER="}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	entries, perr := parseJournal(out)
	if perr != nil {
		// Stop journalctl rather than wait for output nobody reads.
		_ = cmd.Process.Kill()
		io.Copy(io.Discard, out) //nolint:errcheck
	}
	werr := cmd.Wait()
	if werr != nil {
		return nil, stderr.String(), werr
	}
	if perr != nil {
		return nil, stderr.String(), perr
	}
	return entries, stderr.String(), nil
}

// parseJournal decodes the entries of journalctl -o json, one JSON object
// per line.
func parseJournal(r io.Reader) ([]journalEntry, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var entries []journalEntry
	for {
		line, size, err := readLine(br, maxEntryBytes)
		if len(bytes.TrimSpace(line)) > 0 {
			var e journalEntry
			var perr error
			if size > len(line) {
				e, perr = parseOversized(line, size)
			} else {
				e, perr = parseJournalEntry(line)
			}
			if perr != nil {
				return nil, perr
			}
			entries = append(entries, e)
		}
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads one line, keeping at most max bytes of it; size is the
// line's full length (without the newline).
func readLine(br *bufio.Reader, max int) (line []byte, size int, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		chunk = bytes.TrimSuffix(chunk, []byte("\n"))
		size += len(chunk)
		if room := max - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, size, err
		}
	}
}

// parseJournalEntry decodes one JSON entry of journalctl.
func parseJournalEntry(b []byte) (journalEntry, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return journalEntry{}, fmt.Errorf("journalctl printed an entry that is not JSON: %w", err)
	}
	var e journalEntry
	e.cursor, _ = fieldString(fields["__CURSOR"])
	ts, _ := fieldString(fields["__REALTIME_TIMESTAMP"])
	usec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return journalEntry{}, fmt.Errorf("journal entry %s: invalid __REALTIME_TIMESTAMP %q", e.cursor, ts)
	}
	e.line.At = time.UnixMicro(usec).UTC()
	e.line.Priority = priority(fields["PRIORITY"])
	msg, _ := fieldString(fields["MESSAGE"])
	e.line.Message = logs.Clip(strings.TrimRight(msg, "\n"))
	return e, nil
}

// priority decodes PRIORITY; an entry without one (or with a bad one) is
// info, journald's default.
func priority(raw json.RawMessage) int {
	s, ok := fieldString(raw)
	if !ok {
		return 6
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 7 {
		return 6
	}
	return p
}

// fieldString decodes a field of journalctl's JSON: a string; an array of
// numbers, the bytes of a value that is not valid UTF-8 (or binary); or,
// for a field an entry holds more than once, an array of those values, of
// which the first is taken. null (a value journalctl did not print) and
// anything else give ok=false.
func fieldString(raw json.RawMessage) (s string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return s, true
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
			return "", false
		}
		if first := bytes.TrimSpace(items[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
			return fieldString(first)
		}
		b := make([]byte, len(items))
		for i, it := range items {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(it)), 10, 8)
			if err != nil {
				return "", false
			}
			b[i] = byte(n)
		}
		return string(b), true
	}
	return "", false
}

var (
	oversizedCursor   = regexp.MustCompile(`"__CURSOR"\s*:\s*"([^"]*)"`)
	oversizedRealtime = regexp.MustCompile(`"__REALTIME_TIMESTAMP"\s*:\s*"([0-9]+)"`)
	oversizedPriority = regexp.MustCompile(`"PRIORITY"\s*:\s*"([0-7])"`)
)

// parseOversized makes an entry of the start of a JSON line too long to
// decode: journalctl prints the cursor and timestamps first.
func parseOversized(prefix []byte, size int) (journalEntry, error) {
	var e journalEntry
	m := oversizedCursor.FindSubmatch(prefix)
	t := oversizedRealtime.FindSubmatch(prefix)
	if m == nil || t == nil {
		return e, fmt.Errorf("journalctl printed an entry of %d bytes without a cursor and time at its start", size)
	}
	e.cursor = string(m[1])
	usec, err := strconv.ParseInt(string(t[1]), 10, 64)
	if err != nil {
		return e, fmt.Errorf("journal entry %s: invalid __REALTIME_TIMESTAMP", e.cursor)
	}
	e.line.At = time.UnixMicro(usec).UTC()
	e.line.Priority = 6
	if p := oversizedPriority.FindSubmatch(prefix); p != nil {
		e.line.Priority = int(p[1][0] - '0')
	}
	e.line.Message = fmt.Sprintf("(journal entry of %d bytes, too large to show)", size)
	return e, nil
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	const keep = 4 << 10
	t.b = append(t.b, p...)
	if len(t.b) > keep {
		t.b = append(t.b[:0], t.b[len(t.b)-keep:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }
