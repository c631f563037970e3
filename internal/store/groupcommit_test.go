package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// openForTest opens an empty, migrated store of the dialect: SQLite in a
// temporary directory, PostgreSQL in a new database of the test lab.
func openForTest(t *testing.T, d Dialect) *Store {
	t.Helper()
	url := ""
	if d == Postgres {
		url = testlab.PostgresDatabase(t)
	}
	s, err := Open(context.Background(), url, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func forDialects(t *testing.T, fn func(t *testing.T, s *Store)) {
	for _, d := range []Dialect{SQLite, Postgres} {
		t.Run(string(d), func(t *testing.T) { fn(t, openForTest(t, d)) })
	}
}

// Units queued while the writers are busy share one transaction and run in
// the order of their keys; a failing unit fails only its own request and
// leaves nothing behind, and a request that went away before its turn is
// not run.
func TestGroupCommit(t *testing.T) {
	forDialects(t, func(t *testing.T, s *Store) {
		g := s.group
		ctx := context.Background()
		const n = 20
		insert := func(tx *sqlx.Tx, i int) error {
			_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO metric_dirty_hours (server_id, hour) VALUES (?, ?)`), fmt.Sprintf("srv-%02d", i), i)
			return err
		}
		var mu sync.Mutex
		runs := map[int]int{}
		var firstRuns []int // the units in the order of their first run
		boom := errors.New("boom")

		// One unit per loop holds every writer until the others are
		// queued (each is queued once the one before runs, so that an
		// idle loop takes it alone); the first loop is let go first, and
		// takes them all.
		running := make(chan struct{}, g.loops)
		release := make([]chan struct{}, g.loops)
		holders := make(chan error, g.loops)
		for l := range g.loops {
			release[l] = make(chan struct{})
			go func() {
				holders <- g.do(ctx, "", func(ctx context.Context, tx *sqlx.Tx) error {
					running <- struct{}{}
					<-release[l]
					return insert(tx, -1-l)
				})
			}()
			<-running
		}
		cancelled, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		errs := make([]error, n)
		// Queued from the largest key to the smallest.
		for i := n - 1; i >= 1; i-- {
			c := ctx
			if i == 7 {
				c = cancelled
			}
			wg.Go(func() {
				errs[i] = g.do(c, fmt.Sprintf("k%02d", i), func(ctx context.Context, tx *sqlx.Tx) error {
					mu.Lock()
					runs[i]++
					if runs[i] == 1 {
						firstRuns = append(firstRuns, i)
					}
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
			testlab.Eventually(t, time.Minute, fmt.Sprintf("unit %d queued", i), func() bool { return len(g.reqs) >= n-i })
		}
		cancel() // unit 7's request goes away while queued
		close(release[0])
		if err := <-holders; err != nil {
			t.Fatal(err)
		}
		testlab.Eventually(t, time.Minute, "the queue taken", func() bool { return len(g.reqs) == 0 })
		for _, r := range release[1:] {
			close(r)
		}
		for range g.loops - 1 {
			if err := <-holders; err != nil {
				t.Fatal(err)
			}
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
		if err := s.r.SelectContext(ctx, &stored, `SELECT server_id FROM metric_dirty_hours WHERE hour >= 0 ORDER BY server_id`); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for i := 1; i < n; i++ {
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
		// The queued units ran together first, in key order up to the
		// failing unit 13, and then each alone.
		if wantFirst := []int{1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13}; !slices.Equal(firstRuns[:min(len(firstRuns), len(wantFirst))], wantFirst) {
			t.Errorf("first runs in the order %v, want %v first", firstRuns, wantFirst)
		}
		if runs[1] != 2 || runs[13] != 2 || runs[19] != 1 {
			t.Errorf("units 1, 13 and 19 ran %d, %d and %d times, want 2, 2, 1: in the group up to 13, then each alone",
				runs[1], runs[13], runs[19])
		}
	})
}

// After Close, a write is refused instead of waiting forever.
func TestGroupCommitClosed(t *testing.T) {
	forDialects(t, func(t *testing.T, s *Store) {
		if err := s.group.do(context.Background(), "", func(context.Context, *sqlx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		s.Close()
		err := s.group.do(context.Background(), "", func(context.Context, *sqlx.Tx) error { return nil })
		if !errors.Is(err, errStoreClosed) {
			t.Fatalf("after Close: %v, want errStoreClosed", err)
		}
	})
}
