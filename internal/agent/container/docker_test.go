package container

// Tests against a real Docker engine: the image is built here, from
// scratch and a static Go program (testdata/chatter), with the legacy
// builder; no registry is needed.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// newContainer creates (does not start) a container of image with the
// json-file log driver and no network; it is removed when t ends.
func newContainer(t *testing.T, cli *client.Client, image string, tty bool, args ...string) string {
	t.Helper()
	stop := 2
	return testlab.CreateContainer(t, cli, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Cmd: args, Tty: tty, StopTimeout: &stop},
		HostConfig: &container.HostConfig{
			NetworkMode: "none",
			LogConfig:   container.LogConfig{Type: "json-file"},
		},
	})
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Emit(level, message string, _ any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, level+": "+message)
}

// run runs one job like the agent does and returns its data and events.
func run(t *testing.T, ex agent.Executor, jobType string, payload any) (any, []string, error) {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := &recorder{}
	data, _, err := ex.Run(ctx, agentproto.Job{ID: "job-test", Type: jobType, Payload: raw}, nil, rec)
	return data, rec.events, err
}

func mustState(t *testing.T, ex agent.Executor, jobType, name string) agentproto.ContainerState {
	t.Helper()
	data, events, err := run(t, ex, jobType, agentproto.ContainerPayload{Container: name})
	if err != nil {
		t.Fatalf("%s %s: %v (events %q)", jobType, name, err, events)
	}
	if len(events) < 3 {
		t.Errorf("%s: %d events, want one per step: %q", jobType, len(events), events)
	}
	return data.(agentproto.ContainerState)
}

func readLogs(t *testing.T, d *Docker, p agentproto.LogsReadPayload) agentproto.LogsResult {
	t.Helper()
	p.Source = agentproto.LogSourceContainer
	data, events, err := run(t, executor(d, agentproto.JobLogsRead), agentproto.JobLogsRead, p)
	if err != nil {
		t.Fatalf("logs.read %+v: %v (events %q)", p, err, events)
	}
	return data.(agentproto.LogsResult)
}

// seq is the number of a chatter line ("out 7", "err 8"), checking its
// stream and priority.
func seq(t *testing.T, l agentproto.LogLine) int {
	t.Helper()
	kind, num, ok := strings.Cut(l.Message, " ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		t.Fatalf("unexpected line %+v", l)
	}
	switch {
	case kind == "out" && n%2 == 1 && l.Stream == "stdout" && l.Priority == 6:
	case kind == "err" && n%2 == 0 && l.Stream == "stderr" && l.Priority == 3:
	default:
		t.Fatalf("line %+v has the wrong stream or priority", l)
	}
	return n
}

// checkOrder checks that lines are in time order and that each stream's
// lines are consecutive: the last lines of the log hold the last lines of
// each stream (chatter numbers them across streams, odd on stdout, even on
// stderr), but the engine stamps the streams' lines in two readers, so
// their interleaving need not be the program's.
func checkOrder(t *testing.T, lines []agentproto.LogLine) {
	t.Helper()
	last := map[string]int{}
	for i, l := range lines {
		n := seq(t, l)
		if prev, ok := last[l.Stream]; ok && n != prev+2 {
			t.Fatalf("line %d is %q after %d on %s: %v", i, l.Message, prev, l.Stream, lines)
		}
		last[l.Stream] = n
		if i > 0 && l.At.Before(lines[i-1].At) {
			t.Fatalf("line %d goes back in time: %v", i, lines)
		}
	}
}

// logTimeout bounds the wait for a container to log what a test needs.
const logTimeout = time.Minute

// waitLines waits until a container's log has at least n lines.
func waitLines(t *testing.T, d *Docker, name string, n int) {
	t.Helper()
	testlab.EventuallyReport(t, logTimeout, fmt.Sprintf("container %s logs %d lines", name, n), func() (bool, string) {
		data, _, err := run(t, executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 500})
		if err != nil {
			t.Fatal(err)
		}
		got := len(data.(agentproto.LogsResult).Lines)
		return got >= n, fmt.Sprintf("%d lines", got)
	})
}

// waitLogsAfter waits until a container logged a line after t.
func waitLogsAfter(t *testing.T, d *Docker, name string, after time.Time) {
	t.Helper()
	testlab.Eventually(t, logTimeout, fmt.Sprintf("container %s logs a line after %v", name, after), func() bool {
		data, _, err := run(t, executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 1})
		if err != nil {
			t.Fatal(err)
		}
		l := data.(agentproto.LogsResult).Lines
		return len(l) == 1 && l[0].At.After(after)
	})
}

func TestDocker(t *testing.T) {
	cli := testlab.Docker(t)
	image := testlab.ProgramImage(t, cli, testlab.UniqueName("capstan-test-chatter:"), "./testdata/chatter").Ref
	d := &Docker{Host: testlab.DockerHost()}
	t.Cleanup(func() { d.Close() })

	t.Run("StartStopRestart", func(t *testing.T) {
		t.Parallel()
		name := newContainer(t, cli, image, false, "-interval", "100ms")

		st := mustState(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, name)
		if st.Container != name || len(st.ID) != 64 || st.State != "running" || !strings.HasPrefix(st.Status, "Up ") || st.StartedAt.IsZero() {
			t.Fatalf("after start: %+v", st)
		}
		if time.Since(st.StartedAt) > 10*time.Minute || st.StartedAt.Location() != time.UTC {
			t.Errorf("StartedAt = %v", st.StartedAt)
		}
		started := st.StartedAt

		// By id, the state still names the container.
		st = mustState(t, executor(d, agentproto.JobContainerRestart), agentproto.JobContainerRestart, st.ID)
		if st.Container != name || st.State != "running" || !st.StartedAt.After(started) {
			t.Fatalf("after restart: %+v (started before at %v)", st, started)
		}
		// Once it logs, chatter handles SIGTERM (as PID 1 it would
		// otherwise ignore it until the engine kills it).
		waitLogsAfter(t, d, name, st.StartedAt)
		// The engine counts restarts of its restart policy only; a
		// restart asked for resets the count.
		if st.RestartCount != 0 {
			t.Errorf("RestartCount = %d after a manual restart", st.RestartCount)
		}

		st = mustState(t, executor(d, agentproto.JobContainerStop), agentproto.JobContainerStop, name)
		if st.State != "exited" || !strings.HasPrefix(st.Status, "Exited (0)") {
			t.Fatalf("after stop: %+v", st)
		}
		// Stopping a stopped container is no error.
		if st = mustState(t, executor(d, agentproto.JobContainerStop), agentproto.JobContainerStop, name); st.State != "exited" {
			t.Fatalf("after a second stop: %+v", st)
		}
		st = mustState(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, name)
		if st.State != "running" {
			t.Fatalf("after start again: %+v", st)
		}
	})

	t.Run("Logs", func(t *testing.T) {
		t.Parallel()
		name := newContainer(t, cli, image, false, "-interval", "5ms")
		mustState(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, name)
		waitLines(t, d, name, 40)

		data, events, err := run(t, executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 10})
		if err != nil {
			t.Fatal(err)
		}
		res := data.(agentproto.LogsResult)
		if len(res.Lines) != 10 || res.Cursor != "" {
			t.Fatalf("got %d lines (cursor %q), want 10", len(res.Lines), res.Cursor)
		}
		checkOrder(t, res.Lines)
		// How the engine interleaves the two streams depends on when it
		// read each pipe, so the mix of the last 10 lines is not fixed;
		// every line's priority must match its stream (chatter writes
		// "out N" to stdout, "err N" to stderr).
		for _, l := range res.Lines {
			if want := streamPriority(l.Message); l.Priority != want {
				t.Errorf("line %+v: priority %d, want %d", l, l.Priority, want)
			}
			if time.Since(l.At) > 10*time.Minute || l.At.Location() != time.UTC {
				t.Errorf("line %+v: wrong time", l)
			}
		}
		// All lines so far (at least 40, fewer than the 500 asked for
		// only if the program is slow) hold both streams.
		data, _, err = run(t, executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 500})
		if err != nil {
			t.Fatal(err)
		}
		prios := map[int]int{}
		for _, l := range data.(agentproto.LogsResult).Lines {
			prios[l.Priority]++
			if want := streamPriority(l.Message); l.Priority != want {
				t.Errorf("line %+v: priority %d, want %d", l, l.Priority, want)
			}
		}
		if prios[6] == 0 || prios[3] == 0 {
			t.Errorf("priorities %v, want stdout (6) and stderr (3) lines", prios)
		}
		if len(events) < 2 {
			t.Errorf("events %q", events)
		}
		if _, _, err := run(t, executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 501}); err == nil {
			t.Error("lines=501 accepted")
		}
	})

	t.Run("LogsTTY", func(t *testing.T) {
		t.Parallel()
		name := newContainer(t, cli, image, true, "-interval", "5ms")
		mustState(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, name)
		waitLines(t, d, name, 10)
		data, _, err := run(t, executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 6})
		if err != nil {
			t.Fatal(err)
		}
		lines := data.(agentproto.LogsResult).Lines
		if len(lines) != 6 {
			t.Fatalf("got %d lines, want 6", len(lines))
		}
		// With a TTY both streams are one: all stdout, no "\r".
		first, _ := strconv.Atoi(strings.Fields(lines[0].Message)[1])
		for i, l := range lines {
			want := fmt.Sprintf("out %d", first+i)
			if (first+i)%2 == 0 {
				want = fmt.Sprintf("err %d", first+i)
			}
			if l.Message != want || l.Stream != "stdout" || l.Priority != 6 {
				t.Errorf("line %d = %+v, want stdout %q", i, l, want)
			}
		}
	})

	t.Run("ReadCursor", func(t *testing.T) {
		t.Parallel()
		name := newContainer(t, cli, image, false, "-interval", "2ms")
		mustState(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, name)
		waitLines(t, d, name, 20)

		// The newest lines, then everything after them in reads of
		// several sizes while the container keeps logging, then after it
		// stopped: each line once. The engine stamps stdout and stderr
		// lines in two readers, as it reads them: the log's order is not
		// quite the program's, nor quite time order. What counts is the
		// log's order, as the engine serves it.
		seen := map[string]int{}
		add := func(res agentproto.LogsResult) {
			for i, l := range res.Lines {
				seq(t, l)
				seen[l.Message]++
				if i > 0 && l.At.Before(res.Lines[i-1].At) {
					t.Fatalf("a read is not in time order: %v", res.Lines)
				}
			}
		}
		res := readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: 5})
		if len(res.Lines) != 5 || res.Cursor == "" {
			t.Fatalf("first read: %d lines, cursor %q", len(res.Lines), res.Cursor)
		}
		if _, err := ParseCursor(res.Cursor); err != nil {
			t.Fatal(err)
		}
		add(res)
		window := res.Lines
		cursor := res.Cursor
		reads := 1
		for _, n := range []int{1, 7, 3, 500} {
			testlab.Eventually(t, logTimeout, "lines after "+cursor, func() bool {
				res = readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: n, Cursor: cursor})
				if len(res.Lines) > n {
					t.Fatalf("read of %d after %s: %d lines", n, cursor, len(res.Lines))
				}
				if len(res.Lines) == 0 && res.Cursor != cursor {
					t.Fatalf("an empty read moved the cursor from %s to %s", cursor, res.Cursor)
				}
				return len(res.Lines) > 0
			})
			add(res)
			cursor = res.Cursor
			reads++
		}
		mustState(t, executor(d, agentproto.JobContainerStop), agentproto.JobContainerStop, name)
		for {
			res = readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: 50, Cursor: cursor})
			if len(res.Lines) == 0 {
				if res.Cursor != cursor {
					t.Errorf("an empty read moved the cursor from %s to %s", cursor, res.Cursor)
				}
				break
			}
			add(res)
			cursor = res.Cursor
			reads++
		}

		// The whole log in the engine's order: the first read was its
		// last 5 lines then; every line from there on was read once.
		src, err := d.engineLog(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		log, err := lastLines(context.Background(), src, 10000)
		if err != nil {
			t.Fatal(err)
		}
		// The first read is a block of the log's order.
		start := len(log)
		for i, l := range log {
			for _, w := range window {
				if l.Message == w.Message {
					start = min(start, i)
				}
			}
		}
		if start+len(window) > len(log) {
			t.Fatalf("the first read %v is not in the log", window)
		}
		for _, l := range log[start : start+len(window)] {
			if !slices.ContainsFunc(window, func(w agentproto.LogLine) bool { return w.Message == l.Message }) {
				t.Fatalf("the first read %v is not the log's last lines then: %q is among them", window, l.Message)
			}
		}
		for _, l := range log[:start] {
			if seen[l.Message] != 0 {
				t.Errorf("line %q, older than the first read, was read", l.Message)
			}
		}
		for _, l := range log[start:] {
			if seen[l.Message] != 1 {
				t.Errorf("line %q read %d times", l.Message, seen[l.Message])
			}
		}
		if len(seen) != len(log)-start {
			t.Errorf("read %d distinct lines, want %d", len(seen), len(log)-start)
		}
		inverted := 0
		for i := 1; i < len(log); i++ {
			if log[i].At.Before(log[i-1].At) {
				inverted++
			}
		}
		t.Logf("%d reads returned the last %d of %d lines, each once (%d lines of the log stamped before the line ahead of them)",
			reads, len(log)-start, len(log), inverted)
	})

	t.Run("LongLine", func(t *testing.T) {
		t.Parallel()
		// The engine splits a line into entries of 16 KiB, and they all
		// have the line's time: a cursor must count them.
		name := newContainer(t, cli, image, false, "-long", "40000")
		mustState(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, name)
		waitLines(t, d, name, 3)
		all := readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: 10})
		total := 0
		for _, l := range all.Lines {
			if strings.Trim(l.Message, "x") != "" || l.Stream != "stdout" || len(l.Message) > logs.MaxLineBytes {
				t.Fatalf("unexpected line %.40q… (%d bytes)", l.Message, len(l.Message))
			}
			total += len(l.Message)
		}
		if len(all.Lines) != 3 || total != 40000 {
			t.Fatalf("%d lines of %d bytes in all, want the line in 3 pieces", len(all.Lines), total)
		}
		sameTime := all.Lines[0].At.Equal(all.Lines[2].At)
		t.Logf("pieces share their time: %v; cursor after the last: %s", sameTime, all.Cursor)

		last := readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: 1})
		if len(last.Lines) != 1 || last.Cursor != all.Cursor {
			t.Fatalf("the newest line: %d lines, cursor %s, want the cursor %s", len(last.Lines), last.Cursor, all.Cursor)
		}
		c, err := ParseCursor(last.Cursor)
		if err != nil {
			t.Fatal(err)
		}
		if sameTime && c.Stdout.Count != 3 {
			t.Errorf("cursor %s does not count the 3 pieces at its time", last.Cursor)
		}
		res := readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: 10, Cursor: last.Cursor})
		if len(res.Lines) != 0 || res.Cursor != last.Cursor {
			t.Errorf("after the newest line: %d lines, cursor %s", len(res.Lines), res.Cursor)
		}
		// After the first piece: the other two.
		at := all.Lines[0].At
		after1 := Cursor{Stdout: Position{At: at, Count: 1}, Stderr: Position{At: at}}.String()
		res = readLogs(t, d, agentproto.LogsReadPayload{Container: name, Lines: 10, Cursor: after1})
		next, err := ParseCursor(res.Cursor)
		if err != nil || len(res.Lines) != 2 || res.Lines[1].Message != all.Lines[2].Message || next.Stdout != c.Stdout {
			t.Errorf("after the first piece: %d lines, cursor %s (%v), want stdout at %v", len(res.Lines), res.Cursor, err, c.Stdout)
		}
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		name := fmt.Sprintf("capstan-no-such-%d", os.Getpid())
		want := "no such container: " + name
		for _, c := range []struct {
			ex      agent.Executor
			typ     string
			payload any
		}{
			{executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, agentproto.ContainerPayload{Container: name}},
			{executor(d, agentproto.JobContainerStop), agentproto.JobContainerStop, agentproto.ContainerPayload{Container: name}},
			{executor(d, agentproto.JobContainerRestart), agentproto.JobContainerRestart, agentproto.ContainerPayload{Container: name}},
			{executor(d, agentproto.JobContainerLogs), agentproto.JobContainerLogs, agentproto.ContainerLogsPayload{Container: name, Lines: 5}},
			{executor(d, agentproto.JobLogsRead), agentproto.JobLogsRead, agentproto.LogsReadPayload{Source: "container", Container: name, Lines: 5}},
		} {
			data, _, err := run(t, c.ex, c.typ, c.payload)
			if err == nil || err.Error() != want || data != nil {
				t.Errorf("%s: %v, %v; want the error %q", c.typ, data, err, want)
			}
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"", "-rm", "a/b", "web;reboot", "../etc", strings.Repeat("a", 129)} {
			_, _, err := run(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, agentproto.ContainerPayload{Container: name})
			if err == nil || !strings.Contains(err.Error(), "invalid container name") {
				t.Errorf("container %q: %v", name, err)
			}
		}
		p := 3
		_, _, err := run(t, executor(d, agentproto.JobLogsRead), agentproto.JobLogsRead,
			agentproto.LogsReadPayload{Source: "container", Container: "web", Lines: 5, Priority: &p})
		if err == nil || !strings.Contains(err.Error(), "journal logs only") {
			t.Errorf("priority on a container read: %v", err)
		}
		_, _, err = run(t, executor(d, agentproto.JobLogsRead), agentproto.JobLogsRead,
			agentproto.LogsReadPayload{Source: "container", Container: "web", Lines: 5, Cursor: "s=1;i=2"})
		if err == nil || !strings.Contains(err.Error(), "invalid container log cursor") {
			t.Errorf("a journal cursor on a container read: %v", err)
		}
	})
}

func TestDockerUnreachable(t *testing.T) {
	d := &Docker{Host: "unix://" + filepath.Join(t.TempDir(), "nothing.sock")}
	_, _, err := run(t, executor(d, agentproto.JobContainerStart), agentproto.JobContainerStart, agentproto.ContainerPayload{Container: "web"})
	if !client.IsErrConnectionFailed(err) || !strings.Contains(err.Error(), "failed to connect to the docker API at unix://") {
		t.Errorf("err = %v", err)
	}
}

// streamPriority is the priority of a chatter line: 3 (error) for what it
// writes to stderr ("err N"), 6 (info) for stdout ("out N").
func streamPriority(msg string) int {
	if strings.HasPrefix(msg, "err ") {
		return 3
	}
	return 6
}

// executor is the agent's executor of jobType with d's handlers.
func executor(d *Docker, jobType string) agent.Executor {
	r := agent.Registry{}
	d.Register(r)
	logs.Readers{Container: d}.Register(r)
	return r[jobType]
}
