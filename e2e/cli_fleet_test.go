package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
)

// TestCLIFleet runs the command line's fleet, application and access
// commands against a control plane with one enrolled server whose agent
// takes no job (its jobs stay queued), as a signed-in administrator and
// with API tokens: servers and applications are named by name or id,
// --json prints the API's one document, every change shows in the API,
// environment values never reach the output, a token made on the
// command line works until it is revoked, the audit log names the
// command line, and a server is revoked only with --yes.
func TestCLIFleet(t *testing.T) {
	t.Parallel()
	r := newAppRig(t, store.SQLite)
	cli := newClientCLI(t, r.URL)
	cli.Login(r.Admin)
	run := func(args ...string) CLIResult {
		t.Helper()
		return cli.Run(nil, "", cliTimeout, args...)
	}
	ok := func(args ...string) CLIResult {
		t.Helper()
		return cli.OK(nil, args...)
	}

	// Servers, by name and by id.
	var servers struct {
		Servers []ServerInfo `json:"servers"`
	}
	oneJSON(t, ok("servers", "ls", "--json"), &servers)
	if len(servers.Servers) != 1 || servers.Servers[0].Name != "app-host" || servers.Servers[0].ID != r.serverID {
		t.Fatalf("servers ls --json: %+v, want app-host %s", servers.Servers, r.serverID)
	}
	if res := ok("servers", "ls"); !strings.Contains(res.Stdout, "app-host") || !strings.Contains(res.Stdout, r.serverID) {
		t.Fatalf("servers ls: %s", res.Stdout)
	}
	for _, ref := range []string{"app-host", r.serverID} {
		var sv ServerInfo
		oneJSON(t, ok("servers", "show", ref, "--json"), &sv)
		if sv.ID != r.serverID || sv.Name != "app-host" {
			t.Fatalf("servers show %s --json: %+v", ref, sv)
		}
	}
	if res := ok("servers", "show", "app-host"); !strings.Contains(res.Stdout, "e2e-host") {
		t.Fatalf("servers show: the table lacks the hostname:\n%s", res.Stdout)
	}

	// An enrollment: its token and install command, and a pending server.
	var enr Enrollment
	oneJSON(t, ok("servers", "enroll", "edge-1", "--tag", "edge", "--json"), &enr)
	if !strings.HasPrefix(enr.Token, "ept_") || !strings.Contains(enr.InstallCommand, enr.Token) {
		t.Fatalf("servers enroll --json: %+v", enr)
	}
	if sv := r.server(t, enr.Server.ID); sv.Name != "edge-1" || sv.Status != "pending" || !slices.Equal(sv.Tags, []string{"edge"}) {
		t.Fatalf("the enrolled server in the API: %+v", sv)
	}
	if res := ok("servers", "enroll", "edge-2"); !strings.Contains(res.Stdout, "ept_") || strings.Count(res.Stdout, "\n") != 1 {
		t.Fatalf("servers enroll: stdout is not the install command alone:\n%s", res.Stdout)
	}

	// An application created without deploying, shown by name.
	ok("apps", "create", "web", "--server", "app-host", "--image", "ghcr.io/acme/web:1.0", "--port", "8080",
		"--health-path", "/health", "--no-deploy")
	var app AppInfo
	oneJSON(t, ok("apps", "show", "web", "--json"), &app)
	if app.Name != "web" || app.ServerID != r.serverID || app.Source.Image != "ghcr.io/acme/web:1.0" || app.ContainerPort != 8080 ||
		app.HealthPath != "/health" || app.Status != "new" || app.Latest != nil && app.Latest.ID != "" {
		t.Fatalf("apps show web --json after create --no-deploy: %+v", app)
	}
	if res := ok("apps", "show", "web"); !strings.Contains(res.Stdout, "ghcr.io/acme/web:1.0") || !strings.Contains(res.Stdout, app.ID) {
		t.Fatalf("apps show web:\n%s", res.Stdout)
	}

	// The environment: set from arguments and stdin, then unset; the
	// API has the values, the output never.
	set := cli.Run(nil, secretTwo+"\n", cliTimeout, "apps", "env", "set", "web", "DATABASE_URL="+secretOne, "API_KEY=-")
	setJSON := cli.Run(nil, "", cliTimeout, "apps", "env", "set", "web", "MODE=production", "--json")
	for _, res := range []CLIResult{set, setJSON} {
		if res.ExitCode != 0 {
			t.Fatalf("apps env set: exit %d\n%s", res.ExitCode, res.Stderr)
		}
		for _, secret := range []string{secretOne, secretTwo, "production"} {
			if strings.Contains(res.Stdout+res.Stderr, secret) {
				t.Fatalf("apps env set printed a value:\nstdout: %s\nstderr: %s", res.Stdout, res.Stderr)
			}
		}
	}
	var changed AppInfo
	oneJSON(t, setJSON, &changed)
	if !slices.Equal(changed.EnvKeys, []string{"DATABASE_URL", "API_KEY", "MODE"}) {
		t.Fatalf("apps env set --json: env keys %v", changed.EnvKeys)
	}
	env := func() map[string]string {
		m := map[string]string{}
		for _, e := range r.appInfo(t, app.ID).Env { // an administrator's GET reveals the values
			if e.Value != nil {
				m[e.Key] = *e.Value
			}
		}
		return m
	}
	if got := env(); got["DATABASE_URL"] != secretOne || got["API_KEY"] != secretTwo || got["MODE"] != "production" {
		t.Fatalf("the environment in the API after env set: %v", got)
	}
	ok("apps", "env", "unset", app.ID, "API_KEY")
	if got := env(); len(got) != 2 || got["API_KEY"] != "" {
		t.Fatalf("the environment in the API after env unset API_KEY: %v", got)
	}
	if res := run("apps", "env", "set", "web", "NOVALUE"); res.ExitCode != 2 {
		t.Fatalf("apps env set NOVALUE: exit %d, want 2", res.ExitCode)
	}

	// Jobs: a deploy and a ping stay queued; list, show and cancel.
	depID := strings.TrimSpace(ok("apps", "deploy", "web").Stdout)
	pingID := r.ping(t, r.serverID, "from the test")
	var jobs struct {
		Jobs []JobInfo `json:"jobs"`
	}
	oneJSON(t, ok("jobs", "ls", "--server", "app-host", "--state", "queued", "--json"), &jobs)
	types := map[string]string{}
	for _, j := range jobs.Jobs {
		types[j.ID] = j.Type
		if j.Status != "queued" || j.ServerID != r.serverID {
			t.Fatalf("jobs ls --state queued --server app-host listed %+v", j)
		}
	}
	if types[pingID] != "agent.ping" || !slices.Contains(slices.Collect(maps.Values(types)), "app.deploy") {
		t.Fatalf("jobs ls --json: %v, want the ping %s and a deploy", types, pingID)
	}
	oneJSON(t, ok("jobs", "ls", "--app", "web", "--json"), &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].Type != "app.deploy" {
		t.Fatalf("jobs ls --app web: %+v", jobs.Jobs)
	}
	oneJSON(t, ok("jobs", "ls", "--type", "agent.ping", "--limit", "1", "--json"), &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != pingID {
		t.Fatalf("jobs ls --type agent.ping --limit 1: %+v", jobs.Jobs)
	}
	var job JobInfo
	oneJSON(t, ok("jobs", "show", pingID, "--json"), &job)
	if job.ID != pingID || job.Type != "agent.ping" || job.Status != "queued" {
		t.Fatalf("jobs show --json: %+v", job)
	}
	if res := ok("jobs", "show", pingID); !strings.Contains(res.Stdout, "agent.ping") || !strings.Contains(res.Stdout, "queued") {
		t.Fatalf("jobs show:\n%s", res.Stdout)
	}
	ok("jobs", "cancel", pingID)
	if j := r.job(t, pingID); j.Status != "cancelled" {
		t.Fatalf("the job in the API after jobs cancel: %s", j.Status)
	}
	if res := run("jobs", "cancel", pingID); res.ExitCode != 1 {
		t.Fatalf("jobs cancel on a cancelled job: exit %d, want 1\n%s", res.ExitCode, res.Stderr)
	}

	// Deployments.
	var deps struct {
		Deployments []AppDeployment `json:"deployments"`
	}
	oneJSON(t, ok("deployments", "ls", "--app", "web", "--json"), &deps)
	if len(deps.Deployments) != 1 || deps.Deployments[0].ID != depID || deps.Deployments[0].ApplicationID != app.ID {
		t.Fatalf("deployments ls --app web: %+v, want %s", deps.Deployments, depID)
	}
	if res := ok("deployments", "ls", "--limit", "5"); !strings.Contains(res.Stdout, depID) {
		t.Fatalf("deployments ls:\n%s", res.Stdout)
	}
	var dep AppDeployment
	oneJSON(t, ok("deployments", "show", depID, "--json"), &dep)
	if dep.ID != depID || dep.Status != "queued" || dep.Spec.Image != "ghcr.io/acme/web:1.0" {
		t.Fatalf("deployments show --json: %+v", dep)
	}
	if res := ok("deployments", "show", depID); !strings.Contains(res.Stdout, "queued") {
		t.Fatalf("deployments show:\n%s", res.Stdout)
	}
	// Nothing ever succeeded: there is nothing to roll back to.
	if res := run("apps", "rollback", "web"); res.ExitCode != 1 || !strings.Contains(res.Stderr, "no live deployment") {
		t.Fatalf("apps rollback without a live deployment: exit %d\n%s", res.ExitCode, res.Stderr)
	}

	// Alerts: none open on a quiet fleet; the list parses.
	var alerts struct {
		Alerts []map[string]any `json:"alerts"`
	}
	oneJSON(t, ok("alerts", "ls", "--json"), &alerts)
	oneJSON(t, ok("alerts", "ls", "--state", "all", "--json"), &alerts)
	if res := run("alerts", "ls", "--state", "closed"); res.ExitCode != 2 {
		t.Fatalf("alerts ls --state closed: exit %d, want 2", res.ExitCode)
	}

	// Tokens: made once (on stdout alone), working, listed, revoked.
	var tok struct {
		ID        string   `json:"id"`
		Token     string   `json:"token"`
		Resources []string `json:"resources"`
	}
	oneJSON(t, ok("tokens", "create", "ci for web", "--scope", "deploy", "--resource", "app:web", "--expires", "30d", "--json"), &tok)
	if !strings.HasPrefix(tok.Token, "cpt_") || !slices.Equal(tok.Resources, []string{"app:" + app.ID}) {
		t.Fatalf("tokens create --json: %+v", tok)
	}
	reader := strings.TrimSpace(ok("tokens", "create", "reader", "--scope", "read").Stdout)
	if !strings.HasPrefix(reader, "cpt_") || strings.Contains(reader, "\n") {
		t.Fatalf("tokens create: stdout is not the token alone: %q", reader)
	}
	var list struct {
		Applications []AppInfo `json:"applications"`
	}
	oneJSON(t, cli.OK(cli.Token(tok.Token), "apps", "ls", "--json"), &list)
	if len(list.Applications) != 1 || list.Applications[0].ID != app.ID {
		t.Fatalf("apps ls with the new token: %+v", list.Applications)
	}
	type tokenRow struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	var tokens struct {
		Tokens []tokenRow `json:"tokens"`
	}
	oneJSON(t, ok("tokens", "ls", "--json"), &tokens)
	if !slices.Contains(tokens.Tokens, tokenRow{tok.ID, "ci for web"}) {
		t.Fatalf("tokens ls --json: %+v, want %s", tokens.Tokens, tok.ID)
	}
	if res := ok("tokens", "ls"); !strings.Contains(res.Stdout, tok.ID) || strings.Contains(res.Stdout, tok.Token) {
		t.Fatalf("tokens ls:\n%s", res.Stdout)
	}
	// Tokens are made by signed-in people only.
	if res := cli.Run(cli.Token(reader), "", cliTimeout, "tokens", "create", "more", "--scope", "read"); res.ExitCode != 3 {
		t.Fatalf("tokens create with a token: exit %d, want 3\n%s", res.ExitCode, res.Stderr)
	}
	ok("tokens", "revoke", tok.ID)
	if res := cli.Run(cli.Token(tok.Token), "", cliTimeout, "apps", "ls"); res.ExitCode != 3 {
		t.Fatalf("apps ls with the revoked token: exit %d, want 3\n%s", res.ExitCode, res.Stderr)
	}

	// A read token names things by name as the session does.
	readOnly := cli.Token(reader)
	oneJSON(t, cli.OK(readOnly, "servers", "ls", "--json"), &servers)
	if len(servers.Servers) != 3 {
		t.Fatalf("servers ls with a read token: %+v", servers.Servers)
	}
	oneJSON(t, cli.OK(readOnly, "apps", "show", "web", "--json"), &app)
	if app.ID == "" || len(app.Env) != 2 || app.Env[0].Value != nil {
		t.Fatalf("apps show with a read token: %+v", app)
	}
	oneJSON(t, cli.OK(readOnly, "deployments", "show", depID, "--json"), &dep)
	if res := cli.Run(readOnly, "", cliTimeout, "jobs", "cancel", "job_whatever"); res.ExitCode != 3 {
		t.Fatalf("jobs cancel with a read token: exit %d, want 3\n%s", res.ExitCode, res.Stderr)
	}

	// The audit log has what the command line did, and says so.
	var audit struct {
		Entries []struct {
			Action    string `json:"action"`
			UserAgent string `json:"user_agent"`
		} `json:"entries"`
	}
	oneJSON(t, ok("audit", "ls", "--limit", "200", "--since", "1h", "--json"), &audit)
	byCLI := map[string]bool{}
	for _, e := range audit.Entries {
		if strings.HasPrefix(e.UserAgent, "capstan-cli/") {
			byCLI[e.Action] = true
		}
	}
	for _, want := range []string{"server.enrollment.created", "application.created", "token.created", "token.revoked"} {
		if !byCLI[want] {
			t.Errorf("audit ls: no %s by the command line; it did %v", want, byCLI)
		}
	}
	oneJSON(t, ok("audit", "ls", "--action", "token.*", "--json"), &audit)
	for _, e := range audit.Entries {
		if !strings.HasPrefix(e.Action, "token.") {
			t.Fatalf("audit ls --action token.*: %s", e.Action)
		}
	}
	if res := ok("audit", "ls", "--action", "application.created"); !strings.Contains(res.Stdout, "application.created") ||
		!strings.Contains(res.Stdout, r.Admin.Email) {
		t.Fatalf("audit ls:\n%s", res.Stdout)
	}

	// Names that name nothing: exit 4.
	for _, args := range [][]string{
		{"servers", "show", "nowhere"},
		{"servers", "revoke", "nowhere", "--yes"},
		{"apps", "show", "nothing"},
		{"apps", "create", "api", "--server", "nowhere", "--image", "ghcr.io/acme/api:1"},
		{"apps", "env", "unset", "nothing", "KEY"},
		{"jobs", "ls", "--app", "nothing"},
		{"jobs", "show", "job_none"},
		{"deployments", "ls", "--app", "nothing"},
		{"deployments", "show", "dep_none"},
		{"tokens", "create", "x", "--scope", "read", "--resource", "server:nowhere"},
	} {
		if res := run(args...); res.ExitCode != 4 {
			t.Errorf("capstan %s: exit %d, want 4\n%s", strings.Join(args, " "), res.ExitCode, res.Stderr)
		}
	}

	// Revoking asks for --yes, and without it changes nothing.
	res := run("servers", "revoke", "app-host")
	if res.ExitCode != 2 || !strings.Contains(res.Stderr, "--yes") || !strings.Contains(res.Stderr, "for good") {
		t.Fatalf("servers revoke without --yes: exit %d\n%s", res.ExitCode, res.Stderr)
	}
	if sv := r.server(t, r.serverID); sv.RevokedAt != nil {
		t.Fatalf("servers revoke without --yes revoked the server: %+v", sv)
	}
	var revoked ServerInfo
	oneJSON(t, ok("servers", "revoke", "app-host", "--yes", "--json"), &revoked)
	if sv := r.server(t, r.serverID); revoked.ID != r.serverID || sv.RevokedAt == nil || sv.Status != "revoked" {
		t.Fatalf("servers revoke --yes: the API shows %+v", sv)
	}
	// Its queued deploy is cancelled with it.
	if d := r.deploymentInfo(t, depID); d.Status == "queued" {
		t.Fatalf("the revoked server's queued deployment: %s", d.Status)
	}
}
