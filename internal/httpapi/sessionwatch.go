package httpapi

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// sessionCheckEvery is how often the sessions of open streams are checked:
// a stream whose session was revoked (sign-out, a revoked session, a
// password change, a disabled user or a reset second factor, on any
// control plane sharing the store) closes within this.
const sessionCheckEvery = 2 * time.Second

// sessionWatch tells open streams when their session ends. One goroutine
// per control plane asks the store, every sessionCheckEvery and while
// there are streams, which of their sessions ended; a revocation made
// here pokes it at once.
type sessionWatch struct {
	ended func(ctx context.Context, ids []string) ([]string, error)
	log   *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{} // by session id
	running bool
	poked   chan struct{}
}

func newSessionWatch(ended func(context.Context, []string) ([]string, error), log *slog.Logger) *sessionWatch {
	return &sessionWatch{ended: ended, log: log, subs: map[string]map[chan struct{}]struct{}{}, poked: make(chan struct{}, 1)}
}

// watch returns a channel closed when sessionID ends, and a function that
// stops watching (call it when the stream closes).
func (w *sessionWatch) watch(sessionID string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[sessionID] == nil {
		w.subs[sessionID] = map[chan struct{}]struct{}{}
	}
	w.subs[sessionID][ch] = struct{}{}
	if !w.running {
		w.running = true
		go w.run()
	}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.subs[sessionID][ch]; ok {
			delete(w.subs[sessionID], ch)
			if len(w.subs[sessionID]) == 0 {
				delete(w.subs, sessionID)
			}
		}
	}
}

// poke checks the sessions now: one was revoked here.
func (w *sessionWatch) poke() {
	if w == nil {
		return
	}
	select {
	case w.poked <- struct{}{}:
	default:
	}
}

func (w *sessionWatch) run() {
	t := time.NewTicker(sessionCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-w.poked:
		}
		w.mu.Lock()
		if len(w.subs) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		ids := make([]string, 0, len(w.subs))
		for id := range w.subs {
			ids = append(ids, id)
		}
		w.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), sessionCheckEvery)
		ended, err := w.ended(ctx, ids)
		cancel()
		if err != nil {
			// The streams stay open until the next check: a store that
			// does not answer ends no session.
			w.log.Warn("checking the sessions of open streams", "err", err)
			continue
		}
		w.mu.Lock()
		for _, id := range ended {
			for ch := range w.subs[id] {
				close(ch)
			}
			delete(w.subs, id)
		}
		w.mu.Unlock()
	}
}
