// Package logs holds what the agent's log readers share: the bounds of a
// read, the size budget of a result, and the logs.read executor, which
// hands a read to the journal or the container reader by its source.
package logs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Bounds of a read.
const (
	// DefaultLines is the number of lines read when a payload says 0.
	DefaultLines = 200
	// MaxLines is the most lines service.logs and container.logs return.
	MaxLines = 500
	// MaxReadLines is the most lines one logs.read returns (the control
	// plane's bound, internal/logs).
	MaxReadLines = 1000
	// MaxLineBytes bounds one line's message; longer ones are cut (at a
	// rune boundary) and end with TruncatedMark.
	MaxLineBytes = 16 << 10
	// MaxResultBytes bounds the messages of one result, well under the 4 MiB
	// the control plane accepts for a job's result. A read that would
	// exceed it returns fewer lines (see Fit).
	MaxResultBytes = 2 << 20
)

// TruncatedMark ends a message cut to MaxLineBytes.
const TruncatedMark = " …[truncated]"

// Lines checks the number of lines a service.logs or container.logs
// payload asks for: 0 means DefaultLines, otherwise 1 to MaxLines.
func Lines(n int) (int, error) { return lines(n, MaxLines) }

// ReadLines checks the number of lines of a logs.read: 0 means
// DefaultLines, otherwise 1 to MaxReadLines.
func ReadLines(n int) (int, error) { return lines(n, MaxReadLines) }

func lines(n, max int) (int, error) {
	switch {
	case n == 0:
		return DefaultLines, nil
	case n < 1 || n > max:
		return 0, fmt.Errorf("lines must be between 1 and %d, not %d", max, n)
	}
	return n, nil
}

// Clip cuts msg to at most MaxLineBytes (plus TruncatedMark) at a rune
// boundary, and replaces invalid UTF-8 with U+FFFD.
func Clip(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) > MaxLineBytes {
		cut := MaxLineBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + TruncatedMark
	}
	return msg
}

// Fit bounds the total size of lines' messages to MaxResultBytes. For a
// read of the newest lines (keepNewest) it drops the oldest lines; for a
// read after a cursor it drops the newest, so that a cursor taken from the
// last kept line loses nothing. It returns the lines kept.
func Fit(lines []agentproto.LogLine, keepNewest bool) []agentproto.LogLine {
	const perLine = 64 // the JSON around a message
	total := 0
	if keepNewest {
		for i := len(lines) - 1; i >= 0; i-- {
			total += len(lines[i].Message) + perLine
			if total > MaxResultBytes {
				return lines[i+1:]
			}
		}
		return lines
	}
	for i := range lines {
		total += len(lines[i].Message) + perLine
		if total > MaxResultBytes {
			return lines[:i]
		}
	}
	return lines
}

// Reader reads a log for logs.read. The payload's Source is already
// checked and Lines normalized (1 to MaxReadLines); the reader checks the
// rest.
type Reader interface {
	ReadLogs(ctx context.Context, p agentproto.LogsReadPayload, events agent.EventSink) (agentproto.LogsResult, error)
}

// Readers run logs.read: the payload is checked and passed to the
// reader of its source. A nil reader fails the jobs of its source.
type Readers struct {
	Journal   Reader
	Container Reader
}

// Register adds logs.read to r.
func (x Readers) Register(r agent.Registry) {
	agent.Handle(r, agentproto.LogsRead, x.read)
}

func (x Readers) read(ctx context.Context, c agent.Call[agentproto.LogsReadPayload]) (agentproto.LogsResult, error) {
	p := c.Payload
	n, err := ReadLines(p.Lines)
	if err != nil {
		return agentproto.LogsResult{}, fmt.Errorf("invalid logs.read payload: %w", err)
	}
	p.Lines = n
	var r Reader
	switch p.Source {
	case agentproto.LogSourceJournal:
		r = x.Journal
	case agentproto.LogSourceContainer:
		r = x.Container
	case "":
		return agentproto.LogsResult{}, errors.New("invalid logs.read payload: source is required (journal or container)")
	default:
		return agentproto.LogsResult{}, fmt.Errorf("invalid logs.read payload: unknown source %q (journal or container)", p.Source)
	}
	if r == nil {
		return agentproto.LogsResult{}, fmt.Errorf("this agent cannot read %s logs", p.Source)
	}
	res, err := r.ReadLogs(ctx, p, c.Events)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	if res.Lines == nil {
		res.Lines = []agentproto.LogLine{}
	}
	return res, nil
}
