package store_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func mustInsertApp(t *testing.T, s *store.Store, serverID, name string) apps.App {
	t.Helper()
	a := apps.App{ID: ids.NewAt(apps.AppIDPrefix, t0), ServerID: serverID, Name: name,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx:1.27"}, ContainerPort: 80, HealthPath: "/",
		EnvKeys: []string{"A", "B"}, MemoryLimit: "512m", State: apps.StateActive, CreatedBy: "usr_x", CreatedAt: t0, UpdatedAt: t0}
	if err := s.InsertApp(context.Background(), a, "sealed-env"); err != nil {
		t.Fatalf("insert app: %v", err)
	}
	return a
}

func mustQueueDeployment(t *testing.T, s *store.Store, a apps.App, at time.Time) apps.DeploymentRecord {
	t.Helper()
	d := apps.DeploymentRecord{ID: ids.NewAt(apps.DeploymentIDPrefix, at), AppID: a.ID, ServerID: a.ServerID, Status: apps.Queued,
		Spec: apps.Spec{AppName: a.Name, Image: "nginx:1.27", ContainerPort: 80, HealthPath: "/", EnvKeys: []string{"A"}}, CreatedAt: at, UpdatedAt: at}
	if err := s.InsertDeployment(context.Background(), d, "sealed-"+d.ID); err != nil {
		t.Fatalf("insert deployment: %v", err)
	}
	return d
}

func mustInsertJob(t *testing.T, s *store.Store, serverID string) jobs.Job {
	t.Helper()
	j := jobs.Job{ID: ids.New(ids.Job), ServerID: serverID, Type: agentproto.JobAppDeploy, Status: jobs.Queued, Payload: json.RawMessage(`{}`),
		TimeoutSeconds: 900, LeaseSeconds: 30, CreatedAt: t0, UpdatedAt: t0}
	if err := s.InsertJob(context.Background(), j, ""); err != nil {
		t.Fatal(err)
	}
	return j
}

func TestStoreApplications(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		srv2 := mustCreateServer(t, s, "web-2")
		a := mustInsertApp(t, s, srv, "web")
		mustInsertApp(t, s, srv2, "web") // same name, another server
		err := s.InsertApp(ctx, apps.App{ID: ids.New(apps.AppIDPrefix), ServerID: srv, Name: "web", Source: apps.Source{Type: "image"},
			State: apps.StateActive, CreatedAt: t0, UpdatedAt: t0}, "")
		if fe := fault.As(err); fe == nil || fe.Code != "application-name-taken" {
			t.Fatalf("duplicate name: %v", err)
		}

		got, err := s.App(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "web" || got.Source.Image != "nginx:1.27" || !slices.Equal(got.EnvKeys, []string{"A", "B"}) || got.MemoryLimit != "512m" ||
			!got.CreatedAt.Equal(t0.Truncate(time.Millisecond)) || got.LatestStatus != "" || got.InProgress || got.State != apps.StateActive {
			t.Fatalf("app: %+v", got)
		}
		if env, err := s.AppEnv(ctx, a.ID); err != nil || env != "sealed-env" {
			t.Fatalf("env: %q %v", env, err)
		}
		if _, err := s.App(ctx, "app_nope"); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("unknown app: %v", err)
		}
		list, err := s.ListApps(ctx, srv)
		if err != nil || len(list) != 1 || list[0].ID != a.ID {
			t.Fatalf("list by server: %+v %v", list, err)
		}
		if all, _ := s.ListApps(ctx, ""); len(all) != 2 {
			t.Fatalf("list all: %d", len(all))
		}

		a.Name, a.ContainerPort, a.EnvKeys, a.UpdatedAt = "site", 8080, nil, t0.Add(time.Minute)
		if err := s.UpdateApp(ctx, a, nil); err != nil {
			t.Fatal(err)
		}
		if env, _ := s.AppEnv(ctx, a.ID); env != "sealed-env" {
			t.Fatalf("env changed without a new one: %q", env)
		}
		newEnv := ""
		if err := s.UpdateApp(ctx, a, &newEnv); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.App(ctx, a.ID); got.Name != "site" || got.ContainerPort != 8080 || len(got.EnvKeys) != 0 || got.EnvKeys == nil {
			t.Fatalf("updated: %+v", got)
		}
		if env, _ := s.AppEnv(ctx, a.ID); env != "" {
			t.Fatalf("env not replaced: %q", env)
		}
		b := mustInsertApp(t, s, srv, "api")
		b.Name = "site"
		if err := s.UpdateApp(ctx, b, nil); fault.As(err) == nil || fault.As(err).Code != "application-name-taken" {
			t.Fatalf("rename to a taken name: %v", err)
		}

		// States.
		if err := s.SetAppState(ctx, a.ID, []string{apps.StateActive}, apps.StateRemoving, "job_1", "", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.SetAppState(ctx, a.ID, []string{apps.StateActive}, apps.StateRemoving, "job_2", "", t0); fault.KindOf(err) != fault.Conflict {
			t.Fatalf("state from a wrong state: %v", err)
		}
		if err := s.SetAppState(ctx, "app_nope", []string{apps.StateActive}, apps.StateRemoving, "", "", t0); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("state of an unknown app: %v", err)
		}
		if got, err := s.AppByRemoveJob(ctx, "job_1"); err != nil || got.ID != a.ID || got.State != apps.StateRemoving {
			t.Fatalf("by remove job: %+v %v", got, err)
		}
	})
}

func TestStoreDeploymentQueue(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		a := mustInsertApp(t, s, srv, "web")
		now := t0.Add(time.Hour)

		if _, _, ok, err := s.ClaimDeployment(ctx, a.ID, now); ok || err != nil {
			t.Fatalf("claim with nothing queued: %v %v", ok, err)
		}
		d1 := mustQueueDeployment(t, s, a, t0)
		d2 := mustQueueDeployment(t, s, a, t0.Add(time.Second))
		d3 := mustQueueDeployment(t, s, a, t0.Add(2*time.Second))
		if got, _ := s.App(ctx, a.ID); !got.InProgress || got.LatestStatus != apps.Queued {
			t.Fatalf("app with queued deployments: %+v", got)
		}
		claimed, superseded, ok, err := s.ClaimDeployment(ctx, a.ID, now)
		if err != nil || !ok || claimed.ID != d3.ID || claimed.Status != apps.Running || claimed.DispatchedAt == nil ||
			!slices.Equal(superseded, []string{d2.ID, d1.ID}) {
			t.Fatalf("claim: %+v %v %v %v", claimed, superseded, ok, err)
		}
		if got, _ := s.Deployment(ctx, d1.ID); got.Status != apps.Superseded || got.FinishedAt == nil || !strings.Contains(got.Error, d3.ID) {
			t.Fatalf("superseded: %+v", got)
		}
		// One at a time: nothing more is claimed while d3 runs.
		d4 := mustQueueDeployment(t, s, a, t0.Add(3*time.Second))
		if _, _, ok, err := s.ClaimDeployment(ctx, a.ID, now); ok || err != nil {
			t.Fatalf("claim while one runs: %v %v", ok, err)
		}
		// The database itself refuses a second running deployment.
		if err := s.InsertDeployment(ctx, apps.DeploymentRecord{ID: ids.New(apps.DeploymentIDPrefix), AppID: a.ID, ServerID: srv,
			Status: apps.Running, CreatedAt: t0, UpdatedAt: t0}, ""); err == nil {
			t.Fatalf("a second running deployment was stored")
		}

		j := mustInsertJob(t, s, srv)
		if err := s.SetDeploymentJob(ctx, d3.ID, j.ID, now); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDeploymentJob(ctx, d3.ID, "job_other", now); err != nil {
			t.Fatal(err)
		}
		running, err := s.RunningDeployments(ctx, a.ID)
		if err != nil || len(running) != 1 || running[0].JobID != j.ID || running[0].JobStatus != string(jobs.Queued) {
			t.Fatalf("running: %+v %v", running, err)
		}
		if all, _ := s.RunningDeployments(ctx, ""); len(all) != 1 {
			t.Fatalf("running of all apps: %d", len(all))
		}
		if _, ok, _ := s.ClaimJob(ctx, srv, now); !ok {
			t.Fatal("claim job")
		}
		if got, _ := s.Deployment(ctx, d3.ID); got.JobStatus != string(jobs.Running) || got.JobStartedAt == nil {
			t.Fatalf("job status through the deployment: %+v", got)
		}

		res := json.RawMessage(`{"image_id":"sha256:3","container_id":"c3"}`)
		// The job's result is in, its completion hook (which records the
		// deployment's outcome) has not run: the deployment still reads
		// as running, never as succeeded without its image.
		if ok, err := s.FinishJob(ctx, j.ID, jobs.Succeeded, nil, res, nil, now); err != nil || !ok {
			t.Fatalf("finish job: %v %v", ok, err)
		}
		if got, _ := s.Deployment(ctx, d3.ID); got.JobStatus != string(jobs.Running) {
			t.Fatalf("job status through the deployment while its hook is pending: %q, want running", got.JobStatus)
		}
		if err := s.ClearHookPending(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Deployment(ctx, d3.ID); got.JobStatus != string(jobs.Succeeded) {
			t.Fatalf("job status through the deployment after its hook: %q", got.JobStatus)
		}
		if done, err := s.FinishDeployment(ctx, d3.ID, apps.Finish{Status: apps.Succeeded, Result: res, ImageID: "sha256:3", At: now}); err != nil || !done {
			t.Fatalf("finish: %v %v", done, err)
		}
		if done, err := s.FinishDeployment(ctx, d3.ID, apps.Finish{Status: apps.Failed, At: now}); err != nil || done {
			t.Fatalf("finish twice: %v %v", done, err)
		}
		got, _ := s.Deployment(ctx, d3.ID)
		if got.Status != apps.Succeeded || got.ImageID != "sha256:3" || string(got.Result) != string(res) || got.FinishedAt == nil {
			t.Fatalf("finished: %+v", got)
		}
		if app, _ := s.App(ctx, a.ID); app.CurrentDeploymentID != d3.ID {
			t.Fatalf("current: %q", app.CurrentDeploymentID)
		}

		// d4 queued; cancel it alone.
		if ids, err := s.CancelQueuedDeployments(ctx, a.ID, d4.ID, now); err != nil || !slices.Equal(ids, []string{d4.ID}) {
			t.Fatalf("cancel one: %v %v", ids, err)
		}
		if ids, _ := s.CancelQueuedDeployments(ctx, a.ID, d4.ID, now); len(ids) != 0 {
			t.Fatalf("cancel twice: %v", ids)
		}
		d5 := mustQueueDeployment(t, s, a, t0.Add(5*time.Second))
		d6 := mustQueueDeployment(t, s, a, t0.Add(6*time.Second))
		if ids, err := s.CancelQueuedDeployments(ctx, a.ID, "", now); err != nil || !slices.Equal(ids, []string{d5.ID, d6.ID}) {
			t.Fatalf("cancel all: %v %v", ids, err)
		}

		// Image ids: newest first, distinct, only succeeded.
		for i, img := range []string{"sha256:a", "sha256:b", "sha256:a", ""} {
			d := mustQueueDeployment(t, s, a, t0.Add(time.Duration(10+i)*time.Second))
			if c, _, ok, err := s.ClaimDeployment(ctx, a.ID, now); !ok || err != nil || c.ID != d.ID {
				t.Fatalf("claim %d: %v %v", i, ok, err)
			}
			if _, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Succeeded, ImageID: img, At: now}); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.SucceededImageIDs(ctx, a.ID, 5); err != nil || !slices.Equal(got, []string{"sha256:a", "sha256:b", "sha256:3"}) {
			t.Fatalf("image ids: %v %v", got, err)
		}
		if got, _ := s.SucceededImageIDs(ctx, a.ID, 2); !slices.Equal(got, []string{"sha256:a", "sha256:b"}) {
			t.Fatalf("image ids, limit 2: %v", got)
		}

		list, err := s.ListDeployments(ctx, a.ID, 3)
		if err != nil || len(list) != 3 || list[0].CreatedAt.Before(list[2].CreatedAt) {
			t.Fatalf("list: %v", err)
		}
		if env, err := s.DeploymentEnv(ctx, d1.ID); err != nil || env != "sealed-"+d1.ID {
			t.Fatalf("deployment env: %q %v", env, err)
		}

		// No claim while the application is being removed.
		mustQueueDeployment(t, s, a, t0.Add(time.Minute))
		if err := s.SetAppState(ctx, a.ID, []string{apps.StateActive}, apps.StateRemoving, "", "", now); err != nil {
			t.Fatal(err)
		}
		if _, _, ok, err := s.ClaimDeployment(ctx, a.ID, now); ok || err != nil {
			t.Fatalf("claim while removing: %v %v", ok, err)
		}
		if err := s.DeleteApp(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Deployment(ctx, d1.ID); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("deployment of a deleted app: %v", err)
		}
	})
}

// A deployment queued after a given newest one is stored only if that is
// still the application's newest: of callers that saw the same newest and
// insert in parallel, exactly one stores its deployment, the others
// store nothing; a plain insert in between makes a conditional one fail.
func TestStoreInsertDeploymentAfter(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		a := mustInsertApp(t, s, srv, "web")
		record := func(at time.Time) apps.DeploymentRecord {
			return apps.DeploymentRecord{ID: ids.NewAt(apps.DeploymentIDPrefix, at), AppID: a.ID, ServerID: a.ServerID, Status: apps.Queued,
				Spec: apps.Spec{AppName: a.Name, Image: "nginx:1.27", ContainerPort: 80}, CreatedAt: at, UpdatedAt: at}
		}
		count := func() int {
			list, err := s.ListDeployments(ctx, a.ID, 100)
			if err != nil {
				t.Fatal(err)
			}
			return len(list)
		}
		for round, after := range []string{"", "newest"} {
			if after != "" {
				list, _ := s.ListDeployments(ctx, a.ID, 1)
				after = list[0].ID
			}
			before := count()
			var stored atomic.Int64
			testlab.InParallel(8, func(int) {
				ok, err := s.InsertDeploymentAfter(ctx, record(t0), "sealed", after)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
				}
				if ok {
					stored.Add(1)
				}
			})
			if stored.Load() != 1 || count() != before+1 {
				t.Fatalf("round %d: %d stored, %d deployments (from %d); want one stored", round, stored.Load(), count(), before)
			}
		}
		list, _ := s.ListDeployments(ctx, a.ID, 1)
		newest := list[0].ID
		mustQueueDeployment(t, s, a, t0)
		if ok, err := s.InsertDeploymentAfter(ctx, record(t0), "sealed", newest); ok || err != nil {
			t.Fatalf("insert after a deployment that is no longer the newest: %v %v", ok, err)
		}
	})
}

func TestStoreDomains(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		a := mustInsertApp(t, s, srv, "web")
		b := mustInsertApp(t, s, srv, "api")
		dom := func(host string, app apps.App, www bool) domains.Domain {
			return domains.Domain{ID: ids.New(domains.IDPrefix), Hostname: host, ApplicationID: app.ID, ServerID: app.ServerID,
				TLSMode: "auto", RedirectWWW: www, CreatedAt: t0, UpdatedAt: t0}
		}
		insert := func(d domains.Domain) error {
			names := []string{d.Hostname}
			if d.RedirectWWW {
				names = append(names, "www."+d.Hostname)
			}
			return s.InsertDomain(ctx, d, names)
		}
		d1 := dom("example.com", a, true)
		if err := insert(d1); err != nil {
			t.Fatal(err)
		}
		for _, d := range []domains.Domain{dom("example.com", b, false), dom("www.example.com", b, false)} {
			if err := insert(d); fault.As(err) == nil || fault.As(err).Code != "hostname-taken" {
				t.Fatalf("%s: %v", d.Hostname, err)
			}
		}
		if err := insert(dom("zeta.example.com", b, false)); err != nil {
			t.Fatal(err)
		}
		if err := insert(dom("x.example.com", apps.App{ID: "app_nope", ServerID: srv}, false)); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("domain of an unknown app: %v", err)
		}

		got, err := s.Domain(ctx, d1.ID)
		if err != nil || got.Hostname != "example.com" || !got.RedirectWWW || got.Check != nil || got.CheckJobID != nil {
			t.Fatalf("domain: %+v %v", got, err)
		}
		sites, err := s.ProxySites(ctx, srv)
		if err != nil || len(sites) != 2 || sites[0] != (agentproto.ProxySite{Hostname: "example.com", AppID: a.ID, TLSMode: "auto", RedirectWWW: true}) ||
			sites[1].Hostname != "zeta.example.com" {
			t.Fatalf("sites: %+v %v", sites, err)
		}
		if err := s.UpdateDomainTLS(ctx, d1.ID, "off", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateDomainTLS(ctx, "dom_nope", "off", t0); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("update unknown: %v", err)
		}

		// Checks: only the latest job's result is stored.
		if err := s.SetDomainCheckJob(ctx, d1.ID, "job_1", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDomainCheckJob(ctx, d1.ID, "job_2", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDomainCheck(ctx, d1.ID, "job_1", domains.DomainCheck{JobID: "job_1", CheckedAt: t0}, t0); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Domain(ctx, d1.ID); got.Check != nil {
			t.Fatalf("a stale check was stored: %+v", got.Check)
		}
		c := domains.DomainCheck{JobID: "job_2", Status: "succeeded", Addresses: []string{"203.0.113.1"}, PointsToServer: true, CheckedAt: t0}
		if err := s.SetDomainCheck(ctx, d1.ID, "job_2", c, t0); err != nil {
			t.Fatal(err)
		}
		if got, err := s.DomainByCheckJob(ctx, "job_2"); err != nil || got.Check == nil || !got.Check.PointsToServer || got.TLSMode != "off" {
			t.Fatalf("checked domain: %+v %v", got, err)
		}

		// A removing application's sites leave the proxy state.
		if err := s.SetAppState(ctx, b.ID, []string{apps.StateActive}, apps.StateRemoving, "", "", t0); err != nil {
			t.Fatal(err)
		}
		if sites, _ := s.ProxySites(ctx, srv); len(sites) != 1 || sites[0].AppID != a.ID {
			t.Fatalf("sites without the removing app: %+v", sites)
		}
		if list, _ := s.ListDomains(ctx, b.ID); len(list) != 1 {
			t.Fatalf("list by app: %d", len(list))
		}
		if err := s.DeleteApp(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if list, _ := s.ListDomains(ctx, ""); len(list) != 1 || list[0].ID != d1.ID {
			t.Fatalf("domains after deleting an app: %+v", list)
		}
		if err := insert(dom("zeta.example.com", a, false)); err != nil {
			t.Fatalf("name of a deleted app's domain: %v", err)
		}
		if err := s.DeleteDomain(ctx, d1.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteDomain(ctx, d1.ID); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("delete twice: %v", err)
		}
		if err := insert(dom("www.example.com", a, false)); err != nil {
			t.Fatalf("www name of a deleted domain: %v", err)
		}
	})
}

func TestStoreRequestMinutes(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
		rm := func(host string, at time.Time, count int64, p95 float64) agentproto.RequestMinute {
			return agentproto.RequestMinute{Host: host, Minute: at, Count: count, Status2xx: count - 1, Status5xx: 1, BytesOut: count * 10, P50Ms: 1, P95Ms: p95}
		}
		var many []agentproto.RequestMinute
		for i := range 450 { // more than one INSERT chunk
			many = append(many, rm("example.com", m.Add(time.Duration(i)*time.Minute), 2, float64(i)))
		}
		if err := s.PutRequestMinutes(ctx, "srv_a", many, m); err != nil {
			t.Fatal(err)
		}
		// Replaced, not added.
		if err := s.PutRequestMinutes(ctx, "srv_a", []agentproto.RequestMinute{rm("example.com", m, 5, 3), rm("www.example.com", m, 4, 900)}, m); err != nil {
			t.Fatal(err)
		}
		if err := s.PutRequestMinutes(ctx, "srv_b", []agentproto.RequestMinute{rm("example.com", m, 100, 1)}, m); err != nil {
			t.Fatal(err)
		}
		pts, err := s.RequestBuckets(ctx, "srv_a", []string{"example.com", "www.example.com"}, m, m.Add(10*time.Minute), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != 2 || !pts[0].T.Equal(m) || !pts[1].T.Equal(m.Add(5*time.Minute)) {
			t.Fatalf("buckets: %+v", pts)
		}
		// Bucket 0: minute 0 (5 + 4) and minutes 1–4 (2 each).
		if p := pts[0]; p.Count != 17 || p.Status5xx != 6 || p.Status2xx != 11 || p.BytesOut != 170 || p.P95Ms == nil || *p.P95Ms != 900 {
			t.Fatalf("bucket 0: %+v", p)
		}
		if p := pts[1]; p.Count != 10 || *p.P95Ms != 9 {
			t.Fatalf("bucket 1: %+v", p)
		}
		only, _ := s.RequestBuckets(ctx, "srv_a", []string{"example.com"}, m, m.Add(time.Minute), time.Minute)
		if len(only) != 1 || only[0].Count != 5 {
			t.Fatalf("one host, one minute: %+v", only)
		}
		hourly, _ := s.RequestBuckets(ctx, "srv_a", []string{"example.com"}, m, m.Add(24*time.Hour), time.Hour)
		if len(hourly) != 8 || hourly[0].Count != 5+59*2 {
			t.Fatalf("hourly: %d buckets, first %+v", len(hourly), hourly[0])
		}

		n, err := s.PruneRequestMinutes(ctx, m.Add(100*time.Minute), 30)
		if err != nil || n != 30 {
			t.Fatalf("prune batch: %d %v", n, err)
		}
		total := n
		for {
			n, err := s.PruneRequestMinutes(ctx, m.Add(100*time.Minute), 30)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if n < 30 {
				break
			}
		}
		if total != 100+1+1 { // srv_a example.com minutes 0–99, its www minute, srv_b's
			t.Fatalf("pruned %d", total)
		}
		if left, _ := s.RequestBuckets(ctx, "srv_a", []string{"example.com"}, m, m.Add(24*time.Hour), 24*time.Hour); len(left) != 1 || left[0].Count != 350*2 {
			t.Fatalf("left: %+v", left)
		}
	})
}

func TestStoreApplicationKinds(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		plain := mustInsertApp(t, s, srv, "plain")
		if got, err := s.App(ctx, plain.ID); err != nil || got.Kind != apps.KindContainer || got.Compose != (apps.ComposeSettings{}) {
			t.Fatalf("an application without a kind: %+v, %v", got, err)
		}
		c := apps.App{ID: ids.NewAt(apps.AppIDPrefix, t0.Add(time.Second)), ServerID: srv, Name: "stack", Kind: apps.KindCompose,
			Source: apps.Source{Type: apps.SourceImage}, ContainerPort: 8080, HealthPath: "/", State: apps.StateActive, CreatedAt: t0, UpdatedAt: t0,
			Compose: apps.ComposeSettings{WebService: "web", Document: "services:\n  web:\n    image: nginx\n"}}
		if err := s.InsertApp(ctx, c, ""); err != nil {
			t.Fatal(err)
		}
		got, err := s.App(ctx, c.ID)
		if err != nil || got.Kind != apps.KindCompose || got.Compose != c.Compose {
			t.Fatalf("compose application: %+v, %v", got, err)
		}
		// The kind stays what it was created as; the stack changes.
		c.Kind, c.Compose.WebService, c.UpdatedAt = apps.KindContainer, "front", t0.Add(time.Minute)
		if err := s.UpdateApp(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		if got, err = s.App(ctx, c.ID); err != nil || got.Kind != apps.KindCompose || got.Compose.WebService != "front" {
			t.Fatalf("after update: %+v, %v", got, err)
		}

		d := mustQueueDeployment(t, s, got, t0.Add(2*time.Second))
		if _, _, ok, err := s.ClaimDeployment(ctx, got.ID, t0); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		rel := &apps.Release{Services: map[string]string{"web": "sha256:1", "cache": "sha256:2"}}
		if done, err := s.FinishDeployment(ctx, d.ID, apps.Finish{Status: apps.Succeeded, Release: rel, At: t0}); err != nil || !done {
			t.Fatalf("finish: %v %v", done, err)
		}
		rd, err := s.Deployment(ctx, d.ID)
		if err != nil || rd.Release == nil || !maps.Equal(rd.Release.Services, rel.Services) {
			t.Fatalf("kept release: %+v, %v", rd.Release, err)
		}
		other := mustQueueDeployment(t, s, plain, t0.Add(3*time.Second))
		if rd, err := s.Deployment(ctx, other.ID); err != nil || rd.Release != nil {
			t.Fatalf("a deployment without a release: %+v, %v", rd.Release, err)
		}
	})
}
