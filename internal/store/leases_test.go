package store_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/singleton"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// openTwice opens two stores on one database, as two control planes do.
func openTwice(t *testing.T, d store.Dialect) (*store.Store, *store.Store) {
	t.Helper()
	url := storetest.DatabaseURL(t, d)
	if d == store.SQLite {
		url = "sqlite:" + filepath.Join(t.TempDir(), store.FileName)
	}
	var out [2]*store.Store
	for i := range out {
		s, err := store.Open(context.Background(), url, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if _, err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out[0], out[1]
}

func TestSingletonTaskRunsInOneControlPlane(t *testing.T) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			a, b := openTwice(t, d)
			c := testlab.NewClock(t0)
			var runs [2]atomic.Int32
			task := func(i int, s *store.Store, holder string) *singleton.Task {
				return &singleton.Task{Leases: s, Name: "evaluate", Holder: holder, Interval: 30 * time.Second, Now: c.Now, Log: quiet,
					Run: func(context.Context) error { runs[i].Add(1); return nil }}
			}
			tasks := []*singleton.Task{task(0, a, "cp-a"), task(1, b, "cp-b")}
			round := func() [2]bool {
				t.Helper()
				var ran [2]bool
				var wg sync.WaitGroup
				for i, tk := range tasks {
					wg.Go(func() {
						ok, err := tk.Once(ctx)
						if err != nil {
							t.Error(err)
						}
						ran[i] = ok
					})
				}
				wg.Wait()
				if ran[0] == ran[1] {
					t.Fatalf("at %s: ran in a: %v, in b: %v; want exactly one", c.Now().Sub(t0), ran[0], ran[1])
				}
				c.Advance(30 * time.Second)
				return ran
			}
			first := round()
			holder := 0
			if first[1] {
				holder = 1
			}
			for range 20 {
				if got := round(); !got[holder] {
					t.Fatalf("the lease moved from %s while it renewed", tasks[holder].Holder)
				}
			}
			if got, want := runs[holder].Load(), int32(21); got != want {
				t.Fatalf("runs in the holder: got %d, want %d", got, want)
			}
			if got, want := runs[1-holder].Load(), int32(0); got != want {
				t.Fatalf("runs in the other: got %d, want %d", got, want)
			}

			// The holder stops without releasing (killed): the other takes
			// over once the lease lapses, three intervals on.
			other := tasks[1-holder]
			for i := range 3 {
				ok, err := other.Once(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ok, i == 2; got != want {
					t.Fatalf("%d intervals after the holder stopped: ran %v, want %v", i+1, got, want)
				}
				c.Advance(30 * time.Second)
			}
			// A holder that releases hands over at once.
			if err := a.ReleaseLease(ctx, "evaluate", other.Holder); err != nil {
				t.Fatal(err)
			}
			if err := b.ReleaseLease(ctx, "evaluate", other.Holder); err != nil {
				t.Fatal(err)
			}
			if ok, err := tasks[holder].Once(ctx); !ok || err != nil {
				t.Fatalf("after release: ran %v, %v", ok, err)
			}
		})
	}
}
