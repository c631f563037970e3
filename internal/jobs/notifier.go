package jobs

import "sync"

// notifier wakes the claims waiting for a server when a job is queued for
// it. It is process-local.
type notifier struct {
	mu      sync.Mutex // guards waiters
	waiters map[string]map[chan struct{}]struct{}
}

func newNotifier() *notifier {
	return &notifier{waiters: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives a value when a job is queued for
// serverID, and a function that unsubscribes.
func (n *notifier) subscribe(serverID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	set := n.waiters[serverID]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		n.waiters[serverID] = set
	}
	set[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(set, ch)
		if len(set) == 0 && n.waiters[serverID] != nil && len(n.waiters[serverID]) == 0 {
			delete(n.waiters, serverID)
		}
		n.mu.Unlock()
	}
}

// notify wakes every waiter of serverID.
func (n *notifier) notify(serverID string) {
	n.mu.Lock()
	for ch := range n.waiters[serverID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}
