package httpapi

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// DefaultAgentInFlight is how many agent requests a control plane handles
// at once unless told otherwise. A healthy control plane answers an agent
// call in a few milliseconds, so even 10,000 agents keep a few dozen in
// flight; the bound only bites when the store falls behind (a burst after
// a restart, a slow disk), and then what would pile up is requests each
// holding a goroutine, buffers and a decoded body while they wait.
const DefaultAgentInFlight = 1024

// agentSlots bounds the agent requests being handled. A request that
// finds every slot taken is answered 503 with a Retry-After at once, which
// the agent honours; it costs next to nothing, and the requests already
// admitted finish sooner. A waiting claim holds no slot: it is taken out of
// the handler (see Detach) and its wake-ups are bounded on their own.
type agentSlots struct {
	slots   chan struct{}
	refused atomic.Int64 // refusals not yet reported in the log
	logged  atomic.Int64 // when they were last reported, in Unix nanoseconds
}

func newAgentSlots(n int) *agentSlots {
	if n <= 0 {
		n = DefaultAgentInFlight
	}
	return &agentSlots{slots: make(chan struct{}, n)}
}

// acquire takes a slot if one is free.
func (a *agentSlots) acquire() bool {
	select {
	case a.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (a *agentSlots) release() { <-a.slots }

// refusedLogEvery is how often refusals are reported: one line for
// however many there were, since logging each would add to the load they
// come from.
const refusedLogEvery = 10 * time.Second

// refused counts a refusal and reports the refusals in the log at most
// every refusedLogEvery.
func (a *agentSlots) refuse(log *slog.Logger) {
	a.refused.Add(1)
	now := time.Now().UnixNano()
	last := a.logged.Load()
	if now-last < int64(refusedLogEvery) || !a.logged.CompareAndSwap(last, now) {
		return
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "agent requests refused: as many as the control plane takes at once are in progress",
		slog.Int64("refused", a.refused.Swap(0)), slog.Int("max_in_flight", cap(a.slots)))
}

// busyRetryMin and busyRetrySpread make the Retry-After of a refused
// agent request: spread, so that the agents refused in one burst do not
// all come back in the same second.
const (
	busyRetryMin    = 1
	busyRetrySpread = 5
)

// busyProblem is the answer to an agent request refused for want of a
// slot.
func busyProblem() *Problem {
	p := newProblem(http.StatusServiceUnavailable, "control-plane-busy",
		"The control plane is handling as many agent requests as it takes at once; retry after the time in Retry-After.")
	p.GetHeaders().Set("Retry-After", strconv.Itoa(busyRetryMin+rand.IntN(busyRetrySpread)))
	return p
}
