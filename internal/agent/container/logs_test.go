package container

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)

func TestCursorRoundTrip(t *testing.T) {
	c := Cursor{Stdout: Position{At: t0, Count: 3}, Stderr: Position{At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	s := c.String()
	if s != "stdout=2026-11-22T10:00:00.123456789Z~3;stderr=2026-01-02T03:04:05.000000000Z~0" {
		t.Errorf("String() = %q", s)
	}
	got, err := ParseCursor(s)
	if err != nil || got != c {
		t.Errorf("ParseCursor(%q) = %+v, %v", s, got, err)
	}
	if !got.since().Equal(c.Stderr.At) {
		t.Errorf("since = %v", got.since())
	}
	for _, bad := range []string{"", "x", "2026-11-22T10:00:00Z~1",
		"stdout=2026-11-22T10:00:00Z~1",
		"stderr=2026-11-22T10:00:00Z~1;stdout=2026-11-22T10:00:00Z~1",
		"stdout=2026-11-22T10:00:00Z~-1;stderr=2026-11-22T10:00:00Z~1",
		"stdout=2026-11-22T10:00:00Z~a;stderr=2026-11-22T10:00:00Z~1",
		"stdout=yesterday~1;stderr=2026-11-22T10:00:00Z~1",
		"stdout=2026-11-22T10:00:00Z;stderr=2026-11-22T10:00:00Z~1",
		"stdout=2026-11-22T10:00:00Z~1;stderr=2026-11-22T10:00:00Z~1;x",
		"stdout=2026-11-22T10:00:00Z~1;stderr=2026-11-22T10:00:00Z~1" + strings.Repeat("0", 80),
		"s=739ad463348b4ceca5a9e69c95a3c93f;i=4ece7",
	} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q): no error", bad)
		}
	}
}

func TestEngineTime(t *testing.T) {
	if got := engineTime(time.Unix(1732269600, 5)); got != "1732269600.000000005" {
		t.Errorf("engineTime = %q", got)
	}
}

// fakeLog is a log as the engine serves it: in the log's order, since
// filtering line by line.
type fakeLog []agentproto.LogLine

func (f fakeLog) tail(_ context.Context, n int, fn func(agentproto.LogLine) bool) error {
	for _, l := range f[max(0, len(f)-n):] {
		if !fn(l) {
			break
		}
	}
	return nil
}

func (f fakeLog) since(_ context.Context, t time.Time, fn func(agentproto.LogLine) bool) error {
	for _, l := range f {
		if l.At.Before(t) {
			continue
		}
		if !fn(l) {
			break
		}
	}
	return nil
}

// testLog makes a log of n lines whose times only go forward within each
// stream and often repeat (a long line's pieces). mild interleaves the
// streams nearly in time order, as the engine does; otherwise the streams
// are interleaved at random, the later lines of one stream reaching the
// log long after the other's.
func testLog(seed uint64, n int, mild bool) fakeLog {
	r := rand.New(rand.NewPCG(seed, 1))
	var streams [2][]agentproto.LogLine
	var last [2]time.Time
	last[0], last[1] = t0, t0
	for i := range n {
		s := r.IntN(2)
		if r.IntN(8) == 0 && len(streams[s]) == 0 {
			s = 1 - s
		}
		last[s] = last[s].Add(time.Duration(r.IntN(3)) * time.Millisecond)
		streams[s] = append(streams[s], agentproto.LogLine{At: last[s], Stream: streamNames[s], Message: fmt.Sprintf("%s %d", streamNames[s], i)})
	}
	var out fakeLog
	a, b := streams[0], streams[1]
	for len(a) > 0 || len(b) > 0 {
		takeA := len(b) == 0 || (len(a) > 0 && (mild && !b[0].At.Before(a[0].At) || !mild && r.IntN(2) == 0))
		if takeA {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	if mild { // a line now and then a step late
		for i := 0; i+1 < len(out); i++ {
			if out[i].Stream != out[i+1].Stream && r.IntN(4) == 0 {
				out[i], out[i+1] = out[i+1], out[i]
				i++
			}
		}
	}
	return out
}

// checkReads reads the first `prefix` lines of log with a tail of n, then
// the whole log after the cursor in reads of chunk lines, and checks that
// every line after the tail comes once. exact also forbids lines older than
// the tail.
func checkReads(t *testing.T, log fakeLog, prefix, n, chunk int, exact bool) {
	t.Helper()
	ctx := context.Background()
	lines, c, ok, err := readTail(ctx, log[:prefix], n)
	if err != nil || !ok {
		t.Fatalf("readTail: %v, %v", ok, err)
	}
	seen := map[string]int{}
	for _, l := range lines {
		seen[l.Message]++
	}
	for range 2*len(log) + 2 {
		got, next, err := readAfter(ctx, log, c, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > chunk {
			t.Fatalf("read %d lines, asked %d", len(got), chunk)
		}
		if len(got) == 0 {
			if next != c {
				t.Fatalf("an empty read moved the cursor from %v to %v", c, next)
			}
			break
		}
		for i, l := range got {
			seen[l.Message]++
			if i > 0 && l.At.Before(got[i-1].At) {
				t.Fatalf("a read is not in time order: %v", got)
			}
		}
		c = next
	}
	window := log[prefix-min(n, prefix) : prefix]
	for i, l := range log {
		want := 0
		if i >= prefix || slices.Contains(window, l) {
			want = 1
		}
		got := seen[l.Message]
		if got > 1 || got < want || (exact && got != want) {
			t.Fatalf("log of %d lines, tail %d of the first %d, reads of %d: line %d (%s at %s) read %d times\nlog: %v",
				len(log), n, prefix, chunk, i, l.Message, l.At.Format("05.000"), got, log)
		}
	}
}

// TestCursorContinuation reads logs after tails of every size, at every
// point of their writing, in reads of many sizes: every line after the
// tail comes once.
func TestCursorContinuation(t *testing.T) {
	for seed := range uint64(12) {
		log := testLog(seed, 24, seed%2 == 0)
		for prefix := 1; prefix <= len(log); prefix++ {
			for n := 1; n <= prefix; n++ {
				for _, chunk := range []int{1, 2, 3, 5, 8, 500} {
					checkReads(t, log, prefix, n, chunk, true)
				}
			}
		}
	}
}

// TestCursorContinuationSilentStreams moves the position of a stream
// without lines in a read up to streamSkew before the newest line read:
// with the engine's near time order (no line later than streamSkew), no
// line is missed or read twice, though a line older than the first tail may
// come.
func TestCursorContinuationSilentStreams(t *testing.T) {
	defer func(s int, d time.Duration) { tailSlack, streamSkew = s, d }(tailSlack, streamSkew)
	tailSlack, streamSkew = 2, 3*time.Millisecond
	for seed := range uint64(12) {
		log := testLog(seed, 24, true)
		for prefix := 1; prefix <= len(log); prefix++ {
			for n := 1; n <= prefix; n++ {
				for _, chunk := range []int{1, 3, 500} {
					checkReads(t, log, prefix, n, chunk, false)
				}
			}
		}
	}
}

// TestTailCursorRecount: when all the newest lines of a stream have one
// time, the log is asked how many lines have it.
func TestTailCursorRecount(t *testing.T) {
	defer func(s int) { tailSlack = s }(tailSlack)
	tailSlack = 1
	var log fakeLog
	for i := range 5 { // a long line in 5 pieces
		log = append(log, agentproto.LogLine{At: t0, Stream: "stdout", Message: fmt.Sprintf("piece %d", i)})
	}
	log = append(log, agentproto.LogLine{At: t0.Add(-time.Millisecond), Stream: "stderr", Message: "late"})
	lines, c, _, err := readTail(context.Background(), log, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].Message != "late" || lines[1].Message != "piece 4" {
		t.Errorf("lines = %v", lines)
	}
	want := Cursor{Stdout: Position{At: t0, Count: 5}, Stderr: Position{At: t0.Add(-time.Millisecond), Count: 1}}
	if c != want {
		t.Errorf("cursor = %v, want %v", c, want)
	}
	if got, next, _ := readAfter(context.Background(), log, c, 10); len(got) != 0 || next != c {
		t.Errorf("after the tail: %v, %v", got, next)
	}
}
