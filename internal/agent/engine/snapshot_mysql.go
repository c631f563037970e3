package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A MySQL/MariaDB backup's manifest and dump see one snapshot, though
// the engine cannot hand a snapshot from one session to another (as
// PostgreSQL's exported snapshots do). Writes are held off while both
// sessions start their snapshots, which therefore see the same data:
//
//  1. a lock session takes FLUSH TABLES WITH READ LOCK (or, for a login
//     without the RELOAD privilege, LOCK TABLES … READ on every base
//     table of the database);
//  2. the manifest session starts START TRANSACTION WITH CONSISTENT
//     SNAPSHOT;
//  3. the dump starts with --single-transaction, which starts its own
//     consistent snapshot before it writes its first table (or, for a
//     database without tables, its routines, events or end);
//  4. once the dump's output reaches that point, the lock is released.
//
// Writes wait from 1 to 4, typically well under a second; a lock that
// cannot be had within mysqlLockWait fails the backup. Only
// transactional tables (InnoDB) are consistent, as with any
// --single-transaction dump.

// mysqlLockWait bounds how long the lock session waits for its lock.
const mysqlLockWait = 60 * time.Second

// mysqlSnapshotWait bounds how long writes are held off for the dump to
// start its snapshot.
const mysqlSnapshotWait = 5 * time.Minute

// mysqlSnapshot is the manifest's transaction and the lock session that
// holds writes off until the dump has its snapshot.
type mysqlSnapshot struct {
	lock *mysqlConn
	snap *mysqlConn
	db   string

	mu       sync.Mutex
	unlocked bool
	closed   bool
	// started is closed when the dump has its snapshot (or ended).
	started chan struct{}
}

func mysqlSnapshotOf(ctx context.Context, target agentproto.DBTarget, password, database string) (*mysqlSnapshot, error) {
	lc, err := Connect(ctx, target, password, database)
	if err != nil {
		return nil, err
	}
	lock := lc.(*mysqlConn)
	sc, err := Connect(ctx, target, password, database)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s := &mysqlSnapshot{lock: lock, snap: sc.(*mysqlConn), db: database, started: make(chan struct{})}
	if err := s.begin(ctx); err != nil {
		s.Close()
		return nil, err
	}
	go func() {
		t := time.NewTimer(mysqlSnapshotWait)
		defer t.Stop()
		select {
		case <-s.started:
		case <-t.C:
		}
		s.unlock()
	}()
	return s, nil
}

// begin takes the lock and starts the manifest's snapshot.
func (s *mysqlSnapshot) begin(ctx context.Context) error {
	if _, err := s.lock.conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(mysqlLockWait.Seconds()))); err != nil {
		return err
	}
	if _, err := s.lock.conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		if e, ok := mysqlError(err); !ok || e.Code != "1227" && e.Code != "1044" && e.Code != "1045" { // access denied
			return fmt.Errorf("FLUSH TABLES WITH READ LOCK: %w", err)
		}
		if err := s.lockTables(ctx); err != nil {
			return err
		}
	}
	for _, q := range []string{"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := s.snap.conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// lockTables takes read locks on the database's base tables, for a login
// that may not lock the whole server.
func (s *mysqlSnapshot) lockTables(ctx context.Context) error {
	tables, err := mysqlBaseTables(ctx, s.lock, s.db)
	if err != nil || len(tables) == 0 {
		return err
	}
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = myIdent(s.db) + "." + myIdent(t) + " READ"
	}
	if _, err := s.lock.conn.ExecContext(ctx, "LOCK TABLES "+strings.Join(parts, ", ")); err != nil {
		return fmt.Errorf("LOCK TABLES: %w", err)
	}
	return nil
}

// unlock lets writes go on.
func (s *mysqlSnapshot) unlock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unlocked || s.closed {
		return
	}
	s.unlocked = true
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	_, _ = s.lock.conn.ExecContext(ctx, "UNLOCK TABLES")
	s.lock.Close()
}

func (s *mysqlSnapshot) DumpCall(call ToolCall) ToolCall { return call }

// watch releases the lock once the dump's output shows it has its
// snapshot.
func (s *mysqlSnapshot) Watch(w io.Writer) io.Writer {
	return &SnapshotWatch{w: w, seen: func() {
		close(s.started)
		go s.unlock()
	}}
}

func (s *mysqlSnapshot) Manifest(ctx context.Context) (agentproto.BackupManifest, error) {
	return mysqlManifest(ctx, s.snap, s.db)
}

// Close ends the transaction and both sessions (which releases the lock
// if the dump never started).
func (s *mysqlSnapshot) Close() error {
	s.unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	_, err := s.snap.conn.ExecContext(ctx, "COMMIT")
	s.snap.Close()
	return err
}

// dumpStarted are line starts of a mysqldump/mariadb-dump that it writes
// only after it started its transaction: the first table or view, the
// routines, the events, the end of the dump.
var dumpStarted = [][]byte{
	[]byte("-- Table structure for table "),
	[]byte("-- Temporary table structure for view "),
	[]byte("-- Dumping routines for database "),
	[]byte("-- Dumping events for database "),
	[]byte("-- Dump completed"),
	[]byte("/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;"),
}

// dumpStartedMax is the longest of dumpStarted.
const dumpStartedMax = 48

// SnapshotWatch passes a dump's output on and calls seen once when a
// line begins with one of dumpStarted, or when the output ends.
type SnapshotWatch struct {
	w    io.Writer
	done bool
	// line is the start of the current line, up to dumpStartedMax bytes;
	// skip says the rest of the line is passed over.
	line []byte
	skip bool
	seen func()
}

func (s *SnapshotWatch) Write(p []byte) (int, error) {
	if !s.done {
		s.scan(p)
	}
	return s.w.Write(p)
}

func (s *SnapshotWatch) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if s.skip {
			if i < 0 {
				return
			}
			p, s.line, s.skip = p[i+1:], s.line[:0], false
			continue
		}
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		chunk = chunk[:min(len(chunk), dumpStartedMax-len(s.line))]
		s.line = append(s.line, chunk...)
		for _, m := range dumpStarted {
			if bytes.HasPrefix(s.line, m) {
				s.End()
				return
			}
		}
		switch {
		case i >= 0 && len(chunk) == i:
			p, s.line = p[i+1:], s.line[:0]
		case len(s.line) >= dumpStartedMax:
			p, s.skip = p[len(chunk):], true
		default:
			return // the line goes on in the next write
		}
	}
}

// end is the dump's output ending: whatever it read, it read under the
// lock.
func (s *SnapshotWatch) End() {
	if !s.done {
		s.done = true
		s.seen()
	}
}

// mysqlBaseTables lists a database's base tables by name.
func mysqlBaseTables(ctx context.Context, c *mysqlConn, database string) ([]string, error) {
	return c.strings(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = ? AND table_type IN ('BASE TABLE', 'SYSTEM VERSIONED') ORDER BY table_name`, database)
}

// mysqlManifest counts and checksums every base table of database: a
// row's checksum is the MD5 of its columns' values (as bytes, in hex,
// NULL as N), and a table's the sum of its rows' first 64 bits, so it
// does not depend on the order rows are read in.
func mysqlManifest(ctx context.Context, c *mysqlConn, database string) (agentproto.BackupManifest, error) {
	m := agentproto.BackupManifest{Kind: agentproto.BackupManifestSQL, Tables: []agentproto.BackupTable{}}
	tables, err := mysqlBaseTables(ctx, c, database)
	if err != nil {
		return m, err
	}
	for _, name := range tables {
		cols, err := mysqlColumns(ctx, c, database, name)
		if err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		if len(cols) == 0 {
			return m, fmt.Errorf("%s: no columns", name)
		}
		parts := make([]string, len(cols))
		for i, col := range cols {
			parts[i] = "COALESCE(HEX(CAST(" + myIdent(col) + " AS BINARY)), 'N')"
		}
		q := "SELECT COUNT(*), CAST(COALESCE(SUM(CAST(CONV(SUBSTRING(MD5(CONCAT_WS(',', " + strings.Join(parts, ", ") +
			")), 1, 16), 16, 10) AS DECIMAL(65, 0))), 0) AS CHAR) FROM " + myIdent(database) + "." + myIdent(name)
		t := agentproto.BackupTable{Name: name}
		if err := c.conn.QueryRowContext(ctx, q).Scan(&t.Rows, &t.Checksum); err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		m.Tables = append(m.Tables, t)
	}
	return m, nil
}

// mysqlColumns lists a table's columns in their order.
func mysqlColumns(ctx context.Context, c *mysqlConn, database, table string) ([]string, error) {
	return c.strings(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position`, database, table)
}

// errMySQLSwap is a replace the tables' swap cannot do.
var errMySQLSwap = errors.New("cannot swap")

// exists says whether a database exists.
func (c *mysqlConn) Exists(ctx context.Context, name string) (bool, error) {
	var n int
	err := c.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n)
	return n > 0, err
}

// count runs a COUNT(*) query.
func (c *mysqlConn) count(ctx context.Context, q string, args ...any) (int, error) {
	var n int
	err := c.conn.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// swap moves target's base tables into old (a new database) and
// restored's into target, in one RENAME TABLE statement: MariaDB and
// MySQL apply it whole or not at all, so target never holds some tables
// of each. RENAME TABLE cannot move views, and tables with triggers
// cannot change databases: a restored database holding views,
// triggers, routines or events, or a target with triggers, is refused
// before anything changes. The target's views, routines and events stay
// in place.
func (c *mysqlConn) Swap(ctx context.Context, target, restored, old string) error {
	for _, chk := range []struct{ what, q, db string }{
		{"views", "SELECT COUNT(*) FROM information_schema.views WHERE table_schema = ?", restored},
		{"triggers", "SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = ?", restored},
		{"routines", "SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = ?", restored},
		{"events", "SELECT COUNT(*) FROM information_schema.events WHERE event_schema = ?", restored},
	} {
		n, err := c.count(ctx, chk.q, chk.db)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: the backup holds %d %s, which RENAME TABLE cannot move between databases; restore it with mode new",
				errMySQLSwap, n, chk.what)
		}
	}
	n, err := c.count(ctx, "SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = ?", target)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: %s has %d triggers, whose tables RENAME TABLE cannot move; drop them or restore with mode new",
			errMySQLSwap, target, n)
	}
	have, err := mysqlBaseTables(ctx, c, target)
	if err != nil {
		return err
	}
	got, err := mysqlBaseTables(ctx, c, restored)
	if err != nil {
		return err
	}
	if _, _, err := c.DropDatabase(ctx, old); err != nil {
		return err
	}
	if _, err := c.CreateDatabase(ctx, old, ""); err != nil {
		return err
	}
	var renames []string
	for _, t := range have {
		renames = append(renames, myIdent(target)+"."+myIdent(t)+" TO "+myIdent(old)+"."+myIdent(t))
	}
	for _, t := range got {
		renames = append(renames, myIdent(restored)+"."+myIdent(t)+" TO "+myIdent(target)+"."+myIdent(t))
	}
	if len(renames) > 0 {
		if _, err := c.conn.ExecContext(ctx, "RENAME TABLE "+strings.Join(renames, ", ")); err != nil {
			// Nothing moved: old is empty.
			_, _, _ = c.DropDatabase(context.WithoutCancel(ctx), old)
			return err
		}
	}
	// restored is empty now; the caller drops old.
	_, _, err = c.DropDatabase(ctx, restored)
	return err
}
