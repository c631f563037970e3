package backoff_test

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/backoff"
)

func TestExponentialDoublesUpToMax(t *testing.T) {
	e := backoff.Exponential{Base: time.Second, Max: 10 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		5: 10 * time.Second, 60: 10 * time.Second, 0: time.Second} {
		if got := e.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	// A base above the cap is the cap.
	if got := (backoff.Exponential{Base: time.Hour, Max: time.Minute}).Delay(1); got != time.Minute {
		t.Errorf("capped base: %s", got)
	}
}

func TestJitterStaysInItsBand(t *testing.T) {
	lo, hi := 80*time.Millisecond, 120*time.Millisecond
	seen := map[bool]bool{}
	for range 1000 {
		d := backoff.Jitter(100*time.Millisecond, 0.2)
		if d < lo || d >= hi {
			t.Fatalf("Jitter = %s, want in [%s, %s)", d, lo, hi)
		}
		seen[d < 100*time.Millisecond] = true
	}
	if !seen[true] || !seen[false] {
		t.Fatal("1000 jittered waits all fell on one side of the middle")
	}
	if d := backoff.Jitter(time.Second, 0); d != time.Second {
		t.Fatalf("no jitter: %s", d)
	}
}
