package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// TestListJobsFiltersAndNames covers each filter of the job list, alone
// and combined, and the names that come with each job.
func TestListJobsFiltersAndNames(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		web := mustCreateServer(t, s, "web-1")
		db := mustCreateServer(t, s, "db-1")
		app := mustInsertApp(t, s, web, "shop")
		ada := mustCreateAccount(t, s, "ada@example.com", t0)
		insert := func(at time.Duration, serverID, appID, typ, by string) jobs.Job {
			t.Helper()
			now := t0.Add(at)
			j := jobs.Job{ID: ids.NewAt(ids.Job, now), ServerID: serverID, AppID: appID, Type: typ, Status: jobs.Queued,
				Payload: json.RawMessage(`{}`), CreatedBy: by, TimeoutSeconds: 60, LeaseSeconds: 30, CreatedAt: now, UpdatedAt: now}
			if err := s.InsertJob(ctx, j, ""); err != nil {
				t.Fatal(err)
			}
			return j
		}
		deploy := insert(time.Second, web, app.ID, agentproto.JobAppDeploy, ada.User.ID)
		read := insert(2*time.Second, web, "", agentproto.JobLogsRead, "")
		if _, err := s.CancelJob(ctx, read.ID, t0.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		ping := insert(4*time.Second, db, "", agentproto.JobAgentPing, ada.User.ID)

		ids := func(f jobs.ListFilter) []string {
			t.Helper()
			list, err := s.ListJobs(ctx, f, 100)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, j := range list {
				out = append(out, j.ID)
			}
			return out
		}
		for _, c := range []struct {
			name string
			f    jobs.ListFilter
			want []string
		}{
			{"all, newest first", jobs.ListFilter{}, []string{ping.ID, read.ID, deploy.ID}},
			{"server", jobs.ListFilter{ServerID: db}, []string{ping.ID}},
			{"application", jobs.ListFilter{AppID: app.ID}, []string{deploy.ID}},
			{"type", jobs.ListFilter{Type: agentproto.JobLogsRead}, []string{read.ID}},
			{"status", jobs.ListFilter{Status: jobs.Cancelled}, []string{read.ID}},
			{"status queued", jobs.ListFilter{Status: jobs.Queued}, []string{ping.ID, deploy.ID}},
			{"actor system", jobs.ListFilter{Actor: jobs.ActorSystem}, []string{read.ID}},
			{"actor user id", jobs.ListFilter{Actor: ada.User.ID}, []string{ping.ID, deploy.ID}},
			{"actor e-mail, any case", jobs.ListFilter{Actor: "Ada@Example.com"}, []string{ping.ID, deploy.ID}},
			{"actor e-mail unknown", jobs.ListFilter{Actor: "bob@example.com"}, []string{}},
			{"server and actor", jobs.ListFilter{ServerID: web, Actor: ada.User.ID}, []string{deploy.ID}},
			{"server and type, none", jobs.ListFilter{ServerID: db, Type: agentproto.JobAppDeploy}, []string{}},
		} {
			if got := ids(c.f); !equalStrings(got, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		}

		list, err := s.ListJobs(ctx, jobs.ListFilter{}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].ID != ping.ID {
			t.Fatalf("limit 2: %d jobs", len(list))
		}
		all, err := s.ListJobs(ctx, jobs.ListFilter{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]jobs.Job{}
		for _, j := range all {
			byID[j.ID] = j.For(jobs.MemberReader)
		}
		d := byID[deploy.ID]
		if d.ServerName != "web-1" || d.AppID != app.ID || d.AppName != "shop" || d.Actor == nil ||
			*d.Actor != (jobs.JobActor{Type: jobs.ActorUser, ID: ada.User.ID, Email: "ada@example.com"}) {
			t.Errorf("deploy job's names: server %q app %q/%q actor %+v", d.ServerName, d.AppID, d.AppName, d.Actor)
		}
		r := byID[read.ID]
		if r.ServerName != "web-1" || r.AppID != "" || r.AppName != "" || r.Actor == nil || *r.Actor != (jobs.JobActor{Type: jobs.ActorSystem}) {
			t.Errorf("log read's names: server %q app %q/%q actor %+v", r.ServerName, r.AppID, r.AppName, r.Actor)
		}
		if p := byID[ping.ID]; p.ServerName != "db-1" {
			t.Errorf("ping's server name %q", p.ServerName)
		}

		// One job's names, as a single read fills them in.
		server, appName, email, err := s.JobNames(ctx, web, app.ID, ada.User.ID)
		if err != nil || server != "web-1" || appName != "shop" || email != "ada@example.com" {
			t.Fatalf("job names: %q %q %q %v", server, appName, email, err)
		}
		server, appName, email, err = s.JobNames(ctx, "srv_gone", "", "")
		if err != nil || server != "" || appName != "" || email != "" {
			t.Fatalf("unknown names: %q %q %q %v", server, appName, email, err)
		}
		// The stored job keeps its application.
		if j, err := s.Job(ctx, deploy.ID); err != nil || j.AppID != app.ID {
			t.Fatalf("stored job's app: %q %v", j.AppID, err)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
