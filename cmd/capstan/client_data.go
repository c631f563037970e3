package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apiclient"
)

// followPause is how long `logs --follow` waits after a read that found
// no new line before it reads again: the API has no push of log lines,
// only a cursor to continue from.
const followPause = 2 * time.Second

// logsCmd prints an application's log, or a journal unit's or a
// container's on a server.
type logsCmd struct {
	ClientFlags
	App       string `arg:"" optional:"" help:"The application's name or id."`
	Lines     int64  `name:"lines" short:"n" default:"200" help:"How many of the latest lines: 1 to 1000."`
	Since     string `name:"since" help:"Only lines at or after this: a duration back from now (10m, 2h) or an RFC 3339 time."`
	Follow    bool   `name:"follow" short:"f" help:"Keep printing new lines until Ctrl-C."`
	Server    string `name:"server" help:"With --unit or --container instead of an application: the server (srv_…)."`
	Unit      string `name:"unit" help:"A systemd unit on --server whose journal to read (….service)."`
	Container string `name:"container" help:"A Docker container on --server whose log to read."`
}

func (l logsCmd) Run(ctx context.Context) error {
	if l.Lines < 1 || l.Lines > 1000 {
		return exitf(exitUsage, "--lines %d: give 1 to 1000", l.Lines)
	}
	since, err := parseSince(l.Since, time.Now())
	if err != nil {
		return err
	}
	hostLog := l.Server != "" || l.Unit != "" || l.Container != ""
	switch {
	case hostLog && l.App != "":
		return exitf(exitUsage, "give an application, or --server with --unit or --container: not both")
	case hostLog && (l.Server == "" || (l.Unit == "") == (l.Container == "")):
		return exitf(exitUsage, "--server goes with one of --unit and --container")
	case !hostLog && l.App == "":
		return exitf(exitUsage, "give an application, or --server with --unit or --container")
	}
	c, err := connect(ctx, l.ClientFlags)
	if err != nil {
		return err
	}
	lines := l.Lines
	read := apiclient.LogReadInputBody{ServerId: l.Server, Lines: &lines}
	switch {
	case l.Unit != "":
		read.Source, read.Unit = agentproto.LogSourceJournal, &l.Unit
	case l.Container != "":
		read.Source, read.Container = agentproto.LogSourceContainer, &l.Container
	default:
		res, err := l.appLogs(ctx, c, since)
		if err != nil || !l.Follow {
			return err
		}
		// Following goes on by the cursor of the log the application's
		// read came from: its live container, or its live slot's unit.
		if read, err = l.appSource(ctx, c, res); err != nil {
			return err
		}
	}
	for {
		res, err := readLog(ctx, c, read)
		if err != nil {
			if l.Follow && ctx.Err() != nil {
				return nil // Ctrl-C ends following
			}
			return err
		}
		if !l.Follow && l.JSON {
			return printJSON(os.Stdout, res)
		}
		n := 0
		if res.Lines != nil {
			n = len(*res.Lines)
			l.print(*res.Lines, since)
		}
		if !l.Follow {
			return nil
		}
		if res.Cursor != nil && *res.Cursor != "" {
			read.Cursor = res.Cursor
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(followPause):
			}
		}
	}
}

// appLogs reads the application's latest lines and, unless following,
// prints them; following, it reads one line only, to learn where the
// log is (the lines are read again by cursor).
func (l logsCmd) appLogs(ctx context.Context, c *conn, since time.Time) (*apiclient.AppLogs, error) {
	appID, err := findApp(ctx, c, l.App)
	if err != nil {
		return nil, err
	}
	body := apiclient.ReadApplicationLogsJSONRequestBody{Lines: &l.Lines}
	if l.Follow {
		one := int64(1)
		body.Lines = &one
	}
	if !since.IsZero() && !l.Follow {
		s := since.UTC().Format(time.RFC3339)
		body.Since = &s
	}
	r, err := answered(c.api.ReadApplicationLogsWithResponse(ctx, appID, body)).or("reading the logs of " + l.App)
	if err != nil {
		return nil, err
	}
	// The read's progress is not the log: only its lines are printed.
	j, err := waitJob(ctx, c, r.JSON202.JobId, io.Discard)
	if err != nil {
		return nil, err
	}
	g, err := answered(c.api.GetApplicationLogsWithResponse(ctx, appID, j.Id)).or("reading the logs of " + l.App)
	if err != nil {
		return nil, err
	}
	res := g.JSON200
	if res.Status != "succeeded" {
		return nil, exitf(exitFailed, "reading the logs of %s: %s", l.App, orStatus(res.Error, string(res.Status)))
	}
	if res.Redacted {
		return nil, exitf(exitAuth, "the logs of %s are readable by administrators only", l.App)
	}
	if l.Follow {
		return res, nil
	}
	if l.JSON {
		return res, printJSON(os.Stdout, res)
	}
	if res.Lines != nil {
		l.print(*res.Lines, time.Time{})
	}
	return res, nil
}

// appSource is the log read that continues an application's log.
func (l logsCmd) appSource(ctx context.Context, c *conn, res *apiclient.AppLogs) (apiclient.LogReadInputBody, error) {
	lines := l.Lines
	read := apiclient.LogReadInputBody{Lines: &lines}
	appID, err := findApp(ctx, c, l.App)
	if err != nil {
		return read, err
	}
	a, err := answered(c.api.GetApplicationWithResponse(ctx, appID, &apiclient.GetApplicationParams{})).or("reading application " + l.App)
	if err != nil {
		return read, err
	}
	read.ServerId = a.JSON200.ServerId
	switch {
	case res.Unit != nil && *res.Unit != "":
		read.Source, read.Unit = agentproto.LogSourceJournal, res.Unit
	case res.ContainerId != nil && *res.ContainerId != "":
		read.Source, read.Container = agentproto.LogSourceContainer, res.ContainerId
	default:
		return read, exitf(exitFailed, "%s has no live container or unit to follow (state %q)", l.App, res.State)
	}
	return read, nil
}

// print writes log lines on stdout, those before since left out: as
// JSON Lines with --json (when following, a stream has no one document).
func (l logsCmd) print(lines []apiclient.LogLine, since time.Time) {
	enc := json.NewEncoder(os.Stdout)
	for _, ln := range lines {
		if ln.At.Before(since) {
			continue
		}
		if l.JSON {
			_ = enc.Encode(ln)
			continue
		}
		fmt.Printf("%s  %s\n", ln.At.Local().Format("2006-01-02 15:04:05"), strings.TrimRight(ln.Message, "\n"))
	}
}

// readLog queues one log read and returns it once it ended.
func readLog(ctx context.Context, c *conn, body apiclient.LogReadInputBody) (*apiclient.Result, error) {
	what := "reading the log of " + body.Source
	if body.Unit != nil {
		what = "reading the journal of " + *body.Unit
	} else if body.Container != nil {
		what = "reading the log of container " + *body.Container
	}
	r, err := answered(c.api.ReadLogsWithResponse(ctx, body)).or(what)
	if err != nil {
		return nil, err
	}
	wait := int64(30)
	for {
		g, err := answered(c.api.GetLogReadWithResponse(ctx, r.JSON202.JobId, &apiclient.GetLogReadParams{Wait: &wait})).or(what)
		if err != nil {
			return nil, err
		}
		res := g.JSON200
		if !terminal(res.Status) {
			continue // the API's wait passed: ask again
		}
		if res.Status != "succeeded" {
			return nil, exitf(exitFailed, "%s: %s", what, orStatus(res.Error, res.Status))
		}
		if res.Redacted {
			return nil, exitf(exitAuth, "%s: log lines are readable by administrators only", what)
		}
		return res, nil
	}
}

// parseSince reads --since: a duration back from now, or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, exitf(exitUsage, "--since %q: give a duration (10m) or an RFC 3339 time", s)
}

func orStatus(why *string, status string) string {
	if why != nil && *why != "" {
		return *why
	}
	return status
}

type dbCmd struct {
	Ls     dbLsCmd     `cmd:"" help:"List database instances."`
	Query  dbQueryCmd  `cmd:"" help:"Run one SQL statement and print its rows (read-only unless --write)."`
	Export dbExportCmd `cmd:"" help:"Dump one database as .sql.gz into a file, following the export to its end."`
	Import dbImportCmd `cmd:"" help:"Load a .sql, .sql.gz or custom-format dump into a database, following the load to its end."`
}

// findDatabase resolves a database instance's name or id.
func findDatabase(ctx context.Context, c *conn, ref string) (apiclient.Detail, error) {
	r, err := answered(c.api.ListDatabasesWithResponse(ctx)).or("finding database instance " + ref)
	if err != nil {
		return apiclient.Detail{}, err
	}
	if r.JSON200.Databases != nil {
		for _, d := range *r.JSON200.Databases {
			if d.Id == ref || d.Name == ref {
				return d, nil
			}
		}
	}
	return apiclient.Detail{}, exitf(exitNotFound, "no database instance named %q", ref)
}

type dbLsCmd struct {
	ClientFlags
}

func (d dbLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, d.ClientFlags)
	if err != nil {
		return err
	}
	r, err := answered(c.api.ListDatabasesWithResponse(ctx)).or("listing database instances")
	if err != nil {
		return err
	}
	list := []apiclient.Detail{}
	if r.JSON200.Databases != nil {
		list = *r.JSON200.Databases
	}
	rows := make([][]string, 0, len(list))
	for _, db := range list {
		kind := "external"
		if db.Managed {
			kind = "managed"
		}
		rows = append(rows, []string{db.Name, db.Id, string(db.Engine) + " " + db.Version, kind, string(db.State), db.Database, db.ServerId})
	}
	return show(d.ClientFlags, map[string]any{"databases": list}, []string{"NAME", "ID", "ENGINE", "KIND", "STATE", "DATABASE", "SERVER"}, rows)
}

type dbQueryCmd struct {
	ClientFlags
	DB       string        `arg:"" name:"instance" help:"The database instance's name or id."`
	SQL      string        `arg:"" name:"sql" help:"One SQL statement."`
	Database string        `name:"database" short:"d" help:"The database to run it in (default: the instance's initial one)."`
	MaxRows  int64         `name:"max-rows" default:"100" help:"At most this many rows, 1 to 1000; the rest are not fetched."`
	Write    bool          `name:"write" help:"Let the statement write: without it the engine keeps the transaction read-only."`
	Timeout  time.Duration `name:"timeout" default:"5m" help:"Give up following after this long (exit 5); the query goes on."`
}

func (q dbQueryCmd) Run(parent context.Context) error {
	c, err := connect(parent, q.ClientFlags)
	if err != nil {
		return err
	}
	db, err := findDatabase(parent, c, q.DB)
	if err != nil {
		return err
	}
	readonly := !q.Write
	body := apiclient.QueryDatabaseJSONRequestBody{Sql: q.SQL, MaxRows: &q.MaxRows, Readonly: &readonly}
	if q.Database != "" {
		body.Database = &q.Database
	}
	r, err := answered(c.api.QueryDatabaseWithResponse(parent, db.Id, body)).or("querying " + q.DB)
	if err != nil {
		return err
	}
	res, err := q.result(parent, c, db.Id, r.JSON202.JobId)
	if err != nil {
		return err
	}
	if q.JSON {
		if err := printJSON(os.Stdout, res); err != nil {
			return err
		}
	}
	if res.Status != "succeeded" {
		return exitf(exitFailed, "query on %s %s: %s", q.DB, res.Status, orStatus(res.Error, string(res.Status)))
	}
	if res.Redacted {
		return exitf(exitAuth, "query on %s: its rows are readable by administrators only", q.DB)
	}
	var data agentproto.DBQueryResult
	if b, err := json.Marshal(res.Data); err != nil || json.Unmarshal(b, &data) != nil {
		return exitf(exitFailed, "query on %s: an answer of unknown shape", q.DB)
	}
	for _, n := range data.Notices {
		fmt.Fprintln(os.Stderr, n)
	}
	if data.Truncated {
		fmt.Fprintf(os.Stderr, "Only the first %d rows: give --max-rows for more (at most 1000).\n", len(data.Rows))
	}
	if data.RowsAffected != nil && len(data.Columns) == 0 {
		fmt.Fprintf(os.Stderr, "%d rows affected.\n", *data.RowsAffected)
	}
	if q.JSON || len(data.Columns) == 0 {
		return nil
	}
	header := make([]string, len(data.Columns))
	for i, col := range data.Columns {
		header[i] = strings.ToUpper(col.Name)
	}
	rows := make([][]string, 0, len(data.Rows))
	for _, row := range data.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = cell(v)
		}
		rows = append(rows, cells)
	}
	return show(q.ClientFlags, nil, header, rows)
}

// result follows the query's job and reads its answer.
func (q dbQueryCmd) result(parent context.Context, c *conn, dbID, jobID string) (*apiclient.JobResult, error) {
	ctx, cancel := withTimeout(parent, q.Timeout)
	defer cancel()
	if _, err := waitJob(ctx, c, jobID, os.Stderr); err != nil {
		return nil, stopped(ctx, parent, err, "capstan jobs wait "+jobID)
	}
	g, err := answered(c.api.GetDatabaseJobWithResponse(parent, dbID, jobID, &apiclient.GetDatabaseJobParams{})).or("reading query " + jobID)
	if err != nil {
		return nil, err
	}
	return g.JSON200, nil
}

// cell is a value of a row as a table shows it: NULL for null.
func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		return strings.ReplaceAll(v, "\n", `\n`)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

type dbExportCmd struct {
	ClientFlags
	DB       string        `arg:"" name:"instance" help:"The database instance's name or id."`
	Database string        `name:"database" short:"d" help:"The database to dump (default: the instance's initial one)."`
	Output   string        `name:"output" short:"o" required:"" type:"path" help:"The file to write the .sql.gz to; replaced only once the whole export arrived."`
	Timeout  time.Duration `name:"timeout" default:"30m" help:"Give up following after this long (exit 5); the export goes on."`
}

func (e dbExportCmd) Run(parent context.Context) error {
	c, err := connect(parent, e.ClientFlags)
	if err != nil {
		return err
	}
	db, err := findDatabase(parent, c, e.DB)
	if err != nil {
		return err
	}
	body := apiclient.ExportDatabaseJSONRequestBody{}
	if e.Database != "" {
		body.Database = &e.Database
	}
	r, err := answered(c.api.ExportDatabaseWithResponse(parent, db.Id, body)).or("exporting " + e.DB)
	if err != nil {
		return err
	}
	jobID := r.JSON202.JobId
	fmt.Fprintf(os.Stderr, "Export %s of %s queued.\n", jobID, e.DB)
	ctx, cancel := withTimeout(parent, e.Timeout)
	defer cancel()
	j, err := waitJob(ctx, c, jobID, os.Stderr)
	if err != nil {
		return stopped(ctx, parent, err, "capstan jobs wait "+jobID)
	}
	if j.Status != "succeeded" {
		return jobFinished(e.JSON, j)
	}
	n, err := download(parent, c, db.Id, jobID, e.Output)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Exported %s to %s (%s).\n", e.DB, e.Output, size(n))
	if e.JSON {
		return printJSON(os.Stdout, j)
	}
	return nil
}

// download writes a finished export to path: into a temporary file
// beside it, checked against the answer's length and SHA-256, and renamed
// over path only when it all arrived.
func download(ctx context.Context, c *conn, dbID, jobID, path string) (int64, error) {
	resp, err := c.api.DownloadDatabaseExport(ctx, dbID, jobID)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return 0, check(resp, b, "downloading export "+jobID)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // once renamed, there is nothing to remove
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("%d bytes of %d arrived", n, resp.ContentLength)
	}
	if want := resp.Header.Get("Repr-Digest"); err == nil && strings.HasPrefix(want, "sha-256=:") {
		if got := "sha-256=:" + base64.StdEncoding.EncodeToString(sum.Sum(nil)) + ":"; got != want {
			err = fmt.Errorf("its SHA-256 is not the one the control plane sent")
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return 0, exitf(exitFailed, "downloading export %s to %s: %v", jobID, path, err)
	}
	return n, nil
}

type dbImportCmd struct {
	ClientFlags
	DB       string        `arg:"" name:"instance" help:"The database instance's name or id."`
	File     string        `arg:"" name:"file" type:"existingfile" help:"The .sql, .sql.gz or PostgreSQL custom-format dump to load."`
	Database string        `name:"database" short:"d" help:"The database to load into; it must exist (default: the instance's initial one)."`
	Timeout  time.Duration `name:"timeout" default:"30m" help:"Give up following after this long (exit 5); the load goes on."`
}

func (i dbImportCmd) Run(parent context.Context) error {
	f, err := os.Open(i.File)
	if err != nil {
		return exitf(exitUsage, "%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	c, err := connect(parent, i.ClientFlags)
	if err != nil {
		return err
	}
	db, err := findDatabase(parent, c, i.DB)
	if err != nil {
		return err
	}
	params := &apiclient.ImportDatabaseParams{}
	if i.Database != "" {
		params.Database = &i.Database
	}
	// The control plane checks the upload's size against its limit before
	// it takes the body.
	withLength := func(_ context.Context, r *http.Request) error {
		r.ContentLength = st.Size()
		return nil
	}
	r, err := answered(c.api.ImportDatabaseWithBodyWithResponse(parent, db.Id, params, "application/octet-stream", f, withLength)).or("importing " + i.File + " into " + i.DB)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Uploaded %s (%s); import %s queued.\n", i.File, size(st.Size()), r.JSON202.JobId)
	return followJob(parent, c, i.ClientFlags, r.JSON202.JobId, i.Timeout)
}

type backupsCmd struct {
	Ls      backupsLsCmd      `cmd:"" help:"List backups, newest first."`
	Run     backupsRunCmd     `cmd:"" help:"Back up a database now, following the backup to its end."`
	Verify  backupsVerifyCmd  `cmd:"" help:"Test-restore a backup into a throwaway database and compare it with its manifest."`
	Restore backupsRestoreCmd `cmd:"" help:"Restore a backup over its database (--yes), or into a new one (--into)."`
}

// findBackup reads a backup by its id.
func findBackup(ctx context.Context, c *conn, id string) (*apiclient.RunView, error) {
	r, err := answered(c.api.GetBackupWithResponse(ctx, id)).or("reading backup " + id)
	if err != nil {
		return nil, err
	}
	return r.JSON200, nil
}

type backupsLsCmd struct {
	ClientFlags
	DB    string `name:"db" help:"Only this database instance's backups (its name or id)."`
	Limit int64  `name:"limit" default:"50" help:"How many: 1 to 200."`
}

func (b backupsLsCmd) Run(ctx context.Context) error {
	c, err := connect(ctx, b.ClientFlags)
	if err != nil {
		return err
	}
	p := &apiclient.ListBackupsParams{Limit: &b.Limit}
	if b.DB != "" {
		db, err := findDatabase(ctx, c, b.DB)
		if err != nil {
			return err
		}
		p.InstanceId = &db.Id
	}
	r, err := answered(c.api.ListBackupsWithResponse(ctx, p)).or("listing backups")
	if err != nil {
		return err
	}
	var runs []apiclient.RunView
	if r.JSON200.Runs != nil {
		runs = *r.JSON200.Runs
	}
	rows := make([][]string, 0, len(runs))
	for _, run := range runs {
		verified := "-"
		if !run.Verified.At.IsZero() {
			verified = "failed " + ago(run.Verified.At)
			if run.Verified.Ok {
				verified = "ok " + ago(run.Verified.At)
			}
		}
		rows = append(rows, []string{run.Id, run.InstanceId, run.Database, string(run.Status), size(run.Size), verified,
			string(run.Trigger), ago(run.CreatedAt)})
	}
	return show(b.ClientFlags, r.JSON200, []string{"ID", "INSTANCE", "DATABASE", "STATUS", "SIZE", "VERIFIED", "TRIGGER", "CREATED"}, rows)
}

type backupsRunCmd struct {
	ClientFlags
	DB       string        `arg:"" name:"instance" help:"The database instance's name or id."`
	Database string        `name:"database" short:"d" help:"The database to back up (default: the instance's initial one; none for key-value engines)."`
	Timeout  time.Duration `name:"timeout" default:"30m" help:"Give up following after this long (exit 5); the backup goes on."`
}

func (b backupsRunCmd) Run(parent context.Context) error {
	c, err := connect(parent, b.ClientFlags)
	if err != nil {
		return err
	}
	db, err := findDatabase(parent, c, b.DB)
	if err != nil {
		return err
	}
	body := apiclient.RunBackupJSONRequestBody{InstanceId: db.Id}
	if b.Database != "" {
		body.Database = &b.Database
	}
	r, err := answered(c.api.RunBackupWithResponse(parent, body)).or("backing up " + b.DB)
	if err != nil {
		return err
	}
	runID, jobID := r.JSON202.Run.Id, r.JSON202.JobId
	fmt.Fprintf(os.Stderr, "Backup %s of %s queued.\n", runID, b.DB)
	ctx, cancel := withTimeout(parent, b.Timeout)
	defer cancel()
	j, err := waitJob(ctx, c, jobID, os.Stderr)
	if err != nil {
		return stopped(ctx, parent, err, "capstan jobs wait "+jobID)
	}
	if j.Status != "succeeded" {
		return jobFinished(b.JSON, j)
	}
	run, err := findBackup(parent, c, runID)
	if err != nil {
		return err
	}
	if b.JSON {
		if err := printJSON(os.Stdout, run); err != nil {
			return err
		}
	} else {
		fmt.Println(run.Id)
	}
	if run.Status != apiclient.RunViewStatusSucceeded {
		return exitf(exitFailed, "backup %s %s: %s", run.Id, run.Status, run.Error)
	}
	fmt.Fprintf(os.Stderr, "Backup %s of %s succeeded (%s).\n", run.Id, b.DB, size(run.Size))
	return nil
}

type backupsVerifyCmd struct {
	ClientFlags
	ID      string        `arg:"" name:"backup" help:"The backup's id."`
	Timeout time.Duration `name:"timeout" default:"30m" help:"Give up following after this long (exit 5); the verification goes on."`
}

func (v backupsVerifyCmd) Run(parent context.Context) error {
	c, err := connect(parent, v.ClientFlags)
	if err != nil {
		return err
	}
	if _, err := findBackup(parent, c, v.ID); err != nil {
		return err
	}
	r, err := answered(c.api.VerifyBackupWithResponse(parent, v.ID)).or("verifying backup " + v.ID)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(parent, v.Timeout)
	defer cancel()
	j, err := waitJob(ctx, c, r.JSON202.JobId, os.Stderr)
	if err != nil {
		return stopped(ctx, parent, err, "capstan jobs wait "+r.JSON202.JobId)
	}
	if j.Status != "succeeded" {
		return jobFinished(v.JSON, j)
	}
	run, err := findBackup(parent, c, v.ID)
	if err != nil {
		return err
	}
	if v.JSON {
		if err := printJSON(os.Stdout, run); err != nil {
			return err
		}
	}
	if !run.Verified.Ok {
		details, _ := json.Marshal(run.Verified.Details)
		return exitf(exitFailed, "backup %s failed verification: %s", v.ID, details)
	}
	fmt.Fprintf(os.Stderr, "Backup %s verified: it restores, and its tables match its manifest.\n", v.ID)
	return nil
}

type backupsRestoreCmd struct {
	ClientFlags
	ID      string        `arg:"" name:"backup" help:"The backup's id."`
	Into    string        `name:"into" help:"Restore into this new database instead of over the backup's own."`
	Yes     bool          `name:"yes" help:"Restore over the backup's database: what was written to it since the backup is lost."`
	Timeout time.Duration `name:"timeout" default:"30m" help:"Give up following after this long (exit 5); the restore goes on."`
}

func (b backupsRestoreCmd) Run(parent context.Context) error {
	c, err := connect(parent, b.ClientFlags)
	if err != nil {
		return err
	}
	run, err := findBackup(parent, c, b.ID)
	if err != nil {
		return err
	}
	body := apiclient.RestoreBackupJSONRequestBody{Mode: apiclient.BackupRestoreInputBodyModeReplace}
	if b.Into != "" {
		body.Mode, body.Into = apiclient.BackupRestoreInputBodyModeNew, &b.Into
	} else if !b.Yes {
		target := "the whole instance's data"
		if run.Database != "" {
			target = fmt.Sprintf("database %q", run.Database)
		}
		return exitf(exitUsage, "restoring %s replaces %s of instance %s with the backup of %s: everything written "+
			"since is lost. Give --yes to restore over it, or --into NAME to restore into a new database",
			b.ID, target, instanceName(parent, c, run.InstanceId), run.CreatedAt.Local().Format("2006-01-02 15:04"))
	}
	r, err := answered(c.api.RestoreBackupWithResponse(parent, b.ID, body)).or("restoring backup " + b.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Restore of %s queued.\n", b.ID)
	return followJob(parent, c, b.ClientFlags, r.JSON202.JobId, b.Timeout)
}

// instanceName is a database instance's name, or its id when it cannot
// be read.
func instanceName(ctx context.Context, c *conn, id string) string {
	r, err := c.api.GetDatabaseWithResponse(ctx, id)
	if err != nil || r.JSON200 == nil {
		return id
	}
	return r.JSON200.Name
}

// size is a byte count as a person reads it.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
