package backups_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// plane is one control plane's backups side on a store.
type plane struct {
	st      *store.Store
	jobs    *jobs.Service
	servers *servers.Service
	dbs     *databases.Service
	backups *backups.Service
}

// rig is the control plane's backups on a real store, with one enrolled
// server whose agent the test plays, and storage settings saved.
type rig struct {
	t        *testing.T
	ctx      context.Context
	url      string
	dir      string
	key      *secrets.Key
	clock    *testlab.Clock
	serverID string
	admin    audit.Caller
	// tune, when not nil, sets the options of the backups services the
	// rig opens.
	tune func(*backups.Deps)
	*plane
}

var logger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newRig(t *testing.T, d store.Dialect) *rig {
	t.Helper()
	return newRigWith(t, d, nil)
}

// newRigWith is newRig with the backups services' options set by tune.
func newRigWith(t *testing.T, d store.Dialect, tune func(*backups.Deps)) *rig {
	t.Helper()
	r := &rig{t: t, tune: tune, ctx: context.Background(), url: storetest.DatabaseURL(t, d), key: secrets.GenerateKey(),
		clock: testlab.NewClock(time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)),
		admin: audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: "usr_admin", Email: "admin@example.com"}, IP: "192.0.2.9"}}
	r.dir = t.TempDir()
	r.plane = r.open(r.dir)
	if _, err := r.st.Migrate(r.ctx); err != nil {
		t.Fatal(err)
	}
	srvs := r.servers
	e, err := srvs.CreateEnrollment(r.ctx, r.admin, "db-host", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srvs.Enroll(r.ctx, r.admin, agentproto.EnrollRequest{Token: e.Token, Facts: agentproto.Facts{Hostname: "db-host",
		Capabilities: []string{agentproto.CapabilityStorageGrants}}})
	if err != nil {
		t.Fatal(err)
	}
	r.serverID = res.ServerID
	if _, err := r.backups.PutSettings(r.ctx, r.admin, backups.SettingsInput{Provider: "s3", Endpoint: "127.0.0.1:9000",
		Bucket: "capstan-backups", AccessKeyID: "AKTEST", SecretAccessKey: "secret-of-the-test", PathStyle: true}); err != nil {
		t.Fatal(err)
	}
	return r
}

// open opens a control plane on the rig's database (for SQLite, the
// file in dir): each is its own connection pool, as two processes would
// have.
func (r *rig) open(dir string) *plane {
	r.t.Helper()
	st, err := store.Open(r.ctx, r.url, dir)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { st.Close() })
	p := planetest.New(r.t, st, planetest.Options{Clock: r.clock, Key: r.key})
	js, srvs, log := p.Jobs, p.Servers, p.Audit
	dbs := databases.NewService(databases.Deps{Store: st, Jobs: js, Servers: srvs, Audit: log, Key: r.key, Now: r.clock.Now, Log: logger})
	d := backups.Deps{Store: st, Jobs: js, Servers: srvs, Databases: dbs, Events: st, Audit: log, Key: r.key, Now: r.clock.Now, Log: logger}
	if r.tune != nil {
		r.tune(&d)
	}
	b := backups.NewService(d)
	return &plane{st: st, jobs: js, servers: srvs, dbs: dbs, backups: b}
}

// instance registers an external PostgreSQL instance and lets its
// connection test succeed.
func (r *rig) instance(name string) databases.Detail {
	r.t.Helper()
	reg, err := r.dbs.RegisterExternal(r.ctx, r.admin, databases.NewExternal{Name: name, ServerID: r.serverID,
		Engine: agentproto.EnginePostgres, Host: "127.0.0.1", Username: "app", Password: "pw", Database: "app",
		TLSMode: agentproto.DBTLSDisable})
	if err != nil {
		r.t.Fatal(err)
	}
	r.complete(r.claim(agentproto.JobDBConnect), agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "16.4"}, "")
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil || d.State != databases.StateReady {
		r.t.Fatalf("instance %s: %v (state %s)", name, err, d.State)
	}
	return d
}

func (r *rig) claim(typ string) jobs.Job {
	r.t.Helper()
	j, ok, err := r.jobs.Claim(r.ctx, r.serverID, 0)
	if err != nil || !ok {
		r.t.Fatalf("claim: %v (queued: %v), want a %s job", err, ok, typ)
	}
	if j.Type != typ {
		r.t.Fatalf("claimed a %s job, want %s", j.Type, typ)
	}
	return j
}

// claimAll claims every queued job.
func (r *rig) claimAll() []jobs.Job {
	r.t.Helper()
	var out []jobs.Job
	for {
		j, ok, err := r.jobs.Claim(r.ctx, r.serverID, 0)
		if err != nil {
			r.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, j)
	}
}

func (r *rig) complete(j jobs.Job, status string, data any, errText string) {
	r.t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.jobs.Complete(r.ctx, r.serverID, j.ID, agentproto.CompleteRequest{Status: status, Data: b, Error: errText}); err != nil {
		r.t.Fatalf("complete %s: %v", j.ID, err)
	}
}

// backedUp completes a backup.run job as an agent whose upload read back
// right.
func (r *rig) backedUp(j jobs.Job) {
	r.t.Helper()
	sum := "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
	r.complete(j, agentproto.StatusSucceeded, agentproto.BackupRunResult{Bytes: 100, SHA256: sum,
		Remote:   &agentproto.BackupObject{Size: 100, SHA256: sum},
		Manifest: &agentproto.BackupManifest{Kind: agentproto.BackupManifestSQL, Tables: []agentproto.BackupTable{}}}, "")
}

// verified completes a backup.verify job.
func (r *rig) verified(j jobs.Job, ok bool) {
	r.t.Helper()
	if ok {
		r.complete(j, agentproto.StatusSucceeded, agentproto.BackupVerifyResult{OK: true, ChecksumOK: true}, "")
		return
	}
	r.complete(j, agentproto.StatusFailed, agentproto.BackupVerifyResult{Error: "restore failed"}, "restore failed")
}

// report stores a metric sample of an instance listing its databases.
func (r *rig) report(instanceID string, names ...string) {
	r.t.Helper()
	s := agentproto.DBMetricSample{InstanceID: instanceID, At: r.clock.Now()}
	for _, n := range names {
		s.Databases = append(s.Databases, agentproto.DBSize{Name: n, SizeBytes: 1 << 20})
	}
	if _, err := r.st.InsertDatabaseMetricSamples(r.ctx, []agentproto.DBMetricSample{s}, r.clock.Now()); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) policy(instanceID string) backups.PolicyView {
	r.t.Helper()
	list, err := r.backups.Policies(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range list {
		if p.InstanceID == instanceID {
			return p
		}
	}
	r.t.Fatalf("no policy of %s listed", instanceID)
	return backups.PolicyView{}
}

func (r *rig) put(instanceID string, in backups.PolicyInput) (backups.PolicyView, error) {
	return r.backups.PutPolicy(r.ctx, r.admin, instanceID, in)
}

func (r *rig) mustPut(instanceID string, in backups.PolicyInput) backups.PolicyView {
	r.t.Helper()
	v, err := r.put(instanceID, in)
	if err != nil {
		r.t.Fatalf("put policy: %v", err)
	}
	return v
}

func (r *rig) tick() backups.TickResult {
	r.t.Helper()
	res, err := r.backups.Tick(r.ctx)
	if err != nil {
		r.t.Fatalf("tick: %v", err)
	}
	return res
}

func (r *rig) runs(instanceID string) []backups.RunView {
	r.t.Helper()
	list, err := r.backups.Runs(r.ctx, backups.RunQuery{InstanceID: instanceID, Limit: 200}, jobs.AdminReader)
	if err != nil {
		r.t.Fatal(err)
	}
	return list
}

// eventsOf lists the stored events of a type.
func (r *rig) eventsOf(typ events.Type) []events.Event {
	r.t.Helper()
	list, err := r.st.ListEvents(r.ctx, 500, "", string(typ))
	if err != nil {
		r.t.Fatal(err)
	}
	return list
}
