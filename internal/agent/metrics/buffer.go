package metrics

import (
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Bounds of a Buffer's capacity (BufferCapacity).
const (
	// MinBuffered samples are kept whatever the interval.
	MinBuffered = 60
	// MaxBuffered bounds the memory of the buffer: an hour of 2.5 s
	// samples, about 0.8 MB with five filesystems a sample.
	MaxBuffered = 1440
	// MaxBatchBytes bounds the estimated JSON size of one report, well
	// under what a control plane or a proxy in front of it accepts.
	MaxBatchBytes = 1 << 20
)

// BufferCapacity is how many samples taken every interval make an hour,
// within [MinBuffered, MaxBuffered].
func BufferCapacity(interval time.Duration) int {
	if interval <= 0 {
		return MaxBuffered
	}
	n := int((time.Hour + interval - 1) / interval)
	return min(max(n, MinBuffered), MaxBuffered)
}

// Buffer holds samples, oldest first, until they are delivered. It is a
// ring of bounded capacity: when full, a new sample replaces the oldest, so
// during a long outage it keeps the newest. Every sample gets a sequence
// number, so that removing a delivered batch never removes a sample that
// arrived (or replaced another) while the batch was in flight. Safe for
// concurrent use.
type Buffer struct {
	mu      sync.Mutex
	ring    []agentproto.MetricSample // len(ring) is the capacity; guarded by mu
	head    int                       // index of the oldest sample
	n       int                       // samples held
	next    uint64                    // sequence number of the next sample; the oldest is next-n
	evicted uint64                    // samples replaced before delivery, in total
	version uint64                    // changes of the content, for Snapshot
	ready   chan struct{}             // one token: a sample was pushed
}

// NewBuffer returns an empty buffer holding up to capacity samples (at
// least 1).
func NewBuffer(capacity int) *Buffer {
	return &Buffer{ring: make([]agentproto.MetricSample, max(capacity, 1)), ready: make(chan struct{}, 1)}
}

// Push appends a sample, dropping the oldest if the buffer is full, and
// reports whether it did. Only the newest sample keeps its containers'
// figures: the previous newest loses them, so that an outage's backlog
// does not hold (and later send) every container's figures of every
// sample.
func (b *Buffer) Push(s agentproto.MetricSample) (evicted bool) {
	b.mu.Lock()
	if b.n > 0 {
		b.ring[(b.head+b.n-1)%len(b.ring)].Containers = nil
	}
	if b.n == len(b.ring) {
		b.ring[b.head] = agentproto.MetricSample{}
		b.head = (b.head + 1) % len(b.ring)
		b.n--
		b.evicted++
		evicted = true
	}
	b.ring[(b.head+b.n)%len(b.ring)] = s
	b.n++
	b.next++
	b.version++
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
	return evicted
}

// Ready receives a token after a Push; the buffer may be empty again by the
// time it is read.
func (b *Buffer) Ready() <-chan struct{} { return b.ready }

// Len is the number of samples held.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// Cap is the capacity.
func (b *Buffer) Cap() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ring)
}

// Evicted is how many samples were dropped for lack of room since the
// buffer was made.
func (b *Buffer) Evicted() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.evicted
}

// SetCapacity changes the capacity (at least 1), keeping the newest
// samples if they no longer fit.
func (b *Buffer) SetCapacity(capacity int) {
	capacity = max(capacity, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if capacity == len(b.ring) {
		return
	}
	keep := min(b.n, capacity)
	ring := make([]agentproto.MetricSample, capacity)
	for i := range keep {
		ring[i] = b.ring[(b.head+b.n-keep+i)%len(b.ring)]
	}
	b.evicted += uint64(b.n - keep)
	if keep < b.n {
		b.version++
	}
	b.ring, b.head, b.n = ring, 0, keep
}

// Snapshot copies the samples held, oldest first, with a number that
// changes whenever the content does (a Push, a Remove, or a smaller
// capacity dropping samples): equal versions mean equal content.
func (b *Buffer) Snapshot() (samples []agentproto.MetricSample, version uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	samples = make([]agentproto.MetricSample, b.n)
	for i := range b.n {
		samples[i] = b.ring[(b.head+i)%len(b.ring)]
	}
	return samples, b.version
}

// Batch is a copy of the oldest samples of a Buffer.
type Batch struct {
	Samples []agentproto.MetricSample
	last    uint64 // sequence number of the last sample
}

// Peek copies the oldest samples, at most maxSamples of them and, beyond
// the first, no more than maxBytes of estimated JSON. The samples stay in
// the buffer until Remove.
func (b *Buffer) Peek(maxSamples, maxBytes int) Batch {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(b.n, max(maxSamples, 1))
	var out []agentproto.MetricSample
	size := 0
	for i := range n {
		s := b.ring[(b.head+i)%len(b.ring)]
		size += EstimatedSize(s)
		if i > 0 && size > maxBytes {
			break
		}
		out = append(out, s)
	}
	first := b.next - uint64(b.n)
	return Batch{Samples: out, last: first + uint64(len(out)) - 1}
}

// Remove deletes the samples of a batch that are still held (a full buffer
// may have replaced some of them already) and returns how many it deleted.
func (b *Buffer) Remove(batch Batch) int {
	if len(batch.Samples) == 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.next - uint64(b.n)
	if batch.last < first {
		return 0
	}
	k := int(min(batch.last-first+1, uint64(b.n)))
	for range k {
		b.ring[b.head] = agentproto.MetricSample{}
		b.head = (b.head + 1) % len(b.ring)
	}
	b.n -= k
	if k > 0 {
		b.version++
	}
	return k
}

// EstimatedSize is an upper estimate of a sample's JSON size in bytes.
func EstimatedSize(s agentproto.MetricSample) int {
	n := 480
	for _, f := range s.Filesystems {
		n += 170 + len(f.Mount) + len(f.Device) + len(f.FSType)
	}
	for _, c := range s.Containers {
		n += 200 + len(c.ID) + len(c.Name)
	}
	return n
}
