package store_test

import (
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/fault"
)

// inParallel calls fn(0) … fn(n-1) at once and returns what each call
// returned, by i.
func inParallel[T any](n int, fn func(i int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = fn(i) })
	}
	wg.Wait()
	return out
}

// succeeded returns which of calls that raced for one change succeeded,
// by i; every other must have failed with a conflict.
func succeeded(t *testing.T, what string, errs []error) []int {
	t.Helper()
	var won []int
	for i, err := range errs {
		switch {
		case err == nil:
			won = append(won, i)
		case !fault.Is(err, fault.Conflict):
			t.Fatalf("%s %d: got %v, want nil or a conflict", what, i, err)
		}
	}
	return won
}

// countApplied calls fn(0) … fn(n-1) at once and returns how many
// reported that their change applied; an error fails the test.
func countApplied(t *testing.T, n int, fn func(i int) (bool, error)) int {
	t.Helper()
	applied := 0
	for _, ok := range inParallel(n, func(i int) bool {
		ok, err := fn(i)
		if err != nil {
			t.Error(err)
		}
		return ok
	}) {
		if ok {
			applied++
		}
	}
	return applied
}
