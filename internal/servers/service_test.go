package servers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

// countingStore counts agent token lookups and can hold one up.
type countingStore struct {
	*store.Store
	lookups atomic.Int64
	// hold, when set, is called inside ServerByAgentToken after the read.
	hold atomic.Pointer[func()]
}

func (c *countingStore) ServerByAgentToken(ctx context.Context, hash string) (servers.Server, bool, error) {
	c.lookups.Add(1)
	srv, revoked, err := c.Store.ServerByAgentToken(ctx, hash)
	if h := c.hold.Load(); h != nil {
		(*h)()
	}
	return srv, revoked, err
}

type env struct {
	st    *countingStore
	clock *testlab.Clock
	svc   *servers.Service
}

func newEnv(t *testing.T, d store.Dialect) *env {
	t.Helper()
	st := &countingStore{Store: storetest.Open(t, d)}
	p := planetest.New(t, st.Store, planetest.Options{Clock: testlab.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		Servers: func(d *servers.Deps) { d.Store = st }})
	return &env{st: st, clock: p.Clock, svc: p.Servers}
}

var admin = audit.Actor{Type: audit.ActorUser, ID: "usr_test", Email: "admin@example.com"}

// enroll creates and redeems an enrollment; it returns the server id and
// the agent token.
func (e *env) enroll(t *testing.T, name string) (string, string) {
	t.Helper()
	ctx := context.Background()
	en, err := e.svc.CreateEnrollment(ctx, audit.Caller{Actor: admin}, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Enroll(ctx, audit.Caller{}, agentproto.EnrollRequest{Token: en.Token,
		Facts: agentproto.Facts{Hostname: name, AgentVersion: "1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	return res.ServerID, res.AgentToken
}

func expectRevoked(t *testing.T, err error) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Unauthenticated || fe.Code != "agent-revoked" {
		t.Fatalf("Authenticate: got %v, want the agent-revoked problem", err)
	}
}

func forEachStore(t *testing.T, fn func(t *testing.T, d store.Dialect)) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) { fn(t, d) })
	}
}

// A token is looked up once and then served from memory, yet revoking or
// deleting the server in this process refuses its next request at once.
func TestAgentAuthCacheRevocationIsImmediate(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		e := newEnv(t, d)
		ctx := context.Background()
		for _, how := range []string{"revoke", "delete"} {
			id, token := e.enroll(t, "host-"+how)
			before := e.st.lookups.Load()
			for range 5 {
				srv, err := e.svc.Authenticate(ctx, token)
				if err != nil || srv.ID != id {
					t.Fatalf("Authenticate: %v, %v; want server %s", srv.ID, err, id)
				}
			}
			if n := e.st.lookups.Load() - before; n != 1 {
				t.Fatalf("%d store lookups for 5 requests within the TTL, want 1", n)
			}
			if how == "revoke" {
				if _, err := e.svc.Revoke(ctx, audit.Caller{Actor: admin}, id); err != nil {
					t.Fatal(err)
				}
			} else if err := e.svc.Delete(ctx, audit.Caller{Actor: admin}, id); err != nil {
				t.Fatal(err)
			}
			_, err := e.svc.Authenticate(ctx, token)
			expectRevoked(t, err)
		}
	})
}

// A revocation this process did not make (another control plane on the
// same database) is seen once the entry is older than AgentAuthTTL.
func TestAgentAuthCacheRevalidatesWithinTTL(t *testing.T) {
	e := newEnv(t, store.SQLite)
	ctx := context.Background()
	id, token := e.enroll(t, "host-1")
	if _, err := e.svc.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Store.RevokeServer(ctx, id, e.clock.Now()); err != nil { // behind the service's back
		t.Fatal(err)
	}
	e.clock.Advance(servers.AgentAuthTTL - time.Second)
	if _, err := e.svc.Authenticate(ctx, token); err != nil {
		t.Fatalf("within the TTL the cached token still works: %v", err)
	}
	e.clock.Advance(time.Second)
	_, err := e.svc.Authenticate(ctx, token)
	expectRevoked(t, err)
}

// A token confirmed once stays known after its cache entry expired, until
// the store refuses it; a token never confirmed is not known.
func TestKnownAgent(t *testing.T) {
	e := newEnv(t, store.SQLite)
	ctx := context.Background()
	id, token := e.enroll(t, "host-1")
	if _, ok := e.svc.KnownAgent(token); ok {
		t.Fatal("a token never checked is known")
	}
	if _, err := e.svc.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * servers.AgentAuthTTL)
	if got, ok := e.svc.KnownAgent(token); !ok || got != id {
		t.Fatalf("after the TTL: known %v as %q, want %s", ok, got, id)
	}
	if _, ok := e.svc.KnownAgent(agentproto.AgentTokenPrefix + "bogus"); ok {
		t.Fatal("a bogus token is known")
	}
	if _, err := e.st.Store.RevokeServer(ctx, id, e.clock.Now()); err != nil { // behind the service's back
		t.Fatal(err)
	}
	_, err := e.svc.Authenticate(ctx, token)
	expectRevoked(t, err)
	if _, ok := e.svc.KnownAgent(token); ok {
		t.Fatal("a token the store refused is still known")
	}
}

// A lookup that read the token before a revocation committed must not
// put it in the cache after the revocation dropped it.
func TestAgentAuthCacheLookupRacingRevoke(t *testing.T) {
	e := newEnv(t, store.SQLite)
	ctx := context.Background()
	id, token := e.enroll(t, "host-1")
	read, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func() { once.Do(func() { close(read); <-release }) }
	e.st.hold.Store(&hold)
	done := make(chan error)
	go func() {
		_, err := e.svc.Authenticate(ctx, token) // reads "not revoked", then waits
		done <- err
	}()
	<-read
	e.st.hold.Store(nil)
	if _, err := e.svc.Revoke(ctx, audit.Caller{Actor: admin}, id); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the request that was already being authenticated: %v", err)
	}
	_, err := e.svc.Authenticate(ctx, token)
	expectRevoked(t, err)
}

func storedLastSeen(t *testing.T, e *env, id string) time.Time {
	t.Helper()
	srv, err := e.st.Store.Server(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if srv.LastSeenAt == nil {
		t.Fatal("no last_seen_at")
	}
	return *srv.LastSeenAt
}

// With batching, a heartbeat is written at the next flush; until then the
// service's own reads show it. A pending heartbeat never revives a revoked
// server, and an older one never moves last_seen_at back.
func TestHeartbeatBatching(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		e := newEnv(t, d)
		ctx := context.Background()
		enrolledAt := e.clock.Now()
		var ids []string
		for i := range 3 {
			id, _ := e.enroll(t, fmt.Sprintf("host-%d", i))
			ids = append(ids, id)
		}
		stop := e.svc.StartTouchBatching(time.Hour, nil) // flushed by stop only

		e.clock.Advance(10 * time.Second)
		beat := e.clock.Now()
		for _, id := range ids {
			if _, err := e.svc.Heartbeat(ctx, servers.Server{ID: id}, agentproto.HeartbeatRequest{AgentVersion: "1.1"}); err != nil {
				t.Fatal(err)
			}
		}
		if got := storedLastSeen(t, e, ids[0]); !got.Equal(enrolledAt) {
			t.Fatalf("stored last_seen_at %s before the flush, want the enrollment's %s", got, enrolledAt)
		}
		// 35 s after enrollment, 25 s after the heartbeat: online only
		// because of the pending heartbeat.
		e.clock.Advance(25 * time.Second)
		srv, err := e.svc.Get(ctx, ids[0])
		if err != nil || srv.Status != servers.Online || srv.LastSeenAt == nil || !srv.LastSeenAt.Equal(beat) {
			t.Fatalf("Get before the flush: %+v, %v; want online, last seen %s", srv, err, beat)
		}
		list, err := e.svc.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if s.Status != servers.Online {
				t.Fatalf("List before the flush: %s is %s, want online", s.ID, s.Status)
			}
		}
		// Revoked by another control plane: this one still holds the
		// server's heartbeat.
		if _, err := e.st.Store.RevokeServer(ctx, ids[1], e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		// Behind the service's back: the stored heartbeat of ids[2] is
		// newer than the pending one.
		newer := beat.Add(5 * time.Second)
		if err := e.st.Store.TouchServer(ctx, ids[2], "1.2", nil, newer); err != nil {
			t.Fatal(err)
		}
		if err := stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := storedLastSeen(t, e, ids[0]); !got.Equal(beat) {
			t.Errorf("stored last_seen_at %s after the flush, want %s", got, beat)
		}
		if srv, err := e.st.Store.Server(ctx, ids[0]); err != nil || srv.AgentVersion != "1.1" {
			t.Errorf("stored agent version %q (%v), want 1.1", srv.AgentVersion, err)
		}
		if srv, err := e.st.Store.Server(ctx, ids[1]); err != nil || srv.Status != servers.Revoked {
			t.Errorf("revoked server after the flush: %+v, %v; want revoked", srv, err)
		}
		if got := storedLastSeen(t, e, ids[2]); !got.Equal(newer) {
			t.Errorf("stored last_seen_at %s, want the newer %s", got, newer)
		}
		// After stop, heartbeats are written at once again.
		e.clock.Advance(time.Second)
		if _, err := e.svc.Heartbeat(ctx, servers.Server{ID: ids[0]}, agentproto.HeartbeatRequest{AgentVersion: "1.1"}); err != nil {
			t.Fatal(err)
		}
		if got := storedLastSeen(t, e, ids[0]); !got.Equal(e.clock.Now()) {
			t.Errorf("stored last_seen_at %s after an unbatched heartbeat, want %s", got, e.clock.Now())
		}
	})
}

// Many heartbeats of many servers in one call; the chunks of the store's
// transactions are not visible.
func TestTouchServersMany(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		e := newEnv(t, d)
		ctx := context.Background()
		var touches []servers.Touch
		at := e.clock.Now().Add(time.Minute)
		for i := range 260 {
			id, _ := e.enroll(t, fmt.Sprintf("host-%03d", i))
			touches = append(touches, servers.Touch{ServerID: id, AgentVersion: "2.0", At: at.Add(time.Duration(i) * time.Millisecond)})
		}
		if err := e.st.Store.TouchServers(ctx, touches); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []servers.Touch{touches[0], touches[249], touches[250], touches[259]} {
			if got := storedLastSeen(t, e, tc.ServerID); !got.Equal(tc.At) {
				t.Errorf("%s: last_seen_at %s, want %s", tc.ServerID, got, tc.At)
			}
		}
	})
}

// A queued action's audit entry names the server and the container or
// unit it acts on, so that the audit log can say what was done to what.
func TestQueuedActionAuditNamesItsTarget(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		e := newEnv(t, d)
		ctx := context.Background()
		id, _ := e.enroll(t, "web-1")
		for _, a := range []struct{ typ, payload, key, want string }{
			{agentproto.JobContainerRestart, `{"container":"web"}`, "container", "web"},
			{agentproto.JobServiceStop, `{"unit":"nginx.service"}`, "unit", "nginx.service"},
		} {
			if _, _, err := e.svc.QueueAction(ctx, audit.Caller{Actor: admin}, id, a.typ, []byte(a.payload), ""); err != nil {
				t.Fatal(err)
			}
			got, err := e.st.ListAudit(ctx, audit.Query{Limit: 1, Action: servers.ActionQueued})
			if err != nil || len(got) != 1 {
				t.Fatalf("audit: %v, %v", got, err)
			}
			det := got[0].Details
			if det["type"] != a.typ || det["server"] != "web-1" || det[a.key] != a.want || det["job_id"] == "" {
				t.Fatalf("%s: details %v", a.typ, det)
			}
		}
	})
}
