package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// Every change of a server's instances gives another revision, read
// again right after it, although the revision is kept in memory between
// changes on SQLite; and a revision read while a change commits is never
// kept once the change is done.
func TestDatabasesRevisionFollowsChanges(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if s.Shared() {
			// Listening, a PostgreSQL store keeps revisions in memory too.
			listen(t, s)
		}
		srv := mustCreateServer(t, s, "rev-host")
		other := mustCreateServer(t, s, "rev-other")
		last, lastWhat := "", ""
		step := func(what string) {
			t.Helper()
			rev, err := s.DatabasesRevision(ctx, srv)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			again, err := s.DatabasesRevision(ctx, srv)
			if err != nil || again != rev {
				t.Fatalf("%s: read twice: %q then %q (%v)", what, rev, again, err)
			}
			if rev == last {
				t.Fatalf("%s: revision %q is still the one after %s", what, rev, lastWhat)
			}
			last, lastWhat = rev, what
		}
		step("nothing")
		otherRev, err := s.DatabasesRevision(ctx, other)
		if err != nil {
			t.Fatal(err)
		}

		// External: insert, check finished, recheck, delete.
		ext, cred := newInstance(srv, "ext")
		if err := s.InsertDatabaseInstance(ctx, ext, cred); err != nil {
			t.Fatal(err)
		}
		step("insert")
		now := t0.Add(time.Second)
		if ok, err := s.FinishDatabaseCheck(ctx, ext.ID, ext.CheckJobID, databases.CheckResult{State: databases.StateReady, Version: "16"}, now); err != nil || !ok {
			t.Fatalf("finish check: %v %v", ok, err)
		}
		step("check finished")
		if err := s.RecheckDatabaseInstance(ctx, ext.ID, "require", "", ids.NewAt(ids.Job, now), now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		step("recheck")
		if err := s.DeleteDatabaseInstance(ctx, ext.ID); err != nil {
			t.Fatal(err)
		}
		step("delete")

		// Managed: operation begun, finished, removed.
		man, manCred := newInstance(srv, "managed")
		man.Managed, man.State = true, databases.StateReady
		if err := s.InsertDatabaseInstance(ctx, man, manCred); err != nil {
			t.Fatal(err)
		}
		step("insert managed")
		job := ids.NewAt(ids.Job, now)
		if err := s.BeginDatabaseOperation(ctx, man.ID, []string{databases.StateReady}, databases.StateChecking, job, now.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		step("operation begun")
		if ok, err := s.FinishDatabaseOperation(ctx, man.ID, job, databases.OperationResult{State: databases.StateReady, Port: 6000}, now.Add(3*time.Second)); err != nil || !ok {
			t.Fatalf("finish operation: %v %v", ok, err)
		}
		step("operation finished")
		if ok, err := s.DeleteRemovedDatabaseInstance(ctx, man.ID, job); err != nil || !ok {
			t.Fatalf("delete removed: %v %v", ok, err)
		}
		step("removed")

		if rev, err := s.DatabasesRevision(ctx, other); err != nil || rev != otherRev {
			t.Fatalf("another server's revision: %q, want %q (%v)", rev, otherRev, err)
		}

		// Readers racing a change: once the change returned, every read
		// gives the new revision.
		before, err := s.DatabasesRevision(ctx, srv)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 20 {
			inst, c := newInstance(srv, "race-"+string(rune('a'+round)))
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range 8 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := s.DatabasesRevision(ctx, srv); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			if err := s.InsertDatabaseInstance(ctx, inst, c); err != nil {
				t.Fatal(err)
			}
			close(stop)
			wg.Wait()
			after, err := s.DatabasesRevision(ctx, srv)
			if err != nil {
				t.Fatal(err)
			}
			if after == before {
				t.Fatalf("round %d: revision %q unchanged after an insert raced by readers", round, after)
			}
			before = after
		}
	})
}

// On PostgreSQL a control plane keeps revisions in memory only while it
// hears the others: a change made through another one reaches it through
// the database's notifications, and while it does not listen it reads
// every revision from the database.
func TestDatabasesRevisionAcrossControlPlanes(t *testing.T) {
	a, b := openTwice(t, store.Postgres)
	ctx := context.Background()
	srv := mustCreateServer(t, a, "rev-shared")
	listening, stop := listen(t, b)

	var reads atomic.Int64
	b.ObserveQueries(func(op string, _ time.Duration) {
		if op == "query" {
			reads.Add(1)
		}
	})
	rev := func(s *store.Store) string {
		t.Helper()
		r, err := s.DatabasesRevision(ctx, srv)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := rev(b)
	before := reads.Load()
	if again := rev(b); again != first || reads.Load() != before {
		t.Fatalf("read again: %q (was %q), %d queries: want it from memory", again, first, reads.Load()-before)
	}

	inst, cred := newInstance(srv, "shared")
	if err := a.InsertDatabaseInstance(ctx, inst, cred); err != nil {
		t.Fatal(err)
	}
	changed := rev(a)
	testlab.Eventually(t, 10*time.Second, "the other control plane sees the new instance", func() bool { return rev(b) == changed })

	stop()
	if up := <-listening; up {
		t.Fatal("the listener did not report down when it stopped")
	}
	if err := a.DeleteDatabaseInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if got := rev(b); got == changed {
		t.Fatalf("not listening, the control plane still gives the revision %q from before a delete", got)
	}
}

// listen runs s.Listen until the test ends or stop is called (which
// returns once it has), and returns once it listens; listening then gets
// every later change of its state.
func listen(t *testing.T, s *store.Store) (listening <-chan bool, stop func()) {
	t.Helper()
	ch := make(chan bool, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(ctx, func(string) {}, func(up bool) { ch <- up })
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	if up := <-ch; !up {
		t.Fatal("the listener reported down first")
	}
	return ch, stop
}
