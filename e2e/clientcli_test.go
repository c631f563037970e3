package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// clientCLI runs the capstan binary's client commands as a user of one
// control plane would: with its own config file (where `capstan login`
// keeps its session), and with an environment of its choosing.
type clientCLI struct {
	t      testing.TB
	url    string
	config string
}

// newClientCLI is a command-line user of the control plane at url.
func newClientCLI(t testing.TB, url string) *clientCLI {
	return &clientCLI{t: t, url: url, config: filepath.Join(t.TempDir(), "config.json")}
}

// Run runs `capstan args…` with env added (CAPSTAN_URL and
// CAPSTAN_TOKEN for a pipeline; nil for the login's session), stdin as
// its input and a deadline of timeout.
func (c *clientCLI) Run(env []string, stdin string, timeout time.Duration, args ...string) CLIResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, capstanBin, args...)
	cmd.Env = childEnv(append([]string{"CAPSTAN_CONFIG=" + c.config}, env...))
	cmd.Stdin = strings.NewReader(stdin)
	return testlab.RunCommand(c.t, ctx, cmd, "capstan "+strings.Join(args, " "))
}

// Token is the environment of a pipeline holding an API token.
func (c *clientCLI) Token(token string) []string {
	return []string{"CAPSTAN_URL=" + c.url, "CAPSTAN_TOKEN=" + token}
}

// Login signs in as u with `capstan login`; later commands run with a
// nil env use the session.
func (c *clientCLI) Login(u User) {
	c.t.Helper()
	res := c.Run(nil, testPassword+"\n"+totpCode(c.t, u.TOTPSecret)+"\n", cliTimeout, "login", "--url", c.url, "--email", u.Email)
	if res.ExitCode != 0 {
		c.t.Fatalf("capstan login: exit %d\n%s", res.ExitCode, res.Stderr)
	}
}

// OK runs a command that must exit 0 and returns its result.
func (c *clientCLI) OK(env []string, args ...string) CLIResult {
	c.t.Helper()
	res := c.Run(env, "", cliTimeout, args...)
	if res.ExitCode != 0 {
		c.t.Fatalf("capstan %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.ExitCode, res.Stdout, res.Stderr)
	}
	return res
}

// oneJSON decodes a command's stdout, which must be exactly one JSON
// document, into v.
func oneJSON(t testing.TB, res CLIResult, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(res.Stdout))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not a JSON document: %v\n%s", err, res.Stdout)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err == nil {
		t.Fatalf("stdout holds more than one JSON document:\n%s", res.Stdout)
	}
}
