package metrics

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// sample i is taken at t0 + i minutes.
func sample(i int) agentproto.MetricSample {
	return agentproto.MetricSample{At: t0.Add(time.Duration(i) * time.Minute), UptimeSeconds: uint64(i)}
}

// seqs returns the sample numbers of samples.
func seqs(samples []agentproto.MetricSample) []int {
	out := make([]int, len(samples))
	for i, s := range samples {
		out[i] = int(s.UptimeSeconds)
	}
	return out
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestBufferCapacityHoldsAnHour(t *testing.T) {
	for _, c := range []struct {
		interval time.Duration
		want     int
	}{
		{15 * time.Second, 240},
		{5 * time.Second, 720},
		{7 * time.Second, 515}, // rounded up
		{time.Second, MaxBuffered},
		{time.Minute, MinBuffered},
		{time.Hour, MinBuffered},
		{0, MaxBuffered},
	} {
		if got := BufferCapacity(c.interval); got != c.want {
			t.Errorf("BufferCapacity(%s) = %d, want %d", c.interval, got, c.want)
		}
	}
}

func TestBufferKeepsNewestAndPeeksOldestFirst(t *testing.T) {
	b := NewBuffer(5)
	for i := range 8 {
		evicted := b.Push(sample(i))
		if got, want := evicted, i >= 5; got != want {
			t.Fatalf("Push(%d) evicted = %v, want %v", i, got, want)
		}
	}
	if got, want := b.Len(), 5; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	if got, want := b.Evicted(), uint64(3); got != want {
		t.Errorf("Evicted = %d, want %d", got, want)
	}
	batch := b.Peek(3, MaxBatchBytes)
	if got, want := seqs(batch.Samples), []int{3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("Peek(3) = %v, want %v (oldest first)", got, want)
	}
	if got, want := b.Remove(batch), 3; got != want {
		t.Fatalf("Remove = %d, want %d", got, want)
	}
	if got, want := seqs(b.Peek(10, MaxBatchBytes).Samples), []int{6, 7}; !slices.Equal(got, want) {
		t.Fatalf("after Remove, Peek = %v, want %v", got, want)
	}
}

func TestBufferRemoveSkipsSamplesReplacedInFlight(t *testing.T) {
	b := NewBuffer(4)
	for i := range 4 {
		b.Push(sample(i))
	}
	batch := b.Peek(4, MaxBatchBytes) // 0..3 in flight
	b.Push(sample(4))                 // replaces 0
	b.Push(sample(5))                 // replaces 1
	if got, want := b.Remove(batch), 2; got != want {
		t.Fatalf("Remove = %d, want %d (2 and 3; 0 and 1 are gone already)", got, want)
	}
	if got, want := seqs(b.Peek(10, MaxBatchBytes).Samples), []int{4, 5}; !slices.Equal(got, want) {
		t.Fatalf("left = %v, want %v: samples pushed in flight must stay", got, want)
	}
	// A batch whose samples were all replaced removes nothing.
	old := b.Peek(1, MaxBatchBytes)
	for i := 6; i < 12; i++ {
		b.Push(sample(i))
	}
	if got, want := b.Remove(old), 0; got != want {
		t.Fatalf("Remove of a replaced batch = %d, want %d", got, want)
	}
	if got, want := b.Len(), 4; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
}

func TestBufferPeekBoundsBytes(t *testing.T) {
	b := NewBuffer(100)
	s := sample(0)
	for range 10 {
		s.Filesystems = append(s.Filesystems, agentproto.FilesystemSample{Mount: "/srv/data", Device: "/dev/sdb1", FSType: "xfs"})
	}
	for range 100 {
		b.Push(s)
	}
	per := EstimatedSize(s)
	if got, want := len(b.Peek(100, 10*per).Samples), 10; got != want {
		t.Errorf("Peek bounded to 10 samples' bytes = %d samples, want %d", got, want)
	}
	// The first sample goes even if it alone is over the bound.
	if got, want := len(b.Peek(100, 1).Samples), 1; got != want {
		t.Errorf("Peek bounded below one sample = %d samples, want %d", got, want)
	}
}

func TestBufferSetCapacityKeepsNewest(t *testing.T) {
	b := NewBuffer(6)
	for i := range 6 {
		b.Push(sample(i))
	}
	b.SetCapacity(3)
	if got, want := seqs(b.Peek(10, MaxBatchBytes).Samples), []int{3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("after shrinking: %v, want %v", got, want)
	}
	b.SetCapacity(10)
	for i := 6; i < 12; i++ {
		b.Push(sample(i))
	}
	if got, want := seqs(b.Peek(20, MaxBatchBytes).Samples), span(3, 12); !slices.Equal(got, want) {
		t.Fatalf("after growing: %v, want %v", got, want)
	}
}

// fakePost answers with the errors of replies, one per call, then nil.
type fakePost struct {
	replies []error
	batches [][]int
	during  func() // run while "in flight"
}

func (f *fakePost) post(_ context.Context, s []agentproto.MetricSample) error {
	f.batches = append(f.batches, seqs(s))
	if f.during != nil {
		f.during()
	}
	if len(f.replies) == 0 {
		return nil
	}
	err := f.replies[0]
	f.replies = f.replies[1:]
	return err
}

type statusErr int

func (e statusErr) Error() string { return http.StatusText(int(e)) }

func status(err error) int {
	var s statusErr
	if errors.As(err, &s) {
		return int(s)
	}
	return 0
}

func filled(n int) *Buffer {
	b := NewBuffer(2000)
	for i := range n {
		b.Push(sample(i))
	}
	return b
}

func TestSenderDropsOnlyAfterSuccess(t *testing.T) {
	b := filled(3)
	p := &fakePost{replies: []error{statusErr(503), errors.New("connection refused")}}
	s := NewSender(b, p.post, status, nil)
	for i := range 2 {
		n, err := s.Send(context.Background())
		if err == nil || n != 0 {
			t.Fatalf("send %d: n=%d err=%v, want a failure that keeps the batch", i, n, err)
		}
		if got, want := b.Len(), 3; got != want {
			t.Fatalf("after failure %d: %d buffered, want %d", i, got, want)
		}
	}
	n, err := s.Send(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("send after recovery: n=%d err=%v, want 3 sent", n, err)
	}
	if got, want := b.Len(), 0; got != want {
		t.Fatalf("after success: %d buffered, want %d", got, want)
	}
	for i, batch := range p.batches {
		if !slices.Equal(batch, []int{0, 1, 2}) {
			t.Errorf("attempt %d sent %v, want the same batch [0 1 2]", i, batch)
		}
	}
}

func TestSenderDropsRefusedBatch(t *testing.T) {
	for _, st := range []int{http.StatusUnprocessableEntity, http.StatusBadRequest} {
		b := filled(3)
		p := &fakePost{replies: []error{statusErr(st)}}
		s := NewSender(b, p.post, status, nil)
		n, err := s.Send(context.Background())
		if err != nil || n != 3 {
			t.Fatalf("%d: n=%d err=%v, want the batch dropped without error", st, n, err)
		}
		if got := b.Len(); got != 0 {
			t.Fatalf("%d: %d still buffered, want 0", st, got)
		}
		// Later samples go through.
		b.Push(sample(3))
		if n, err := s.Send(context.Background()); err != nil || n != 1 {
			t.Fatalf("%d: next send n=%d err=%v", st, n, err)
		}
	}
}

func TestSenderHalvesBatchOnTooLarge(t *testing.T) {
	b := filled(800)
	p := &fakePost{replies: []error{statusErr(http.StatusRequestEntityTooLarge)}}
	s := NewSender(b, p.post, status, nil)
	if n, err := s.Send(context.Background()); err != nil || n != 0 {
		t.Fatalf("413: n=%d err=%v, want nothing dropped and no error", n, err)
	}
	if got, want := len(p.batches[0]), agentproto.MaxMetricSamples; got != want {
		t.Fatalf("first batch %d samples, want %d", got, want)
	}
	for b.Len() > 0 {
		if _, err := s.Send(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var all []int
	for i, batch := range p.batches[1:] {
		if len(batch) > agentproto.MaxMetricSamples/2 {
			t.Errorf("batch %d after 413 has %d samples, want ≤ %d", i+1, len(batch), agentproto.MaxMetricSamples/2)
		}
		all = append(all, batch...)
	}
	if !slices.Equal(all, span(0, 800)) {
		t.Fatalf("delivered %d samples, want 0..799 in order without loss", len(all))
	}
	// A single sample that is too large is dropped.
	b.Push(sample(800))
	s2 := NewSender(b, (&fakePost{replies: []error{statusErr(http.StatusRequestEntityTooLarge)}}).post, status, nil)
	if n, err := s2.Send(context.Background()); err != nil || n != 1 || b.Len() != 0 {
		t.Fatalf("413 for one sample: n=%d err=%v len=%d, want it dropped", n, err, b.Len())
	}
}

func TestSenderKeepsSamplesTakenInFlight(t *testing.T) {
	b := filled(2)
	p := &fakePost{}
	p.during = func() { b.Push(sample(2)) }
	s := NewSender(b, p.post, status, nil)
	if n, err := s.Send(context.Background()); err != nil || n != 2 {
		t.Fatalf("n=%d err=%v, want 2 sent", n, err)
	}
	if got, want := seqs(b.Peek(10, MaxBatchBytes).Samples), []int{2}; !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
}

func TestSenderEmptyBuffer(t *testing.T) {
	p := &fakePost{}
	s := NewSender(NewBuffer(4), p.post, status, nil)
	if n, err := s.Send(context.Background()); n != 0 || err != nil || len(p.batches) != 0 {
		t.Fatalf("n=%d err=%v posts=%d, want nothing posted", n, err, len(p.batches))
	}
}

// TestBufferKeepsContainersOnTheNewestOnly: a pushed sample takes the
// container figures off the one before it.
func TestBufferKeepsContainersOnTheNewestOnly(t *testing.T) {
	b := NewBuffer(10)
	for i := range 3 {
		b.Push(agentproto.MetricSample{UptimeSeconds: uint64(i), Containers: []agentproto.ContainerSample{{ID: "c1"}}})
	}
	batch := b.Peek(10, MaxBatchBytes)
	if len(batch.Samples) != 3 {
		t.Fatalf("%d samples", len(batch.Samples))
	}
	for i, s := range batch.Samples {
		if want := i == 2; (s.Containers != nil) != want {
			t.Errorf("sample %d has containers %v, want %v", i, s.Containers != nil, want)
		}
	}
}
