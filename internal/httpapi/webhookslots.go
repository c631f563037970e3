package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// DefaultWebhookInFlight is how many webhook deliveries a control plane
// reads and verifies at once unless told otherwise. The webhook is
// public, and a delivery's body (up to githost.MaxWebhookBody, 25 MiB) is
// read whole before its signature can be checked: the bound keeps what
// unsigned bodies can take to 4 × 25 MiB, however many arrive. The git
// host's deliveries are a few kilobytes and are verified in well under a
// millisecond, so even a burst of pushes rarely holds more than one.
const DefaultWebhookInFlight = 4

// Deliveries beyond the slots wait: up to webhookWaiters of them, each up
// to webhookWait, for a burst of pushes to get through. The others are
// refused at once. A delivery that has a slot must send its body within
// webhookBodyTimeout: GitHub gives up on a delivery after 10 s, so a body
// still arriving then is not its, and a client trickling bodies cannot
// keep a slot longer.
const (
	webhookWaiters     = 32
	webhookWait        = 2 * time.Second
	webhookBodyTimeout = 10 * time.Second
	// webhookRetryAfter is the Retry-After, in seconds, of a refusal.
	webhookRetryAfter = 5
)

// bodySlots bounds the requests of an operation whose bodies are being
// read and checked. A slot is taken before the body is read (in
// admitBodies) and given back once the handler no longer needs to hold
// it: for the webhook, as soon as the signature has been checked.
type bodySlots struct {
	slots   chan struct{}
	waiters atomic.Int64 // requests waiting for a slot

	refused atomic.Int64 // refusals not yet reported in the log
	logged  atomic.Int64 // when they were last reported, in Unix nanoseconds
}

func newBodySlots(n int) *bodySlots {
	if n <= 0 {
		n = DefaultWebhookInFlight
	}
	return &bodySlots{slots: make(chan struct{}, n)}
}

// acquire takes a slot, waiting up to webhookWait for one unless
// webhookWaiters requests wait already; false when it got none.
func (b *bodySlots) acquire(ctx context.Context) bool {
	select {
	case b.slots <- struct{}{}:
		return true
	default:
	}
	if b.waiters.Add(1) > webhookWaiters {
		b.waiters.Add(-1)
		return false
	}
	defer b.waiters.Add(-1)
	t := time.NewTimer(webhookWait)
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (b *bodySlots) release() { <-b.slots }

// inUse is how many slots are taken.
func (b *bodySlots) inUse() int { return len(b.slots) }

// refuse counts a refusal and reports the refusals in the log at most
// every refusedLogEvery, in one line for however many there were.
func (b *bodySlots) refuse(log *slog.Logger, path string) {
	b.refused.Add(1)
	now := time.Now().UnixNano()
	last := b.logged.Load()
	if now-last < int64(refusedLogEvery) || !b.logged.CompareAndSwap(last, now) {
		return
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "webhook deliveries refused: as many as the control plane reads at once are in progress",
		slog.String("path", path), slog.Int64("refused", b.refused.Swap(0)), slog.Int("max_in_flight", cap(b.slots)))
}

// webhookBusyProblem is the answer to a delivery refused for want of a
// slot: 503, since the control plane, not the sender, is short of room
// (every delivery comes from the git host, which shares the slots with
// whatever else posts to the endpoint).
func webhookBusyProblem() *Problem {
	p := newProblem(http.StatusServiceUnavailable, "webhook-busy",
		"The control plane is reading as many webhook deliveries as it takes at once; deliver again after the time in Retry-After.")
	p.GetHeaders().Set("Retry-After", strconv.Itoa(webhookRetryAfter))
	return p
}

const bodySlotsKey = "capstan-body-slots"

type releaseKey struct{}

// admitBodies is huma middleware that takes one of an operation's body
// slots (Metadata[bodySlotsKey]) before its input is read, or answers
// 503 webhook-busy without reading it. The slot is given back when the
// handler returns, or earlier through releaseBody.
func (s *Server) admitBodies(ctx huma.Context, next func(huma.Context)) {
	slots, _ := ctx.Operation().Metadata[bodySlotsKey].(*bodySlots)
	if slots == nil {
		next(ctx)
		return
	}
	if !slots.acquire(ctx.Context()) {
		slots.refuse(s.log, ctx.Operation().Path)
		writeHumaProblem(ctx, webhookBusyProblem())
		return
	}
	release := sync.OnceFunc(slots.release)
	defer release()
	next(huma.WithValue(ctx, releaseKey{}, release))
}

// releaseBody gives back the body slot of the request being served, once
// its body is no longer to be feared; a no-op for operations without one.
func releaseBody(ctx context.Context) {
	if release, ok := ctx.Value(releaseKey{}).(func()); ok {
		release()
	}
}
