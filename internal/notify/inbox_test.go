package notify

import (
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/events"
)

func TestDescribeHidesDeployErrorsFromMembers(t *testing.T) {
	ev, err := events.New(events.DeployFailed, events.Subject{Type: "deployment", ID: "dep_1"}, events.DeployPayload{DeploymentID: "dep_1",
		ApplicationID: "app_1", ApplicationName: "web", Error: "health check failed: s3cret output"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin, member := Describe(ev, true), Describe(ev, false)
	if !strings.Contains(admin.Body, "s3cret output") || strings.Contains(member.Body, "s3cret") {
		t.Fatalf("admin body %q, member body %q", admin.Body, member.Body)
	}
	if got, want := member.Link, "/applications/app_1/deployments/dep_1"; got != want {
		t.Fatalf("link: got %q, want %q", got, want)
	}
	if !strings.Contains(member.Title, "web") {
		t.Fatalf("title: %q", member.Title)
	}
}

func TestDescribeBackupFailures(t *testing.T) {
	ev, err := events.New(events.BackupFailed, events.Subject{Type: "backup", ID: "run_1"}, events.BackupPayload{RunID: "run_1",
		InstanceID: "db_1", Database: "shop", Error: "pg_dump: s3cret detail"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin, member := Describe(ev, true), Describe(ev, false)
	if !strings.Contains(admin.Body, "s3cret detail") || strings.Contains(member.Body, "s3cret") || !strings.Contains(member.Title, "shop") {
		t.Fatalf("admin %+v, member %+v", admin, member)
	}
	if got, want := member.Link, "/databases/db_1/backups/run_1"; got != want {
		t.Fatalf("link: got %q, want %q", got, want)
	}
}
