package jobs

import "sync"

// notifier wakes waiters by key: the claims waiting for a server when a job
// is queued for it (key: the server id), and the readers waiting for a job
// to end (keys: the job id, and the server's end key). It is process-local.
type notifier struct {
	mu      sync.Mutex // guards waiters
	waiters map[string]map[chan struct{}]struct{}
}

func newNotifier() *notifier {
	return &notifier{waiters: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives a value when any of keys is
// notified, and a function that unsubscribes.
func (n *notifier) subscribe(keys ...string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	for _, k := range keys {
		set := n.waiters[k]
		if set == nil {
			set = map[chan struct{}]struct{}{}
			n.waiters[k] = set
		}
		set[ch] = struct{}{}
	}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		for _, k := range keys {
			if set := n.waiters[k]; set != nil {
				delete(set, ch)
				if len(set) == 0 {
					delete(n.waiters, k)
				}
			}
		}
		n.mu.Unlock()
	}
}

// notify wakes every waiter of key.
func (n *notifier) notify(key string) {
	n.mu.Lock()
	for ch := range n.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}

// notifyAll wakes every waiter.
func (n *notifier) notifyAll() {
	n.mu.Lock()
	for _, set := range n.waiters {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	n.mu.Unlock()
}
