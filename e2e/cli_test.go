package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestCLIOnRealStack runs the capstan command line against a control
// plane, an enrolled agent, Caddy and Docker, as a pipeline and as a
// person: a deploy with a deploy token follows the deployment live and
// exits 0 once the new release serves; a broken release exits 1 with the
// health check's failure; a rollback releases the one before the live
// release again; `jobs wait` on a job cancelled meanwhile exits
// 1; --json prints one document on stdout; `capstan login` keeps a
// session that later commands use; wrong names, credentials and command
// lines get their own exit codes; `capstan logs` prints the application's
// lines.
func TestCLIOnRealStack(t *testing.T) {
	t.Parallel()
	s := newAppStack(t, appStackOptions{Images: map[string]int{"v1": 0, "v2": 0, "v3": http.StatusInternalServerError}})
	v2, v3 := s.Images["v2"], s.Images["v3"]
	app := s.createApp(t, map[string]any{"name": "web", "source": map[string]any{"type": "image", "image": s.Images["v1"].Ref},
		"container_port": 8080, "health_path": "/health"})
	s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)

	resp := s.Post(t, "/api/v1/tokens", s.Token, map[string]any{"name": "ci", "scopes": []string{"deploy", "read:secrets"},
		"resources": []string{"app:" + app.ID}})
	var tok struct {
		Token string `json:"token"`
	}
	expectJSON(t, resp, http.StatusCreated, &tok)
	cli := newClientCLI(t, s.URL)
	run := cli.Run
	pipeline := cli.Token(tok.Token)

	// A pipeline deploys v2 and waits: 0, and v2 is the live release.
	res := run(pipeline, "", deployTimeout, "apps", "deploy", app.ID, "--image", v2.Ref, "--wait")
	if res.ExitCode != 0 || res.Stdout != "" || !strings.Contains(res.Stderr, "succeeded") {
		t.Fatalf("deploy v2: exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	var live AppInfo
	s.Get(t, "/api/v1/applications/"+app.ID, s.Token).JSON(t, &live)
	if live.Current == nil || live.Current.ImageID != v2.ID {
		t.Fatalf("the live release after the CLI's deploy: %+v, want image %s", live.Current, v2.ID)
	}

	// v3 is broken: exit 1, the health check's failure and the
	// container's log in the output, and --json's one document parses.
	res = run(pipeline, "", failedDeployTimeout+time.Minute, "apps", "deploy", app.ID, "--image", v3.Ref, "--wait", "--json")
	var failed struct {
		Status string  `json:"status"`
		Error  *string `json:"error"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &failed); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, res.Stdout)
	}
	if res.ExitCode != 1 || failed.Status != "failed" || !strings.Contains(res.Stderr, "health check failed") ||
		!strings.Contains(res.Stderr, "version v3 is broken") {
		t.Fatalf("deploy v3: exit %d, status %q\nstderr: %s", res.ExitCode, failed.Status, res.Stderr)
	}

	// The pipeline rolls back: v3 never went live, so the release before
	// the live v2 is v1, and v1 serves again.
	res = run(pipeline, "", deployTimeout, "apps", "rollback", "web", "--wait")
	if res.ExitCode != 0 || !strings.Contains(res.Stderr, "succeeded") {
		t.Fatalf("rollback: exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	s.Get(t, "/api/v1/applications/"+app.ID, s.Token).JSON(t, &live)
	if live.Current == nil || live.Current.ImageID != s.Images["v1"].ID || live.Current.RollbackOf == nil || *live.Current.RollbackOf != app.Latest.ID {
		t.Fatalf("the live release after the rollback: %+v, want v1 (image %s) rolled back from %s", live.Current, s.Images["v1"].ID, app.Latest.ID)
	}
	if strings.TrimSpace(res.Stdout) != "" {
		t.Fatalf("rollback --wait printed on stdout: %s", res.Stdout)
	}

	// A person signs in; the session serves later commands.
	cli.Login(s.Admin)
	res = run(nil, "", cliTimeout, "apps", "ls", "--json")
	var list struct {
		Applications []struct {
			Name string `json:"name"`
		} `json:"applications"`
	}
	oneJSON(t, res, &list)
	if res.ExitCode != 0 || len(list.Applications) != 1 || list.Applications[0].Name != "web" {
		t.Fatalf("apps ls --json after login: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := run(nil, "", cliTimeout, "apps", "ls"); res.ExitCode != 0 || !strings.Contains(res.Stdout, "web") {
		t.Fatalf("apps ls: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The pipeline's token is narrowed to the application: it lists it,
	// and names it by name.
	res = run(pipeline, "", cliTimeout, "apps", "ls", "--json")
	oneJSON(t, res, &list)
	if res.ExitCode != 0 || len(list.Applications) != 1 || list.Applications[0].Name != "web" {
		t.Fatalf("apps ls --json with the narrowed token: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}

	// `jobs wait` on a job cancelled meanwhile: a server whose agent
	// takes no job keeps it queued until the cancellation.
	idle := s.createEnrollment(t, "idle")
	idleAgent := s.enrollHTTP(t, idle.Token).AgentToken
	expectStatus(t, s.Do(t, Req{Method: http.MethodPost, Path: "/agent/v1/heartbeat", Token: idleAgent, JSON: map[string]any{}}), http.StatusOK)
	resp = s.action(t, idle.Server.ID, map[string]any{"type": "service.restart", "payload": map[string]any{"unit": "web.service"}})
	expectStatus(t, resp, http.StatusAccepted)
	var queued Accepted
	resp.JSON(t, &queued)
	waited := make(chan CLIResult, 1)
	var exited time.Time
	go func() {
		r := run(nil, "", cliTimeout, "jobs", "wait", queued.JobID)
		exited = time.Now()
		waited <- r
	}()
	// The command is following once its ticket is taken and the job read.
	testlab.Eventually(t, cliTimeout, "jobs wait following the job", func() bool {
		return strings.Contains(s.Logs(), `"method":"GET","path":"/api/v1/jobs/`+queued.JobID+`"`)
	})
	expectStatus(t, s.Post(t, "/api/v1/jobs/"+queued.JobID+"/cancel", s.Token, nil), http.StatusOK)
	cancelled := time.Now()
	if res := <-waited; res.ExitCode != 1 || !strings.Contains(res.Stderr, "cancelled") {
		t.Fatalf("jobs wait on a cancelled job: exit %d\n%s", res.ExitCode, res.Stderr)
	}
	t.Logf("jobs wait: from the job's end to the command's exit: %s", exited.Sub(cancelled))

	// Exit codes: not found 4, refused 3, a bad command line 2.
	for _, c := range []struct {
		env  []string
		args []string
		want int
	}{
		{nil, []string{"jobs", "wait", "job_none"}, 4},
		{nil, []string{"apps", "deploy", "nothing-by-this-name"}, 4},
		{[]string{"CAPSTAN_URL=" + s.URL, "CAPSTAN_TOKEN=cpt_unknown"}, []string{"apps", "ls"}, 3},
		{nil, []string{"apps", "deploy"}, 2},
	} {
		if res := run(c.env, "", cliTimeout, c.args...); res.ExitCode != c.want {
			t.Errorf("capstan %s: exit %d, want %d\n%s", strings.Join(c.args, " "), res.ExitCode, c.want, res.Stderr)
		}
	}

	// `capstan logs` prints the live release's lines: v1's, since the
	// rollback.
	if res := run(nil, "", cliTimeout, "logs", "web"); res.ExitCode != 0 || !strings.Contains(res.Stdout, "version v1 listening on") {
		t.Errorf("logs web: exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
}
