package e2e

// Harness of the host-work tests (hostwork_test.go): jobs and log reads
// through the API, a FROM-scratch image of a program that prints numbered
// lines, built and run through the Docker Engine API, and the checks that
// two log reads joined by a cursor neither repeat nor skip a line.

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// hwJobTimeout bounds the wait for one host job (a container stop takes up
// to its stop timeout; a systemd job a moment).
const hwJobTimeout = 90 * time.Second

// hwFinished waits until a job is succeeded, failed or cancelled and
// returns it.
func (f *Fleet) hwFinished(t testing.TB, id string) JobInfo {
	t.Helper()
	var j JobInfo
	testlab.EventuallyReport(t, hwJobTimeout, "job "+id+" finishes", func() (bool, string) {
		j = f.job(t, id)
		switch j.Status {
		case "succeeded", "failed", "cancelled":
			return true, ""
		}
		return false, j.Type + " " + j.Status
	})
	return j
}

// hwRun queues an action, waits for it to finish and fails the test unless
// it ended with status want. It returns the finished job.
func (f *Fleet) hwRun(t testing.TB, serverID, typ string, payload any, want string) JobInfo {
	t.Helper()
	r := f.action(t, serverID, map[string]any{"type": typ, "payload": payload})
	expectStatus(t, r, http.StatusAccepted)
	var a Accepted
	r.JSON(t, &a)
	j := f.hwFinished(t, a.JobID)
	if j.Status != want {
		t.Fatalf("%s %s: job %s ended %s (error %q), want %s; data %s", typ, payloadText(payload), j.ID, j.Status,
			deref(j.Error), want, j.Data)
	}
	return j
}

func payloadText(p any) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// hwData decodes a job's data.
func hwData[T any](t testing.TB, j JobInfo) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(j.Data, &v); err != nil {
		t.Fatalf("job %s (%s): data is not a %T: %v\n%s", j.ID, j.Type, v, err, j.Data)
	}
	return v
}

// hwLogRead is GET /api/v1/logs/{job_id}.
type hwLogRead struct {
	JobID  string               `json:"job_id"`
	Status string               `json:"status"`
	Error  *string              `json:"error"`
	Lines  []agentproto.LogLine `json:"lines"`
	Cursor string               `json:"cursor"`
}

// hwReadLogs posts a read (POST /api/v1/logs, which must answer 202 with a
// Location), polls its Location until the read finished, and fails the test
// unless it succeeded.
func (f *Fleet) hwReadLogs(t testing.TB, body map[string]any) hwLogRead {
	t.Helper()
	r := f.Post(t, "/api/v1/logs", f.Token, body)
	var a Accepted
	expectJSON(t, r, http.StatusAccepted, &a)
	if a.JobID == "" || a.Job.Type != agentproto.JobLogsRead {
		t.Fatalf("POST /api/v1/logs: unexpected body %s", r.Body)
	}
	loc := r.Header.Get("Location")
	if want := "/api/v1/logs/" + a.JobID; loc != want {
		t.Fatalf("POST /api/v1/logs: Location %q, want %q", loc, want)
	}
	var res hwLogRead
	testlab.EventuallyReport(t, hwJobTimeout, "log read "+a.JobID+" finishes", func() (bool, string) {
		r := f.Get(t, loc, f.Token)
		expectStatus(t, r, http.StatusOK)
		res = hwLogRead{}
		r.JSON(t, &res)
		switch res.Status {
		case "succeeded":
			if res.JobID != a.JobID || res.Lines == nil {
				t.Fatalf("GET %s: unexpected body %s", loc, r.Body)
			}
			return true, ""
		case "failed", "cancelled":
			t.Fatalf("log read %s (%s) ended %s: %s", a.JobID, payloadText(body), res.Status, deref(res.Error))
		}
		return false, res.Status
	})
	return res
}

// hwJobCount is how many jobs GET /api/v1/jobs lists for a server (at
// most 100).
func (f *Fleet) hwJobCount(t testing.TB, serverID string) int {
	t.Helper()
	return len(f.listJobs(t, "?limit=100&server_id="+serverID))
}

// hwSeq is a numbered line of a test program: its run (a process), its
// stream and its number.
type hwSeq struct {
	run    string
	stream string
	n      int
}

// hwContinues checks that second, read with the cursor of first, holds
// only lines that came after first, and that first and second together
// hold each line of the program once and none is missing in between: in
// each run and stream, the numbers follow one another by step. Lines for
// which parse says false (not the program's) are ignored. It returns how
// many program lines second holds.
func hwContinues(t testing.TB, first, second []agentproto.LogLine, step int, parse func(agentproto.LogLine) (hwSeq, bool)) int {
	t.Helper()
	type group struct{ run, stream string }
	seen := map[hwSeq]int{}
	nums := map[group][]int{}
	lastFirst := map[group]int{}
	newLines := 0
	for i, read := range [][]agentproto.LogLine{first, second} {
		for _, l := range read {
			s, ok := parse(l)
			if !ok {
				continue
			}
			if seen[s]++; seen[s] > 1 {
				t.Errorf("line %q was read twice (reads:\nfirst %v\nsecond %v)", l.Message, first, second)
			}
			g := group{s.run, s.stream}
			if i == 0 {
				lastFirst[g] = max(lastFirst[g], s.n)
			} else {
				newLines++
				if last, ok := lastFirst[g]; ok && s.n <= last {
					t.Errorf("the read after the cursor holds %q, not newer than the first read's %d", l.Message, last)
				}
			}
			nums[g] = append(nums[g], s.n)
		}
	}
	for g, ns := range nums {
		slices.Sort(ns)
		for i := 1; i < len(ns); i++ {
			if ns[i] != ns[i-1]+step {
				t.Errorf("run %s, %s: line %d follows line %d (a gap or a repeat; want steps of %d): %v",
					g.run, g.stream, ns[i], ns[i-1], step, ns)
			}
		}
	}
	return newLines
}

// hwChatterLine parses a line of the chatter program ("out RUN N" on
// stdout at priority 6, "err RUN N" on stderr at priority 3), failing the
// test if its stream or priority is wrong.
func hwChatterLine(t testing.TB) func(agentproto.LogLine) (hwSeq, bool) {
	return func(l agentproto.LogLine) (hwSeq, bool) {
		t.Helper()
		f := strings.Fields(l.Message)
		if len(f) != 3 {
			t.Fatalf("not a line of the program: %+v", l)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("not a line of the program: %+v", l)
		}
		switch {
		case f[0] == "out" && n%2 == 1 && l.Stream == "stdout" && l.Priority == 6:
		case f[0] == "err" && n%2 == 0 && l.Stream == "stderr" && l.Priority == 3:
		default:
			t.Fatalf("line %+v: wrong stream or priority (want stdout/6 for out, stderr/3 for err)", l)
		}
		return hwSeq{run: f[1], stream: l.Stream, n: n}, true
	}
}

// hwRequireDocker returns a client of the engine under test. Without one
// the test is skipped, or fails when CI=true.
func hwRequireDocker(t *testing.T) *client.Client {
	t.Helper()
	return testlab.Docker(t)
}

// hwBuildChatterImage builds an image of testdata/chatter FROM scratch
// (see testlab.ProgramImage); the image is removed when the test ends.
func hwBuildChatterImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	return testlab.ProgramImage(t, cli, testlab.UniqueName("capstan-e2e-chatter:"), "testdata/chatter").Ref
}

// hwRunContainer creates and starts a container of image with args: no
// network (nothing published), the json-file log driver, a 2 s stop
// timeout. It is removed when the test ends; it returns its name.
func hwRunContainer(t *testing.T, cli *client.Client, image string, args ...string) string {
	t.Helper()
	stop := 2
	name := testlab.CreateContainer(t, cli, client.ContainerCreateOptions{
		Name:   testlab.UniqueName("capstan-e2e-hw-"),
		Config: &container.Config{Image: image, Cmd: args, StopTimeout: &stop, Labels: map[string]string{"dev.capstan.e2e": "hostwork"}},
		HostConfig: &container.HostConfig{
			NetworkMode: "none",
			LogConfig:   container.LogConfig{Type: "json-file"},
		},
	})
	testlab.StartContainer(t, cli, name)
	return name
}

// hwContainerState inspects a container through the Engine API: its
// state ("running", "exited"…) and when it last started.
func hwContainerState(t *testing.T, cli *client.Client, name string) (string, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspecting container %s: %v", name, err)
	}
	st := res.Container.State
	if st == nil {
		t.Fatalf("container %s: the engine reports no state", name)
	}
	started, _ := time.Parse(time.RFC3339Nano, st.StartedAt)
	return string(st.Status), started
}

// hwStartAgent is startAgent with extra environment variables (such as
// DOCKER_HOST for the engine under test).
func hwStartAgent(t testing.TB, config string, env ...string) *AgentProcess {
	t.Helper()
	return startAgentWith(t, config, env)
}

// hwLogSources is GET /api/v1/logs/sources.
type hwLogSources struct {
	ServerID string   `json:"server_id"`
	Sources  []string `json:"sources"`
	Units    []struct {
		Name        string `json:"name"`
		ActiveState string `json:"active_state"`
	} `json:"units"`
	Containers  []hwLogContainer `json:"containers"`
	CollectedAt *time.Time       `json:"collected_at"`
}

// hwLogContainer is a readable container as the logs sources list it.
type hwLogContainer struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	Image string `json:"image"`
	State string `json:"state"`
}

func (f *Fleet) hwLogSources(t testing.TB, serverID string) hwLogSources {
	t.Helper()
	var s hwLogSources
	expectJSON(t, f.Get(t, "/api/v1/logs/sources?server_id="+serverID, f.Token), http.StatusOK, &s)
	return s
}
