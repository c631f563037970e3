package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestConsoleInBrowser drives the web console in headless Chromium
// (web/e2e/console.mjs, with playwright-core) against the real control
// plane and a real agent on this host's Docker engine: sign in with a
// computed TOTP code; enroll a server and see it come online without a
// reload when its agent starts; see a container's CPU and memory and its
// image among the server's images; restart a container and see the job
// finish live; read its log and follow it. axe-core finds no serious
// violation on any screen, and no
// CSP violation or page error happens. Screenshots go to web/test-results/.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	cli := hwRequireDocker(t)
	image := hwBuildChatterImage(t, cli)
	container := hwRunContainer(t, cli, image, "-interval", "1s")

	f := newFleet(t, Options{})
	var agent *AgentProcess
	steps := runConsoleScript(t, f, "console.mjs", []string{"CAPSTAN_CONTAINER=" + container, "CAPSTAN_IMAGE=" + image}, func(line string, fields []string) {
		switch fields[0] {
		case "enroll-token":
			config := enrollAgent(t, f.ControlPlane, fields[1])
			env := testlab.DockerEnv()
			agent = hwStartAgent(t, config, env...)
		case "job-succeeded":
			seen, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				t.Errorf("job-succeeded line %q", line)
				return
			}
			var job JobInfo
			f.Get(t, "/api/v1/jobs/"+fields[1], f.Token).JSON(t, &job)
			if job.Status != "succeeded" || job.FinishedAt == nil || job.Type != "container.restart" {
				t.Errorf("the job the console showed succeeded: %+v", job)
				return
			}
			lag := time.UnixMilli(seen).Sub(*job.FinishedAt)
			t.Logf("figure: the console showed the job finished %s after it finished", lag.Round(time.Millisecond))
			if lag < -time.Second {
				t.Errorf("the console showed the job finished %s before it did", -lag)
			}
		}
	}, func() string {
		if agent != nil {
			return "agent log:\n" + agent.Logs()
		}
		return ""
	})
	if want := "signed-in enroll-token online-seen tab-linked job-succeeded logs-filtered logs-followed jobs-filtered audit-sentence done"; strings.Join(steps, " ") != want {
		t.Fatalf("console.mjs steps %v, want %s", steps, want)
	}
}

// runConsoleScript runs the browser test web/e2e/<script> with Node and
// Debian's Chromium against fleet f, signed in as an administrator of its
// own (TOTP codes are accepted once per step, and the fleet's
// administrator used this step's). The script gets CAPSTAN_URL,
// CAPSTAN_EMAIL, CAPSTAN_PASSWORD, CAPSTAN_TOTP_SECRET and env; each line
// it prints goes to onLine (when not nil) with its fields, and the first
// fields are returned, in order, as the steps the script reported. The
// test fails when the script exits with an error; diag, when not nil,
// adds what helps to read such a failure (an agent's log, say).
func runConsoleScript(t *testing.T, f *Fleet, script string, env []string, onLine func(line string, fields []string), diag func() string) []string {
	t.Helper()
	return runConsoleScriptAs(t, f, script, true, env, onLine, diag)
}

// runConsoleScriptAs is runConsoleScript signed in as a user of its own
// who is an administrator or, with admin false, a member.
func runConsoleScriptAs(t *testing.T, f *Fleet, script string, admin bool, env []string, onLine func(line string, fields []string),
	diag func() string) []string {
	t.Helper()
	user := createUser(t, f.ControlPlane, "browser-"+strings.ToLower(strings.TrimSuffix(script, ".mjs"))+"@example.com", testPassword, admin)
	return runConsoleScriptAsUser(t, f, script, user, env, onLine, diag)
}

// runConsoleScriptAsUser is runConsoleScript signed in as user, for a test
// that checks through the API what that user's own state became.
func runConsoleScriptAsUser(t *testing.T, f *Fleet, script string, user User, env []string, onLine func(line string, fields []string),
	diag func() string) []string {
	t.Helper()
	chromium := testlab.Chromium(t)
	node, webDir := testlab.ConsoleScripts(t, filepath.Join("..", "web"))
	page := f.Get(t, "/", "")
	if page.Status != 200 || !strings.Contains(string(page.Body), "/assets/") {
		testlab.Require(t, "the web console built into the binary (make web before go test ./e2e)")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("e2e", script))
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(), "CAPSTAN_URL="+f.URL, "CAPSTAN_EMAIL="+user.Email, "CAPSTAN_PASSWORD="+user.Password,
		"CAPSTAN_TOTP_SECRET="+user.TOTPSecret, "CAPSTAN_TEST_CHROMIUM="+chromium)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, out) //nolint:errcheck // drain
	}()
	var steps []string
	for line := range lines {
		t.Logf("%s: %s", script, line)
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		steps = append(steps, fields[0])
		if onLine != nil {
			onLine(line, fields)
		}
	}
	if err := cmd.Wait(); err != nil {
		extra := ""
		if diag != nil {
			extra = diag()
		}
		t.Fatalf("%s: %v\nsteps: %v\nstderr:\n%s\n%s", script, err, steps, stderr.String(), extra)
	}
	return steps
}
