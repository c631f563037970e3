package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Checkpoints, for SQLite. In WAL mode every commit appends pages to the
// write-ahead log, and a checkpoint copies them back into the database
// file (and, with synchronous=NORMAL, is the only step that waits for the
// disk: one fsync of the log, one of the database file).
//
// SQLite's own checkpoint runs inside the commit that finds the log past
// 1,000 pages, on the writer, with every write queued behind it. Under
// load the log rarely starts again right away (a reader is still using
// it), so it stays past 1,000 pages and every commit ran another
// checkpoint with its two fsyncs: a few milliseconds, sometimes 15, added
// to every batch of writes, on the path of every request that writes.
//
// The writer therefore never checkpoints by itself. A connection of its
// own checkpoints in the background every second, PASSIVE: it copies what
// no reader still needs without blocking the writer or the readers. Only
// a checkpoint that no write overlaps can catch up with the log's end and
// let the log start again from its beginning, so when the log has grown
// past restartFrames the checkpointer also runs one through the writer
// connection, which holds writes back for as long as it takes to copy
// the little the background ones left and sync, and for the readers still
// on the log to finish (at most 5 ms). The next write then starts the log
// again. At most one such pause per second, instead of a checkpoint per
// commit.

// checkpointEvery is how often the background checkpoint runs.
const checkpointEvery = time.Second

// restartFrames is the length of the log, in pages, from which a
// checkpoint runs through the writer so that the log starts again.
const restartFrames = 4096

// CheckpointStats is what the latest background checkpoint reported.
type CheckpointStats struct {
	Runs         int64 // checkpoints run so far
	LogFrames    int64 // frames in the log at the latest one
	Checkpointed int64 // of those, frames copied into the database file
	WriterRuns   int64 // checkpoints run through the writer
}

type checkpointer struct {
	db     *sql.DB // a connection of its own
	writer *sql.DB // the store's writer
	every  time.Duration
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
	runs   atomic.Int64
	log    atomic.Int64
	ckpt   atomic.Int64
	wruns  atomic.Int64
}

func startCheckpointer(db, writer *sql.DB, every time.Duration) *checkpointer {
	db.SetMaxOpenConns(1)
	c := &checkpointer{db: db, writer: writer, every: every, quit: make(chan struct{}), done: make(chan struct{})}
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

// run checkpoints once in the background, and through the writer when
// the log is long. A failure (the database being closed, a transient
// error) is left to the next tick.
func (c *checkpointer) run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log, ckpt, err := checkpoint(ctx, c.db)
	if err != nil {
		return
	}
	c.runs.Add(1)
	if log >= restartFrames {
		// Each pass copies what was written during the one before, so a
		// few passes leave the writer little to copy while writes wait.
		for range maxCatchUp {
			if log-ckpt <= catchUpFrames {
				break
			}
			if log, ckpt, err = checkpoint(ctx, c.db); err != nil {
				return
			}
		}
		if wlog, wckpt, err := c.restart(ctx); err == nil {
			c.wruns.Add(1)
			log, ckpt = wlog, wckpt
		}
	}
	c.log.Store(log)
	c.ckpt.Store(ckpt)
}

// A checkpoint through the writer follows background passes until at most
// catchUpFrames are left to copy, or maxCatchUp of them ran.
const (
	catchUpFrames = 256
	maxCatchUp    = 4
)

// restartWait is how long a checkpoint through the writer waits for the
// readers still on the log before it leaves the log's restart to a later
// one: every write waits meanwhile.
const restartWait = 5 // milliseconds

// restart runs a RESTART checkpoint through the writer's connection, so
// that no write commits while it copies the rest of the log, and then the
// next write starts the log again. It waits at most restartWait for
// readers still on the log (they finish within milliseconds; a long
// one makes it return, and the next tick tries again).
func (c *checkpointer) restart(ctx context.Context) (log, ckpt int64, err error) {
	conn, err := c.writer.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", restartWait)); err != nil {
		return 0, 0, err
	}
	var busy int64
	err = conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(RESTART)`).Scan(&busy, &log, &ckpt)
	if _, rerr := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout)); rerr != nil {
		// The writer must not keep the short wait: drop the connection.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return 0, 0, rerr
	}
	return log, ckpt, err
}

// checkpoint runs a PASSIVE checkpoint on a connection of db and returns
// the pages in the log and how many of them are in the database file.
func checkpoint(ctx context.Context, db *sql.DB) (log, ckpt int64, err error) {
	var busy int64
	err = db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &ckpt)
	return log, ckpt, err
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
	return CheckpointStats{Runs: s.ckpt.runs.Load(), LogFrames: s.ckpt.log.Load(), Checkpointed: s.ckpt.ckpt.Load(), WriterRuns: s.ckpt.wruns.Load()}
}
