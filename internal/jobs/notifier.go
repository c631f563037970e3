package jobs

import "sync"

// notifier wakes waiters by key: the claims waiting for a server when a job
// is queued for it (key: the server id), and the readers waiting for a job
// to end (keys: the job id, and the server's end key). It is process-local.
// A waiter is a channel (a goroutine selects on it) or a function (a wait
// held without a goroutine, see Service.WaitQueued).
type notifier struct {
	mu      sync.Mutex // guards waiters
	waiters map[string][]*waiter
}

type waiter struct {
	ch chan struct{} // receives a value when woken; nil for fn
	fn func()        // called when woken; must not block
}

func (w *waiter) wake() {
	if w.fn != nil {
		w.fn()
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func newNotifier() *notifier {
	return &notifier{waiters: map[string][]*waiter{}}
}

// subscribe returns a channel that receives a value when any of keys is
// notified, and a function that unsubscribes.
func (n *notifier) subscribe(keys ...string) (<-chan struct{}, func()) {
	w := &waiter{ch: make(chan struct{}, 1)}
	return w.ch, n.add(w, keys)
}

// subscribeFunc calls fn (under the notifier's lock: it must not block)
// whenever key is notified, until the returned function is called.
func (n *notifier) subscribeFunc(key string, fn func()) func() {
	return n.add(&waiter{fn: fn}, []string{key})
}

func (n *notifier) add(w *waiter, keys []string) func() {
	n.mu.Lock()
	for _, k := range keys {
		n.waiters[k] = append(n.waiters[k], w)
	}
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		for _, k := range keys {
			list := n.waiters[k]
			for i, o := range list {
				if o == w {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) == 0 {
				delete(n.waiters, k)
			} else {
				n.waiters[k] = list
			}
		}
		n.mu.Unlock()
	}
}

// notify wakes every waiter of key.
func (n *notifier) notify(key string) {
	n.mu.Lock()
	for _, w := range n.waiters[key] {
		w.wake()
	}
	n.mu.Unlock()
}

// notifyAll wakes every waiter.
func (n *notifier) notifyAll() {
	n.mu.Lock()
	for _, list := range n.waiters {
		for _, w := range list {
			w.wake()
		}
	}
	n.mu.Unlock()
}
