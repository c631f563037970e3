package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/backoff"
)

// Delivery states.
const (
	Pending   = "pending"   // waiting for its first or next attempt
	Delivered = "delivered" // the destination took it
	Failed    = "failed"    // given up: retried until MaxAge, or the destination is gone
)

// DeliveryIDPrefix starts every delivery id.
const DeliveryIDPrefix = "dlv"

// Delivery is the record of one event going to one destination. Its ID is
// the same across attempts: receivers use it to drop repeats.
type Delivery struct {
	ID            string     `json:"id" doc:"Delivery id (dlv_…); the same across attempts (a webhook's webhook-id)"`
	EventID       string     `json:"event_id"`
	EventType     Type       `json:"event_type"`
	Destination   string     `json:"-"`
	Status        string     `json:"status" enum:"pending,delivered,failed" doc:"pending: waiting for an attempt; delivered; failed: given up"`
	Attempts      int        `json:"attempts" doc:"Attempts made so far"`
	ResponseCode  int        `json:"response_code,omitempty" doc:"Status code of the last attempt's HTTP response or SMTP reply; absent when none came"`
	LastError     string     `json:"last_error,omitempty" doc:"Why the last attempt failed; absent after a success"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty" doc:"When the next attempt is due; absent unless pending"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
}

// Claimed is a delivery claimed for one attempt, with its event.
type Claimed struct {
	Delivery
	Event Event
}

// Outcome is what one attempt came to.
type Outcome struct {
	Status       string // Delivered, Pending (retry at NextAttemptAt) or Failed
	Attempt      int    // the attempt number the claim made
	ResponseCode int
	Error        string
	At           time.Time
	NextAttempt  time.Time // when Status is Pending
}

// Store persists events and deliveries.
type Store interface {
	// UnroutedEvents returns up to limit events not yet routed, oldest
	// first.
	UnroutedEvents(ctx context.Context, limit int) ([]Event, error)
	// RouteEvent records a pending delivery per destination and marks the
	// event routed, in one transaction; an event already routed (by
	// another dispatcher) is left alone.
	RouteEvent(ctx context.Context, eventID string, destinations []string, now time.Time) error
	// ClaimDeliveries claims up to limit pending deliveries due at now
	// whose earlier claim (if any) lapsed, counting an attempt for each
	// and holding them until leaseUntil.
	ClaimDeliveries(ctx context.Context, now, leaseUntil time.Time, limit int) ([]Claimed, error)
	// FinishDelivery records an attempt's outcome, unless the delivery
	// was claimed again since (its attempt count moved on).
	FinishDelivery(ctx context.Context, id string, o Outcome) error
}

// Result is what a destination answered.
type Result struct {
	// Code is the HTTP status or SMTP reply code; 0 when none came.
	Code int
}

// ErrGone is returned (wrapped) by a destination that no longer exists or
// no longer wants the event: the delivery fails at once, without retries.
var ErrGone = errors.New("the destination no longer exists")

// Destination receives events of one kind of destination.
type Destination interface {
	// Kind names this kind of destination ("inbox", "email", "channel");
	// deliveries are recorded for "kind:key".
	Kind() string
	// Route returns the keys of the destinations of this kind that want
	// ev (none, one or many).
	Route(ctx context.Context, ev Event) ([]string, error)
	// Deliver sends ev to the destination key. d.ID is the same on every
	// attempt, so the destination can make a repeat a no-op.
	Deliver(ctx context.Context, key string, d Delivery, ev Event) (Result, error)
}

// Dispatcher routes stored events to destinations and delivers them, with
// retries and exponential backoff. Several dispatchers (one per control
// plane replica) may share a store: routing is conditional and deliveries
// are claimed with a lease, so each attempt is made by one of them.
type Dispatcher struct {
	store Store
	now   func() time.Time
	log   *slog.Logger
	wake  chan struct{}

	mu       sync.RWMutex // guards dests and watchers
	dests    map[string]Destination
	watchers []func(Event)

	// RetryBase is the wait after a first failed attempt; each further
	// failure doubles it, up to RetryMax. MaxAge is how long a delivery is
	// retried before it fails for good. Set them before Run.
	RetryBase, RetryMax, MaxAge time.Duration
	// AttemptTimeout bounds one attempt; Lease is how long a claim holds
	// (longer than AttemptTimeout, so only a crashed dispatcher's claims
	// lapse).
	AttemptTimeout, Lease time.Duration
}

// Defaults of the retry schedule: 10 s, 20 s, 40 s … up to an hour
// between attempts, for up to 24 hours.
const (
	DefaultRetryBase = 10 * time.Second
	DefaultRetryMax  = time.Hour
	DefaultMaxAge    = 24 * time.Hour
)

// NewDispatcher returns a dispatcher with the default retry schedule.
func NewDispatcher(st Store, now func() time.Time, log *slog.Logger) *Dispatcher {
	if log == nil {
		log = slog.Default()
	}
	return &Dispatcher{store: st, now: now, log: log, wake: make(chan struct{}, 1), dests: map[string]Destination{},
		RetryBase: DefaultRetryBase, RetryMax: DefaultRetryMax, MaxAge: DefaultMaxAge,
		AttemptTimeout: 30 * time.Second, Lease: 2 * time.Minute}
}

// Register adds a kind of destination. Events stored before it was
// registered but not yet routed are routed to it too.
func (d *Dispatcher) Register(dest Destination) {
	d.mu.Lock()
	d.dests[dest.Kind()] = dest
	d.mu.Unlock()
	d.Notify()
}

// Watch registers fn to be told of every event this dispatcher routes,
// once routed: the live stream of the web console. fn must not block.
// Each event is routed by one of the dispatchers sharing a store.
func (d *Dispatcher) Watch(fn func(Event)) {
	d.mu.Lock()
	d.watchers = append(d.watchers, fn)
	d.mu.Unlock()
}

// Notify wakes the dispatcher: an event was stored. It never blocks.
func (d *Dispatcher) Notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run routes and delivers until ctx ends: at once when notified, and every
// poll otherwise (events published by other replicas, retries coming due).
func (d *Dispatcher) Run(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	failures := 0
	for {
		if _, err := d.Pass(ctx); err != nil && ctx.Err() == nil {
			failures++
			wait := min(time.Duration(1<<min(failures, 6))*time.Second, time.Minute)
			d.log.Error("event dispatch", "err", err.Error(), "retry_in", wait.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(wait)):
			}
			continue
		}
		failures = 0
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-t.C:
		}
	}
}

// claimBatch is how many deliveries one claim takes.
const claimBatch = 64

// Pass routes every unrouted event and makes every attempt that is due,
// returning how many attempts it made.
func (d *Dispatcher) Pass(ctx context.Context) (int, error) {
	if err := d.route(ctx); err != nil {
		return 0, err
	}
	attempts := 0
	for {
		now := d.now()
		claimed, err := d.store.ClaimDeliveries(ctx, now, now.Add(d.Lease), claimBatch)
		if err != nil {
			return attempts, err
		}
		var wg sync.WaitGroup
		errs := make([]error, len(claimed))
		for i, c := range claimed {
			wg.Go(func() { errs[i] = d.attempt(ctx, c) })
		}
		wg.Wait()
		attempts += len(claimed)
		if err := errors.Join(errs...); err != nil {
			return attempts, err
		}
		if len(claimed) < claimBatch {
			return attempts, nil
		}
	}
}

func (d *Dispatcher) route(ctx context.Context) error {
	for {
		evs, err := d.store.UnroutedEvents(ctx, 100)
		if err != nil {
			return err
		}
		d.mu.RLock()
		dests := make([]Destination, 0, len(d.dests))
		for _, dest := range d.dests {
			dests = append(dests, dest)
		}
		watchers := d.watchers
		d.mu.RUnlock()
		for _, ev := range evs {
			var names []string
			for _, dest := range dests {
				keys, err := dest.Route(ctx, ev)
				if err != nil {
					return fmt.Errorf("route %s to %s: %w", ev.ID, dest.Kind(), err)
				}
				for _, k := range keys {
					names = append(names, dest.Kind()+":"+k)
				}
			}
			if err := d.store.RouteEvent(ctx, ev.ID, names, d.now()); err != nil {
				return err
			}
			for _, fn := range watchers {
				fn(ev)
			}
		}
		if len(evs) < 100 {
			return nil
		}
	}
}

// attempt makes one attempt of a claimed delivery and records it.
func (d *Dispatcher) attempt(ctx context.Context, c Claimed) error {
	kind, key, _ := strings.Cut(c.Destination, ":")
	d.mu.RLock()
	dest := d.dests[kind]
	d.mu.RUnlock()
	o := Outcome{Attempt: c.Attempts}
	var err error
	if dest == nil {
		err = fmt.Errorf("no destination of kind %q in this control plane", kind)
	} else {
		actx, cancel := context.WithTimeout(ctx, d.AttemptTimeout)
		var res Result
		res, err = dest.Deliver(actx, key, c.Delivery, c.Event)
		cancel()
		o.ResponseCode = res.Code
	}
	o.At = d.now()
	switch {
	case err == nil:
		o.Status = Delivered
	case ctx.Err() != nil:
		// Shutting down: leave the claim to lapse and the attempt to be
		// made again.
		return nil
	case errors.Is(err, ErrGone):
		o.Status, o.Error = Failed, err.Error()
	default:
		o.Error = err.Error()
		o.Status, o.NextAttempt = Pending, o.At.Add(d.Backoff(c.Attempts))
		if o.NextAttempt.After(c.CreatedAt.Add(d.MaxAge)) {
			o.Status = Failed
		}
		d.log.Warn("event delivery failed", "delivery_id", c.ID, "event_type", string(c.Event.Type),
			"destination_kind", kind, "attempt", c.Attempts, "status", o.Status, "response_code", o.ResponseCode, "err", o.Error)
	}
	return d.store.FinishDelivery(ctx, c.ID, o)
}

// Backoff is the wait after failed attempt n (1-based): RetryBase doubled
// per earlier failure, at most RetryMax, with ±20% jitter.
func (d *Dispatcher) Backoff(n int) time.Duration {
	return jitter(backoff.Exponential{Base: d.RetryBase, Max: d.RetryMax}.Delay(n))
}

func jitter(d time.Duration) time.Duration { return backoff.Jitter(d, 0.2) }
