package store

import (
	"context"
	"errors"
	"sync"

	"github.com/jmoiron/sqlx"
)

// Group commit, for SQLite: the writes of many requests that arrive while
// the writer is busy run in one transaction instead of one each. Every
// transaction costs a BEGIN, a COMMIT that appends the changed pages to
// the WAL, and now and then a checkpoint; with one writer connection and
// a few hundred metric reports a second, that fixed cost is most of the
// writer's time. A request still gets its answer only after its writes are
// committed.

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
	unit writeUnit
	err  error
	done chan struct{}
}

type groupCommitter struct {
	s    *Store
	reqs chan *groupReq

	startOnce sync.Once
	stopOnce  sync.Once
	quit      chan struct{} // closed by stop
	exited    chan struct{} // closed when the loop has ended
}

func newGroupCommitter(s *Store) *groupCommitter {
	return &groupCommitter{s: s, reqs: make(chan *groupReq, 1024), quit: make(chan struct{}), exited: make(chan struct{})}
}

// do runs unit in a write transaction shared with other requests' units
// and returns once that transaction committed (or failed).
func (g *groupCommitter) do(ctx context.Context, unit writeUnit) error {
	g.startOnce.Do(func() { go g.loop() })
	r := &groupReq{ctx: ctx, unit: unit, done: make(chan struct{})}
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

func (g *groupCommitter) loop() {
	defer close(g.exited)
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
	for _, r := range live {
		r.err = g.s.tx(ctx, func(tx *sqlx.Tx) error { return r.unit(ctx, tx) })
		close(r.done)
	}
}
