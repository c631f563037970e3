package databases_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// managed creates a managed instance and lets db.create succeed.
func (r *rig) managed(name string) (databases.Detail, jobs.Job) {
	r.t.Helper()
	reg, err := r.dbs.CreateManaged(r.ctx, r.admin, databases.NewManaged{Name: name, ServerID: r.serverID,
		Engine: agentproto.EnginePostgres, Version: "16", Database: "app"})
	if err != nil {
		r.t.Fatal(err)
	}
	j := r.claim(agentproto.JobDBCreate)
	r.complete(j, agentproto.StatusSucceeded, agentproto.DBCreateResult{ContainerID: "c1", HostPort: 40123, ServerVersion: "16.4"}, "")
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil {
		r.t.Fatal(err)
	}
	return d, j
}

// TestCreateManaged: the instance is creating until db.create ends, then
// ready on 127.0.0.1 and the published port; the admin password is
// generated, travels only in the job's secrets, and is the one the
// connection read gives.
func TestCreateManaged(t *testing.T) {
	r := newRig(t)
	reg, err := r.dbs.CreateManaged(r.ctx, r.admin, databases.NewManaged{Name: "pg", ServerID: r.serverID,
		Engine: agentproto.EnginePostgres, Database: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if reg.Instance.State != databases.StateCreating || !reg.Instance.Managed || reg.Instance.Version != "17" {
		t.Fatalf("created: %+v", reg.Instance)
	}
	j := r.claim(agentproto.JobDBCreate)
	var p agentproto.DBCreatePayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Image != "postgres:17" || p.ContainerName != "capstan-db-pg" || p.Network != "capstan" || p.Volume != "capstan-db-"+reg.Instance.ID ||
		p.Username != "postgres" || p.Database != "app" {
		t.Fatalf("payload: %+v", p)
	}
	sec, err := r.jobs.Secrets(r.ctx, r.serverID, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	pw := sec[agentproto.SecretDBPassword]
	if len(pw) != 48 || strings.Contains(string(j.Payload), pw) {
		t.Fatalf("password %q; payload %s", pw, j.Payload)
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DBCreateResult{HostPort: 40123, ServerVersion: "17.2"}, "")
	d, err := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != databases.StateReady || d.Host != "127.0.0.1" || d.Port != 40123 || d.ServerVersion != "17.2" {
		t.Fatalf("after db.create: %+v", d)
	}
	conn, err := r.dbs.Connection(r.ctx, r.admin, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if l := conn.Logins[0]; l.Password != pw || !strings.Contains(l.URL, "@127.0.0.1:40123/app") ||
		!strings.Contains(l.AppURL, "@capstan-db-pg:5432/app") {
		t.Fatalf("connection: %+v", conn.Logins)
	}
	for _, e := range r.auditActions(databases.ActionCreated) {
		if b, _ := json.Marshal(e); strings.Contains(string(b), pw) {
			t.Fatal("the password is in the audit log")
		}
	}

	// A failed creation leaves the instance failed with the error.
	reg, err = r.dbs.CreateManaged(r.ctx, r.admin, databases.NewManaged{Name: "bad", ServerID: r.serverID,
		Engine: agentproto.EngineRedis})
	if err != nil {
		t.Fatal(err)
	}
	r.complete(r.claim(agentproto.JobDBCreate), agentproto.StatusFailed,
		agentproto.DBFailure{Error: agentproto.DBError{Message: "image redis:7.4 is not on the server"}}, "image redis:7.4 is not on the server")
	if d, _ := r.dbs.Get(r.ctx, reg.Instance.ID, jobs.AdminReader); d.State != databases.StateFailed || d.LastError == nil ||
		!strings.Contains(*d.LastError, "not on the server") {
		t.Fatalf("after a failed db.create: %+v", d)
	}
}

// TestCreateManagedBadInput: bad input is refused and nothing is stored
// or queued.
func TestCreateManagedBadInput(t *testing.T) {
	r := newRig(t)
	mem := int64(1 << 20)
	for field, n := range map[string]databases.NewManaged{
		"engine":       {Name: "a", Engine: "mongodb", Database: "app"},
		"version":      {Name: "b", Engine: agentproto.EnginePostgres, Version: "9", Database: "app"},
		"database":     {Name: "c", Engine: agentproto.EnginePostgres, Database: `a"; DROP TABLE x; --`},
		"memory_limit": {Name: "d", Engine: agentproto.EnginePostgres, Database: "app", MemoryLimit: &mem},
		"name":         {Name: "E E", Engine: agentproto.EnginePostgres, Database: "app"},
	} {
		n.ServerID = r.serverID
		_, err := r.dbs.CreateManaged(r.ctx, r.admin, n)
		wantInvalid(t, err, field)
	}
	r.managed("taken")
	_, err := r.dbs.CreateManaged(r.ctx, r.admin, databases.NewManaged{Name: "taken", ServerID: r.serverID,
		Engine: agentproto.EnginePostgres, Database: "app"})
	wantInvalid(t, err, "name")
	r.noJob()
	if list, _ := r.dbs.List(r.ctx, jobs.AdminReader); len(list) != 1 {
		t.Fatalf("%d instances, want 1", len(list))
	}
}

// TestManagedControlConcurrent: of control calls fired at once, exactly
// one is queued and the others are refused while it runs; its outcome
// decides the state.
func TestManagedControlConcurrent(t *testing.T) {
	r := newRig(t)
	d, _ := r.managed("pg")
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.dbs.Control(r.ctx, r.admin, d.ID, agentproto.DBControlStop)
		}()
	}
	wg.Wait()
	queued := 0
	for _, err := range errs {
		switch {
		case err == nil:
			queued++
		case fault.Is(err, fault.Conflict):
		default:
			t.Fatalf("control: %v", err)
		}
	}
	if queued != 1 {
		t.Fatalf("%d stops queued, want 1", queued)
	}
	j := r.claim(agentproto.JobDBControl)
	r.noJob()
	// Removal waits for the stop, too.
	if _, err := r.dbs.Remove(r.ctx, r.admin, d.ID, false); !fault.Is(err, fault.Conflict) {
		t.Fatalf("delete while stopping: %v", err)
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DBControlResult{Action: agentproto.DBControlStop}, "")
	if got, _ := r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); got.State != databases.StateStopped {
		t.Fatalf("after stop: %s", got.State)
	}
	rm, err := r.dbs.Remove(r.ctx, r.admin, d.ID, true)
	if err != nil || rm.VolumeKept == nil || *rm.VolumeKept || rm.JobID == "" {
		t.Fatalf("remove with purge: %+v, %v", rm, err)
	}
	j = r.claim(agentproto.JobDBRemove)
	r.complete(j, agentproto.StatusSucceeded, agentproto.DBRemoveResult{ContainerRemoved: true, VolumeRemoved: true}, "")
	if _, err := r.dbs.Get(r.ctx, d.ID, jobs.AdminReader); !fault.Is(err, fault.NotFound) {
		t.Fatalf("after removal: %v", err)
	}
}

// TestControlExternal: an external instance is not controlled here.
func TestControlExternal(t *testing.T) {
	r := newRig(t)
	d := r.ready("ext", agentproto.EnginePostgres, "16.4")
	if _, err := r.dbs.Control(r.ctx, r.admin, d.ID, agentproto.DBControlRestart); !fault.Is(err, fault.Conflict) {
		t.Fatalf("control of an external instance: %v", err)
	}
	if _, err := r.dbs.Remove(r.ctx, r.admin, d.ID, true); !fault.Is(err, fault.Invalid) {
		t.Fatalf("purge of an external instance: %v", err)
	}
}
