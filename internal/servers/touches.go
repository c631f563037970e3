package servers

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Touch is one heartbeat to record: the server was seen at At running
// AgentVersion.
type Touch struct {
	ServerID     string
	AgentVersion string
	At           time.Time
}

// TouchFlushInterval is how often batched heartbeats are written. A
// server's stored last_seen_at lags its last heartbeat by at most about
// this much (plus the write), far below the 3 heartbeat intervals after
// which it counts as offline; this process's own reads (Get, List) see
// the pending heartbeats at once.
const TouchFlushInterval = time.Second

// touchBatcher holds the latest heartbeat of each server until the next
// flush writes them all in one transaction, instead of one write
// transaction per heartbeat.
type touchBatcher struct {
	store Store

	mu      sync.Mutex // guards pending
	pending map[string]Touch

	flushMu sync.Mutex // one flush at a time, so touches are written in order
}

func newTouchBatcher(st Store) *touchBatcher {
	return &touchBatcher{store: st, pending: map[string]Touch{}}
}

func (b *touchBatcher) add(t Touch) {
	b.mu.Lock()
	if cur, ok := b.pending[t.ServerID]; !ok || !t.At.Before(cur.At) {
		b.pending[t.ServerID] = t
	}
	b.mu.Unlock()
}

// seen returns the pending heartbeat time of a server, if any.
func (b *touchBatcher) seen(id string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.pending[id]
	return t.At, ok
}

// drop forgets a server's pending heartbeat.
func (b *touchBatcher) drop(id string) {
	b.mu.Lock()
	delete(b.pending, id)
	b.mu.Unlock()
}

// flush writes the pending heartbeats. On failure they are put back, unless
// a newer heartbeat of the same server arrived meanwhile.
func (b *touchBatcher) flush(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.mu.Unlock()
		return nil
	}
	batch := make([]Touch, 0, len(b.pending))
	for _, t := range b.pending {
		batch = append(batch, t)
	}
	b.pending = make(map[string]Touch, len(batch))
	b.mu.Unlock()
	err := b.store.TouchServers(ctx, batch)
	if err != nil {
		for _, t := range batch {
			b.add(t)
		}
	}
	return err
}

// StartTouchBatching makes heartbeats without new facts be written in
// batches, every interval, until the returned stop function is called;
// stop writes what is pending and waits for it. Without it, every
// heartbeat is written at once.
// Call stop only once no request is served any more (after the HTTP
// server's Shutdown).
func (s *Service) StartTouchBatching(interval time.Duration, log *slog.Logger) (stop func(ctx context.Context) error) {
	b := newTouchBatcher(s.store)
	s.touches.Store(b)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := b.flush(ctx); err != nil && log != nil {
				log.Error("writing heartbeats", "err", err.Error())
			}
			cancel()
		}
	}()
	var once sync.Once
	return func(ctx context.Context) error {
		once.Do(func() { close(done) })
		<-exited
		s.touches.Store(nil) // later heartbeats are written at once
		return b.flush(ctx)
	}
}
