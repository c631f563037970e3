package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstan-dev/capstan/internal/apiclient"
)

// The client commands for the fleet, applications and access: servers,
// jobs, applications' settings and rollbacks, deployments, alerts, API
// tokens and the audit log. Each prints the API's answer as one JSON
// document with --json, else a table or the object's fields.

// kind is what a name on the command line can stand for: a server or an
// application, named by id or by name.
type kind struct {
	noun   string // as messages say it
	prefix string // of its ids
	list   func(context.Context, *conn) ([]named, error)
}

// named is one entry of a kind's list.
type named struct{ id, name string }

var (
	serverKind = kind{noun: "server", prefix: "srv_", list: serverNames}
	appKind    = kind{noun: "application", prefix: "app_", list: appNames}
)

// resolve turns a name or id of kind k into its id. An id is taken as it
// is (the API says whether it exists); a name must name exactly one.
func resolve(ctx context.Context, c *conn, k kind, ref string) (string, error) {
	if strings.HasPrefix(ref, k.prefix) {
		return ref, nil
	}
	all, err := k.list(ctx, c)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, n := range all {
		if n.name == ref {
			ids = append(ids, n.id)
		}
	}
	switch len(ids) {
	case 0:
		return "", exitf(exitNotFound, "no %s named %q", k.noun, ref)
	case 1:
		return ids[0], nil
	}
	// Application names are unique on a server only.
	return "", exitf(exitUsage, "%d %ss are named %q (%s): give the id", len(ids), k.noun, ref, strings.Join(ids, ", "))
}

// findServer resolves a server's id or name.
func findServer(ctx context.Context, c *conn, ref string) (string, error) {
	return resolve(ctx, c, serverKind, ref)
}

func serverNames(ctx context.Context, c *conn) ([]named, error) {
	r, err := answered(c.api.ListServersWithResponse(ctx)).or("listing servers")
	if err != nil {
		return nil, err
	}
	var out []named
	for _, s := range deref(r.JSON200.Servers) {
		out = append(out, named{s.Id, s.Name})
	}
	return out, nil
}

func appNames(ctx context.Context, c *conn) ([]named, error) {
	r, err := answered(c.api.ListApplicationsWithResponse(ctx, &apiclient.ListApplicationsParams{})).or("listing applications")
	if err != nil {
		return nil, err
	}
	var out []named
	for _, a := range deref(r.JSON200.Applications) {
		out = append(out, named{a.Id, a.Name})
	}
	return out, nil
}

// deref is a list the API may leave out as empty.
func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// when is an optional time for a table: empty when there is none.
func when(t *time.Time) string {
	if t == nil {
		return ""
	}
	return ago(*t)
}

// showDetail prints one object: doc with --json, else its fields as
// name and value lines (empty ones left out), then its progress events
// as a follow prints them.
func showDetail(f ClientFlags, doc any, fields [][2]string, events []apiclient.Event) error {
	if f.JSON {
		return printJSON(os.Stdout, doc)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, kv := range fields {
		if kv[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(events) > 0 {
		fmt.Println()
		(&follower{log: os.Stdout}).printEvents(events)
	}
	return nil
}

// moreAfter tells a person, on stderr, how to read the next page.
func moreAfter(f ClientFlags, cursor *string) {
	if !f.JSON && cursor != nil && *cursor != "" {
		fmt.Fprintf(os.Stderr, "More: add --before %s\n", *cursor)
	}
}

// done says on stderr what a command did, and prints doc with --json.
func done(f ClientFlags, doc any, format string, args ...any) error {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	if f.JSON {
		return printJSON(os.Stdout, doc)
	}
	return nil
}

// Servers.

type serversCmd struct {
	Ls     serversLsCmd     `cmd:"" help:"List the servers."`
	Show   serversShowCmd   `cmd:"" help:"Show a server: its state, facts and latest metrics."`
	Enroll serversEnrollCmd `cmd:"" help:"Add a server: prints the one-time install command to run as root on it."`
	Revoke serversRevokeCmd `cmd:"" help:"Revoke a server's agent for good (asks for --yes)."`
}

type serversLsCmd struct {
	ClientFlags
}

func (s serversLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, s.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.ListServersWithResponse(ctx)).or("listing servers")
	if err != nil {
		return err
	}
	var rows [][]string
	for _, sv := range deref(r.JSON200.Servers) {
		rows = append(rows, []string{sv.Name, sv.Id, string(sv.Status), strings.TrimSpace(sv.Facts.Os + " " + sv.Facts.OsVersion),
			str(sv.AgentVersion), when(sv.LastSeenAt), strings.Join(deref(sv.Tags), ",")})
	}
	return show(s.ClientFlags, r.JSON200, []string{"NAME", "ID", "STATE", "OS", "AGENT", "LAST SEEN", "TAGS"}, rows)
}

type serversShowCmd struct {
	ClientFlags
	Server string `arg:"" help:"The server's name or id."`
}

func (s serversShowCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, s.ClientFlags)
	if err != nil {
		return err
	}
	id, err := findServer(ctx, c, s.Server)
	if err != nil {
		return err
	}
	r, err := answered(c.api.GetServerWithResponse(ctx, id)).or("reading server " + s.Server)
	if err != nil {
		return err
	}
	sv := r.JSON200
	fields := [][2]string{
		{"Name", sv.Name}, {"ID", sv.Id}, {"State", string(sv.Status)}, {"Tags", strings.Join(deref(sv.Tags), ", ")},
		{"Hostname", sv.Facts.Hostname}, {"OS", strings.TrimSpace(sv.Facts.Os + " " + sv.Facts.OsVersion)},
		{"Kernel", sv.Facts.Kernel}, {"Arch", sv.Facts.Arch}, {"Agent", str(sv.AgentVersion)},
		{"Enrolled", when(sv.EnrolledAt)}, {"Last seen", when(sv.LastSeenAt)}, {"Revoked", when(sv.RevokedAt)},
	}
	if sv.Facts.CpuCount > 0 {
		fields = append(fields, [2]string{"CPUs", strconv.FormatInt(sv.Facts.CpuCount, 10)})
	}
	if sv.Facts.MemoryBytes > 0 {
		fields = append(fields, [2]string{"Memory", fmt.Sprintf("%.1f GiB", float64(sv.Facts.MemoryBytes)/(1<<30))})
	}
	if m := sv.LatestMetrics; !m.At.IsZero() {
		fields = append(fields, [2]string{"Metrics", fmt.Sprintf("cpu %.0f%%, load %.2f, %s", m.CpuPercent, m.Load1, ago(m.At))})
	}
	return showDetail(s.ClientFlags, sv, fields, nil)
}

type serversEnrollCmd struct {
	ClientFlags
	Name string   `arg:"" help:"The new server's name: 1 to 63 letters, digits, '.', '-' or '_'."`
	Tags []string `name:"tag" help:"A tag for the server (repeat for several)."`
}

func (s serversEnrollCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, s.ClientFlags)
	if err != nil {
		return err
	}
	body := apiclient.CreateEnrollmentJSONRequestBody{Name: s.Name}
	if len(s.Tags) > 0 {
		body.Tags = &s.Tags
	}
	r, err := answered(c.api.CreateEnrollmentWithResponse(ctx, body)).or("enrolling " + s.Name)
	if err != nil {
		return err
	}
	e := r.JSON201
	fmt.Fprintf(os.Stderr, "Server %s (%s) waits for its agent. Run this as root on it before %s; its token is shown only now:\n",
		e.Server.Name, e.Server.Id, e.ExpiresAt.Local().Format(time.DateTime))
	if s.JSON {
		return printJSON(os.Stdout, e)
	}
	fmt.Println(e.InstallCommand)
	return nil
}

type serversRevokeCmd struct {
	ClientFlags
	Server string `arg:"" help:"The server's name or id."`
	Yes    bool   `name:"yes" help:"Revoke it: there is no undoing this."`
}

func (s serversRevokeCmd) Run(ctx context.Context) error {
	if !s.Yes {
		return exitf(exitUsage, "revoking %s stops its agent's credential at once and for good: its queued jobs are cancelled, "+
			"its running jobs fail, and it comes back only if enrolled again. Add --yes to revoke it", s.Server)
	}
	c, err := connect(ctx, s.ClientFlags)
	if err != nil {
		return err
	}
	id, err := findServer(ctx, c, s.Server)
	if err != nil {
		return err
	}
	r, err := answered(c.api.RevokeServerWithResponse(ctx, id)).or("revoking " + s.Server)
	if err != nil {
		return err
	}
	return done(s.ClientFlags, r.JSON200, "Server %s (%s) revoked.", r.JSON200.Name, r.JSON200.Id)
}

// Jobs.

type jobsLsCmd struct {
	ClientFlags
	Server string `name:"server" help:"Only this server's jobs (name or id)."`
	App    string `name:"app" help:"Only this application's jobs (name or id): its deploys, removal, logs and domain checks."`
	Type   string `name:"type" help:"Only jobs of this type, e.g. app.deploy, service.restart, backup.run."`
	State  string `name:"state" placeholder:"STATE" enum:",queued,running,succeeded,failed,cancelled" default:"" help:"Only jobs in this state: queued, running, succeeded, failed or cancelled."`
	Actor  string `name:"actor" help:"Only jobs queued by this user (e-mail or usr_… id), or system."`
	Limit  int64  `name:"limit" placeholder:"N" help:"How many, 1 to 100 (default 30), newest first."`
}

func (j jobsLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, j.ClientFlags)
	if err != nil {
		return err
	}
	p := apiclient.ListJobsParams{}
	if j.Server != "" {
		id, err := findServer(ctx, c, j.Server)
		if err != nil {
			return err
		}
		p.ServerId = &id
	}
	if j.App != "" {
		id, err := findApp(ctx, c, j.App)
		if err != nil {
			return err
		}
		p.AppId = &id
	}
	p.Type, p.Status, p.Actor, p.Limit = optional(j.Type), optional(j.State), optional(j.Actor), optionalInt(j.Limit)
	r, err := answered(c.api.ListJobsWithResponse(ctx, &p)).or("listing jobs")
	if err != nil {
		return err
	}
	var rows [][]string
	for _, job := range deref(r.JSON200.Jobs) {
		server := str(job.ServerName)
		if server == "" {
			server = job.ServerId
		}
		rows = append(rows, []string{job.Id, job.Type, string(job.Status), server, str(job.AppName), ago(job.CreatedAt)})
	}
	return show(j.ClientFlags, r.JSON200, []string{"ID", "TYPE", "STATE", "SERVER", "APP", "CREATED"}, rows)
}

// optional is a flag's value as an optional parameter: nil when empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optionalInt(n int64) *int64 {
	if n == 0 {
		return nil
	}
	return &n
}

type jobsShowCmd struct {
	ClientFlags
	ID string `arg:"" help:"The job's id (job_…)."`
}

func (j jobsShowCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, j.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.GetJobWithResponse(ctx, j.ID, &apiclient.GetJobParams{})).or("reading job " + j.ID)
	if err != nil {
		return err
	}
	job := r.JSON200
	why := str(job.Error)
	if why == "" {
		why = str(job.ErrorClass)
	}
	actor := string(job.Actor.Type)
	if e := str(job.Actor.Email); e != "" {
		actor = e
	}
	fields := [][2]string{
		{"ID", job.Id}, {"Type", job.Type}, {"State", string(job.Status)},
		{"Server", strings.TrimSpace(str(job.ServerName) + " " + job.ServerId)},
		{"App", strings.TrimSpace(str(job.AppName) + " " + str(job.AppId))}, {"By", actor},
		{"Created", ago(job.CreatedAt)}, {"Started", when(job.StartedAt)}, {"Finished", when(job.FinishedAt)}, {"Error", why},
	}
	return showDetail(j.ClientFlags, job, fields, deref(job.Events))
}

type jobsCancelCmd struct {
	ClientFlags
	ID string `arg:"" help:"The job's id (job_…); only a queued job can be cancelled."`
}

func (j jobsCancelCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, j.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.CancelJobWithResponse(ctx, j.ID)).or("cancelling job " + j.ID)
	if err != nil {
		return err
	}
	return done(j.ClientFlags, r.JSON200, "Job %s (%s) cancelled.", j.ID, r.JSON200.Type)
}

// Applications.

type appsShowCmd struct {
	ClientFlags
	App string `arg:"" help:"The application's name or id."`
}

func (a appsShowCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, a.ClientFlags)
	if err != nil {
		return err
	}
	id, err := findApp(ctx, c, a.App)
	if err != nil {
		return err
	}
	// Never the environment's values: the command shows its keys.
	reveal := false
	r, err := answered(c.api.GetApplicationWithResponse(ctx, id, &apiclient.GetApplicationParams{Reveal: &reveal})).or("reading application " + a.App)
	if err != nil {
		return err
	}
	app := r.JSON200
	var addrs []string
	for _, ad := range deref(app.Addresses) {
		addrs = append(addrs, ad.Url)
	}
	fields := [][2]string{
		{"Name", app.Name}, {"ID", app.Id}, {"Kind", string(app.Kind)}, {"Status", string(app.Status)},
		{"Server", app.ServerId}, {"Source", sourceText(app.Source)}, {"Port", portText(app.ContainerPort)},
		{"Health path", app.HealthPath}, {"Memory limit", app.MemoryLimit},
		{"Env", strings.Join(deref(app.EnvKeys), ", ")}, {"Addresses", strings.Join(addrs, ", ")},
		{"Current", deploymentText(app.Current)}, {"Latest", deploymentText(app.Latest)},
		{"Created", ago(app.CreatedAt)},
	}
	return showDetail(a.ClientFlags, app, fields, nil)
}

func sourceText(s apiclient.Source) string {
	switch {
	case s.Image != nil:
		return string(s.Type) + " " + *s.Image
	case s.Branch != nil:
		return string(s.Type) + " branch " + *s.Branch
	}
	return string(s.Type)
}

func portText(p int64) string {
	if p == 0 {
		return ""
	}
	return strconv.FormatInt(p, 10)
}

// deploymentText is one deployment on a line: "" for none.
func deploymentText(d apiclient.Deployment) string {
	if d.Id == "" {
		return ""
	}
	return fmt.Sprintf("%s %s (%s)", d.Id, d.Status, ago(d.CreatedAt))
}

type appsCreateCmd struct {
	ClientFlags
	Name       string        `arg:"" help:"The application's name: a DNS label, unique on its server."`
	Server     string        `name:"server" required:"" help:"The server it runs on (name or id)."`
	Image      string        `name:"image" required:"" help:"The Docker image to run, e.g. ghcr.io/acme/web:1.4.2."`
	Port       int64         `name:"port" help:"The port the container listens on."`
	HealthPath string        `name:"health-path" help:"The path that must answer 2xx or 3xx before a release takes traffic (default /)."`
	Memory     string        `name:"memory" help:"A memory limit, e.g. 512m or 1g."`
	NoDeploy   bool          `name:"no-deploy" help:"Create it without deploying it."`
	Wait       bool          `name:"wait" help:"Follow the first deployment live and exit 0 only when it succeeded."`
	Timeout    time.Duration `name:"timeout" default:"30m" help:"With --wait: give up following after this long (exit 5); the deployment goes on."`
}

func (a appsCreateCmd) Run(parent context.Context) error {
	if a.NoDeploy && a.Wait {
		return exitf(exitUsage, "--no-deploy and --wait: there is nothing to wait for")
	}
	c, err := connect(parent, a.ClientFlags)
	if err != nil {
		return err
	}
	serverID, err := findServer(parent, c, a.Server)
	if err != nil {
		return err
	}
	body := apiclient.CreateApplicationJSONRequestBody{
		Name: a.Name, ServerId: serverID,
		Source:        apiclient.Source{Type: apiclient.Image, Image: &a.Image},
		ContainerPort: optionalInt(a.Port), HealthPath: optional(a.HealthPath), MemoryLimit: optional(a.Memory),
	}
	if a.NoDeploy {
		deploy := false
		body.Deploy = &deploy
	}
	r, err := answered(c.api.CreateApplicationWithResponse(parent, body)).or("creating " + a.Name)
	if err != nil {
		return err
	}
	app := r.JSON201
	if app.Latest.Id == "" {
		return done(a.ClientFlags, app, "Application %s (%s) created; deploy it with `capstan apps deploy %s`.", app.Name, app.Id, app.Name)
	}
	fmt.Fprintf(os.Stderr, "Application %s (%s) created.\n", app.Name, app.Id)
	if !a.Wait {
		return done(a.ClientFlags, app, "Deployment %s of %s queued.", app.Latest.Id, app.Name)
	}
	fmt.Fprintf(os.Stderr, "Deployment %s of %s queued.\n", app.Latest.Id, app.Name)
	return followDeployment(parent, c, a.JSON, a.Timeout, app.Id, app.Latest.Id, str(app.Latest.JobId))
}

// deploymentQueued reports a deployment the API accepted: its id (or
// document with --json), or with wait its end.
func deploymentQueued(parent context.Context, c *conn, f ClientFlags, wait bool, timeout time.Duration, appID string, dep *apiclient.DeploymentAcceptedOutputBody) error {
	if !wait {
		if f.JSON {
			return printJSON(os.Stdout, dep)
		}
		fmt.Println(dep.DeploymentId)
		return nil
	}
	return followDeployment(parent, c, f.JSON, timeout, appID, dep.DeploymentId, dep.JobId)
}

// followDeployment follows a deployment live to its end, printing its
// job's progress on stderr, and exits 0 only when it succeeded. jobID is
// "" while the deployment waits for the application's previous one.
func followDeployment(parent context.Context, c *conn, asJSON bool, timeout time.Duration, appID, depID, jobID string) error {
	ctx, cancel := withTimeout(parent, timeout)
	defer cancel()
	f := &follower{c: c, log: os.Stderr, jobID: jobID, appID: appID}
	var last *apiclient.DeploymentDetail
	err := f.run(ctx, func(ctx context.Context) (bool, error) {
		g, err := answered(c.api.GetDeploymentWithResponse(ctx, depID)).or("reading deployment " + depID)
		if err != nil {
			return false, err
		}
		last = g.JSON200
		if last.JobId != nil {
			f.jobID = *last.JobId
		}
		if last.Events != nil {
			f.printEvents(*last.Events)
		}
		return terminal(string(last.Status)), nil
	})
	if err != nil {
		again := "capstan deployments show " + depID
		if f.jobID != "" {
			again = "capstan jobs wait " + f.jobID
		}
		return stopped(ctx, parent, err, again)
	}
	return finished(asJSON, last, "deployment "+depID, string(last.Status), last.Error)
}

type appsRollbackCmd struct {
	ClientFlags
	App     string        `arg:"" help:"The application's name or id."`
	To      string        `name:"to" help:"The deployment to release again (dep_…); default: the last succeeded deployment before the live one."`
	Wait    bool          `name:"wait" help:"Follow the rollback live and exit 0 only when it succeeded."`
	Timeout time.Duration `name:"timeout" default:"30m" help:"With --wait: give up following after this long (exit 5); the deployment goes on."`
}

func (a appsRollbackCmd) Run(parent context.Context) error {
	c, err := connect(parent, a.ClientFlags)
	if err != nil {
		return err
	}
	appID, err := findApp(parent, c, a.App)
	if err != nil {
		return err
	}
	var target apiclient.Deployment
	if a.To != "" {
		g, err := answered(c.api.GetDeploymentWithResponse(parent, a.To)).or("reading deployment " + a.To)
		if err != nil {
			return err
		}
		if g.JSON200.ApplicationId != appID {
			return exitf(exitUsage, "deployment %s is not one of %s's (it is %s's)", a.To, a.App, g.JSON200.ApplicationId)
		}
		target = apiclient.Deployment{Id: g.JSON200.Id, Spec: g.JSON200.Spec, ImageId: g.JSON200.ImageId}
	} else if target, err = previousDeployment(parent, c, a.App, appID); err != nil {
		return err
	}
	r, err := answered(c.api.RollbackDeploymentWithResponse(parent, target.Id)).or("rolling " + a.App + " back to " + target.Id)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Rollback of %s to %s (%s): deployment %s queued.\n", a.App, target.Id, target.Spec.Image, r.JSON202.DeploymentId)
	return deploymentQueued(parent, c, a.ClientFlags, a.Wait, a.Timeout, appID, r.JSON202)
}

// previousDeployment is the last deployment that succeeded before the
// application's live one: what a rollback releases by default. A
// deployment that failed after the live one changed nothing that runs,
// so it is not what is rolled back from.
func previousDeployment(ctx context.Context, c *conn, name, appID string) (apiclient.Deployment, error) {
	var none apiclient.Deployment
	reveal := false
	g, err := answered(c.api.GetApplicationWithResponse(ctx, appID, &apiclient.GetApplicationParams{Reveal: &reveal})).or("reading application " + name)
	if err != nil {
		return none, err
	}
	current := str(g.JSON200.CurrentDeploymentId)
	if current == "" {
		return none, exitf(exitFailed, "%s has no live deployment to roll back from", name)
	}
	limit := int64(100)
	l, err := answered(c.api.ListApplicationDeploymentsWithResponse(ctx, appID, &apiclient.ListApplicationDeploymentsParams{Limit: &limit})).or("listing the deployments of " + name)
	if err != nil {
		return none, err
	}
	seen := false
	for _, d := range deref(l.JSON200.Deployments) { // newest first
		switch {
		case d.Id == current:
			seen = true
		case seen && d.Status == apiclient.DeploymentStatusSucceeded:
			return d, nil
		}
	}
	return none, exitf(exitFailed, "%s has no succeeded deployment before the live one (%s) to roll back to", name, current)
}

type appsEnvCmd struct {
	Set   appsEnvSetCmd   `cmd:"" help:"Set environment variables (KEY=VALUE; KEY=- reads the value from stdin) for the next deployment."`
	Unset appsEnvUnsetCmd `cmd:"" help:"Remove environment variables for the next deployment."`
}

type appsEnvSetCmd struct {
	ClientFlags
	App  string   `arg:"" help:"The application's name or id."`
	Vars []string `arg:"" name:"KEY=VALUE" help:"Variables to set; KEY=- takes the value from stdin (one such variable)."`
}

func (e appsEnvSetCmd) Run(ctx context.Context) error {
	vars, err := envVars(e.Vars, os.Stdin)
	if err != nil {
		return err
	}
	keys := make([]string, len(vars))
	for i, v := range vars {
		keys[i] = v.Key
	}
	return changeEnv(ctx, e.ClientFlags, e.App, apiclient.ChangeApplicationEnvJSONRequestBody{Set: &vars},
		"Set %s on %s; the next deployment uses them.", strings.Join(keys, ", "))
}

// envVars parses KEY=VALUE arguments; a value of - is read from stdin
// (without its last line end), for one variable at most.
func envVars(args []string, stdin io.Reader) ([]apiclient.EnvVar, error) {
	var vars []apiclient.EnvVar
	fromStdin := false
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		switch {
		case !ok:
			return nil, exitf(exitUsage, "%q is not KEY=VALUE", a)
		case k == "":
			return nil, exitf(exitUsage, "a variable without a key: give KEY=VALUE")
		}
		if v == "-" {
			if fromStdin {
				return nil, exitf(exitUsage, "only one variable can take its value from stdin")
			}
			fromStdin = true
			b, err := io.ReadAll(io.LimitReader(stdin, 64<<10))
			if err != nil {
				return nil, err
			}
			v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		}
		vars = append(vars, apiclient.EnvVar{Key: k, Value: v})
	}
	return vars, nil
}

type appsEnvUnsetCmd struct {
	ClientFlags
	App  string   `arg:"" help:"The application's name or id."`
	Keys []string `arg:"" name:"KEY" help:"Variables to remove."`
}

func (e appsEnvUnsetCmd) Run(ctx context.Context) error {
	return changeEnv(ctx, e.ClientFlags, e.App, apiclient.ChangeApplicationEnvJSONRequestBody{Remove: &e.Keys},
		"Removed %s from %s; the next deployment goes without them.", strings.Join(e.Keys, ", "))
}

// changeEnv sends one change of an application's environment. The
// answer lists the keys only; no value is ever printed.
func changeEnv(ctx context.Context, f ClientFlags, ref string, body apiclient.ChangeApplicationEnvJSONRequestBody, format, keys string) error {
	c, err := connect(ctx, f)
	if err != nil {
		return err
	}
	id, err := findApp(ctx, c, ref)
	if err != nil {
		return err
	}
	r, err := answered(c.api.ChangeApplicationEnvWithResponse(ctx, id, body)).or("changing the environment of " + ref)
	if err != nil {
		return err
	}
	for i := range deref(r.JSON200.Env) {
		(*r.JSON200.Env)[i].Value = nil
	}
	return done(f, r.JSON200, format, keys, ref)
}

// Deployments.

type deploymentsCmd struct {
	Ls   deploymentsLsCmd   `cmd:"" help:"List deployments, newest first."`
	Show deploymentsShowCmd `cmd:"" help:"Show a deployment and its progress events."`
}

type deploymentsLsCmd struct {
	ClientFlags
	App   string `name:"app" help:"Only this application's deployments (name or id)."`
	Limit int64  `name:"limit" placeholder:"N" help:"How many, 1 to 100 (default 30)."`
}

func (d deploymentsLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, d.ClientFlags)
	if err != nil {
		return err
	}
	var list *apiclient.DeploymentListOutputBody
	if d.App != "" {
		id, err := findApp(ctx, c, d.App)
		if err != nil {
			return err
		}
		r, err := answered(c.api.ListApplicationDeploymentsWithResponse(ctx, id, &apiclient.ListApplicationDeploymentsParams{Limit: optionalInt(d.Limit)})).or("listing the deployments of " + d.App)
		if err != nil {
			return err
		}
		list = r.JSON200
	} else {
		r, err := answered(c.api.ListDeploymentsWithResponse(ctx, &apiclient.ListDeploymentsParams{Limit: optionalInt(d.Limit)})).or("listing deployments")
		if err != nil {
			return err
		}
		list = r.JSON200
	}
	var rows [][]string
	for _, dep := range deref(list.Deployments) {
		image := dep.Spec.Image
		if dep.Spec.Git != nil {
			image = str(dep.Ref)
		}
		rows = append(rows, []string{dep.Id, dep.Spec.AppName, string(dep.Status), image, str(dep.RollbackOf), ago(dep.CreatedAt)})
	}
	return show(d.ClientFlags, list, []string{"ID", "APP", "STATUS", "IMAGE", "ROLLBACK OF", "CREATED"}, rows)
}

type deploymentsShowCmd struct {
	ClientFlags
	ID string `arg:"" help:"The deployment's id (dep_…)."`
}

func (d deploymentsShowCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, d.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.GetDeploymentWithResponse(ctx, d.ID)).or("reading deployment " + d.ID)
	if err != nil {
		return err
	}
	dep := r.JSON200
	fields := [][2]string{
		{"ID", dep.Id}, {"App", strings.TrimSpace(dep.Spec.AppName + " " + dep.ApplicationId)}, {"Status", string(dep.Status)},
		{"Image", dep.Spec.Image}, {"Ref", str(dep.Ref)}, {"Image id", dep.ImageId}, {"Rollback of", str(dep.RollbackOf)},
		{"Job", str(dep.JobId)}, {"Created", ago(dep.CreatedAt)}, {"Started", when(dep.StartedAt)},
		{"Finished", when(dep.FinishedAt)}, {"Error", str(dep.Error)},
	}
	return showDetail(d.ClientFlags, dep, fields, deref(dep.Events))
}

// Alerts.

type alertsCmd struct {
	Ls  alertsLsCmd  `cmd:"" help:"List alerts, newest first."`
	Ack alertsAckCmd `cmd:"" help:"Acknowledge an open alert."`
}

type alertsLsCmd struct {
	ClientFlags
	State  string `name:"state" enum:"open,resolved,all" default:"open" help:"open (default), resolved or all."`
	Limit  int64  `name:"limit" placeholder:"N" help:"How many, 1 to 200 (default 50)."`
	Before string `name:"before" help:"The page after this cursor (printed after a full page)."`
}

func (a alertsLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, a.ClientFlags)
	if err != nil {
		return err
	}
	state := apiclient.ListAlertsParamsState(a.State)
	r, err := answered(c.api.ListAlertsWithResponse(ctx, &apiclient.ListAlertsParams{State: &state, Limit: optionalInt(a.Limit), Before: optional(a.Before)})).or("listing alerts")
	if err != nil {
		return err
	}
	var rows [][]string
	for _, al := range deref(r.JSON200.Alerts) {
		subject := string(al.Subject.Type) + " " + al.Subject.Name
		if dt := str(al.Subject.Detail); dt != "" {
			subject += " " + dt
		}
		acked := ""
		if al.AcknowledgedAt != nil {
			acked = ago(*al.AcknowledgedAt)
		}
		rows = append(rows, []string{al.Id, al.Kind, string(al.Severity), string(al.State), subject,
			strconv.FormatFloat(al.Value, 'f', -1, 64) + " " + al.Unit, ago(al.OpenedAt), acked})
	}
	if err := show(a.ClientFlags, r.JSON200, []string{"ID", "KIND", "SEVERITY", "STATE", "SUBJECT", "VALUE", "OPENED", "ACKNOWLEDGED"}, rows); err != nil {
		return err
	}
	moreAfter(a.ClientFlags, r.JSON200.NextCursor)
	return nil
}

type alertsAckCmd struct {
	ClientFlags
	ID string `arg:"" help:"The alert's id (alr_…)."`
}

func (a alertsAckCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, a.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.AcknowledgeAlertWithResponse(ctx, a.ID)).or("acknowledging alert " + a.ID)
	if err != nil {
		return err
	}
	return done(a.ClientFlags, r.JSON200, "Alert %s (%s on %s) acknowledged.", a.ID, r.JSON200.Kind, r.JSON200.Subject.Name)
}

// API tokens.

type tokensCmd struct {
	Ls     tokensLsCmd     `cmd:"" help:"List your API tokens (an administrator's: everyone's)."`
	Create tokensCreateCmd `cmd:"" help:"Make an API token; it is printed once, on stdout. Needs a signed-in session, not a token."`
	Revoke tokensRevokeCmd `cmd:"" help:"Revoke an API token: it is refused from its next call."`
}

type tokensLsCmd struct {
	ClientFlags
}

func (t tokensLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, t.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.ListTokensWithResponse(ctx)).or("listing tokens")
	if err != nil {
		return err
	}
	var rows [][]string
	for _, tok := range deref(r.JSON200.Tokens) {
		expires := "never"
		if tok.ExpiresAt != nil {
			expires = tok.ExpiresAt.Local().Format(time.DateOnly)
		}
		rows = append(rows, []string{tok.Id, tok.Name, strings.Join(deref(tok.Scopes), ","), strings.Join(deref(tok.Resources), ","),
			tok.UserEmail, expires, when(tok.LastUsedAt)})
	}
	return show(t.ClientFlags, r.JSON200, []string{"ID", "NAME", "SCOPES", "RESOURCES", "OWNER", "EXPIRES", "LAST USED"}, rows)
}

type tokensCreateCmd struct {
	ClientFlags
	Name      string   `arg:"" help:"What the token is for, e.g. \"deploy from CI\"."`
	Scopes    []string `name:"scope" required:"" help:"read, read:secrets, deploy, operate, write or admin (repeat for several)."`
	Resources []string `name:"resource" help:"Narrow it to app:APP, server:SERVER (names or ids), db:ID or server-tag:TAG (repeat for several)."`
	Expires   string   `name:"expires" help:"Days until it expires, e.g. 30d (1 to 365; default 90), or never (administrators)."`
}

func (t tokensCreateCmd) Run(ctx context.Context) error {
	body := apiclient.CreateTokenJSONRequestBody{Name: t.Name, Scopes: &t.Scopes}
	switch e := t.Expires; {
	case e == "":
	case e == "never":
		never := true
		body.NeverExpires = &never
	default:
		days, err := strconv.ParseInt(strings.TrimSuffix(e, "d"), 10, 64)
		if err != nil {
			return exitf(exitUsage, "--expires %q: give days, e.g. 30d, or never", e)
		}
		body.ExpiresInDays = &days
	}
	c, err := connect(ctx, t.ClientFlags)
	if err != nil {
		return err
	}
	if len(t.Resources) > 0 {
		res := make([]string, len(t.Resources))
		for i, rs := range t.Resources {
			if res[i], err = resourceID(ctx, c, rs); err != nil {
				return err
			}
		}
		body.Resources = &res
	}
	r, err := answered(c.api.CreateTokenWithResponse(ctx, body)).or("making token " + t.Name)
	if err != nil {
		return err
	}
	tok := r.JSON201
	fmt.Fprintf(os.Stderr, "Token %s (%s) made. It is shown only now: keep it somewhere safe.\n", tok.Name, tok.Id)
	if t.JSON {
		return printJSON(os.Stdout, tok)
	}
	fmt.Println(tok.Token)
	return nil
}

// resourceID is a token's resource with the application or server named
// by its id, as the API takes it.
func resourceID(ctx context.Context, c *conn, r string) (string, error) {
	prefix, ref, _ := strings.Cut(r, ":")
	var k kind
	switch prefix {
	case "app":
		k = appKind
	case "server":
		k = serverKind
	default:
		return r, nil
	}
	id, err := resolve(ctx, c, k, ref)
	return prefix + ":" + id, err
}

type tokensRevokeCmd struct {
	ClientFlags
	ID string `arg:"" help:"The token's id (as tokens ls shows it)."`
}

func (t tokensRevokeCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, t.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.RevokeTokenWithResponse(ctx, t.ID)).or("revoking token " + t.ID)
	if err != nil {
		return err
	}
	return done(t.ClientFlags, r.JSON200, "Token %s (%s) revoked.", r.JSON200.Name, t.ID)
}

// The audit log.

type auditCmd struct {
	Ls auditLsCmd `cmd:"" help:"List audit log entries, newest first."`
}

type auditLsCmd struct {
	ClientFlags
	Action     string `name:"action" help:"Only this action, or a prefix ending in .* (auth.*)."`
	Actor      string `name:"actor" help:"Only entries of this actor: a user's e-mail address, or an id (usr_…, srv_…)."`
	TargetType string `name:"target-type" help:"Only entries about objects of this type, e.g. server, application."`
	Target     string `name:"target" help:"Only entries about this object (its id)."`
	Since      string `name:"since" help:"Entries at or after this time: RFC 3339, or a duration ago (24h)."`
	Until      string `name:"until" help:"Entries before this time: RFC 3339, or a duration ago."`
	Limit      int64  `name:"limit" placeholder:"N" help:"How many, 1 to 200 (default 50)."`
	Before     string `name:"before" help:"The page after this cursor (printed after a full page)."`
}

func (a auditLsCmd) Run(ctx context.Context) error {
	p := apiclient.ListAuditLogsParams{Action: optional(a.Action), Actor: optional(a.Actor), TargetType: optional(a.TargetType),
		TargetId: optional(a.Target), Limit: optionalInt(a.Limit), Before: optional(a.Before)}
	var err error
	if p.Since, err = timeFlag("--since", a.Since); err != nil {
		return err
	}
	if p.Until, err = timeFlag("--until", a.Until); err != nil {
		return err
	}
	c, err := connect(ctx, a.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.ListAuditLogsWithResponse(ctx, &p)).or("reading the audit log")
	if err != nil {
		return err
	}
	var rows [][]string
	for _, e := range deref(r.JSON200.Entries) {
		actor := str(e.Actor.Email)
		if actor == "" {
			actor = e.Actor.Id
		}
		if n := str(e.Actor.TokenName); n != "" {
			actor += " (token " + n + ")"
		}
		target := strings.TrimSpace(str(e.Target.Type) + " " + str(e.Target.Id))
		rows = append(rows, []string{e.At.Local().Format(time.DateTime), e.Action, actor, target, e.Ip, e.UserAgent})
	}
	if err := show(a.ClientFlags, r.JSON200, []string{"AT", "ACTION", "ACTOR", "TARGET", "IP", "CLIENT"}, rows); err != nil {
		return err
	}
	moreAfter(a.ClientFlags, r.JSON200.NextCursor)
	return nil
}

// timeFlag parses a time given as RFC 3339 or as a duration before now.
func timeFlag(name, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return &t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, exitf(exitUsage, "%s %q: give an RFC 3339 time or a duration such as 24h", name, v)
	}
	t := time.Now().Add(-d)
	return &t, nil
}
