package agentapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/httpapi"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// MaxClaimsPerServer is how many claim long polls one server may hold
// open at once. The agent holds one; a second covers a reconnect whose old
// poll the control plane has not seen end yet. A newer poll ends the oldest
// at once (answered 204), so a server cannot pile up waiting requests.
const MaxClaimsPerServer = 2

// claimSlots tracks the open claim long polls of every server in this
// process.
type claimSlots struct {
	mu      sync.Mutex // guards waiting
	waiting map[string][]*claimSlot
}

type claimSlot struct {
	end func() // ends the claim at once, with no job
}

func newClaimSlots() *claimSlots { return &claimSlots{waiting: map[string][]*claimSlot{}} }

// hold registers a claim of serverID and returns a context that ends when
// ctx does or when a newer claim of the same server pushes this one out,
// and a release to call when the claim is answered.
func (c *claimSlots) hold(ctx context.Context, serverID string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	release := c.holdFunc(serverID, cancel)
	return ctx, func() {
		cancel()
		release()
	}
}

// holdFunc registers a claim of serverID that a newer claim ends by
// calling end (which must not block), and returns a release to call when
// the claim is answered.
func (c *claimSlots) holdFunc(serverID string, end func()) func() {
	s := &claimSlot{end: end}
	c.mu.Lock()
	list := append(c.waiting[serverID], s)
	for len(list) > MaxClaimsPerServer {
		list[0].end()
		list = list[1:]
	}
	c.waiting[serverID] = list
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		list := c.waiting[serverID]
		for i, o := range list {
			if o == s {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(c.waiting, serverID)
		} else {
			c.waiting[serverID] = list
		}
	}
}

// count returns how many claims of serverID are waiting.
func (c *claimSlots) count(serverID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting[serverID])
}

// claimStoreTimeout bounds one store attempt of a woken parked claim.
const claimStoreTimeout = 10 * time.Second

// parker holds the claims that wait for a job without a goroutine each:
// the request was detached from net/http (httpapi.Detach), and what is
// kept per claim is its connection, a wake-up subscription, a timer and a
// claim slot. Wake-ups and timeouts run the claim on a short-lived
// goroutine; at most maxClaimWork of them ask the store at once, so that
// waking every claim (the bus reconnected) does not flood it.
type parker struct {
	jobs  *jobs.Service
	slots *claimSlots
	work  chan struct{} // a token per store attempt in flight
}

// maxClaimWork is how many woken parked claims ask the store at once.
const maxClaimWork = 16

func newParker(j *jobs.Service, slots *claimSlots) *parker {
	return &parker{jobs: j, slots: slots, work: make(chan struct{}, maxClaimWork)}
}

// Why a parked claim ends without a job.
type claimEnd uint8

const (
	endNone    claimEnd = iota
	endTimeout          // its wait elapsed
	endPushed           // a newer claim of the server took its slot
)

// parkedClaim is one claim waiting for a job of its server.
type parkedClaim struct {
	p        *parker
	serverID string

	mu       sync.Mutex        // guards the fields below
	d        *httpapi.Detached // nil until the request was detached
	woken    bool              // a wake-up not yet looked at
	end      claimEnd          // why it must end, endNone while it may wait
	running  bool              // a goroutine is running it
	finished bool              // answered; every later signal is ignored
	stop     func()            // ends the wake-up subscription
	release  func()            // frees the claim slot
	timer    *time.Timer       // its wait
}

// park starts the wait of a claim of serverID for up to wait: it is
// subscribed to wake-ups and holds a claim slot from now, so that a job
// queued between the caller's store attempt and the request's detaching
// is not missed. The caller then either detaches the request with
// attach, or gives up with cancel (it found a job, or could not detach).
func (p *parker) park(serverID string, wait time.Duration) *parkedClaim {
	c := &parkedClaim{p: p, serverID: serverID}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop = p.jobs.WaitQueued(serverID, func() { c.signal(true, endNone) })
	c.release = p.slots.holdFunc(serverID, func() { c.signal(false, endPushed) })
	c.timer = time.AfterFunc(wait, func() { c.signal(false, endTimeout) })
	return c
}

// cancel ends a claim that was not detached.
func (c *parkedClaim) cancel() {
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	c.cleanup()
}

func (c *parkedClaim) cleanup() {
	c.timer.Stop()
	c.stop()
	c.release()
}

// attach hands the claim its detached request (nil: the request could not
// be detached and was answered 204) and runs what came meanwhile.
func (c *parkedClaim) attach(d *httpapi.Detached) {
	if d == nil {
		c.cancel()
		return
	}
	c.mu.Lock()
	c.d = d
	c.mu.Unlock()
	c.signal(false, endNone)
}

// signal records a wake-up or a reason to end, and runs the claim on a
// goroutine unless one runs it already (that one looks again before it
// stops). It does not block: it is called under the notifier's and the
// slots' locks.
func (c *parkedClaim) signal(woken bool, end claimEnd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	c.woken = c.woken || woken
	if c.end == endNone {
		c.end = end
	}
	if c.d == nil || c.running || (!c.woken && c.end == endNone && !c.p.jobs.ClaimsStopped()) {
		return
	}
	c.running = true
	go c.run()
}

// run answers the claim when it must end, or when a wake-up finds a job;
// a wake-up that finds none leaves it waiting.
func (c *parkedClaim) run() {
	for {
		c.mu.Lock()
		woken, end := c.woken, c.end
		c.woken = false
		if !woken && end == endNone && !c.p.jobs.ClaimsStopped() {
			c.running = false
			c.mu.Unlock()
			return
		}
		d := c.d
		c.mu.Unlock()
		switch {
		case c.p.jobs.ClaimsStopped():
			// The control plane is shutting down: no job, and the
			// connection closes.
			c.finish(func() { d.Respond(http.StatusNoContent, "", nil, false) })
			return
		case end == endPushed:
			c.finish(func() { d.Respond(http.StatusNoContent, "", nil, true) })
			return
		case woken:
			if !d.Alive() {
				// The agent hung up: a job claimed now would sit
				// running until its lease lapsed.
				c.finish(d.Drop)
				return
			}
			j, ok, err := c.claim()
			switch {
			case err != nil:
				c.finish(func() { d.RespondError(err) })
				return
			case ok:
				c.finish(func() { d.RespondJSON(http.StatusOK, claimResponse(j), true) })
				return
			}
		default: // endTimeout
			c.finish(func() { d.Respond(http.StatusNoContent, "", nil, true) })
			return
		}
	}
}

func (c *parkedClaim) claim() (jobs.Job, bool, error) {
	c.p.work <- struct{}{}
	defer func() { <-c.p.work }()
	ctx, cancel := context.WithTimeout(context.Background(), claimStoreTimeout)
	defer cancel()
	return c.p.jobs.ClaimNow(ctx, c.serverID)
}

// finish marks the claim answered, frees what it held and answers it.
func (c *parkedClaim) finish(answer func()) {
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	c.cleanup()
	answer()
}

func claimResponse(j jobs.Job) *AgentClaimResponse {
	return &AgentClaimResponse{Job: AgentJob{
		ID: j.ID, Type: j.Type, Payload: j.Payload, HasSecrets: j.HasSecrets,
		TimeoutSeconds: j.TimeoutSeconds, LeaseSeconds: j.LeaseSeconds, CreatedAt: j.CreatedAt,
	}}
}
