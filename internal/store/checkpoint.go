package store

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// Checkpoints, for SQLite. In WAL mode every commit appends pages to the
// write-ahead log, and a checkpoint copies them back into the database
// file (and, with synchronous=NORMAL, is the only step that waits for the
// disk). SQLite runs a checkpoint inside the commit that takes the log
// past 1,000 pages, so every few seconds under load one request's commit,
// and every write queued behind the single writer, waited for a copy of
// the whole log and an fsync. A connection of its own now checkpoints in
// the background every second: PASSIVE, so it copies what no reader still
// needs without blocking the writer or the readers. The writer's own
// checkpoint stays on, and then finds (nearly) everything copied already:
// it is what lets the log start again from the beginning, since only a
// checkpoint that no write overlaps can catch up with the log's end, and
// without it the log grows for as long as writes go on.

// checkpointEvery is how often the background checkpoint runs.
const checkpointEvery = time.Second

// CheckpointStats is what the latest background checkpoint reported.
type CheckpointStats struct {
	Runs         int64 // checkpoints run so far
	LogFrames    int64 // frames in the log at the latest one
	Checkpointed int64 // of those, frames copied into the database file
}

type checkpointer struct {
	db    *sql.DB
	every time.Duration
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
	runs  atomic.Int64
	log   atomic.Int64
	ckpt  atomic.Int64
}

func startCheckpointer(db *sql.DB, every time.Duration) *checkpointer {
	db.SetMaxOpenConns(1)
	c := &checkpointer{db: db, every: every, quit: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			c.run()
		}
	}
}

// run checkpoints once. A failure (the database being closed, a
// transient error) is left to the next tick.
func (c *checkpointer) run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var busy, log, ckpt int64
	if err := c.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &ckpt); err != nil {
		return
	}
	c.log.Store(log)
	c.ckpt.Store(ckpt)
	c.runs.Add(1)
}

func (c *checkpointer) stop() {
	c.once.Do(func() { close(c.quit) })
	<-c.done
	c.db.Close()
}

// CheckpointStats reports the background checkpoints of an SQLite store;
// the zero value for PostgreSQL.
func (s *Store) CheckpointStats() CheckpointStats {
	if s.ckpt == nil {
		return CheckpointStats{}
	}
	return CheckpointStats{Runs: s.ckpt.runs.Load(), LogFrames: s.ckpt.log.Load(), Checkpointed: s.ckpt.ckpt.Load()}
}
