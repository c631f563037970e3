package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/testlab"
)

func openSQLiteForTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Units queued while the writer is busy share one transaction; a failing
// unit fails only its own request and leaves nothing behind, and a
// request that went away before its turn is not run.
func TestGroupCommit(t *testing.T) {
	s := openSQLiteForTest(t)
	g := s.group
	ctx := context.Background()
	const n = 20
	insert := func(tx *sqlx.Tx, i int) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO metric_dirty_hours (server_id, hour) VALUES (?, ?)`, fmt.Sprintf("srv-%02d", i), 0)
		return err
	}
	var mu sync.Mutex
	runs := map[int]int{}
	boom := errors.New("boom")

	// The first unit holds the writer until the others are queued.
	running, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error)
	go func() {
		firstDone <- g.do(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
			close(running)
			<-release
			return insert(tx, 0)
		})
	}()
	<-running
	cancelled, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 1; i < n; i++ {
		c := ctx
		if i == 7 {
			c = cancelled
		}
		wg.Go(func() {
			errs[i] = g.do(c, func(ctx context.Context, tx *sqlx.Tx) error {
				mu.Lock()
				runs[i]++
				mu.Unlock()
				if err := insert(tx, i); err != nil {
					return err
				}
				if i == 13 {
					return boom // after writing: its row must be rolled back
				}
				return nil
			})
		})
	}
	testlab.Eventually(t, time.Minute, fmt.Sprintf("%d units queued", n-1), func() bool { return len(g.reqs) >= n-1 })
	cancel() // unit 7's request goes away while queued
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	for i := 1; i < n; i++ {
		switch {
		case i == 7:
			if !errors.Is(errs[i], context.Canceled) || runs[i] != 0 {
				t.Errorf("unit 7: %v after %d runs; want context.Canceled and no run", errs[i], runs[i])
			}
		case i == 13:
			if !errors.Is(errs[i], boom) {
				t.Errorf("unit 13: %v, want boom", errs[i])
			}
		case errs[i] != nil:
			t.Errorf("unit %d: %v", i, errs[i])
		}
	}
	var stored []string
	if err := s.r.SelectContext(ctx, &stored, `SELECT server_id FROM metric_dirty_hours ORDER BY server_id`); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range n {
		if i != 7 && i != 13 {
			want[fmt.Sprintf("srv-%02d", i)] = true
		}
	}
	if len(stored) != len(want) {
		t.Errorf("stored %v, want the %d units other than 7 and 13", stored, len(want))
	}
	for _, id := range stored {
		if !want[id] {
			t.Errorf("stored %s, which must not be", id)
		}
	}
	// The queued units ran together first (then, after unit 13 failed,
	// each alone).
	if runs[1] != 2 || runs[13] != 2 {
		t.Errorf("units ran %d and %d times, want twice: in the group, then alone", runs[1], runs[13])
	}
}

// After Close, a write is refused instead of waiting forever.
func TestGroupCommitClosed(t *testing.T) {
	s := openSQLiteForTest(t)
	if err := s.group.do(context.Background(), func(context.Context, *sqlx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	err := s.group.do(context.Background(), func(context.Context, *sqlx.Tx) error { return nil })
	if !errors.Is(err, errStoreClosed) {
		t.Fatalf("after Close: %v, want errStoreClosed", err)
	}
}
