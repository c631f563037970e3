package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
)

// Group commit: the writes of many requests that arrive while the writers
// are busy run in one transaction instead of one each. Every transaction
// costs a BEGIN and a COMMIT that waits for its log to reach the disk (and,
// on SQLite, now and then a checkpoint); with a few hundred metric reports
// a second, that fixed cost is most of the writers' time. A request still
// gets its answer only after its writes are committed.
//
// SQLite has one writer connection, so one loop runs the batches.
// PostgreSQL runs several batches at once (pgLoops loops take from the one
// queue), each in its own transaction and connection. There, batches and
// other transactions lock the same rows: each unit names the rows it locks
// by a key (a server's id), and a batch runs its units in key order, so
// that every batch — of this process or of another control plane on the
// same database — takes its row locks in one global order and two batches
// never wait on each other in a cycle.

// pgLoops is how many batches run at once on PostgreSQL.
const pgLoops = 8

// maxGroup bounds how many units one transaction runs.
const maxGroup = 32

var errStoreClosed = errors.New("store: closed")

// writeUnit is one request's writes. It may run more than once: when a
// unit of a group fails, the group is rolled back and each unit runs again
// in a transaction of its own, so that one unit's failure fails only its
// request. It must therefore set its results from scratch.
type writeUnit func(ctx context.Context, tx *sqlx.Tx) error

type groupReq struct {
	ctx  context.Context
	key  string // the unit runs after the units of smaller keys in its batch
	unit writeUnit
	err  error
	done chan struct{}
}

type groupCommitter struct {
	s     *Store
	loops int
	reqs  chan *groupReq
	// failed counts the batches of several units that failed and ran
	// again unit by unit.
	failed atomic.Int64

	startOnce sync.Once
	stopOnce  sync.Once
	quit      chan struct{} // closed by stop
	exited    chan struct{} // closed when the loop has ended
}

// newGroupCommitter returns the group committer of s: one loop for
// SQLite, pgLoops for PostgreSQL.
func newGroupCommitter(s *Store) *groupCommitter {
	loops := 1
	if s.dialect == Postgres {
		loops = pgLoops
	}
	return &groupCommitter{s: s, loops: loops, reqs: make(chan *groupReq, 1024), quit: make(chan struct{}), exited: make(chan struct{})}
}

// do runs unit in a write transaction shared with other requests' units
// and returns once that transaction committed (or failed). key names the
// rows the unit locks, in the order of the keys of the other units (see
// above); units that lock rows of one server use its id.
func (g *groupCommitter) do(ctx context.Context, key string, unit writeUnit) error {
	g.startOnce.Do(g.start)
	r := &groupReq{ctx: ctx, key: key, unit: unit, done: make(chan struct{})}
	select {
	case g.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.exited:
		return errStoreClosed
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		// The unit may still be committed; the caller sees an error and
		// may retry, which the units of this package tolerate.
		return ctx.Err()
	case <-g.exited:
		return errStoreClosed
	}
}

func (g *groupCommitter) stop() {
	g.stopOnce.Do(func() {
		close(g.quit)
		g.startOnce.Do(func() { close(g.exited) }) // never started
	})
	<-g.exited
}

func (g *groupCommitter) start() {
	var wg sync.WaitGroup
	for range g.loops {
		wg.Go(g.loop)
	}
	go func() {
		wg.Wait()
		close(g.exited)
	}()
}

func (g *groupCommitter) loop() {
	batch := make([]*groupReq, 0, maxGroup)
	for {
		var first *groupReq
		select {
		case first = <-g.reqs:
		case <-g.quit:
			return
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < maxGroup {
			select {
			case r := <-g.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		g.run(batch)
	}
}

// run commits the live units of a batch together; if that fails, each runs
// alone.
func (g *groupCommitter) run(batch []*groupReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, func(a, b *groupReq) int { return strings.Compare(a.key, b.key) })
	// The units run without their requests' contexts: a request that goes
	// away must not abort the others' transaction.
	ctx := context.Background()
	err := g.s.tx(ctx, func(tx *sqlx.Tx) error {
		for _, r := range live {
			if err := r.unit(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(live) == 1 {
		for _, r := range live {
			r.err = err
			close(r.done)
		}
		return
	}
	// On PostgreSQL the failed statement aborted the transaction, which
	// rolled back, so each unit starts again from nothing; a batch that
	// lost a deadlock or serialization conflict also ends here.
	g.failed.Add(1)
	for _, r := range live {
		r.err = g.s.tx(ctx, func(tx *sqlx.Tx) error { return r.unit(ctx, tx) })
		close(r.done)
	}
}
