package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// controlPlane is the job and server services of one control plane, with
// its own store connection and bus listener, as capstan serve wires them.
type controlPlane struct {
	jobs    *jobs.Service
	servers *servers.Service
}

func startControlPlane(t *testing.T, url string, key *secrets.Key) controlPlane {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, url, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Now().UTC() }
	js := jobs.NewService(jobs.Deps{Store: st, Key: key, Now: now, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Bus: st})
	srvs := servers.NewService(servers.Deps{Store: st, Jobs: js, Audit: audit.NewLog(st, now), Now: now, PublicURL: "http://capstan.test", EnrollmentTTL: time.Hour, Bus: st})
	up := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Listen(ctx, func(msg string) {
			if !js.Deliver(msg) {
				srvs.Deliver(msg)
			}
		}, func(ok bool) {
			srvs.BusConnected(ok)
			if ok {
				js.WakeAll()
				up <- struct{}{}
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done; st.Close() })
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		t.Fatal("the bus did not connect")
	}
	return controlPlane{jobs: js, servers: srvs}
}

// busAdmin is the administrator the bus tests act as.
var busAdmin = audit.Actor{Type: audit.ActorUser, ID: "usr_admin"}

// twoControlPlanes starts two control planes on one migrated PostgreSQL
// database and enrolls a server through the first.
func twoControlPlanes(t *testing.T) (a, b controlPlane, enrolled agentproto.EnrollResponse) {
	t.Helper()
	ctx := context.Background()
	url := storetest.DatabaseURL(t, store.Postgres)
	migrated, err := store.Open(ctx, url, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrated.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	key := secrets.GenerateKey()
	a, b = startControlPlane(t, url, key), startControlPlane(t, url, key)
	e, err := a.servers.CreateEnrollment(ctx, audit.Caller{Actor: busAdmin}, "web-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	enrolled, err = a.servers.Enroll(ctx, audit.Caller{}, agentproto.EnrollRequest{Token: e.Token})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, enrolled
}

// TestBusAcrossControlPlanes: two control planes on one PostgreSQL
// database. A job queued through one wakes the claim waiting in the other
// at once; a job finished through one wakes the readers waiting in the
// other; a revocation through one refuses the agent's token in the other.
func TestBusAcrossControlPlanes(t *testing.T) {
	ctx := context.Background()
	a, b, enrolled := twoControlPlanes(t)
	serverID := enrolled.ServerID

	// The agent waits on B (30 s); the job is queued on A.
	type claim struct {
		j   jobs.Job
		ok  bool
		err error
		at  time.Time
	}
	claimed := make(chan claim, 1)
	go func() {
		j, ok, err := b.jobs.Claim(ctx, serverID, 30*time.Second)
		claimed <- claim{j, ok, err, time.Now()}
	}()
	testlab.Eventually(t, 10*time.Second, "the claim waiting on B", func() bool { return jobs.ClaimWaiters(b.jobs, serverID) == 1 })
	queued := time.Now()
	j, _, err := a.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID, Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})})
	if err != nil {
		t.Fatal(err)
	}
	c := <-claimed
	if c.err != nil || !c.ok || c.j.ID != j.ID {
		t.Fatalf("claim on B: %v %v %s, want job %s", c.ok, c.err, c.j.ID, j.ID)
	}
	if d := c.at.Sub(queued); d > 10*time.Second {
		t.Fatalf("the claim on B took %s after the job was queued on A: it was not woken", d)
	}

	// A reader waits on A (30 s); the agent completes through B.
	read := make(chan jobs.Job, 1)
	go func() {
		got, _, _ := a.jobs.Wait(ctx, j.ID, jobs.MaxWait, jobs.AdminReader)
		read <- got
	}()
	testlab.Eventually(t, 10*time.Second, "the reader waiting on A", func() bool { return jobs.EndWaiters(a.jobs, j.ID) == 1 })
	if _, err := b.jobs.Complete(ctx, serverID, j.ID, succeeded); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-read:
		if got.Status != jobs.Succeeded {
			t.Fatalf("reader on A: %s, want succeeded", got.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader on A was not woken by the completion on B")
	}

	// B has the agent's token cached; A revokes the server.
	for _, cp := range []controlPlane{a, b} {
		if _, err := cp.servers.Authenticate(ctx, enrolled.AgentToken); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.servers.Revoke(ctx, audit.Caller{Actor: busAdmin}, serverID); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, 5*time.Second, "B refusing the revoked agent's token", func() bool {
		_, err := b.servers.Authenticate(ctx, enrolled.AgentToken)
		return err != nil
	})
}

// TestWaitQueuedAcrossControlPlanes: a claim held without a goroutine
// (WaitQueued) on B is woken by a job queued on A, and ClaimNow on B takes
// it; a revocation on A wakes it again and ClaimNow refuses the ended
// server; stopping B's claims wakes it once more.
func TestWaitQueuedAcrossControlPlanes(t *testing.T) {
	ctx := context.Background()
	a, b, enrolled := twoControlPlanes(t)
	serverID := enrolled.ServerID

	woken := make(chan struct{}, 1)
	stop := b.jobs.WaitQueued(serverID, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	defer stop()
	wake := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatalf("the claim waiting on B was not woken by %s", what)
		}
	}
	if _, ok, err := b.jobs.ClaimNow(ctx, serverID); ok || err != nil {
		t.Fatalf("claim with nothing queued: %v %v", ok, err)
	}
	j, _, err := a.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID, Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})})
	if err != nil {
		t.Fatal(err)
	}
	wake("a job queued on A")
	if got, ok, err := b.jobs.ClaimNow(ctx, serverID); !ok || err != nil || got.ID != j.ID {
		t.Fatalf("claim on B after the wake: %v %v %s, want job %s", ok, err, got.ID, j.ID)
	}
	if _, err := a.servers.Revoke(ctx, audit.Caller{Actor: busAdmin}, serverID); err != nil {
		t.Fatal(err)
	}
	wake("the revocation on A")
	if _, _, err := b.jobs.ClaimNow(ctx, serverID); err != jobs.ErrServerEnded {
		t.Fatalf("claim of a revoked server: %v, want ErrServerEnded", err)
	}
	if b.jobs.ClaimsStopped() {
		t.Fatal("claims stopped before StopClaims")
	}
	b.jobs.StopClaims()
	wake("StopClaims")
	if !b.jobs.ClaimsStopped() {
		t.Fatal("ClaimsStopped is false after StopClaims")
	}
}
