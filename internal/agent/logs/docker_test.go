package logs

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)

func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }

// multiplexed is a logs response as the engine sends it for a container
// without a TTY: one stdcopy frame per entry.
func multiplexed(t *testing.T, entries ...[2]string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	for _, e := range entries {
		stream := stdcopy.Stdout
		if e[0] == "stderr" {
			stream = stdcopy.Stderr
		}
		frame(&buf, stream, e[1])
	}
	return &buf
}

// frame writes one stdcopy frame: the stream, three zero bytes, the
// payload's length (big-endian uint32), the payload.
func frame(buf *bytes.Buffer, stream stdcopy.StdType, payload string) {
	var hdr [8]byte
	hdr[0] = byte(stream)
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	buf.Write(hdr[:])
	buf.WriteString(payload)
}

func collect(t *testing.T, r io.Reader, tty bool) []agentproto.LogLine {
	t.Helper()
	var lines []agentproto.LogLine
	if err := ReadDocker(r, tty, func(l agentproto.LogLine) bool { lines = append(lines, l); return true }); err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestReadDockerMultiplexed(t *testing.T) {
	t1 := t0.Add(time.Millisecond)
	r := multiplexed(t,
		[2]string{"stdout", stamp(t0) + " hello\n"},
		[2]string{"stderr", stamp(t1) + " oops\r\n"},
		[2]string{"stdout", stamp(t1) + " \n"},            // an empty line
		[2]string{"stdout", stamp(t1) + " partial piece"}, // a long line's first piece
		[2]string{"stderr", stamp(t1) + " caf\xe9\n"},
	)
	got := collect(t, r, false)
	want := []agentproto.LogLine{
		{At: t0, Priority: 6, Message: "hello", Stream: "stdout"},
		{At: t1, Priority: 3, Message: "oops", Stream: "stderr"},
		{At: t1, Priority: 6, Message: "", Stream: "stdout"},
		{At: t1, Priority: 6, Message: "partial piece", Stream: "stdout"},
		{At: t1, Priority: 3, Message: "caf\uFFFD", Stream: "stderr"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) || got[i].Priority != want[i].Priority || got[i].Message != want[i].Message || got[i].Stream != want[i].Stream {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadDockerStopsEarly(t *testing.T) {
	r := multiplexed(t, [2]string{"stdout", stamp(t0) + " a\n"}, [2]string{"stdout", stamp(t0) + " b\n"}, [2]string{"stdout", stamp(t0) + " c\n"})
	n := 0
	if err := ReadDocker(r, false, func(agentproto.LogLine) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Errorf("read %d lines (%v), want to stop after 2", n, err)
	}
}

func TestReadDockerSystemError(t *testing.T) {
	var buf bytes.Buffer
	frame(&buf, stdcopy.Stdout, stamp(t0)+" a\n")
	frame(&buf, stdcopy.Systemerr, "log file is gone")
	err := ReadDocker(&buf, false, func(agentproto.LogLine) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "log file is gone") {
		t.Errorf("err = %v", err)
	}
	// A truncated frame is an error, not a silent end.
	var short bytes.Buffer
	frame(&short, stdcopy.Stdout, stamp(t0)+" abcdef\n")
	trunc := bytes.NewReader(short.Bytes()[:short.Len()-3])
	if err := ReadDocker(trunc, false, func(agentproto.LogLine) bool { return true }); err == nil {
		t.Error("truncated frame: no error")
	}
}

func TestReadDockerTTY(t *testing.T) {
	raw := stamp(t0) + " one\r\n" + stamp(t0.Add(time.Second)) + " two\r\n" + "no stamp\n" + stamp(t0.Add(2*time.Second)) + " last"
	got := collect(t, strings.NewReader(raw), true)
	if len(got) != 4 {
		t.Fatalf("got %d lines: %+v", len(got), got)
	}
	for i, w := range []struct {
		at  time.Time
		msg string
	}{{t0, "one"}, {t0.Add(time.Second), "two"}, {t0.Add(time.Second), "no stamp"}, {t0.Add(2 * time.Second), "last"}} {
		if !got[i].At.Equal(w.at) || got[i].Message != w.msg || got[i].Stream != "stdout" || got[i].Priority != 6 {
			t.Errorf("line %d = %+v, want %s %q", i, got[i], w.at, w.msg)
		}
	}
}

func TestReadDockerClipsLongEntries(t *testing.T) {
	r := multiplexed(t, [2]string{"stdout", stamp(t0) + " " + strings.Repeat("z", MaxLineBytes+100) + "\n"})
	got := collect(t, r, false)
	if len(got) != 1 || !strings.HasSuffix(got[0].Message, TruncatedMark) || !got[0].At.Equal(t0) {
		t.Errorf("long entry = %d lines, %d bytes", len(got), len(got[0].Message))
	}
}

func rawFrame(stream byte, s string) []byte {
	b := make([]byte, 8, 8+len(s))
	b[0] = stream
	binary.BigEndian.PutUint32(b[4:], uint32(len(s)))
	return append(b, s...)
}

func TestReadDockerEntriesWithoutTimestamp(t *testing.T) {
	var in bytes.Buffer
	in.Write(rawFrame(1, "2026-11-22T10:00:00.000000001Z first\n"))
	in.Write(rawFrame(2, "2026-11-22T10:00:00.000000002Z oops\n"))
	in.Write(rawFrame(1, "2026-11-22T10:00:00.000000003Z two\n2026-11-22T10:00:00.000000004Z lines\n"))
	in.Write(rawFrame(1, "no timestamp\n"))
	var got []agentproto.LogLine
	if err := ReadDocker(&in, false, func(l agentproto.LogLine) bool { got = append(got, l); return true }); err != nil {
		t.Fatal(err)
	}
	want := []string{"stdout/6 first", "stderr/3 oops", "stdout/6 two", "stdout/6 lines", "stdout/6 no timestamp"}
	if len(got) != len(want) {
		t.Fatalf("lines %+v", got)
	}
	for i, l := range got {
		if s := l.Stream + "/" + string(rune('0'+l.Priority)) + " " + l.Message; s != want[i] {
			t.Errorf("line %d = %q, want %q", i, s, want[i])
		}
	}
	if got[4].At != got[3].At || got[3].At.Nanosecond() != 4 {
		t.Errorf("times %v, %v", got[3].At, got[4].At)
	}
	var sys bytes.Buffer
	sys.Write(rawFrame(3, "log driver failed"))
	if err := ReadDocker(&sys, false, func(agentproto.LogLine) bool { return true }); err == nil || !strings.Contains(err.Error(), "log driver failed") {
		t.Errorf("system error: %v", err)
	}
	var tty []agentproto.LogLine
	if err := ReadDocker(strings.NewReader("2026-11-22T10:00:00Z a\r\n2026-11-22T10:00:01Z b\n"), true, func(l agentproto.LogLine) bool { tty = append(tty, l); return true }); err != nil || len(tty) != 2 || tty[0].Message != "a" || tty[1].Stream != "stdout" {
		t.Errorf("tty: %+v, %v", tty, err)
	}
}
