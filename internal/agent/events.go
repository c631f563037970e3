package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Event batching.
const (
	// eventFlushDelay is how long the sink waits for more events after the
	// first one before posting the batch.
	eventFlushDelay = 100 * time.Millisecond
	eventBatchMax   = 200
	// eventBufferMax bounds the events waiting to be posted (the control
	// plane may be unreachable); later ones are dropped and counted.
	eventBufferMax = 1000
	// eventCloseBudget bounds how long a finished job waits for its
	// remaining events to be posted before it is completed.
	eventCloseBudget = 10 * time.Second
)

// jobEvents is the EventSink of one job: Emit appends to a buffer, a
// goroutine posts batches, retrying with backoff while the control plane is
// unreachable.
type jobEvents struct {
	client  *Client
	jobID   string
	log     *slog.Logger
	redact  *redactor
	backoff Backoff

	mu      sync.Mutex
	buf     []agentproto.Event
	dropped int
	closed  bool
	gone    bool // the control plane refused the job's events for good

	cancel  context.CancelFunc
	wake    chan struct{}
	closing chan struct{}
	done    chan struct{}
}

func newJobEvents(ctx context.Context, c *Client, jobID string, log *slog.Logger, r *redactor, b Backoff) *jobEvents {
	ctx, cancel := context.WithCancel(ctx)
	s := &jobEvents{
		client: c, jobID: jobID, log: log, redact: r, backoff: b,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go s.loop(ctx)
	return s
}

// Emit implements EventSink.
func (s *jobEvents) Emit(level, message string, data any) {
	switch level {
	case agentproto.LevelDebug, agentproto.LevelInfo, agentproto.LevelWarn, agentproto.LevelError:
	default:
		level = agentproto.LevelInfo
	}
	ev := agentproto.Event{At: time.Now().UTC(), Level: level, Message: s.redact.string(message)}
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			ev.Message += fmt.Sprintf(" (event data not encodable: %v)", err)
		} else if string(b) != "null" {
			ev.Data = s.redact.jsonBytes(b)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.gone {
		return
	}
	if len(s.buf) >= eventBufferMax {
		s.dropped++
		return
	}
	s.buf = append(s.buf, ev)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting events, posts the remaining ones (trying for at
// most eventCloseBudget) and returns when the sink's goroutine has ended.
func (s *jobEvents) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	t := time.AfterFunc(eventCloseBudget, s.cancel)
	<-s.done
	t.Stop()
	s.cancel()
}

func (s *jobEvents) loop(ctx context.Context) {
	defer close(s.done)
	for {
		select {
		case <-s.wake:
			// Let more events join this batch.
			if !s.sleepUnlessClosing(ctx, eventFlushDelay) {
				return
			}
		case <-s.closing:
		case <-ctx.Done():
			return
		}
		for s.pending() {
			err := s.send(ctx)
			if err == nil {
				s.backoff.Reset()
				continue
			}
			if ctx.Err() != nil || errors.Is(err, ErrRevoked) {
				return
			}
			switch StatusOf(err) {
			case http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
				s.log.Warn("job events refused; dropping them", "job_id", s.jobID, "err", err)
				s.mu.Lock()
				s.gone, s.buf, s.dropped = true, nil, 0
				s.mu.Unlock()
				return
			}
			d := RetryDelay(&s.backoff, err)
			s.log.Warn("posting job events failed", "job_id", s.jobID, "err", err, "retry_in", d.Round(time.Millisecond).String())
			// Before Close, a close cuts the wait short for one last try
			// at once; after it, retries go on within the close budget.
			wait := s.sleepUnlessClosing
			if isClosed(s.closing) {
				wait = Sleep
			}
			if !wait(ctx, d) {
				return
			}
		}
		if isClosed(s.closing) {
			return
		}
	}
}

// sleepUnlessClosing waits d, or less if the sink is closed; it returns
// false if ctx ended.
func (s *jobEvents) sleepUnlessClosing(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.closing:
	case <-ctx.Done():
		return false
	}
	return true
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (s *jobEvents) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf) > 0 || s.dropped > 0
}

// send posts the oldest batch of buffered events and removes it from the
// buffer once accepted. After the last batch it reports dropped events.
func (s *jobEvents) send(ctx context.Context) error {
	s.mu.Lock()
	n := min(len(s.buf), eventBatchMax)
	batch := make([]agentproto.Event, n, n+1)
	copy(batch, s.buf[:n])
	dropped := 0
	if n == len(s.buf) && s.dropped > 0 {
		dropped = s.dropped
		batch = append(batch, agentproto.Event{
			At: time.Now().UTC(), Level: agentproto.LevelWarn,
			Message: fmt.Sprintf("%d events dropped: the agent could not post them in time", dropped),
		})
	}
	s.mu.Unlock()
	if err := s.client.PostEvents(ctx, s.jobID, batch); err != nil {
		return err
	}
	s.mu.Lock()
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil
	}
	s.dropped -= dropped
	s.mu.Unlock()
	return nil
}

// HumanBytes is n in B, KiB, MiB or GiB, for event messages.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
