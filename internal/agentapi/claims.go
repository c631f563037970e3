package agentapi

import (
	"context"
	"sync"
)

// MaxClaimsPerServer is how many claim long polls one server may hold
// open at once. The agent holds one; a second covers a reconnect whose old
// poll the control plane has not seen end yet. A newer poll ends the oldest
// at once (answered 204), so a server cannot pile up waiting requests.
const MaxClaimsPerServer = 2

// claimSlots tracks the open claim long polls of every server in this
// process.
type claimSlots struct {
	mu      sync.Mutex // guards waiting
	waiting map[string][]*claimSlot
}

type claimSlot struct {
	cancel context.CancelFunc
}

func newClaimSlots() *claimSlots { return &claimSlots{waiting: map[string][]*claimSlot{}} }

// hold registers a claim of serverID and returns a context that ends when
// ctx does or when a newer claim of the same server pushes this one out,
// and a release to call when the claim is answered.
func (c *claimSlots) hold(ctx context.Context, serverID string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	s := &claimSlot{cancel: cancel}
	c.mu.Lock()
	list := append(c.waiting[serverID], s)
	for len(list) > MaxClaimsPerServer {
		list[0].cancel()
		list = list[1:]
	}
	c.waiting[serverID] = list
	c.mu.Unlock()
	return ctx, func() {
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		list := c.waiting[serverID]
		for i, o := range list {
			if o == s {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(c.waiting, serverID)
		} else {
			c.waiting[serverID] = list
		}
	}
}

// count returns how many claims of serverID are waiting.
func (c *claimSlots) count(serverID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting[serverID])
}
