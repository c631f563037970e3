package githost_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestWebhooks: a delivery is verified before anything else (a forged,
// missing or malformed signature is refused), handled once however often
// and however concurrently its body arrives, under the same delivery id
// or new ones (the signature does not cover the id), and a failed
// handling lets a redelivery try again. A push reaches the push handler
// with the exact commit; other refs are ignored; applications that skip
// it are reported. Installation events keep the installations current.
func TestWebhooks(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		r := newRig(t, st)
		r.connect()
		repo := r.host.AddRepo("acme", "web", true, map[string]string{"main": strings.Repeat("a", 40)})
		inst := r.host.Install(t, "acme")
		if _, err := r.svc.AddInstallation(r.ctx, r.caller, inst, githost.SetupInstall); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var pushes []githost.Push
		var fail, skip atomic.Bool
		r.svc.OnPush(func(_ context.Context, p githost.Push) (githost.PushOutcome, error) {
			if fail.Load() {
				return githost.PushOutcome{}, errors.New("the store is down")
			}
			if skip.Load() {
				return githost.PushOutcome{Skipped: []githost.SkippedDeploy{{ApplicationID: "app_1", Reason: "older"}}}, nil
			}
			mu.Lock()
			defer mu.Unlock()
			pushes = append(pushes, p)
			return githost.PushOutcome{DeploymentIDs: []string{"dep_" + p.CommitSHA[:6]}}, nil
		})
		sha := strings.Repeat("b", 40)
		body := r.host.PushEvent(inst, repo, "main", strings.Repeat("a", 40), sha)
		deliver := func(id, sig string, b []byte) (githost.WebhookResult, error) {
			return r.svc.HandleWebhook(r.ctx, githost.Delivery{Event: "push", ID: id, Signature: sig, Body: b})
		}

		// Forged, missing or malformed signatures: nothing happens.
		forged := "sha256=" + strings.Repeat("0", 64)
		for _, sig := range []string{forged, "", "sha1=abc", "sha256=zz", r.host.Sign(append(body, ' '))} {
			_, err := deliver(testlab.DeliveryID(), sig, body)
			if fe := fault.As(err); fe == nil || fe.Kind != fault.Unauthenticated || fe.Code != "invalid-signature" {
				t.Fatalf("signature %q: %v, want invalid-signature", sig, err)
			}
		}

		// One body, fired concurrently under one delivery id and under
		// new ones: handled exactly once.
		id := testlab.DeliveryID()
		var handled, duplicates atomic.Int64
		testlab.InParallel(8, func(i int) {
			did := id
			if i%2 == 1 {
				did = testlab.DeliveryID()
			}
			res, err := deliver(did, r.host.Sign(body), body)
			switch {
			case err != nil:
				t.Errorf("delivery: %v", err)
			case res.Result == githost.WebhookHandled:
				handled.Add(1)
			case res.Result == githost.WebhookDuplicate:
				duplicates.Add(1)
			}
		})
		if handled.Load() != 1 || duplicates.Load() != 7 {
			t.Fatalf("%d handled, %d duplicates; want 1 and 7", handled.Load(), duplicates.Load())
		}
		if len(pushes) != 1 || pushes[0] != (githost.Push{InstallationID: inst, RepoID: repo.ID, Repository: "acme/web", Branch: "main", CommitSHA: sha}) {
			t.Fatalf("pushes %+v", pushes)
		}

		// Later, under yet another delivery id: still a duplicate.
		if res, err := deliver(testlab.DeliveryID(), r.host.Sign(body), body); err != nil || res.Result != githost.WebhookDuplicate {
			t.Fatalf("the body again under a new delivery id: %+v, %v", res, err)
		}

		// A failed handling is forgotten: the redelivery is handled.
		fail.Store(true)
		body2 := r.host.PushEvent(inst, repo, "main", sha, strings.Repeat("c", 40))
		id2 := testlab.DeliveryID()
		if _, err := deliver(id2, r.host.Sign(body2), body2); err == nil {
			t.Fatal("a failed handling succeeded")
		}
		fail.Store(false)
		if res, err := deliver(id2, r.host.Sign(body2), body2); err != nil || res.Result != githost.WebhookHandled {
			t.Fatalf("redelivery: %+v, %v", res, err)
		}

		// A push the applications skip says so.
		skip.Store(true)
		body3 := r.host.PushEvent(inst, repo, "main", strings.Repeat("c", 40), strings.Repeat("d", 40))
		if res, err := deliver(testlab.DeliveryID(), r.host.Sign(body3), body3); err != nil || res.Result != githost.WebhookSkipped ||
			len(res.Skipped) != 1 || res.Skipped[0].Reason != "older" || len(res.DeploymentIDs) != 0 {
			t.Fatalf("skipped push: %+v, %v", res, err)
		}
		skip.Store(false)

		// Tags and deleted branches deploy nothing.
		tag := []byte(strings.Replace(string(body), `"refs/heads/main"`, `"refs/tags/v1"`, 1))
		if res, err := deliver(testlab.DeliveryID(), r.host.Sign(tag), tag); err != nil || res.Result != githost.WebhookIgnored {
			t.Fatalf("tag push: %+v, %v", res, err)
		}
		if len(pushes) != 2 {
			t.Fatalf("%d pushes handled, want 2", len(pushes))
		}

		// installation_repositories keeps the selection current; a
		// deleted installation is forgotten.
		ir := []byte(strings.Replace(string(r.host.InstallationEvent("added", inst)), `"repository_selection":"all"`, `"repository_selection":"selected"`, 1))
		if res, err := r.svc.HandleWebhook(r.ctx, githost.Delivery{Event: "installation_repositories", ID: testlab.DeliveryID(),
			Signature: r.host.Sign(ir), Body: ir}); err != nil || res.Result != githost.WebhookHandled {
			t.Fatalf("installation_repositories: %+v, %v", res, err)
		}
		if in, err := st.GitHostInstallation(r.ctx, inst); err != nil || in.RepositorySelection != "selected" {
			t.Fatalf("installation after installation_repositories: %+v, %v", in, err)
		}
		del := r.host.InstallationEvent("deleted", inst)
		if res, err := r.svc.HandleWebhook(r.ctx, githost.Delivery{Event: "installation", ID: testlab.DeliveryID(),
			Signature: r.host.Sign(del), Body: del}); err != nil || res.Result != githost.WebhookHandled {
			t.Fatalf("installation deleted: %+v, %v", res, err)
		}
		if _, err := st.GitHostInstallation(r.ctx, inst); !fault.Is(err, fault.NotFound) {
			t.Fatalf("a deleted installation is still recorded: %v", err)
		}
	})
}
