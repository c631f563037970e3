package service

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// echoScript is the test service: numbered lines on stdout, each third
// followed by an error line (priority 3 by its syslog prefix), a line that
// is not UTF-8 (the journal keeps its bytes; journalctl prints them as an
// array), then "done", then it idles.
const echoScript = `#!/bin/sh
sleep 0.3
i=0
while [ "$i" -lt 30 ]; do
	i=$((i + 1))
	echo "line $i"
	if [ $((i % 3)) -eq 0 ]; then
		echo "<3>error $i"
	fi
done
printf 'caf\351 latin1\n'
echo done
exec sleep infinity
`

const (
	echoUnit = "capstan-test-echo.service"
	failUnit = "capstan-test-fail.service"
)

var testFiles = map[string]string{
	"echo.sh": echoScript,
	echoUnit:  "[Unit]\nDescription=Capstan test: a service that logs\n\n[Service]\nExecStart=/bin/sh /opt/capstan-test/echo.sh\n",
	failUnit:  "[Unit]\nDescription=Capstan test: a service that fails\n\n[Service]\nType=oneshot\nExecStart=/bin/false\n",
	// The rule the installer writes (internal/agentapi/install.sh.tmpl).
	"50-capstan-agent.rules": `polkit.addRule(function(action, subject) {
    if (action.id == "org.freedesktop.systemd1.manage-units" &&
        subject.user == "capstan") {
        var verb = action.lookup("verb");
        var unit = action.lookup("unit");
        if ((verb == "start" || verb == "stop" || verb == "restart") &&
            unit && unit.match(/\.service$/)) {
            return polkit.Result.YES;
        }
    }
});
`,
}

// svcHost is a booted systemd host with testdata/svcjob in it: the jobs
// run inside it through svcjob, as the agent's unprivileged account.
type svcHost struct {
	*testlab.Host
}

func startSvcHost(t *testing.T) svcHost {
	testlab.RequireNspawn(t)
	root := testlab.DebianRootfs(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "svcjob"), testlab.GoProgram(t, "./testdata/svcjob"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range testFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	m := testlab.BootHost(t, root, testlab.HostOptions{BindsRO: []string{
		dir + ":/opt/capstan-test",
		filepath.Join(dir, echoUnit) + ":/etc/systemd/system/" + echoUnit,
		filepath.Join(dir, failUnit) + ":/etc/systemd/system/" + failUnit,
		filepath.Join(dir, "50-capstan-agent.rules") + ":/etc/polkit-1/rules.d/50-capstan-agent.rules",
	}})
	t.Logf("host %s booted in %s", m.Name, time.Since(start).Round(time.Millisecond))
	// The agent's account, as the installer makes it.
	m.MustRun(t, "useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "capstan")
	m.MustRun(t, "usermod", "-a", "-G", "systemd-journal", "capstan")
	return svcHost{m}
}

type jobOutcome struct {
	Data   json.RawMessage `json:"data"`
	Error  string          `json:"error"`
	Events []struct {
		Level   string `json:"level"`
		Message string `json:"message"`
	} `json:"events"`
}

// job runs one job in the container as the capstan account.
func (h svcHost) job(t *testing.T, jobType string, payload any) jobOutcome {
	t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(agentproto.Job{ID: "job-test", Type: jobType, Payload: p})
	res := h.Run(t, "setpriv", "--reuid=capstan", "--regid=capstan", "--init-groups",
		"/opt/capstan-test/svcjob", string(j))
	out, errs, code := res.Stdout, res.Stderr, res.ExitCode
	if code != 0 {
		t.Fatalf("svcjob %s: exit %d\n%s%s", j, code, out, errs)
	}
	var o jobOutcome
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("svcjob %s printed %q: %v", j, out, err)
	}
	return o
}

func (h svcHost) unitJob(t *testing.T, jobType, unit string) agentproto.UnitState {
	t.Helper()
	o := h.job(t, jobType, agentproto.ServicePayload{Unit: unit})
	if o.Error != "" {
		t.Fatalf("%s %s: %s", jobType, unit, o.Error)
	}
	if len(o.Events) < 3 {
		t.Errorf("%s %s: events %+v, want one per step", jobType, unit, o.Events)
	}
	var st agentproto.UnitState
	if err := json.Unmarshal(o.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (h svcHost) logs(t *testing.T, jobType string, payload any) agentproto.LogsResult {
	t.Helper()
	o := h.job(t, jobType, payload)
	if o.Error != "" {
		t.Fatalf("%s %+v: %s", jobType, payload, o.Error)
	}
	var res agentproto.LogsResult
	if err := json.Unmarshal(o.Data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func (h svcHost) read(t *testing.T, p agentproto.LogsReadPayload) agentproto.LogsResult {
	t.Helper()
	p.Source = agentproto.LogSourceJournal
	return h.logs(t, agentproto.JobLogsRead, p)
}

// show is a unit property as systemctl shows it.
func (h svcHost) show(t *testing.T, unit, prop string) string {
	return strings.TrimSpace(h.MustRun(t, "systemctl", "show", "-p", prop, "--value", unit))
}

// waitDone waits until the echo service said "done" n times.
func (h svcHost) waitDone(t *testing.T, n int) {
	t.Helper()
	testlab.EventuallyReport(t, time.Minute, fmt.Sprintf("%s says done %d times", echoUnit, n), func() (bool, string) {
		got := 0
		for _, l := range h.logs(t, agentproto.JobServiceLogs, agentproto.ServiceLogsPayload{Unit: echoUnit, Lines: 500}).Lines {
			if l.Message == "done" {
				got++
			}
		}
		return got >= n, fmt.Sprintf("%d times", got)
	})
}

func messages(lines []agentproto.LogLine) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Message
	}
	return out
}

func TestSystemd(t *testing.T) {
	start := time.Now()
	h := startSvcHost(t)

	t.Run("UnknownUnit", func(t *testing.T) {
		const unit = "capstan-no-such.service"
		for _, typ := range []string{agentproto.JobServiceStart, agentproto.JobServiceStop, agentproto.JobServiceRestart} {
			o := h.job(t, typ, agentproto.ServicePayload{Unit: unit})
			if want := "no such unit: " + unit; !strings.HasPrefix(o.Error, want) || string(o.Data) != "null" {
				t.Errorf("%s: error %q, data %s; want the error %q", typ, o.Error, o.Data, want)
			}
		}
		if got := h.show(t, unit, "LoadState") + " " + h.show(t, unit, "ActiveState"); got != "not-found inactive" {
			t.Errorf("%s is %s after the jobs", unit, got)
		}
		if res := h.logs(t, agentproto.JobServiceLogs, agentproto.ServiceLogsPayload{Unit: unit, Lines: 10}); len(res.Lines) != 0 {
			t.Errorf("the journal of %s: %v", unit, res.Lines)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		for _, unit := range []string{"../x.service", "-x.service", "x.socket", "a b.service"} {
			o := h.job(t, agentproto.JobServiceStart, agentproto.ServicePayload{Unit: unit})
			if !strings.Contains(o.Error, "invalid unit name") {
				t.Errorf("unit %q: error %q", unit, o.Error)
			}
		}
		p := 8
		o := h.job(t, agentproto.JobLogsRead, agentproto.LogsReadPayload{Source: "journal", Unit: echoUnit, Lines: 5, Priority: &p})
		if !strings.Contains(o.Error, "invalid priority 8") {
			t.Errorf("priority 8: error %q", o.Error)
		}
		o = h.job(t, agentproto.JobLogsRead, agentproto.LogsReadPayload{Source: "journal", Unit: echoUnit, Lines: 5, Cursor: "s=nonsense"})
		if !strings.Contains(o.Error, "journalctl") {
			t.Errorf("a bad cursor: error %q", o.Error)
		}
	})

	t.Run("Failing", func(t *testing.T) {
		o := h.job(t, agentproto.JobServiceStart, agentproto.ServicePayload{Unit: failUnit})
		var st agentproto.UnitState
		json.Unmarshal(o.Data, &st) //nolint:errcheck
		if !strings.Contains(o.Error, `the systemd job ended "failed"`) || st.ActiveState != "failed" {
			t.Errorf("start of %s: error %q, state %+v", failUnit, o.Error, st)
		}
	})

	t.Run("Lifecycle", func(t *testing.T) {
		if st := h.unitJob(t, agentproto.JobServiceStop, echoUnit); st != (agentproto.UnitState{Unit: echoUnit, LoadState: "loaded", ActiveState: "inactive", SubState: "dead"}) {
			t.Errorf("stop of a stopped unit: %+v", st)
		}
		st := h.unitJob(t, agentproto.JobServiceStart, echoUnit)
		if st != (agentproto.UnitState{Unit: echoUnit, LoadState: "loaded", ActiveState: "active", SubState: "running"}) {
			t.Fatalf("after start: %+v", st)
		}
		pid := h.show(t, echoUnit, "MainPID")
		h.waitDone(t, 1)

		// A cursor after the first run's output.
		first := h.read(t, agentproto.LogsReadPayload{Unit: echoUnit, Lines: 1})
		if len(first.Lines) != 1 || first.Lines[0].Message != "done" || first.Cursor == "" {
			t.Fatalf("the newest line: %+v", first)
		}

		st = h.unitJob(t, agentproto.JobServiceRestart, echoUnit)
		if st.ActiveState != "active" || st.SubState != "running" {
			t.Fatalf("after restart: %+v", st)
		}
		if again := h.show(t, echoUnit, "MainPID"); again == pid || again == "0" {
			t.Errorf("MainPID %s after restart, %s before", again, pid)
		}
		h.waitDone(t, 2)

		// service.logs: the last lines, with their priorities; the line
		// that is not UTF-8 came as bytes.
		last := h.logs(t, agentproto.JobServiceLogs, agentproto.ServiceLogsPayload{Unit: echoUnit, Lines: 5})
		wantMsgs := []string{"line 29", "line 30", "error 30", "caf\uFFFD latin1", "done"}
		wantPrios := []int{6, 6, 3, 6, 6}
		if !slices.Equal(messages(last.Lines), wantMsgs) || last.Cursor != "" {
			t.Fatalf("service.logs 5: %q (cursor %q), want %q", messages(last.Lines), last.Cursor, wantMsgs)
		}
		for i, l := range last.Lines {
			if l.Priority != wantPrios[i] || l.Stream != "" || time.Since(l.At) > 10*time.Minute || l.At.Location() != time.UTC {
				t.Errorf("line %d: %+v, want priority %d", i, l, wantPrios[i])
			}
		}

		// Everything after the first run, in reads of 7 lines: exactly
		// the newest lines of the journal, nothing twice, nothing missed.
		all := h.read(t, agentproto.LogsReadPayload{Unit: echoUnit, Lines: 500})
		var chained []agentproto.LogLine
		cursor := first.Cursor
		for range 100 {
			res := h.read(t, agentproto.LogsReadPayload{Unit: echoUnit, Lines: 7, Cursor: cursor})
			if len(res.Lines) > 7 {
				t.Fatalf("asked 7 lines, got %d", len(res.Lines))
			}
			if len(res.Lines) == 0 {
				if res.Cursor != cursor {
					t.Errorf("an empty read moved the cursor from %s to %s", cursor, res.Cursor)
				}
				break
			}
			chained = append(chained, res.Lines...)
			cursor = res.Cursor
		}
		n := len(chained)
		if n < 42 || n >= len(all.Lines) {
			t.Fatalf("the reads after the first run returned %d lines, the journal has %d", n, len(all.Lines))
		}
		if !slices.Equal(chained, all.Lines[len(all.Lines)-n:]) {
			t.Fatalf("the reads after the cursor:\n%q\nthe journal's newest lines:\n%q", messages(chained), messages(all.Lines[len(all.Lines)-n:]))
		}
		if before := all.Lines[len(all.Lines)-n-1]; before != first.Lines[0] {
			t.Errorf("the line before those read is %+v, not the cursor's %+v", before, first.Lines[0])
		}
		if all.Cursor != cursor {
			t.Errorf("the newest read's cursor %s, the last chained read's %s", all.Cursor, cursor)
		}

		// Priority 3 or more urgent, after the cursor in reads of 4: the
		// second run's errors.
		var errs []agentproto.LogLine
		cursor = first.Cursor
		for range 100 {
			p := 3
			res := h.read(t, agentproto.LogsReadPayload{Unit: echoUnit, Lines: 4, Cursor: cursor, Priority: &p})
			if len(res.Lines) == 0 {
				break
			}
			errs = append(errs, res.Lines...)
			cursor = res.Cursor
		}
		var want []string
		for i := 3; i <= 30; i += 3 {
			want = append(want, fmt.Sprintf("error %d", i))
		}
		if !slices.Equal(messages(errs), want) {
			t.Errorf("errors after the cursor: %q, want %q", messages(errs), want)
		}
		p := 3
		for _, l := range h.read(t, agentproto.LogsReadPayload{Unit: echoUnit, Lines: 500, Priority: &p}).Lines {
			if l.Priority > 3 {
				t.Errorf("priority filter 3 let %+v through", l)
			}
		}

		if st := h.unitJob(t, agentproto.JobServiceStop, echoUnit); st.ActiveState != "inactive" || st.SubState != "dead" {
			t.Errorf("after stop: %+v", st)
		}
	})
	t.Logf("booted and tested in %s", time.Since(start).Round(time.Millisecond))
}
