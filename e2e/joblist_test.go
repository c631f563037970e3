package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// namedJob is a job of GET /api/v1/jobs with the names it carries.
type namedJob struct {
	ID         string `json:"id"`
	ServerID   string `json:"server_id"`
	ServerName string `json:"server_name"`
	AppID      string `json:"app_id"`
	AppName    string `json:"app_name"`
	Type       string `json:"type"`
	Status     string `json:"status"`
	Actor      *struct {
		Type  string `json:"type"`
		ID    string `json:"id"`
		Email string `json:"email"`
	} `json:"actor"`
}

func (f *Fleet) namedJobs(t testing.TB, query string) []namedJob {
	t.Helper()
	var out struct {
		Jobs []namedJob `json:"jobs"`
	}
	expectJSON(t, f.Get(t, "/api/v1/jobs"+query, f.Token), http.StatusOK, &out)
	return out.Jobs
}

// TestJobListFiltersAndLogReadWait: the job list filters by server, type,
// state and actor, names each job's server and creator, refuses filter
// values that cannot match with a problem naming the field, and a log
// read's result waits (?wait=) for the read to end, in one request.
func TestJobListFiltersAndLogReadWait(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	web := f.createEnrollment(t, "names-web")
	agent := f.enrollHTTP(t, web.Token)
	db := f.createEnrollment(t, "names-db")

	// A read that stays queued: wait=1 answers after about a second, with
	// the state then and no lines.
	r := f.Post(t, "/api/v1/logs", f.Token, map[string]any{"server_id": web.Server.ID, "source": "journal", "unit": "web.service"})
	var read Accepted
	expectJSON(t, r, http.StatusAccepted, &read)
	start := time.Now()
	r = f.Get(t, "/api/v1/logs/"+read.JobID+"?wait=1", f.Token)
	var res hwLogRead
	expectJSON(t, r, http.StatusOK, &res)
	if took := time.Since(start); res.Status != "queued" || len(res.Lines) != 0 || took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("wait=1 on a queued read: status %s, %d lines after %s", res.Status, len(res.Lines), took)
	}

	// A request waiting up to 30 s gets the lines as soon as the agent
	// completes the read.
	done := make(chan *Response, 1)
	go func() { done <- f.Get(t, "/api/v1/logs/"+read.JobID+"?wait=30", f.Token) }()
	job := f.claim(t, agent.AgentToken, 5)
	if job == nil || job.ID != read.JobID {
		t.Fatalf("claimed %+v, want the log read %s", job, read.JobID)
	}
	lines := []agentproto.LogLine{{At: time.Now().UTC(), Priority: 3, Message: "boom"}, {At: time.Now().UTC(), Priority: 6, Message: "ready"}}
	data, _ := json.Marshal(agentproto.LogsResult{Lines: lines, Cursor: "c-1"})
	completed := time.Now()
	expectStatus(t, f.agentCall(t, agent.AgentToken, http.MethodPost, "/jobs/"+read.JobID+"/complete",
		agentproto.CompleteRequest{Status: "succeeded", Data: data}), http.StatusOK)
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("GET ?wait=30 did not answer within 20 s of the read's end")
	}
	expectStatus(t, r, http.StatusOK)
	res = hwLogRead{}
	r.JSON(t, &res)
	if res.Status != "succeeded" || len(res.Lines) != 2 || res.Lines[1].Message != "ready" || res.Cursor != "c-1" {
		t.Fatalf("waited read: %s", r.Body)
	}
	if late := time.Since(completed); late > 10*time.Second {
		t.Errorf("the waiting read answered %s after the job ended", late)
	}
	expectProblem(t, f.Get(t, "/api/v1/logs/"+read.JobID+"?wait=31", f.Token), http.StatusUnprocessableEntity, "validation-failed")

	ping := f.ping(t, db.Server.ID, "hello")

	ids := func(query string) []string {
		t.Helper()
		out := []string{}
		for _, j := range f.namedJobs(t, query) {
			out = append(out, j.ID)
		}
		return out
	}
	email := url.QueryEscape(f.Admin.Email)
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{ping, read.JobID}},
		{"?server_id=" + db.Server.ID, []string{ping}},
		{"?type=logs.read", []string{read.JobID}},
		{"?status=succeeded", []string{read.JobID}},
		{"?status=queued&server_id=" + db.Server.ID, []string{ping}},
		{"?status=failed", []string{}},
		{"?actor=system", []string{}},
		{"?actor=" + f.Admin.ID, []string{ping, read.JobID}},
		{"?actor=" + email + "&type=agent.ping", []string{ping}},
		{"?actor=nobody%40example.com", []string{}},
		{"?app_id=app_0000000000000000000000000", []string{}},
	} {
		if got := ids(c.query); !slices.Equal(got, c.want) {
			t.Errorf("GET /api/v1/jobs%s: %v, want %v", c.query, got, c.want)
		}
	}

	list := f.namedJobs(t, "?type=logs.read")
	if j := list[0]; j.ServerName != "names-web" || j.Actor == nil || j.Actor.Type != "user" || j.Actor.ID != f.Admin.ID ||
		j.Actor.Email != f.Admin.Email || j.AppID != "" {
		t.Errorf("listed log read: %+v actor %+v", j, j.Actor)
	}
	r = f.Get(t, "/api/v1/jobs/"+ping, f.Token)
	var one namedJob
	expectJSON(t, r, http.StatusOK, &one)
	if one.ServerName != "names-db" || one.Actor == nil || one.Actor.Email != f.Admin.Email {
		t.Errorf("GET /api/v1/jobs/%s: %s", ping, r.Body)
	}

	for _, c := range []struct{ query, field string }{
		{"?type=shell.exec", "type"},
		{"?status=done", "status"},
		{"?server_id=app_x", "server_id"},
		{"?server_id=srv_a%3Bb", "server_id"},
		{"?app_id=srv_x", "app_id"},
		{"?actor=nobody", "actor"},
		{"?limit=101", "limit"},
	} {
		p := expectProblem(t, f.Get(t, "/api/v1/jobs"+c.query, f.Token), http.StatusUnprocessableEntity, "validation-failed")
		if fields := problemFields(p); !slices.Contains(fields, c.field) {
			t.Errorf("GET /api/v1/jobs%s: fields %q, want %q", c.query, fields, c.field)
		}
	}
}
