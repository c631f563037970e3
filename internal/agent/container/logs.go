package container

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Stream indexes.
const (
	stdoutIdx = 0
	stderrIdx = 1
)

var streamNames = [2]string{"stdout", "stderr"}

func streamIndex(l agentproto.LogLine) int {
	if l.Stream == "stderr" {
		return stderrIdx
	}
	return stdoutIdx
}

// Position is how far a reader got in one stream of a container log: the
// time of the last line read and how many lines of the stream have exactly
// that time, up to it.
type Position struct {
	At    time.Time
	Count int
}

// Cursor is how far a reader got in a container log, per stream. The
// engine stamps each line as it reads it from the container, one reader
// per stream, so the times of one stream only go forward; but a stream's
// line may reach the log a little after a later-stamped line of the other
// stream. A read after the cursor asks the engine for the lines since the
// earlier of its two times and drops, per stream, the lines before its
// position and the first Count lines at it: nothing twice, nothing missed.
//
// A stream without lines in a read is moved to streamSkew before the
// newest line read (so that a silent stream does not make every read
// start at its last line, however old): its next line, stamped then or
// later, is read. Lines older than that (by more than streamSkew, which
// the engine does not come near) and steps back of the host's clock are
// not accounted for.
type Cursor struct {
	Stdout, Stderr Position
}

func (c *Cursor) pos(stream int) *Position {
	if stream == stderrIdx {
		return &c.Stderr
	}
	return &c.Stdout
}

// since is the earliest time a read after c needs.
func (c Cursor) since() time.Time {
	if c.Stderr.At.Before(c.Stdout.At) {
		return c.Stderr.At
	}
	return c.Stdout.At
}

// cursorLayout is RFC 3339 with all nine digits of nanoseconds.
const cursorLayout = "2006-01-02T15:04:05.000000000Z07:00"

// String encodes c as
// stdout=2026-11-22T10:00:00.123456789Z~2;stderr=2026-11-22T10:00:00.120000000Z~1.
func (c Cursor) String() string {
	var b strings.Builder
	for i, name := range streamNames {
		p := c.pos(i)
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(name + "=" + p.At.UTC().Format(cursorLayout) + "~" + strconv.Itoa(p.Count))
	}
	return b.String()
}

// ParseCursor decodes a cursor of Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	bad := fmt.Errorf("invalid container log cursor %q", s)
	parts := strings.Split(s, ";")
	if len(s) > 128 || len(parts) != len(streamNames) {
		return Cursor{}, bad
	}
	var c Cursor
	for i, name := range streamNames {
		v, ok := strings.CutPrefix(parts[i], name+"=")
		ts, n, ok2 := strings.Cut(v, "~")
		if !ok || !ok2 {
			return Cursor{}, bad
		}
		t, err := time.Parse(time.RFC3339Nano, ts)
		// In UTC (as String writes it) the year must keep four digits.
		if err != nil || t.UTC().Year() < 1 || t.UTC().Year() > 9999 {
			return Cursor{}, bad
		}
		count, err := strconv.Atoi(n)
		if err != nil || count < 0 || count > 1<<30 {
			return Cursor{}, bad
		}
		*c.pos(i) = Position{At: t.UTC(), Count: count}
	}
	return c, nil
}

// engineTime is a time as the engine's since parameter takes it.
func engineTime(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// logSource is a container log as the engine serves it: lines in the
// log's order, with the engine's times. fn returns false to stop.
type logSource interface {
	// tail reads the last n lines.
	tail(ctx context.Context, n int, fn func(agentproto.LogLine) bool) error
	// since reads the lines stamped at or after t.
	since(ctx context.Context, t time.Time, fn func(agentproto.LogLine) bool) error
}

// engineLog is a container's log on the engine.
type engineLog struct {
	cli  *client.Client
	name string
	id   string
	tty  bool
}

func (d *Docker) engineLog(ctx context.Context, name string) (engineLog, error) {
	cli, err := d.client()
	if err != nil {
		return engineLog{}, err
	}
	c, err := inspect(ctx, cli, name)
	if err != nil {
		return engineLog{}, err
	}
	e := engineLog{cli: cli, name: strings.TrimPrefix(c.Name, "/"), id: c.ID}
	if c.Config != nil {
		e.tty = c.Config.Tty
	}
	return e, nil
}

func (e engineLog) tail(ctx context.Context, n int, fn func(agentproto.LogLine) bool) error {
	return e.read(ctx, client.ContainerLogsOptions{Tail: strconv.Itoa(n)}, fn)
}

func (e engineLog) since(ctx context.Context, t time.Time, fn func(agentproto.LogLine) bool) error {
	return e.read(ctx, client.ContainerLogsOptions{Since: engineTime(t)}, fn)
}

func (e engineLog) read(ctx context.Context, opts client.ContainerLogsOptions, fn func(agentproto.LogLine) bool) error {
	opts.ShowStdout, opts.ShowStderr, opts.Timestamps = true, true, true
	rc, err := e.cli.ContainerLogs(ctx, e.id, opts)
	if err != nil {
		return engineError(e.name, "reading the log of container", err)
	}
	defer rc.Close()
	if err := logs.ReadDocker(rc, e.tty, fn); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("reading the log of container %s: %w", e.name, ctx.Err())
		}
		return fmt.Errorf("container %s: %w", e.name, err)
	}
	return nil
}

// streamSkew bounds how much earlier than the newest line in the log a
// line not yet in it may be stamped (a variable for the tests).
var streamSkew = time.Second

// tailSlack is how many lines before the newest ones a read without a
// cursor looks at to place the cursor of a stream that has none of them
// (a variable for the tests).
var tailSlack = 100

// lastLines returns the last n lines of a log, in the log's order.
func lastLines(ctx context.Context, src logSource, n int) ([]agentproto.LogLine, error) {
	var lines []agentproto.LogLine
	err := src.tail(ctx, n, func(l agentproto.LogLine) bool {
		lines = append(lines, l)
		return true
	})
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, err
}

// readTail returns the newest n lines of a log (fewer if they exceed the
// size budget), in time order, and the cursor after them; ok is false for
// an empty log.
func readTail(ctx context.Context, src logSource, n int) (lines []agentproto.LogLine, c Cursor, ok bool, err error) {
	wide, err := lastLines(ctx, src, n+tailSlack)
	if err != nil {
		return nil, Cursor{}, false, err
	}
	lines = logs.Fit(wide[max(0, len(wide)-n):], true)
	if len(lines) == 0 {
		return lines, Cursor{}, false, nil
	}
	c, recount := tailCursor(wide, len(wide) >= n+tailSlack)
	for i, again := range recount {
		if again {
			if c.pos(i).Count, err = countAt(ctx, src, i, c.pos(i).At); err != nil {
				return nil, Cursor{}, false, err
			}
		}
	}
	logs.SortByTime(lines)
	return lines, c, true, nil
}

// tailCursor is the cursor after wide, the newest lines of a log (cut is
// true if there may be older ones). A stream's position is its last line;
// recount says the log must be asked how many lines of the stream have
// that time, because all of the stream's lines in wide do and older ones
// may too. A stream without lines in wide is placed streamSkew before the
// newest line.
func tailCursor(wide []agentproto.LogLine, cut bool) (c Cursor, recount [2]bool) {
	newest := wide[0].At
	var first [2]*agentproto.LogLine
	for i := range wide {
		l := &wide[i]
		if l.At.After(newest) {
			newest = l.At
		}
		s := streamIndex(*l)
		if first[s] == nil {
			first[s] = l
		}
		p := c.pos(s)
		if !l.At.Equal(p.At) {
			*p = Position{At: l.At}
		}
		p.Count++
	}
	for s := range first {
		if first[s] == nil {
			*c.pos(s) = Position{At: newest.Add(-streamSkew)}
			continue
		}
		recount[s] = cut && first[s].At.Equal(c.pos(s).At)
	}
	return c, recount
}

// countAt asks the log how many lines of a stream have time t.
func countAt(ctx context.Context, src logSource, stream int, t time.Time) (int, error) {
	n := 0
	err := src.since(ctx, t, func(l agentproto.LogLine) bool {
		if streamIndex(l) != stream {
			return true
		}
		if l.At.Equal(t) {
			n++
			return true
		}
		return false // the stream is past t
	})
	return n, err
}

// skipper drops the lines of a read after a cursor that it had read.
type skipper struct {
	cur     Cursor
	skipped [2]int  // lines at the cursor's time skipped so far, per stream
	fresh   [2]bool // a line of the stream was not skipped
	newest  time.Time
}

// skip reports whether l is at or before the cursor.
func (s *skipper) skip(l agentproto.LogLine) bool {
	if l.At.After(s.newest) {
		s.newest = l.At
	}
	i := streamIndex(l)
	p := s.cur.pos(i)
	if l.At.Before(p.At) {
		return true
	}
	if l.At.Equal(p.At) && s.skipped[i] < p.Count {
		s.skipped[i]++
		return true
	}
	s.fresh[i] = true
	return false
}

// next is the cursor after lines, the lines returned by a read after
// s.cur, in the log's order. A stream that had no new lines among those
// read moves up to streamSkew before the newest line read.
func (s *skipper) next(lines []agentproto.LogLine) Cursor {
	c := s.cur
	for _, l := range lines {
		// A line at the position's time follows those it counts.
		p := c.pos(streamIndex(l))
		if !l.At.Equal(p.At) {
			*p = Position{At: l.At}
		}
		p.Count++
	}
	for i, fresh := range s.fresh {
		if p := c.pos(i); !fresh && !s.newest.IsZero() && s.newest.Add(-streamSkew).After(p.At) {
			*p = Position{At: s.newest.Add(-streamSkew)}
		}
	}
	return c
}

// readAfter returns up to n lines of a log after cursor c, fewer if they
// exceed the size budget, in time order, and the cursor after them (c if
// there are none).
func readAfter(ctx context.Context, src logSource, c Cursor, n int) ([]agentproto.LogLine, Cursor, error) {
	s := skipper{cur: c}
	var lines []agentproto.LogLine
	err := src.since(ctx, c.since(), func(l agentproto.LogLine) bool {
		if !s.skip(l) {
			lines = append(lines, l)
		}
		return len(lines) < n
	})
	if err != nil {
		return nil, c, err
	}
	lines = logs.Fit(lines, false)
	if len(lines) == 0 {
		return lines, c, nil
	}
	next := s.next(lines)
	logs.SortByTime(lines)
	return lines, next, nil
}

// logs runs container.logs: the last lines of a container's
// log (agentproto.LogsResult, without a cursor), stdout at priority 6 and
// stderr at 3.
func (d *Docker) logs(ctx context.Context, c agent.Call[agentproto.ContainerLogsPayload]) (agentproto.LogsResult, error) {
	p, events := c.Payload, c.Events
	if err := checkContainer(p.Container); err != nil {
		return agentproto.LogsResult{}, err
	}
	n, err := logs.Lines(p.Lines)
	if err != nil {
		return agentproto.LogsResult{}, fmt.Errorf("invalid container.logs payload: %w", err)
	}
	src, err := d.engineLog(ctx, p.Container)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("reading the last %d lines of the log of container %s", n, src.name), nil)
	lines, err := lastLines(ctx, src, n)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	kept := logs.Fit(lines, true)
	logs.SortByTime(kept)
	events.Emit(agentproto.LevelInfo, readMessage(len(kept), len(lines)), nil)
	return agentproto.LogsResult{Lines: nonNil(kept)}, nil
}

// ReadLogs reads a container's log for logs.read (logs.Reader): the
// newest lines, or with a cursor the first lines after it. The result's
// cursor (see Cursor) is that of the last line returned, or the cursor
// given if there is none.
func (d *Docker) ReadLogs(ctx context.Context, p agentproto.LogsReadPayload, events agent.EventSink) (agentproto.LogsResult, error) {
	if err := checkContainer(p.Container); err != nil {
		return agentproto.LogsResult{}, err
	}
	if p.Priority != nil {
		return agentproto.LogsResult{}, errors.New("priority applies to journal logs only; container lines are 6 (stdout) or 3 (stderr)")
	}
	n, err := logs.ReadLines(p.Lines)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	var cur Cursor
	if p.Cursor != "" {
		if cur, err = ParseCursor(p.Cursor); err != nil {
			return agentproto.LogsResult{}, err
		}
	}
	src, err := d.engineLog(ctx, p.Container)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	if p.Cursor != "" {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("reading up to %d lines of the log of container %s after the cursor", n, src.name), nil)
		lines, next, err := readAfter(ctx, src, cur, n)
		if err != nil {
			return agentproto.LogsResult{}, err
		}
		events.Emit(agentproto.LevelInfo, readMessage(len(lines), len(lines)), nil)
		if len(lines) == 0 {
			return agentproto.LogsResult{Lines: nonNil(lines), Cursor: p.Cursor}, nil
		}
		return agentproto.LogsResult{Lines: lines, Cursor: next.String()}, nil
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("reading the last %d lines of the log of container %s", n, src.name), nil)
	lines, c, ok, err := readTail(ctx, src, n)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	res := agentproto.LogsResult{Lines: nonNil(lines)}
	if ok {
		res.Cursor = c.String()
	}
	events.Emit(agentproto.LevelInfo, readMessage(len(lines), len(lines)), nil)
	return res, nil
}

func readMessage(kept, read int) string {
	msg := fmt.Sprintf("read %d lines", kept)
	if kept < read {
		msg += fmt.Sprintf(" (%d older ones did not fit in one result)", read-kept)
	}
	return msg
}

func nonNil(lines []agentproto.LogLine) []agentproto.LogLine {
	if lines == nil {
		return []agentproto.LogLine{}
	}
	return lines
}
