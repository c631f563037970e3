package auth

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
)

// hashQueue bounds the password hashes computed at once (argon2id takes
// 19 MiB and tens of milliseconds each) and the callers waiting for one.
// When the wait line is full a caller is refused at once instead of
// queueing without bound.
type hashQueue struct {
	slots      chan struct{} // one element per hash being computed
	waiting    atomic.Int64  // callers blocked on slots
	maxWaiting int64
}

func newHashQueue(slots, maxWaiting int) *hashQueue {
	return &hashQueue{slots: make(chan struct{}, slots), maxWaiting: int64(maxWaiting)}
}

// busyRetryAfter is what a caller refused by a full queue is told to wait:
// a queue of maxWaiting drains in well under a second.
const busyRetryAfter = time.Second

var errHashBusy = &fault.Error{Kind: fault.TooManyRequests, Code: CodeSignInBusy,
	Message: "Too many sign-in attempts are being checked right now. Try again in a moment.", RetryAfter: busyRetryAfter}

// acquire takes a slot, waiting in line if there is room in it; it returns
// errHashBusy when the line is full. release must follow a nil error.
func (q *hashQueue) acquire(ctx context.Context) error {
	select {
	case q.slots <- struct{}{}:
		return nil
	default:
	}
	if q.waiting.Add(1) > q.maxWaiting {
		q.waiting.Add(-1)
		return errHashBusy
	}
	defer q.waiting.Add(-1)
	select {
	case q.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *hashQueue) release() { <-q.slots }

// full reports whether acquire would be refused now: every slot is taken
// and the wait line is full. It is a hint for skipping work before
// acquire, which decides.
func (q *hashQueue) full() bool {
	return len(q.slots) == cap(q.slots) && q.waiting.Load() >= q.maxWaiting
}
