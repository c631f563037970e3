package logs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Priorities of container lines.
const (
	priorityStdout = 6 // info
	priorityStderr = 3 // error
)

// maxEntryBytes bounds one log entry read from the engine (its log
// drivers split lines into entries of 16 KiB); the rest of a longer one
// is skipped.
const maxEntryBytes = 1 << 20

// ReadDocker calls fn with each entry of a logs response read with
// timestamps, in the engine's order, until fn returns false. Without a
// TTY the response is multiplexed (stdcopy framing: an 8-byte header
// giving the stream and length, then one entry); with a TTY it is the raw
// output, one entry per line, all of it stdout.
func ReadDocker(r io.Reader, tty bool, fn func(agentproto.LogLine) bool) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var last time.Time
	emit := func(stream string, prio int, b []byte) bool {
		for piece := range bytes.SplitSeq(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			l := parseEntry(piece, last)
			l.Stream, l.Priority = stream, prio
			last = l.At
			if !fn(l) {
				return false
			}
		}
		return true
	}
	if tty {
		for {
			line, err := readLine(br, maxEntryBytes)
			if len(line) > 0 && !emit("stdout", priorityStdout, line) {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading the log stream: %w", err)
		}
		size := int64(binary.BigEndian.Uint32(hdr[4:]))
		payload := make([]byte, min(size, maxEntryBytes))
		if _, err := io.ReadFull(br, payload); err != nil {
			return fmt.Errorf("reading the log stream: %w", err)
		}
		if _, err := io.CopyN(io.Discard, br, size-int64(len(payload))); err != nil {
			return fmt.Errorf("reading the log stream: %w", err)
		}
		var ok bool
		switch stdcopy.StdType(hdr[0]) {
		case stdcopy.Stdin, stdcopy.Stdout:
			ok = emit("stdout", priorityStdout, payload)
		case stdcopy.Stderr:
			ok = emit("stderr", priorityStderr, payload)
		case stdcopy.Systemerr:
			return fmt.Errorf("the engine failed reading the log: %s", strings.TrimSpace(string(payload)))
		default:
			return fmt.Errorf("reading the log stream: unknown stream %d", hdr[0])
		}
		if !ok {
			return nil
		}
	}
}

// parseEntry splits an entry into the engine's timestamp (RFC 3339 with
// nanoseconds) and the message. An entry without one takes the time of the
// entry before it.
func parseEntry(b []byte, prev time.Time) agentproto.LogLine {
	b = bytes.TrimSuffix(b, []byte("\r"))
	l := agentproto.LogLine{At: prev}
	ts, msg, _ := bytes.Cut(b, []byte(" "))
	if t, err := time.Parse(time.RFC3339Nano, string(ts)); err == nil {
		l.At, b = t.UTC(), msg
	}
	l.Message = Clip(string(b))
	return l
}

// readLine reads one line, keeping at most max bytes of it.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if room := max - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// SortByTime orders lines by time, keeping the order of lines with the
// same time (and of each stream).
func SortByTime(lines []agentproto.LogLine) {
	slices.SortStableFunc(lines, func(a, b agentproto.LogLine) int { return a.At.Compare(b.At) })
}
