package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestHostWorkContainers runs a real agent on this host against the real
// Docker engine: a FROM-scratch container that prints numbered lines is
// stopped, started, restarted and read through the API, and its log is
// read in two parts joined by a cursor.
func TestHostWorkContainers(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	cli := hwRequireDocker(t)
	image := hwBuildChatterImage(t, cli)
	name := hwRunContainer(t, cli, image, "-interval", "50ms")
	t.Logf("image built and container %s started after %s", name, time.Since(begin).Round(time.Millisecond))

	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "docker-host-1")
	id := e.Server.ID
	config := enrollAgent(t, f.ControlPlane, e.Token)
	env := testlab.DockerEnv()
	agent := hwStartAgent(t, config, env...)
	t.Logf("control plane up, agent enrolled and started after %s", time.Since(begin).Round(time.Millisecond))
	parse := hwChatterLine(t)

	// The agent posts its inventory at start: the container is readable.
	var src hwLogSources
	waitFor(t, hwJobTimeout, "GET /api/v1/logs/sources lists container "+name, func() (bool, string) {
		src = f.hwLogSources(t, id)
		return slices.ContainsFunc(src.Containers, func(c hwLogContainer) bool { return c.Name == name }), fmt.Sprintf("%+v", src)
	})
	var listed []string
	for _, c := range src.Containers {
		if c.Name == name {
			listed = append(listed, c.Name)
			if len(c.ID) != 64 || c.State != "running" || c.Image == "" {
				t.Errorf("logs sources: container %+v, want its 64-character id, state running and its image", c)
			}
		}
	}
	if len(listed) != 1 {
		t.Errorf("logs sources list %s %d times: %+v", name, len(listed), src.Containers)
	}
	if src.ServerID != id || !slices.Contains(src.Sources, "container") || src.CollectedAt == nil {
		t.Errorf("logs sources: %+v", src)
	}
	t.Logf("inventory listed the container after %s", time.Since(begin).Round(time.Millisecond))

	// A read of the newest lines, then a read after its cursor once the
	// program printed more: every line once, none missing.
	// How many lines the program printed by now depends on how fast this
	// machine is: read until it printed 10.
	var read1 hwLogRead
	waitFor(t, hwJobTimeout, "a read of the newest 10 lines returns 10", func() (bool, string) {
		read1 = f.hwReadLogs(t, map[string]any{"server_id": id, "source": "container", "container": name, "lines": 10})
		if len(read1.Lines) > 10 {
			t.Fatalf("a read of 10 lines returned %d", len(read1.Lines))
		}
		return len(read1.Lines) == 10, fmt.Sprintf("%d lines", len(read1.Lines))
	})
	if read1.Cursor == "" {
		t.Fatalf("first read: %d lines and no cursor", len(read1.Lines))
	}
	for _, l := range read1.Lines {
		parse(l)
	}
	var read2 hwLogRead
	waitFor(t, hwJobTimeout, "reads after the cursor "+read1.Cursor+" find 4 lines", func() (bool, string) {
		read2 = f.hwReadLogs(t, map[string]any{"server_id": id, "source": "container", "container": name, "lines": 100,
			"cursor": read1.Cursor})
		if len(read2.Lines) == 0 && read2.Cursor != read1.Cursor {
			t.Errorf("an empty read moved the cursor from %q to %q", read1.Cursor, read2.Cursor)
		}
		return len(read2.Lines) >= 4, fmt.Sprintf("%d lines", len(read2.Lines))
	})
	if n := hwContinues(t, read1.Lines, read2.Lines, 2, parse); n != len(read2.Lines) {
		t.Errorf("second read: %d of its %d lines are the program's", n, len(read2.Lines))
	}
	if read2.Cursor == "" || read2.Cursor == read1.Cursor {
		t.Errorf("second read's cursor %q, want a new one (first %q)", read2.Cursor, read1.Cursor)
	}
	t.Logf("reads joined by a cursor: %d + %d lines", len(read1.Lines), len(read2.Lines))

	// container.logs: the last 5 lines, stdout at priority 6, stderr at 3.
	logs := hwData[agentproto.LogsResult](t, f.hwRun(t, id, agentproto.JobContainerLogs,
		map[string]any{"container": name, "lines": 5}, "succeeded"))
	prios := map[int]int{}
	for _, l := range logs.Lines {
		parse(l)
		prios[l.Priority]++
	}
	if len(logs.Lines) != 5 || prios[6] == 0 || prios[3] == 0 {
		t.Errorf("container.logs lines 5: %d lines, priorities %v; want 5 lines of priorities 6 and 3", len(logs.Lines), prios)
	}

	// stop, start, restart: the job's result and the engine agree.
	st := hwData[agentproto.ContainerState](t, f.hwRun(t, id, agentproto.JobContainerStop,
		map[string]any{"container": name}, "succeeded"))
	if engine, _ := hwContainerState(t, cli, name); st.State != "exited" || st.Container != name || engine != "exited" {
		t.Fatalf("container.stop: data %+v, engine says %q; want exited", st, engine)
	}
	st = hwData[agentproto.ContainerState](t, f.hwRun(t, id, agentproto.JobContainerStart,
		map[string]any{"container": name}, "succeeded"))
	engine, engineStarted := hwContainerState(t, cli, name)
	if st.State != "running" || engine != "running" || st.StartedAt.IsZero() || !st.StartedAt.Equal(engineStarted) {
		t.Fatalf("container.start: data %+v, engine says %q since %v; want running", st, engine, engineStarted)
	}
	started := st.StartedAt
	st = hwData[agentproto.ContainerState](t, f.hwRun(t, id, agentproto.JobContainerRestart,
		map[string]any{"container": name}, "succeeded"))
	engine, engineStarted = hwContainerState(t, cli, name)
	if st.State != "running" || engine != "running" || !st.StartedAt.After(started) || !st.StartedAt.Equal(engineStarted) {
		t.Fatalf("container.restart: data %+v, engine says %q since %v; want running, started after %v", st, engine, engineStarted, started)
	}

	// A container that does not exist fails its job, naming it; the agent
	// carries on.
	missing := fmt.Sprintf("capstan-e2e-no-such-%d", os.Getpid())
	for _, typ := range []string{agentproto.JobContainerRestart, agentproto.JobContainerLogs} {
		j := f.hwRun(t, id, typ, map[string]any{"container": missing}, "failed")
		if !strings.Contains(deref(j.Error), missing) {
			t.Errorf("%s of a missing container: error %q, want one naming %s", typ, deref(j.Error), missing)
		}
	}
	if !agent.Running() {
		t.Fatalf("the agent exited after a failed job:\n%s", agent.Logs())
	}
	logs = hwData[agentproto.LogsResult](t, f.hwRun(t, id, agentproto.JobContainerLogs,
		map[string]any{"container": name, "lines": 2}, "succeeded"))
	if len(logs.Lines) != 2 {
		t.Errorf("container.logs after the failed jobs: %d lines, want 2", len(logs.Lines))
	}
	t.Logf("done after %s", time.Since(begin).Round(time.Millisecond))
}

// TestHostWorkLogsValidation: invalid log reads and log actions are refused
// with a field error, and queue no job.
func TestHostWorkLogsValidation(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "logs-1")
	f.enrollHTTP(t, e.Token)
	id := e.Server.ID

	// Valid reads are queued (no agent runs: they stay queued); absent
	// lines means the default.
	r := f.Post(t, "/api/v1/logs", f.Token, map[string]any{"server_id": id, "source": "journal", "unit": "nginx.service"})
	var a struct {
		Job struct {
			Payload agentproto.LogsReadPayload `json:"payload"`
		} `json:"job"`
	}
	expectJSON(t, r, http.StatusAccepted, &a)
	if got, want := a.Job.Payload.Lines, 200; got != want {
		t.Errorf("no lines: queued with lines %d, want the default %d", got, want)
	}
	r = f.Post(t, "/api/v1/logs", f.Token, map[string]any{"server_id": id, "source": "container", "container": "web_1.x", "lines": 1000})
	expectStatus(t, r, http.StatusAccepted)
	jobs := f.hwJobCount(t, id)
	if jobs != 2 {
		t.Fatalf("jobs of the server after two reads: %d", jobs)
	}
	allJobs := len(f.listJobs(t, "?limit=100"))

	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"unknown source", map[string]any{"source": "syslog", "unit": "nginx.service"}, "source"},
		{"lines 0", map[string]any{"source": "journal", "unit": "nginx.service", "lines": 0}, "lines"},
		{"lines -1", map[string]any{"source": "journal", "unit": "nginx.service", "lines": -1}, "lines"},
		{"lines 1001", map[string]any{"source": "container", "container": "web", "lines": 1001}, "lines"},
		{"unit a;b.service", map[string]any{"source": "journal", "unit": "a;b.service"}, "unit"},
		{"unit $(x).service", map[string]any{"source": "journal", "unit": "$(x).service"}, "unit"},
		{"unit ../x.service", map[string]any{"source": "journal", "unit": "../x.service"}, "unit"},
		{"unit a/b.service", map[string]any{"source": "journal", "unit": "a/b.service"}, "unit"},
		{"unit without .service", map[string]any{"source": "journal", "unit": "nginx"}, "unit"},
		{"container 'bad name'", map[string]any{"source": "container", "container": "bad name"}, "container"},
		{"container a/b", map[string]any{"source": "container", "container": "a/b"}, "container"},
		{"container -x", map[string]any{"source": "container", "container": "-x"}, "container"},
		{"priority 8", map[string]any{"source": "journal", "unit": "nginx.service", "priority": 8}, "priority"},
		{"priority -1", map[string]any{"source": "journal", "unit": "nginx.service", "priority": -1}, "priority"},
		{"priority on a container read", map[string]any{"source": "container", "container": "web", "priority": 3}, "priority"},
		{"unit on a container read", map[string]any{"source": "container", "container": "web", "unit": "nginx.service"}, "unit"},
		{"container on a journal read", map[string]any{"source": "journal", "unit": "nginx.service", "container": "web"}, "container"},
		{"cursor of 513 characters", map[string]any{"source": "journal", "unit": "nginx.service", "cursor": strings.Repeat("c", 513)}, "cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.body["server_id"] = id
			r := f.Post(t, "/api/v1/logs", f.Token, tc.body)
			p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if fields := problemFields(p); !slices.Contains(fields, tc.field) {
				t.Errorf("errors: got fields %q, want %q; body %s", fields, tc.field, r.Body)
			}
			if got := f.hwJobCount(t, id); got != jobs {
				t.Errorf("jobs of the server: %d, want %d (the invalid read queued one)", got, jobs)
			}
		})
	}

	t.Run("server that does not exist", func(t *testing.T) {
		r := f.Post(t, "/api/v1/logs", f.Token, map[string]any{"server_id": "srv_nonexistent", "source": "journal", "unit": "nginx.service"})
		p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
		if fields := problemFields(p); !slices.Equal(fields, []string{"server_id"}) {
			t.Errorf("errors: got fields %q, want [server_id]; body %s", fields, r.Body)
		}
	})

	for _, tc := range []struct {
		name    string
		typ     string
		payload map[string]any
	}{
		{"service.logs lines 0", agentproto.JobServiceLogs, map[string]any{"unit": "nginx.service", "lines": 0}},
		{"service.logs lines 501", agentproto.JobServiceLogs, map[string]any{"unit": "nginx.service", "lines": 501}},
		{"container.logs lines 501", agentproto.JobContainerLogs, map[string]any{"container": "web", "lines": 501}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.action(t, id, map[string]any{"type": tc.typ, "payload": tc.payload})
			p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			if fields := problemFields(p); !slices.Equal(fields, []string{"payload.lines"}) {
				t.Errorf("errors: got fields %q, want [payload.lines]; body %s", fields, r.Body)
			}
			if got := f.hwJobCount(t, id); got != jobs {
				t.Errorf("jobs of the server: %d, want %d (the invalid action queued one)", got, jobs)
			}
		})
	}
	if got := len(f.listJobs(t, "?limit=100")); got != allJobs {
		t.Errorf("jobs of all servers: %d, want %d", got, allJobs)
	}

	// Only log reads are found under /api/v1/logs; sources need a server.
	ping := f.ping(t, id, "not a log read")
	for _, path := range []string{"/api/v1/logs/job_unknown", "/api/v1/logs/" + ping, "/api/v1/logs/sources?server_id=srv_unknown"} {
		expectProblem(t, f.Get(t, path, f.Token), http.StatusNotFound, "not-found")
	}
	// Before the agent reported an inventory, nothing is listed.
	src := f.hwLogSources(t, id)
	if len(src.Units) != 0 || len(src.Containers) != 0 || src.CollectedAt != nil {
		t.Errorf("logs sources without an inventory: %+v", src)
	}
}

// hwDemoScript is the program of the test unit: numbered lines on stdout,
// every third at priority err through the "<3>" prefix that journald
// reads (SyslogLevelPrefix=yes, the default), each with its process id.
const hwDemoScript = `#!/bin/sh
i=0
while :; do
	i=$((i + 1))
	if [ $((i % 3)) -eq 0 ]; then
		echo "<3>demo $$ $i err"
	else
		echo "demo $$ $i info"
	fi
	sleep 0.1
done
`

// hwDemoLine parses a line of the demo unit ("demo PID N info|err"); lines
// that are not its own (systemd's about the unit) are not. It fails the
// test if a demo line has the wrong priority.
func hwDemoLine(t testing.TB) func(agentproto.LogLine) (hwSeq, bool) {
	return func(l agentproto.LogLine) (hwSeq, bool) {
		t.Helper()
		f := strings.Fields(l.Message)
		if len(f) != 4 || f[0] != "demo" {
			return hwSeq{}, false
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("not a line of the demo: %+v", l)
		}
		switch {
		case f[3] == "err" && n%3 == 0 && l.Priority == 3:
		case f[3] == "info" && n%3 != 0 && l.Priority == 6:
		default:
			t.Fatalf("demo line %+v: wrong priority (want 3 for err, 6 for info)", l)
		}
		return hwSeq{run: f[1], n: n}, true
	}
}

// hostWorkServices drives a test unit on a booted systemd host whose agent
// (installed by the installer, running as the unprivileged capstan account
// with the installer's polkit rule) is online: service.stop, start and
// restart, service.logs, and journal reads by priority and by cursor.
func hostWorkServices(t *testing.T, cp *ControlPlane, token, serverID string, c *Container) {
	begin := time.Now()
	f := &Fleet{ControlPlane: cp, Token: token}
	const unit = "capstan-demo.service"
	c.MustExec(t, "cat >/usr/local/bin/capstan-demo <<'EOF'\n"+hwDemoScript+"EOF\n"+`chmod 755 /usr/local/bin/capstan-demo
cat >/etc/systemd/system/capstan-demo.service <<'EOF'
[Unit]
Description=Capstan e2e demo: numbered lines, every third of priority err

[Service]
ExecStart=/usr/local/bin/capstan-demo
EOF
systemctl daemon-reload && systemctl start capstan-demo.service`)
	agentPID := c.Show(t, "capstan-agent", "MainPID")["MainPID"]

	state := func(typ, wantActive string) agentproto.UnitState {
		t.Helper()
		st := hwData[agentproto.UnitState](t, f.hwRun(t, serverID, typ, map[string]any{"unit": unit}, "succeeded"))
		got := c.Show(t, unit, "ActiveState", "MainPID")
		if st.Unit != unit || st.LoadState != "loaded" || st.ActiveState != wantActive || got["ActiveState"] != wantActive {
			t.Fatalf("%s: data %+v, systemd says %v; want active_state %q", typ, st, got, wantActive)
		}
		return st
	}
	state(agentproto.JobServiceStop, "inactive")
	state(agentproto.JobServiceStart, "active")
	pid := c.Show(t, unit, "MainPID")["MainPID"]
	state(agentproto.JobServiceRestart, "active")
	if again := c.Show(t, unit, "MainPID")["MainPID"]; again == pid || again == "0" {
		t.Errorf("service.restart: MainPID %s, before %s; want a new process", again, pid)
	}
	t.Logf("stop, start, restart took %s", time.Since(begin).Round(time.Millisecond))

	parse := hwDemoLine(t)
	logs := hwData[agentproto.LogsResult](t, f.hwRun(t, serverID, agentproto.JobServiceLogs,
		map[string]any{"unit": unit, "lines": 5}, "succeeded"))
	if len(logs.Lines) != 5 {
		t.Errorf("service.logs lines 5: %d lines: %v", len(logs.Lines), logs.Lines)
	}
	for i, l := range logs.Lines {
		parse(l)
		if i > 0 && l.At.Before(logs.Lines[i-1].At) {
			t.Errorf("service.logs: lines not oldest first: %v", logs.Lines)
		}
	}

	// Priority 3: the err lines only (at least two of them, once logged).
	journal := map[string]any{"server_id": serverID, "source": "journal", "unit": unit}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range journal {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	var errs hwLogRead
	waitFor(t, hwJobTimeout, "a read of priority 3 finds 2 lines", func() (bool, string) {
		errs = f.hwReadLogs(t, with(map[string]any{"priority": 3, "lines": 50}))
		return len(errs.Lines) >= 2, fmt.Sprintf("%d lines", len(errs.Lines))
	})
	for _, l := range errs.Lines {
		if s, ok := parse(l); !ok || !strings.HasSuffix(l.Message, " err") || l.Priority != 3 {
			t.Errorf("a read of priority 3 returned %+v (%v)", l, s)
		}
	}

	// The newest lines, then the lines after their cursor once the unit
	// logged more: each once, none missing.
	var read1 hwLogRead
	waitFor(t, hwJobTimeout, "a read of the newest 10 lines returns 10", func() (bool, string) {
		read1 = f.hwReadLogs(t, with(map[string]any{"lines": 10}))
		return len(read1.Lines) == 10, fmt.Sprintf("%d lines", len(read1.Lines))
	})
	if read1.Cursor == "" {
		t.Fatalf("first read: %d lines and no cursor", len(read1.Lines))
	}
	var read2 hwLogRead
	waitFor(t, hwJobTimeout, "reads after the cursor find 3 lines", func() (bool, string) {
		read2 = f.hwReadLogs(t, with(map[string]any{"lines": 100, "cursor": read1.Cursor}))
		if len(read2.Lines) == 0 && read2.Cursor != read1.Cursor {
			t.Errorf("an empty read moved the cursor from %q to %q", read1.Cursor, read2.Cursor)
		}
		return len(read2.Lines) >= 3, fmt.Sprintf("%d lines", len(read2.Lines))
	})
	if n := hwContinues(t, read1.Lines, read2.Lines, 1, parse); n < 3 {
		t.Errorf("the read after the cursor holds %d lines of the demo, want 3: %v", n, read2.Lines)
	}
	if read2.Cursor == "" || read2.Cursor == read1.Cursor {
		t.Errorf("second read's cursor %q, want a new one (first %q)", read2.Cursor, read1.Cursor)
	}

	// A unit that does not exist fails its job, naming it; the agent
	// carries on.
	const missing = "capstan-no-such-unit.service"
	j := f.hwRun(t, serverID, agentproto.JobServiceRestart, map[string]any{"unit": missing}, "failed")
	if msg := deref(j.Error); !strings.Contains(msg, "no such unit") || !strings.Contains(msg, missing) {
		t.Errorf("service.restart of a missing unit: error %q, want \"no such unit\" naming %s", msg, missing)
	}
	if got := c.Show(t, "capstan-agent", "ActiveState", "MainPID"); got["ActiveState"] != "active" || got["MainPID"] != agentPID {
		t.Fatalf("capstan-agent after the failed job: %v, want active with MainPID %s", got, agentPID)
	}
	state(agentproto.JobServiceStop, "inactive")
	t.Logf("service work done in %s", time.Since(begin).Round(time.Millisecond))
}

// TestHostWorkInventoryFollowsDocker: the agent follows the engine's
// events, so a container started and removed outside Capstan shows in
// (and leaves) the server's inventory within seconds, not at the next
// 30 s check; while it runs, the server's container metrics show its
// memory and CPU.
func TestHostWorkInventoryFollowsDocker(t *testing.T) {
	t.Parallel()
	cli := hwRequireDocker(t)
	image := hwBuildChatterImage(t, cli)
	f := newFleet(t, Options{})
	e := f.createEnrollment(t, "docker-events-1")
	id := e.Server.ID
	config := enrollAgent(t, f.ControlPlane, e.Token)
	env := testlab.DockerEnv()
	agent := hwStartAgent(t, config, env...)
	waitFor(t, hwJobTimeout, "the first inventory", func() (bool, string) {
		src := f.hwLogSources(t, id)
		return src.CollectedAt != nil, fmt.Sprintf("%+v", src)
	})
	listed := func(name string) bool {
		return slices.ContainsFunc(f.hwLogSources(t, id).Containers, func(c hwLogContainer) bool { return c.Name == name })
	}

	began := time.Now()
	name := hwRunContainer(t, cli, image, "-interval", "1s")
	waitFor(t, 10*time.Second, "the inventory lists container "+name, func() (bool, string) { return listed(name), "" })
	t.Logf("a container started outside Capstan was in the inventory after %s", time.Since(began).Round(time.Millisecond))

	// The metric samples carry its CPU, memory and network, served with
	// the server.
	waitFor(t, 90*time.Second, "the server's container metrics list "+name, func() (bool, string) {
		var d struct {
			ContainerMetrics *struct {
				Containers []agentproto.ContainerSample `json:"containers"`
			} `json:"container_metrics"`
		}
		expectJSON(t, f.Get(t, "/api/v1/servers/"+id, f.Token), http.StatusOK, &d)
		if d.ContainerMetrics == nil {
			return false, "no container metrics"
		}
		for _, c := range d.ContainerMetrics.Containers {
			if c.Name == name {
				if c.MemoryUsed == 0 || c.MemoryLimit < c.MemoryUsed || c.CPUPercent < 0 || c.CPUPercent > 100 {
					t.Fatalf("container metrics %+v", c)
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", d.ContainerMetrics.Containers)
	})

	began = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the inventory no longer lists "+name, func() (bool, string) { return !listed(name), "" })
	t.Logf("its removal was in the inventory after %s", time.Since(began).Round(time.Millisecond))
	if !agent.Running() {
		t.Fatalf("the agent exited:\n%s", agent.Logs())
	}
}
