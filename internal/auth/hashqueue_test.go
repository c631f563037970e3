package auth

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestHashQueueBounded: with every slot busy and the line full, the next
// caller is refused at once with 429 and Retry-After instead of waiting.
func TestHashQueueBounded(t *testing.T) {
	q := newHashQueue(2, 3)
	ctx := context.Background()
	for i := range 2 {
		if err := q.acquire(ctx); err != nil {
			t.Fatalf("acquire slot %d: %v", i, err)
		}
	}
	// Three callers wait in line.
	acquired := make(chan error, 3)
	for range 3 {
		go func() { acquired <- q.acquire(ctx) }()
	}
	testlab.Eventually(t, 10*time.Second, "three callers waiting in line", func() bool { return q.waiting.Load() == 3 })
	if !q.full() {
		t.Fatal("full with every slot busy and the line full: got false")
	}
	err := q.acquire(ctx)
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.TooManyRequests || fe.Code != CodeSignInBusy || fe.RetryAfter <= 0 {
		t.Fatalf("acquire with a full line: got %v, want a too-many-requests %s fault with Retry-After", err, CodeSignInBusy)
	}
	if got, want := q.waiting.Load(), int64(3); got != want {
		t.Fatalf("waiting after a refusal: got %d, want %d", got, want)
	}
	// Each release lets one waiting caller in.
	for i := range 3 {
		q.release()
		if err := <-acquired; err != nil {
			t.Fatalf("waiting caller %d: %v", i, err)
		}
	}
	if q.full() {
		t.Fatal("full with an empty line: got true")
	}
	// A cancelled wait gives up its place.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- q.acquire(cctx) }()
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled acquire: got %v, want %v", err, context.Canceled)
	}
	if got, want := q.waiting.Load(), int64(0); got != want {
		t.Fatalf("waiting after a cancelled wait: got %d, want %d", got, want)
	}
}
