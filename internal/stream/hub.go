// Package stream is the control plane's live feed for browsers: what
// changed (a job's state and events, a server coming online, an alert
// opening, a new inbox item) as it happens, for GET /api/v1/stream. It is
// fed by the job service and the event bus, never by polling.
//
// A Hub numbers every message and keeps the newest ones in a ring, so
// that a client that reconnects with the id of the last message it saw
// gets the ones it missed. Every hub marks its ids with a random tag of
// its own, so an id from before a restart, from another control plane
// (a load balancer may send a reconnecting client to any), or one older
// than the ring, is recognised as a gap: the client is told to reload
// what it shows.
package stream

import (
	"math/rand/v2"
	"sync"
)

// Message types: the event names of the stream.
const (
	TypeJob       = "job"        // a job's state changed; data: the job without its payload, data and output
	TypeJobEvents = "job.events" // progress events of a running job (administrators only)
	TypeEvent     = "event"      // an event of the event bus (server online/offline, alerts, deployments…)
	TypeInbox     = "inbox"      // a new item in the receiving user's inbox
	TypeReset     = "reset"      // messages were missed: reload what is shown
)

// Viewer is who receives a stream.
type Viewer struct {
	UserID string
	Admin  bool
	// Covers, when set, narrows the stream to the messages about the
	// servers and applications it covers (an API token's resources);
	// messages about none are left out.
	Covers func(serverID, appID string) bool
}

// Message is one message of the stream, encoded for each audience.
type Message struct {
	ID   int64
	Type string
	// Admin is the data administrators receive; Member the data members
	// receive, nil when members do not receive the message at all.
	Admin, Member []byte
	// UserID, when set, limits the message to that user.
	UserID string
	// ServerID and AppID say what the message is about (a job's server
	// and application), for viewers narrowed to resources.
	ServerID, AppID string
	// jobID names the job a job message is about, for a relay that
	// cannot carry the message whole.
	jobID string
}

// For returns the data v receives of m, and false when v receives none.
func (m Message) For(v Viewer) ([]byte, bool) {
	if m.UserID != "" && m.UserID != v.UserID {
		return nil, false
	}
	if v.Covers != nil && (m.ServerID == "" || !v.Covers(m.ServerID, m.AppID)) {
		return nil, false
	}
	if v.Admin {
		return m.Admin, m.Admin != nil
	}
	return m.Member, m.Member != nil
}

// DefaultRing is how many recent messages a hub keeps for resuming.
const DefaultRing = 4096

// subscriberBuffer is how many messages a subscriber may fall behind
// before it is dropped; it then reconnects and resumes from the ring.
const subscriberBuffer = 512

// An id is a hub's tag in the bits from seqBits up, and the message's
// number in that hub below.
const (
	seqBits = 40
	tagBits = 22
)

// Hub fans messages out to subscribers and keeps the newest for resuming.
type Hub struct {
	tag  int64      // this hub's mark, in the high bits of every id it gives
	mu   sync.Mutex // guards everything below
	next int64
	ring []Message // the newest messages, a circle of fixed size
	head int       // index of the oldest message in ring
	n    int       // how many of ring are in use
	subs map[*Subscription]struct{}
	// relay, when set, is told of every message published here first
	// (see Relay).
	relay func(Message)
}

// NewHub returns a hub that keeps the newest ring messages (DefaultRing
// when ring < 1).
func NewHub(ring int) *Hub {
	if ring < 1 {
		ring = DefaultRing
	}
	tag := (1 + rand.Int64N(1<<tagBits-1)) << seqBits
	return &Hub{tag: tag, next: tag, ring: make([]Message, ring), subs: map[*Subscription]struct{}{}}
}

// Subscription receives a hub's messages until it is closed or dropped.
type Subscription struct {
	hub *Hub
	c   chan Message
	// dropped is closed when the hub dropped the subscription because
	// it fell too far behind.
	dropped chan struct{}
	once    sync.Once
}

// C delivers the messages in id order.
func (s *Subscription) C() <-chan Message { return s.c }

// Dropped is closed when the subscriber fell too far behind; it should
// end its stream, and its client resume from the ring.
func (s *Subscription) Dropped() <-chan struct{} { return s.dropped }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	delete(s.hub.subs, s)
	s.hub.mu.Unlock()
}

// Publish numbers m, keeps it in the ring and hands it to every
// subscriber, and to the other control planes' hubs when a relay is set.
// It never blocks: a subscriber whose buffer is full is dropped.
func (h *Hub) Publish(m Message) Message { return h.publishFrom(m, true) }

// publish is Publish for this hub alone: for messages the relay brought.
func (h *Hub) publish(m Message) Message { return h.publishFrom(m, false) }

func (h *Hub) publishFrom(m Message, local bool) Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	if local && h.relay != nil {
		// Under the lock, so the others receive messages in this hub's
		// order; the relay never blocks.
		defer h.relay(m)
	}
	h.next++
	m.ID = h.next
	if h.n < len(h.ring) {
		h.ring[(h.head+h.n)%len(h.ring)] = m
		h.n++
	} else {
		h.ring[h.head] = m
		h.head = (h.head + 1) % len(h.ring)
	}
	for s := range h.subs {
		select {
		case s.c <- m:
		default:
			delete(h.subs, s)
			s.once.Do(func() { close(s.dropped) })
		}
	}
	return m
}

// Subscribe starts a subscription. With after > 0 (the id of the last
// message the client saw) it also returns the messages after it that the
// ring still holds; resumed is false when the ring no longer reaches back
// to after (the client missed messages and must reload). last is the id
// of the newest message published before the subscription began. The
// backlog and the subscription meet with no gap and no repeat.
func (h *Hub) Subscribe(after int64) (s *Subscription, backlog []Message, last int64, resumed bool) {
	s = &Subscription{hub: h, c: make(chan Message, subscriberBuffer), dropped: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[s] = struct{}{}
	if after <= 0 {
		return s, nil, h.next, true
	}
	if after&^(1<<seqBits-1) != h.tag || after > h.next {
		// An id this hub never gave: from before a restart, from another
		// control plane, or made up.
		return s, nil, h.next, false
	}
	// The ring holds the ids next-n+1 … next, one after another.
	if after < h.next-int64(h.n) {
		return s, nil, h.next, false
	}
	for i := int(after - (h.next - int64(h.n))); i < h.n; i++ {
		backlog = append(backlog, h.ring[(h.head+i)%len(h.ring)])
	}
	return s, backlog, h.next, true
}

// Subscribers returns how many subscriptions are open.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
