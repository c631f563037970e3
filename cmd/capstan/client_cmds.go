package main

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/capstan-dev/capstan/internal/apiclient"
)

// loginCmd signs in with a password and a TOTP code and keeps the
// session's refresh cookie as a context.
type loginCmd struct {
	URL     string `name:"url" env:"CAPSTAN_URL" required:"" help:"The control plane's URL, e.g. https://cp.example.com."`
	Email   string `name:"email" help:"The account's e-mail address (asked when not given)."`
	Context string `name:"context" help:"Name of the context to save (default: the URL's host)."`
}

func (l loginCmd) Run(ctx context.Context) error {
	base := strings.TrimRight(l.URL, "/")
	u, err := url.ParseRequestURI(base)
	if err != nil || u.Host == "" {
		return exitf(exitUsage, "--url %q is not a URL", l.URL)
	}
	in := bufio.NewReader(os.Stdin)
	ask := func(prompt string, secret bool) (string, error) {
		fmt.Fprint(os.Stderr, prompt)
		if secret && term.IsTerminal(int(os.Stdin.Fd())) {
			b, err := term.ReadPassword(int(os.Stdin.Fd()))
			fmt.Fprintln(os.Stderr)
			return string(b), err
		}
		s, err := in.ReadString('\n')
		return strings.TrimRight(s, "\r\n"), err
	}
	email := l.Email
	if email == "" {
		if email, err = ask("E-mail: ", false); err != nil {
			return err
		}
	}
	password, err := ask("Password: ", true)
	if err != nil {
		return err
	}
	api, err := apiclient.NewClientWithResponses(base)
	if err != nil {
		return err
	}
	lr, err := api.LoginWithResponse(ctx, apiclient.LoginJSONRequestBody{Email: email, Password: password})
	if err != nil {
		return err
	}
	if err := check(lr.HTTPResponse, lr.Body, "signing in"); err != nil {
		return asAuth(err)
	}
	code, err := ask("Code from the authenticator app: ", false)
	if err != nil {
		return err
	}
	vr, err := api.Verify2faWithResponse(ctx, apiclient.Verify2faJSONRequestBody{ChallengeId: lr.JSON200.ChallengeId, Code: strings.TrimSpace(code)})
	if err != nil {
		return err
	}
	if err := check(vr.HTTPResponse, vr.Body, "signing in"); err != nil {
		return asAuth(err)
	}
	cctx := &clientContext{URL: base, Email: email}
	for _, ck := range vr.HTTPResponse.Cookies() {
		if strings.HasSuffix(ck.Name, "capstan_refresh") {
			cctx.CookieName, cctx.CookieValue = ck.Name, ck.Value
		}
	}
	if cctx.CookieValue == "" {
		return exitf(exitFailed, "signing in: the control plane set no refresh cookie")
	}
	cfg, p, err := loadConfig()
	if err != nil {
		return err
	}
	name := l.Context
	if name == "" {
		name = u.Host
	}
	cfg.Contexts[name], cfg.Current = cctx, name
	if err := cfg.save(p); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Signed in to %s as %s (context %q, kept in %s).\n", base, email, name, p)
	return nil
}

// asAuth gives a refused sign-in the authentication exit code.
func asAuth(err error) error {
	if e, ok := err.(*exitError); ok && e.code != exitUsage {
		e.code = exitAuth
	}
	return err
}

type appsCmd struct {
	Ls       appsLsCmd       `cmd:"" help:"List applications."`
	Deploy   appsDeployCmd   `cmd:"" help:"Deploy an application, and follow the deployment to its end with --wait."`
	Show     appsShowCmd     `cmd:"" help:"Show an application: its settings, environment keys, addresses and deployments."`
	Create   appsCreateCmd   `cmd:"" help:"Create a container application from a Docker image (git, compose and service applications: the console or the API)."`
	Rollback appsRollbackCmd `cmd:"" help:"Release an earlier deployment again (default: the last succeeded one before the live one)."`
	Env      appsEnvCmd      `cmd:"" help:"Change an application's environment variables; values are never printed."`
}

type appsLsCmd struct {
	ClientFlags
}

func (a appsLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, a.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.ListApplicationsWithResponse(ctx, &apiclient.ListApplicationsParams{})).or("listing applications")
	if err != nil {
		return err
	}
	list := []apiclient.Application{}
	if r.JSON200.Applications != nil {
		list = *r.JSON200.Applications
	}
	rows := make([][]string, 0, len(list))
	for _, app := range list {
		rows = append(rows, []string{app.Name, app.Id, string(app.Status), app.ServerId, ago(app.CreatedAt)})
	}
	return show(a.ClientFlags, map[string]any{"applications": list}, []string{"NAME", "ID", "STATUS", "SERVER", "CREATED"}, rows)
}

// findApp resolves an application's id or name.
func findApp(ctx context.Context, c *conn, ref string) (string, error) {
	return resolve(ctx, c, appKind, ref)
}

type appsDeployCmd struct {
	ClientFlags
	App     string        `arg:"" help:"The application's name or id."`
	Image   string        `name:"image" help:"Deploy this image reference instead of the application's (image sources)."`
	Ref     string        `name:"ref" help:"Git sources: the branch, tag or commit to deploy."`
	Wait    bool          `name:"wait" help:"Follow the deployment live and exit 0 only when it succeeded."`
	Timeout time.Duration `name:"timeout" default:"30m" help:"With --wait: give up following after this long (exit 5); the deployment goes on."`
}

func (d appsDeployCmd) Run(parent context.Context) error {
	if d.Image != "" && d.Ref != "" {
		return exitf(exitUsage, "--image and --ref are one choice: give one")
	}
	c, err := connect(parent, d.ClientFlags)
	if err != nil {
		return err
	}
	appID, err := findApp(parent, c, d.App)
	if err != nil {
		return err
	}
	body := apiclient.DeployApplicationJSONRequestBody{}
	if ref := d.Image + d.Ref; ref != "" {
		body.Ref = &ref
	}
	r, err := answered(c.api.DeployApplicationWithResponse(parent, appID, body)).or("deploying " + d.App)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Deployment %s of %s queued.\n", r.JSON202.DeploymentId, d.App)
	return deploymentQueued(parent, c, d.ClientFlags, d.Wait, d.Timeout, appID, r.JSON202)
}

type jobsCmd struct {
	Wait   jobsWaitCmd   `cmd:"" help:"Follow a job live to its end; exit 0 only when it succeeded."`
	Ls     jobsLsCmd     `cmd:"" help:"List jobs, newest first."`
	Show   jobsShowCmd   `cmd:"" help:"Show a job and its progress events."`
	Cancel jobsCancelCmd `cmd:"" help:"Cancel a queued job."`
}

type jobsWaitCmd struct {
	ClientFlags
	ID      string        `arg:"" help:"The job's id (job_…)."`
	Timeout time.Duration `name:"timeout" default:"30m" help:"Give up following after this long (exit 5); the job goes on."`
}

func (w jobsWaitCmd) Run(parent context.Context) error {
	c, err := connect(parent, w.ClientFlags)
	if err != nil {
		return err
	}
	return followJob(parent, c, w.ClientFlags, w.ID, w.Timeout)
}

// finished reports the end of what was followed: its document with
// --json, and exit 0 only when it succeeded.
func finished(asJSON bool, doc any, what, status string, why *string) error {
	if asJSON {
		if err := printJSON(os.Stdout, doc); err != nil {
			return err
		}
	}
	if status != "succeeded" {
		if why != nil {
			status += ": " + *why
		}
		return exitf(exitFailed, "%s %s", what, status)
	}
	fmt.Fprintf(os.Stderr, "%s succeeded.\n", strings.ToUpper(what[:1])+what[1:])
	return nil
}
