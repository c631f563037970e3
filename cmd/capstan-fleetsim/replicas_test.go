package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestParseSeveralControlPlanes(t *testing.T) {
	base := []string{"--admin-token", "tok"}
	parse := func(args ...string) (config, error) {
		return parseFlags(append(append([]string{}, base...), args...), io.Discard)
	}

	c, err := parse("--url", " http://127.0.0.1:8080/, http://localhost:8081,http://127.0.0.2:8082 ", "--pid", "101, 102,103", "--kill-index", "2")
	if err != nil {
		t.Fatalf("three URLs and three pids: %v", err)
	}
	wantURLs := []string{"http://127.0.0.1:8080", "http://localhost:8081", "http://127.0.0.2:8082"}
	if !reflect.DeepEqual(c.URLs, wantURLs) || !reflect.DeepEqual(c.PIDs, []int{101, 102, 103}) || c.KillIndex != 2 {
		t.Errorf("parsed URLs %q, pids %v, kill index %d; want %q, [101 102 103], 2", c.URLs, c.PIDs, c.KillIndex, wantURLs)
	}
	if c.URL != strings.Join(wantURLs, ",") {
		t.Errorf("URL %q, want the cleaned list", c.URL)
	}

	// One URL and one pid read as they always did.
	c, err = parse("--url", "http://127.0.0.1:9000/", "--pid", "42")
	if err != nil {
		t.Fatalf("one URL and one pid: %v", err)
	}
	if !reflect.DeepEqual(c.URLs, []string{"http://127.0.0.1:9000"}) || !reflect.DeepEqual(c.PIDs, []int{42}) || c.URL != "http://127.0.0.1:9000" {
		t.Errorf("one URL: %q %v %q", c.URLs, c.PIDs, c.URL)
	}
	for _, pid := range []string{"", "0"} {
		c, err = parse("--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--pid", pid)
		if err != nil || c.PIDs != nil {
			t.Errorf("--pid %q: %v %v, want no process watched", pid, c.PIDs, err)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "http://127.0.0.1:1,http://192.0.2.1:2"}, "not a loopback address"},
		{[]string{"--url", "http://127.0.0.1:1,,http://127.0.0.1:2"}, "empty entry"},
		{[]string{"--url", "http://127.0.0.1:1,"}, "empty entry"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:1/"}, "twice"},
		{[]string{"--url", "http://127.0.0.1:1,ftp://127.0.0.1:2"}, "http://"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--pid", "5"}, "1 process ids for 2 URLs"},
		{[]string{"--url", "http://127.0.0.1:1", "--pid", "5,6"}, "2 process ids for 1 URLs"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--pid", "5,x"}, "positive process id"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--pid", "5,-6"}, "positive process id"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--pid", "5,5"}, "twice"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--kill-index", "2"}, "--kill-index must be between 0 and 1"},
		{[]string{"--url", "http://127.0.0.1:1", "--kill-index", "-1"}, "--kill-index"},
		{[]string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--kill-after", "10s", "--restart-cmd", "true"}, "--kill-after needs --pid"},
	} {
		_, err := parse(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

func TestAgentsSpreadAcrossControlPlanes(t *testing.T) {
	urls := []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}
	s := &sim{urls: urls, seed: 7, runID: "t"}
	count := make([]int, len(urls))
	for i := range 10 {
		a := newAgent(s, i)
		if a.cp != i%3 || a.base != urls[i%3] {
			t.Errorf("agent %d talks to control plane %d (%s), want %d (%s)", i, a.cp, a.base, i%3, urls[i%3])
		}
		count[a.cp]++
	}
	if got := pinned(10, 3); !reflect.DeepEqual(got, count) || !reflect.DeepEqual(got, []int{4, 3, 3}) {
		t.Errorf("pinned(10, 3) = %v, agents made %v; want [4 3 3]", got, count)
	}
	if got := pinned(2, 3); !reflect.DeepEqual(got, []int{1, 1, 0}) {
		t.Errorf("pinned(2, 3) = %v, want [1 1 0]", got)
	}
	// One control plane: every agent on it.
	one := &sim{urls: urls[:1], seed: 7, runID: "t"}
	for i := range 5 {
		if a := newAgent(one, i); a.cp != 0 || a.base != urls[0] {
			t.Errorf("agent %d of one control plane talks to %d (%s)", i, a.cp, a.base)
		}
	}
}

// actionServer answers POST /api/v1/servers/{id}/actions with status and
// counts the requests.
func actionServer(t *testing.T, status int) (string, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/servers/srv_1/actions" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusAccepted {
			io.WriteString(w, `{"job_id":"job_`+strconv.Itoa(int(n.Load()))+`"}`) //nolint:errcheck // test reply
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// TestAdminMovesOnRefusedConnection: the administrator's call to a control
// plane that refuses connections goes to the next one, is recorded there,
// and later calls stay there; a control plane that answers with an error
// keeps the call (it may have acted on it).
func TestAdminMovesOnRefusedConnection(t *testing.T) {
	dead := "http://127.0.0.1:" + strconv.Itoa(testlab.FreePort(t)) // nothing listens
	live, hits := actionServer(t, http.StatusAccepted)
	rec := newRecorder(2)
	a := newAdmin([]string{dead, live}, &http.Client{Timeout: 10 * time.Second}, rec, "tok")
	ctx := context.Background()

	id, _, err := a.queuePing(ctx, "srv_1", 0)
	if err != nil || id != "job_1" || hits.Load() != 1 {
		t.Fatalf("queuePing through a dead control plane: %q %v (%d requests reached the live one); want job_1 from the live one", id, err, hits.Load())
	}
	if got := a.cur.Load(); got != 1 {
		t.Errorf("the administrator talks to control plane %d after the move, want 1", got)
	}
	// Without a preferred control plane, the call goes where the last
	// one went.
	if _, _, err := a.send(ctx, -1, http.MethodPost, "/api/v1/servers/srv_1/actions", "tok", nil, nil, http.StatusAccepted); err != nil || hits.Load() != 2 {
		t.Errorf("next call: %v, %d requests on the live control plane; want 2", err, hits.Load())
	}
	rec.mu.Lock()
	onDead, onLive := rec.cpTotal[0].summaries(), rec.cpTotal[1].summaries()
	total := rec.total.summaries()
	rec.mu.Unlock()
	if len(onDead) != 0 || onLive[callActions].Count != 1 || onLive[callActions].Errors != 0 || total[callActions].Errors != 0 {
		t.Errorf("recorded on the dead control plane %v, on the live one %v, in total %v; want one action on the live one and no error", onDead, onLive, total)
	}

	// A 500 is the control plane's answer: no move, an error.
	failing, failHits := actionServer(t, http.StatusInternalServerError)
	other, otherHits := actionServer(t, http.StatusAccepted)
	b := newAdmin([]string{failing, other}, &http.Client{Timeout: 10 * time.Second}, newRecorder(2), "tok")
	if _, _, err := b.queuePing(ctx, "srv_1", 0); err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("queuePing answered 500: %v, want the 500", err)
	}
	if failHits.Load() != 1 || otherHits.Load() != 0 || b.cur.Load() != 0 {
		t.Errorf("after a 500: %d requests on the failing control plane, %d on the other, talking to %d; want 1, 0, 0", failHits.Load(), otherHits.Load(), b.cur.Load())
	}

	// Every control plane refusing: the error is the refusal.
	c := newAdmin([]string{dead, "http://127.0.0.1:" + strconv.Itoa(testlab.FreePort(t))}, &http.Client{Timeout: 10 * time.Second}, newRecorder(2), "tok")
	if _, _, err := c.queuePing(ctx, "srv_1", 1); !refused(err) {
		t.Errorf("queuePing with no control plane listening: %v, want connection refused", err)
	}
}

func TestRecorderPerControlPlane(t *testing.T) {
	r := newRecorder(2)
	r.record(0, callHeartbeat, 2*time.Millisecond, nil)
	r.record(1, callHeartbeat, 40*time.Millisecond, nil)
	r.record(1, callHeartbeat, 0, io.ErrUnexpectedEOF)
	r.recordDispatch(1, 3*time.Millisecond)
	r.setSteady()
	r.record(0, callMetrics, 5*time.Millisecond, nil)
	r.recordDispatch(0, -time.Millisecond) // claimed before the POST answer

	cp0, cp1, total := r.cpTotal[0].summaries(), r.cpTotal[1].summaries(), r.total.summaries()
	// Quantiles are within the histogram's 1.6 %.
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*0.02 }
	if cp0[callHeartbeat].Count != 1 || !near(cp0[callHeartbeat].P99ms, 2) || cp1[callHeartbeat].Count != 1 || cp1[callHeartbeat].Errors != 1 ||
		!near(cp1[callHeartbeat].P99ms, 40) || total[callHeartbeat].Count != 2 || total[callHeartbeat].Errors != 1 {
		t.Errorf("heartbeats: control plane 0 %+v, 1 %+v, total %+v", cp0[callHeartbeat], cp1[callHeartbeat], total[callHeartbeat])
	}
	if s0, s1 := r.cpSteady[0].summaries(), r.cpSteady[1].summaries(); s0[callMetrics].Count != 1 || len(s1) != 0 || s0[callHeartbeat].Count != 0 {
		t.Errorf("steady state: control plane 0 %v, 1 %v; want the one metrics call on 0", s0, s1)
	}
	if e := r.cpTotal[1].totalErrors(); e != 1 {
		t.Errorf("control plane 1 errors %d, want 1", e)
	}
	d0, d1 := dispatchSummary(&r.cpDispatch[0][0], r.cpEarly[0][0]), dispatchSummary(&r.cpDispatch[1][0], r.cpEarly[1][0])
	sd0, sd1 := dispatchSummary(&r.cpDispatch[0][1], r.cpEarly[0][1]), dispatchSummary(&r.cpDispatch[1][1], r.cpEarly[1][1])
	if d0.Count != 1 || d0.Early != 1 || d1.Count != 1 || !near(d1.P50ms, 3) || sd0.Count != 1 || sd1.Count != 0 {
		t.Errorf("dispatch: control plane 0 %+v (steady %+v), 1 %+v (steady %+v)", d0, sd0, d1, sd1)
	}
	if d := dispatchSummary(&r.dispatch[1], r.early[1]); d.Count != 2 || d.Early != 1 {
		t.Errorf("dispatch in total %+v, want 2 with 1 early", d)
	}
}

func TestSumReports(t *testing.T) {
	got := sumReports([]ProcReport{
		{PID: "10", CPUAvgPct: 30, CPUAvgOfMachinePct: 15, CPUMaxPct: 60, RSSEndMB: 100, RSSMaxMB: 120, FDsMax: 500, FDLimit: 20000, ThreadsEnd: 9},
		{PID: "11", CPUAvgPct: 20, CPUAvgOfMachinePct: 10, CPUMaxPct: 50, RSSEndMB: 90, RSSMaxMB: 95, FDsMax: 400, FDLimit: 1024, ThreadsEnd: 8},
	}, 95)
	want := ProcReport{PID: "10,11", CPUAvgPct: 50, CPUAvgOfMachinePct: 25, CPUMaxPct: 95, RSSEndMB: 190, RSSMaxMB: 215, FDsMax: 900, FDLimit: 1024, ThreadsEnd: 17}
	if got != want {
		t.Errorf("sumReports = %+v, want %+v", got, want)
	}
	if got := sumIntervals([]ProcInterval{{CPUPercent: 10, RSSMB: 50, Threads: 3, FDs: 20}, {CPUPercent: 5, RSSMB: 40, Threads: 4, FDs: 30}}); got != (ProcInterval{CPUPercent: 15, RSSMB: 90, Threads: 7, FDs: 50}) {
		t.Errorf("sumIntervals = %+v", got)
	}
}
