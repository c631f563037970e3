package stream

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/capstan-dev/capstan/internal/jobs"
)

// Control planes that share a store each have their own hub, and a
// change reaches only the hub of the control plane that made it: the one
// an agent reported a result to, or whose dispatcher routed the event.
// A Relay carries every message a hub publishes to the others over the
// store's bus (PostgreSQL NOTIFY), so a browser sees the whole fleet
// whichever control plane its stream is open on.
//
// A message travels whole when it fits in one notification. A job whose
// message does not (a large payload) travels as its id, and the others
// read it from the store. Anything else that does not fit, and anything
// lost on the way (a full queue, a failed notify, a bus that reconnected),
// reaches the other streams as a reset: their clients reload what they
// show, rather than show it stale.

// Bus carries notifications between control planes.
type Bus interface {
	Notify(ctx context.Context, msg string) error
}

// relayPrefix starts the bus messages of the stream.
const relayPrefix = "stream:"

// maxNotify is how long a bus message may be: PostgreSQL refuses
// notification payloads of 8000 bytes and more.
const maxNotify = 7900

// relayQueue is how many messages may wait to be sent before the relay
// gives up on them and sends a reset instead.
const relayQueue = 4096

// Relay carries a hub's messages to the hubs of the other control planes
// and theirs to it.
type Relay struct {
	hub    *Hub
	bus    Bus
	origin string // this control plane's mark on what it sends
	job    func(ctx context.Context, id string) (jobs.Job, error)
	log    *slog.Logger
	q      chan string
	lost   atomic.Bool // messages were dropped: send a reset
}

// NewRelay relays hub's messages over bus once Run runs. origin is unique
// to this control plane; job reads a job from the store.
func NewRelay(hub *Hub, bus Bus, origin string, job func(ctx context.Context, id string) (jobs.Job, error), log *slog.Logger) *Relay {
	r := &Relay{hub: hub, bus: bus, origin: origin, job: job, log: log, q: make(chan string, relayQueue)}
	hub.mu.Lock()
	hub.relay = r.send
	hub.mu.Unlock()
	return r
}

// wire is a message on the bus.
type wire struct {
	Type   string          `json:"t"`
	Admin  json.RawMessage `json:"a,omitempty"`
	Member json.RawMessage `json:"m,omitempty"`
	UserID string          `json:"u,omitempty"`
	Server string          `json:"s,omitempty"`
	App    string          `json:"p,omitempty"`
}

// send queues m for the other control planes. It never blocks: a full
// queue drops m and sends a reset after what is queued.
func (r *Relay) send(m Message) {
	head := relayPrefix + r.origin + ":"
	var msg string
	if b, err := json.Marshal(wire{Type: m.Type, Admin: m.Admin, Member: m.Member, UserID: m.UserID, Server: m.ServerID, App: m.AppID}); err == nil && len(head)+2+len(b) <= maxNotify {
		msg = head + "m:" + string(b)
	} else if m.jobID != "" {
		msg = head + "job:" + m.jobID
	} else {
		msg = head + "reset:"
	}
	select {
	case r.q <- msg:
	default:
		r.lost.Store(true)
	}
}

// Run sends the queued messages, in order, until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-r.q:
			r.notify(ctx, msg)
		}
		if r.lost.Swap(false) {
			r.notify(ctx, relayPrefix+r.origin+":reset:")
		}
	}
}

func (r *Relay) notify(ctx context.Context, msg string) {
	if err := r.bus.Notify(ctx, msg); err != nil && ctx.Err() == nil {
		r.log.WarnContext(ctx, "relaying the live stream to the other control planes", "err", err.Error())
		r.lost.Store(true)
	}
}

// Deliver takes a message from the bus and publishes the other control
// planes' stream messages in this one's hub. It reports whether msg was
// one of the stream's.
func (r *Relay) Deliver(ctx context.Context, msg string) bool {
	rest, ok := strings.CutPrefix(msg, relayPrefix)
	if !ok {
		return false
	}
	origin, rest, _ := strings.Cut(rest, ":")
	if origin == r.origin {
		return true // this control plane's own, published here already
	}
	kind, body, _ := strings.Cut(rest, ":")
	switch kind {
	case "m":
		var w wire
		if err := json.Unmarshal([]byte(body), &w); err != nil || w.Type == "" {
			r.Missed()
			return true
		}
		r.hub.publish(Message{Type: w.Type, Admin: nonNull(w.Admin), Member: nonNull(w.Member), UserID: w.UserID,
			ServerID: w.Server, AppID: w.App})
	case "job":
		j, err := r.job(ctx, body)
		if err != nil {
			r.log.WarnContext(ctx, "reading a job another control plane changed", "job", body, "err", err.Error())
			r.Missed()
			return true
		}
		for _, m := range jobMessages(jobs.Change{Job: j}) {
			r.hub.publish(m)
		}
	default:
		r.Missed()
	}
	return true
}

// Missed tells this hub's clients to reload what they show: messages of
// the other control planes were lost (the bus reconnected, say).
func (r *Relay) Missed() {
	r.hub.publish(resetMessage())
}

func resetMessage() Message {
	return Message{Type: TypeReset, Admin: []byte("{}"), Member: []byte("{}")}
}

func nonNull(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}
