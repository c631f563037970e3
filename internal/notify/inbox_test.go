package notify

import (
	"encoding/json"
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

// TestDescribeNamesNotIDs: a message tells its objects by name; the ids
// are in its link only.
func TestDescribeNamesNotIDs(t *testing.T) {
	for _, c := range []struct {
		typ     events.Type
		payload any
		ids     []string
		names   []string
	}{
		{events.DeploySucceeded, events.DeployPayload{DeploymentID: "dep_1", ApplicationID: "app_1", ApplicationName: "shop", Ref: "v1.2"},
			[]string{"dep_1", "app_1"}, []string{"shop at v1.2"}},
		{events.DeployFailed, events.DeployPayload{DeploymentID: "dep_1", ApplicationID: "app_1", ApplicationName: "shop"},
			[]string{"dep_1", "app_1"}, []string{"shop"}},
		{events.BackupFailed, events.BackupPayload{RunID: "bkr_1", InstanceID: "dbi_1", Database: "orders", Trigger: "schedule"},
			[]string{"bkr_1", "dbi_1"}, []string{"scheduled backup of database orders"}},
		{events.AlertOpened, events.AlertPayload{AlertID: "alr_1", Kind: "cpu", SubjectName: "web-1", Severity: "warning"},
			[]string{"alr_1"}, []string{"cpu on web-1"}},
		{events.AlertResolved, events.AlertPayload{AlertID: "alr_1", Kind: "cpu", SubjectName: "web-1"},
			[]string{"alr_1"}, []string{"cpu of web-1"}},
	} {
		b, _ := json.Marshal(c.payload)
		m := Describe(events.Event{Type: c.typ, Payload: b}, true)
		for _, id := range c.ids {
			if strings.Contains(m.Title+" "+m.Body, id) {
				t.Errorf("%s: %q / %q names %s", c.typ, m.Title, m.Body, id)
			}
		}
		for _, n := range c.names {
			if !strings.Contains(m.Body, n) {
				t.Errorf("%s: body %q lacks %q", c.typ, m.Body, n)
			}
		}
	}
}
