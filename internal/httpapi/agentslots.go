package httpapi

import (
	"math/rand/v2"
	"net/http"
	"strconv"
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
type agentSlots chan struct{}

func newAgentSlots(n int) agentSlots {
	if n <= 0 {
		n = DefaultAgentInFlight
	}
	return make(agentSlots, n)
}

// acquire takes a slot if one is free.
func (a agentSlots) acquire() bool {
	select {
	case a <- struct{}{}:
		return true
	default:
		return false
	}
}

func (a agentSlots) release() { <-a }

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
