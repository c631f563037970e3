package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

func (d *Deployer) runLogs(ctx context.Context, job agentproto.Job, _ map[string]string, events agent.EventSink) (any, any, error) {
	var p agentproto.AppLogsPayload
	if err := logs.DecodePayload(job, &p); err != nil {
		return nil, nil, err
	}
	if err := checkAppID(p.AppID); err != nil {
		return nil, nil, fmt.Errorf("invalid app.logs payload: %w", err)
	}
	n, err := logs.ReadLines(p.Lines)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid app.logs payload: %w", err)
	}
	cli, err := d.client()
	if err != nil {
		return nil, nil, err
	}
	list, err := appContainers(ctx, cli, p.AppID)
	if err != nil {
		return nil, nil, err
	}
	live, ok := liveContainer(list)
	if !ok {
		return nil, nil, fmt.Errorf("application %s has no container on this server", p.AppID)
	}
	insp, err := cli.ContainerInspect(ctx, live.ID, client.ContainerInspectOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("inspecting container %s: %w", containerName(live), err)
	}
	c := insp.Container
	res := agentproto.AppLogsResult{ContainerID: c.ID, RestartCount: c.RestartCount, State: string(live.State)}
	if c.State != nil {
		res.State = string(c.State.Status)
		if t, err := time.Parse(time.RFC3339Nano, c.State.StartedAt); err == nil && t.Year() > 1 {
			res.StartedAt = t.UTC()
		}
	}
	tty := c.Config != nil && c.Config.Tty
	what := fmt.Sprintf("the last %d lines", n)
	if p.Since != nil {
		what += " since " + p.Since.UTC().Format(time.RFC3339)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("reading %s of the log of container %s (%s, deployment %s)",
		what, containerName(live), res.State, live.Labels[agentproto.LabelDeployment]), nil)
	opts := client.ContainerLogsOptions{Tail: strconv.Itoa(n)}
	if p.Since != nil {
		opts.Since = fmt.Sprintf("%d.%09d", p.Since.Unix(), p.Since.Nanosecond())
	}
	lines, err := readLog(ctx, cli, c.ID, tty, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the log of container %s: %w", containerName(live), err)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	kept := logs.Fit(lines, true)
	sortByTime(kept)
	msg := fmt.Sprintf("read %d lines", len(kept))
	if len(kept) < len(lines) {
		msg += fmt.Sprintf(" (%d older ones did not fit in one result)", len(lines)-len(kept))
	}
	events.Emit(agentproto.LevelInfo, msg, nil)
	res.Lines = kept
	if res.Lines == nil {
		res.Lines = []agentproto.LogLine{}
	}
	return res, nil, nil
}

// logTail emits the last lines of a failed release's container, for the
// job's events.
func logTail(ctx context.Context, cli *client.Client, s started, events agent.EventSink) {
	ctx, cancel := cleanupContext(ctx, 10*time.Second)
	defer cancel()
	lines, err := readLog(ctx, cli, s.ID, false, client.ContainerLogsOptions{Tail: "20"})
	if err != nil || len(lines) == 0 {
		return
	}
	msgs := make([]string, len(lines))
	for i, l := range lines {
		msgs[i] = l.Stream + ": " + l.Message
	}
	events.Emit(agentproto.LevelWarn, fmt.Sprintf("the last %d lines of the log of container %s", len(lines), s.Name),
		map[string]any{"lines": msgs})
}

// Priorities of container lines, as internal/agent/container gives them.
const (
	priorityStdout = 6 // info
	priorityStderr = 3 // error
)

// maxEntryBytes bounds one log entry read from the engine; the rest of a
// longer one is skipped.
const maxEntryBytes = 1 << 20

// readLog reads a container's log with the engine's timestamps, in the
// engine's order.
func readLog(ctx context.Context, cli *client.Client, id string, tty bool, opts client.ContainerLogsOptions) ([]agentproto.LogLine, error) {
	opts.ShowStdout, opts.ShowStderr, opts.Timestamps = true, true, true
	rc, err := cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var lines []agentproto.LogLine
	err = readEntries(rc, tty, func(l agentproto.LogLine) { lines = append(lines, l) })
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return lines, err
}

// readEntries calls fn with each line of a logs response read with
// timestamps. Without a TTY the response is multiplexed (an 8-byte header
// giving the stream and length, then one entry); with one it is the raw
// output, all of it stdout. (A copy of internal/agent/container's reader,
// without its cursor bookkeeping.)
func readEntries(r io.Reader, tty bool, fn func(agentproto.LogLine)) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var last time.Time
	emit := func(stream string, prio int, b []byte) {
		for piece := range bytes.SplitSeq(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			l := parseEntry(piece, last)
			l.Stream, l.Priority = stream, prio
			last = l.At
			fn(l)
		}
	}
	if tty {
		b, err := io.ReadAll(io.LimitReader(br, 64<<20))
		if len(b) > 0 {
			emit("stdout", priorityStdout, b)
		}
		return err
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
		switch stdcopy.StdType(hdr[0]) {
		case stdcopy.Stdin, stdcopy.Stdout:
			emit("stdout", priorityStdout, payload)
		case stdcopy.Stderr:
			emit("stderr", priorityStderr, payload)
		case stdcopy.Systemerr:
			return fmt.Errorf("the engine failed reading the log: %s", strings.TrimSpace(string(payload)))
		default:
			return fmt.Errorf("reading the log stream: unknown stream %d", hdr[0])
		}
	}
}

// parseEntry splits an entry into the engine's timestamp and the message.
// An entry without one takes the time of the entry before it.
func parseEntry(b []byte, prev time.Time) agentproto.LogLine {
	b = bytes.TrimSuffix(b, []byte("\r"))
	l := agentproto.LogLine{At: prev}
	ts, msg, _ := bytes.Cut(b, []byte(" "))
	if t, err := time.Parse(time.RFC3339Nano, string(ts)); err == nil {
		l.At, b = t.UTC(), msg
	}
	l.Message = logs.Clip(string(b))
	return l
}

// sortByTime orders lines by time, keeping the order of lines with the
// same time.
func sortByTime(lines []agentproto.LogLine) {
	slices.SortStableFunc(lines, func(a, b agentproto.LogLine) int { return a.At.Compare(b.At) })
}
