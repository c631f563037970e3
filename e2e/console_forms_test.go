package e2e

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// formApp is an application as GET /api/v1/applications/{id} gives it,
// with every setting of every kind, to see that one kind's settings hold
// nothing of another's.
type formApp struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Kind          string `json:"kind"`
	ServerID      string `json:"server_id"`
	ContainerPort int    `json:"container_port"`
	Source        struct {
		Type           string `json:"type"`
		Image          string `json:"image"`
		InstallationID int64  `json:"installation_id"`
		RepoID         int64  `json:"repo_id"`
		Branch         string `json:"branch"`
	} `json:"source"`
	Compose      string   `json:"compose"`
	ComposeFile  string   `json:"compose_file"`
	WebService   string   `json:"web_service"`
	Dockerfile   string   `json:"dockerfile"`
	BuildContext string   `json:"build_context"`
	BuildArgKeys []string `json:"build_arg_keys"`
	Service      *struct {
		BuildCommand        string `json:"build_command"`
		StartCommand        string `json:"start_command"`
		BuildTimeoutSeconds int    `json:"build_timeout_seconds"`
	} `json:"service"`
	EnvKeys []string       `json:"env_keys"`
	Latest  *AppDeployment `json:"latest"`
}

// TestConsoleFormsApps drives the application create form in headless
// Chromium (web/e2e/forms-apps.mjs) against a real control plane whose git
// host is the GitHub stand-in, connected through the API, and a real
// agent: switching between the kinds and sources shows each one's fields
// only and posts nothing of the others; a compose application and a
// service application are created, each after its field errors were shown
// next to the fields; the service application's repository and branch
// are picked from the ones the git host lists. The API then shows each
// application with its own kind's settings only.
func TestConsoleFormsApps(t *testing.T) {
	t.Parallel()
	host := testlab.StartGitHost(t)
	f := newFleet(t, gitHostOptions(store.SQLite, host))
	e, config := f.enrollServer(t, "forms-host")
	startAgent(t, config)
	testlab.Eventually(t, time.Minute, "the server online", func() bool { return f.server(t, e.Server.ID).Status == "online" })

	web := host.AddRepo("acme", "shop", false, map[string]string{"main": strings.Repeat("a", 40), "release": strings.Repeat("b", 40)})
	host.UpdateRepo(web, func(r *testlab.HostedRepo) {
		for b, sha := range r.Branches {
			r.Commits[sha] = testlab.HostedCommit{SHA: sha, Message: "the head of " + b, AuthorName: "Ada", AuthorEmail: "ada@example.com"}
		}
	})
	other := host.AddRepo("acme", "tools", true, map[string]string{"main": strings.Repeat("c", 40)})
	inst := connectGitHost(t, f.ControlPlane, host, f.Token, "acme", web, other)

	created := map[string]formApp{}
	steps := runConsoleScript(t, f, "forms-apps.mjs", []string{"CAPSTAN_SERVER=forms-host", "CAPSTAN_REPO=" + web.FullName()},
		func(line string, fields []string) {
			if fields[0] != "created" || len(fields) != 3 {
				return
			}
			var a formApp
			expectJSON(t, f.Get(t, "/api/v1/applications/"+fields[2], f.Token), http.StatusOK, &a)
			created[fields[1]] = a
		}, nil)
	want := "kinds-switched compose-errors created service-errors created done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("forms-apps.mjs steps %v, want %s", steps, want)
	}

	c, ok := created["compose"]
	if !ok || c.Name != "shop-stack" || c.Kind != "compose" || c.ServerID != e.Server.ID || c.Source.Type != "inline" ||
		c.Source.Image != "" || c.Source.RepoID != 0 || c.WebService != "web" || !strings.Contains(c.Compose, "image: nginx:alpine") ||
		c.ComposeFile != "" || c.ContainerPort != 80 {
		t.Errorf("the compose application the browser created: %+v", c)
	}
	if c.Dockerfile != "" || c.BuildContext != "" || len(c.BuildArgKeys) != 0 {
		t.Errorf("the compose application has build settings of a git container: %+v", c)
	}
	if c.Service != nil && (c.Service.StartCommand != "" || c.Service.BuildCommand != "") {
		t.Errorf("the compose application has a service's commands: %+v", *c.Service)
	}
	if strings.Join(c.EnvKeys, " ") != "MODE" || c.Latest != nil {
		t.Errorf("the compose application: env %v, latest deployment %+v; want MODE and none (not deployed)", c.EnvKeys, c.Latest)
	}

	s, ok := created["service"]
	if !ok || s.Name != "shop-api" || s.Kind != "service" || s.Source.Type != "git" || s.Source.InstallationID != inst ||
		s.Source.RepoID != web.ID || s.Source.Branch != "release" || s.Source.Image != "" || s.Service == nil ||
		s.Service.StartCommand != "./bin/api" || s.Service.BuildCommand != "make" || s.Service.BuildTimeoutSeconds != 600 ||
		s.ContainerPort != 0 {
		t.Errorf("the service application the browser created: %+v (service %+v)", s, s.Service)
	}
	if s.Compose != "" || s.WebService != "" || s.ComposeFile != "" || len(s.BuildArgKeys) != 0 {
		t.Errorf("the service application has settings of another kind: %+v", s)
	}
	if len(s.EnvKeys) != 0 || s.Latest != nil {
		t.Errorf("the service application: env %v, latest deployment %+v; want none of either", s.EnvKeys, s.Latest)
	}
	if n := len(auditEntries(t, f.ControlPlane, f.Token, "application.created")); n != 2 {
		t.Errorf("%d applications created, want the browser's 2 (refused forms create nothing)", n)
	}
}

// TestConsoleFormsBackups drives the backup screens in headless Chromium
// (web/e2e/forms-backups.mjs) against a real control plane whose cloud
// drive provider is the Google stand-in, a real agent and a real
// PostgreSQL database backed up to an S3 stand-in: the list of backups
// pages to its older runs (more than a page of them, the older ones
// written to the store), "Verify now" on a backup shows it verified live,
// and the cloud drive is connected through the provider's consent and
// back, then disconnected after a confirmation naming the account. The
// API and the stand-in then show what the browser did.
func TestConsoleFormsBackups(t *testing.T) {
	t.Parallel()
	testlab.Docker(t)
	drive := testlab.StartCloudDrive(t)
	opts := cloudDriveOptions(store.SQLite, drive)
	opts.Args = append(opts.Args, "--database-images",
		databaseImagesFile(t, map[string]map[string]string{"postgres": {"15": testlab.EngineImage(t, "postgres")}}))
	r := newBackupRigWith(t, opts)
	expectStatus(t, r.putSettings(t, r.storageSettings("forms")), http.StatusOK)
	pg, _ := r.registerPostgres(t, "pg-forms", "CREATE TABLE notes (id int PRIMARY KEY, body text)")
	run, job := r.backup(t, pg.ID, "")
	if job.Status != "succeeded" || string(run.Verified) != "null" && len(run.Verified) != 0 {
		t.Fatalf("the backup to verify: job %s, run %+v", job.Status, run)
	}

	// Older runs than a page holds (50), as the store keeps them: copies
	// of the real run, an hour apart, before it.
	const older = 60
	db, err := sql.Open("sqlite", "file:"+filepath.Join(r.ControlPlane.DataDir, store.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var created int64
	if err := db.QueryRow(`SELECT created_at FROM backup_runs WHERE id = ?`, run.ID).Scan(&created); err != nil {
		t.Fatal(err)
	}
	for i := range older {
		at := time.UnixMilli(created).Add(-time.Duration(i+1) * time.Hour)
		res, err := db.Exec(`INSERT INTO backup_runs (id, instance_id, server_id, engine, database_name, trigger_kind, job_id, status,
			remote_key, size, sha256, manifest, created_at, started_at, finished_at)
			SELECT ?, instance_id, server_id, engine, database_name, ?, ?, status, remote_key || ?, size, sha256, manifest, ?, ?, ?
			FROM backup_runs WHERE id = ?`, ids.NewAt(backups.RunIDPrefix, at), backups.TriggerSchedule, jobs.NewID(at),
			"."+strconv.Itoa(i), at.UnixMilli(), at.UnixMilli(), at.Add(time.Second).UnixMilli(), run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("copy %d of the run: %d rows, %v", i, n, err)
		}
	}
	if n := len(r.runs(t, "")); n != older+1 {
		t.Fatalf("%d runs listed, want %d", n, older+1)
	}

	steps := runConsoleScript(t, r.Fleet, "forms-backups.mjs", []string{"CAPSTAN_RUN=" + run.ID, "CAPSTAN_DRIVE_EMAIL=" + drive.Email},
		func(line string, fields []string) {
			switch fields[0] {
			case "paged":
				if fields[1] != strconv.Itoa(older+1) {
					t.Errorf("the browser listed %s backups after paging, want %d", fields[1], older+1)
				}
			case "verified":
				var v struct {
					OK bool `json:"ok"`
				}
				got := r.run(t, fields[1])
				if err := json.Unmarshal(got.Verified, &v); err != nil || !v.OK || fields[1] != run.ID {
					t.Errorf("the run the console showed verified: %s %s (%v)", fields[1], got.Verified, err)
				}
			case "drive-connected":
				var st CloudDriveStatus
				r.Get(t, "/api/v1/backups/clouddrive", r.Token).JSON(t, &st)
				if !st.Connected || st.AccountEmail != drive.Email || drive.LiveGrants() != 1 {
					t.Errorf("after the browser connected the drive: %+v, %d grants at the provider", st, drive.LiveGrants())
				}
			case "drive-disconnected":
				var st CloudDriveStatus
				r.Get(t, "/api/v1/backups/clouddrive", r.Token).JSON(t, &st)
				if st.Connected || drive.Revocations() != 1 || drive.LiveGrants() != 0 {
					t.Errorf("after the browser disconnected the drive: %+v, %d revocations, %d grants", st, drive.Revocations(), drive.LiveGrants())
				}
			}
		}, func() string { return "agent log:\n" + r.agent.Logs() })
	want := "paged verified drive-connected drive-disconnected done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("forms-backups.mjs steps %v, want %s", steps, want)
	}
	if n := len(auditEntries(t, r.ControlPlane, r.Token, "backup.verify.queued")); n != 1 {
		t.Errorf("%d verifications queued, want the browser's 1", n)
	}
}
