package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func mustProxyRevision(t *testing.T, s *store.Store, serverID string) int64 {
	t.Helper()
	cfg, err := s.ProxyState(context.Background(), serverID)
	if err != nil {
		t.Fatalf("proxy state of %s: %v", serverID, err)
	}
	return cfg.Revision
}

// TestProxyRevisionBumps: every change to what a server's proxy serves
// raises that server's revision by one, in the change's transaction; a
// refused change raises nothing, and other servers keep theirs.
func TestProxyRevisionBumps(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		other := mustCreateServer(t, s, "web-2")
		a := mustInsertApp(t, s, srv, "web")
		b := mustInsertApp(t, s, srv, "api")
		if got := mustProxyRevision(t, s, srv); got != 0 {
			t.Fatalf("revision of a new server: got %d, want 0", got)
		}
		want := int64(0)
		step := func(what string, err error, bump bool) {
			t.Helper()
			if bump && err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if bump {
				want++
			}
			if got := mustProxyRevision(t, s, srv); got != want {
				t.Fatalf("after %s: revision %d, want %d", what, got, want)
			}
		}
		d := domains.Domain{ID: ids.New(domains.IDPrefix), Hostname: "example.com", ApplicationID: a.ID, ServerID: srv,
			TLSMode: "internal", CreatedAt: t0, UpdatedAt: t0}
		step("creating a domain", s.InsertDomain(ctx, d, []string{d.Hostname}), true)
		dup := d
		dup.ID = ids.New(domains.IDPrefix)
		if err := s.InsertDomain(ctx, dup, []string{d.Hostname}); fault.KindOf(err) != fault.Conflict {
			t.Fatalf("a taken hostname: %v", err)
		}
		step("a refused domain", nil, false)
		step("changing its TLS mode", s.UpdateDomainTLS(ctx, d.ID, "off", t0), true)
		if err := s.UpdateDomainTLS(ctx, "dom_nope", "off", t0); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("TLS mode of an unknown domain: %v", err)
		}
		step("changing an unknown domain", nil, false)
		if cfg, _ := s.ProxyState(ctx, srv); len(cfg.Sites) != 1 || cfg.Sites[0].TLSMode != "off" {
			t.Fatalf("proxy state: %+v", cfg)
		}
		step("deleting the domain", s.DeleteDomain(ctx, d.ID), true)
		if err := s.DeleteDomain(ctx, d.ID); fault.KindOf(err) != fault.NotFound {
			t.Fatalf("deleting it again: %v", err)
		}
		step("deleting it again", nil, false)

		dep := mustQueueDeployment(t, s, a, t0)
		if _, _, ok, err := s.ClaimDeployment(ctx, a.ID, t0); err != nil || !ok {
			t.Fatalf("claim deployment: %v %v", ok, err)
		}
		done, err := s.FinishDeployment(ctx, dep.ID, apps.Finish{Status: apps.Succeeded, ImageID: "sha256:1", At: t0})
		if !done {
			t.Fatalf("finish deployment: %v %v", done, err)
		}
		step("a deployment succeeding", err, true)
		if done, err := s.FinishDeployment(ctx, dep.ID, apps.Finish{Status: apps.Succeeded, At: t0}); done || err != nil {
			t.Fatalf("finishing it again: %v %v", done, err)
		}
		step("finishing it again", nil, false)

		step("removing an application", s.SetAppState(ctx, b.ID, []string{apps.StateActive}, apps.StateRemoving, "job_1", "", t0), true)
		if err := s.SetAppState(ctx, b.ID, []string{apps.StateActive}, apps.StateRemoving, "job_1", "", t0); fault.KindOf(err) != fault.Conflict {
			t.Fatalf("removing it again: %v", err)
		}
		step("removing it again", nil, false)
		step("deleting the application", s.DeleteApp(ctx, b.ID), true)
		if got := mustProxyRevision(t, s, other); got != 0 {
			t.Fatalf("another server's revision: got %d, want 0", got)
		}
	})
}

// TestProxyRevisionParallel: changes committed in parallel each get a
// revision of their own (none lost), and every read of the proxy state
// returns sites that are exactly those of the revision it returns, with
// revisions never going down from one read to the next.
func TestProxyRevisionParallel(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		a := mustInsertApp(t, s, srv, "web")
		const n = 24

		// Only creations: the revision is the number of sites.
		var writers, readers sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan error, 4*n)
		for r := range 3 {
			readers.Go(func() {
				last := int64(-1)
				for {
					select {
					case <-stop:
						return
					default:
					}
					cfg, err := s.ProxyState(ctx, srv)
					if err != nil {
						errs <- fmt.Errorf("reader %d: %w", r, err)
						return
					}
					if cfg.Revision != int64(len(cfg.Sites)) {
						errs <- fmt.Errorf("reader %d: revision %d with %d sites", r, cfg.Revision, len(cfg.Sites))
						return
					}
					if cfg.Revision < last {
						errs <- fmt.Errorf("reader %d: revision %d after %d", r, cfg.Revision, last)
						return
					}
					last = cfg.Revision
				}
			})
		}
		domainIDs := make([]string, n)
		for i := range n {
			writers.Go(func() {
				d := domains.Domain{ID: ids.New(domains.IDPrefix), Hostname: fmt.Sprintf("site-%d.example.com", i), ApplicationID: a.ID,
					ServerID: srv, TLSMode: "auto", CreatedAt: t0, UpdatedAt: t0}
				domainIDs[i] = d.ID
				if err := s.InsertDomain(ctx, d, []string{d.Hostname}); err != nil {
					errs <- fmt.Errorf("insert %s: %w", d.Hostname, err)
				}
			})
		}
		writers.Wait()
		close(stop)
		readers.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := mustProxyRevision(t, s, srv); got != n {
			t.Fatalf("revision after %d parallel creations: got %d, want %d", n, got, n)
		}

		// Parallel changes of one domain and deletions of the others:
		// each bumps once.
		for i := range n {
			writers.Go(func() {
				var err error
				if i%2 == 0 {
					err = s.UpdateDomainTLS(ctx, domainIDs[0], []string{"off", "internal"}[i%4/2], t0)
				} else {
					err = s.DeleteDomain(ctx, domainIDs[i])
				}
				if err != nil {
					t.Errorf("change %d: %v", i, err)
				}
			})
		}
		writers.Wait()
		if got := mustProxyRevision(t, s, srv); got != 2*n {
			t.Fatalf("revision after %d more parallel changes: got %d, want %d", n, got, 2*n)
		}
	})
}
