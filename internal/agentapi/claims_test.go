package agentapi

import (
	"context"
	"sync"
	"testing"
)

// Parallel claims of one server: at most MaxClaimsPerServer stay live, the
// oldest are ended, and releases leave nothing behind.
func TestClaimSlots(t *testing.T) {
	c := newClaimSlots()
	var (
		mu       sync.Mutex
		ctxs     []context.Context
		releases []func()
		wg       sync.WaitGroup
	)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, release := c.hold(context.Background(), "srv_a")
			mu.Lock()
			ctxs, releases = append(ctxs, ctx), append(releases, release)
			mu.Unlock()
		}()
	}
	wg.Wait()
	live := 0
	for _, ctx := range ctxs {
		if ctx.Err() == nil {
			live++
		}
	}
	if live != MaxClaimsPerServer || c.count("srv_a") != MaxClaimsPerServer {
		t.Fatalf("%d claims live, %d tracked; want %d", live, c.count("srv_a"), MaxClaimsPerServer)
	}
	if _, release := c.hold(context.Background(), "srv_b"); c.count("srv_b") != 1 {
		t.Fatal("another server's claim was not tracked on its own")
	} else {
		release()
	}
	for _, r := range releases {
		r()
	}
	c.mu.Lock()
	n := len(c.waiting)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d servers tracked after every claim was released", n)
	}
}
