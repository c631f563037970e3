// Package store persists every domain's records in SQLite (the default, one
// file in the data directory) or PostgreSQL (for scale-out). One set of
// queries serves both dialects: they are written with ? placeholders and
// rebound for PostgreSQL. Schemas differ per dialect and live in embedded,
// append-only goose migrations under migrations/<dialect>.
//
// Times are stored as Unix milliseconds (BIGINT) in both dialects, so that
// comparisons and ordering mean the same everywhere.
//
// Public methods own their transaction: they open it, defer the rollback,
// call unexported helpers that take the transaction, and commit last.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect names a supported database.
type Dialect string

// The supported dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

//go:embed migrations
var migrations embed.FS

// FileName is the SQLite database file inside the data directory.
const FileName = "capstan.db"

// Store is the persistence layer. It is safe for concurrent use.
type Store struct {
	dialect Dialect
	// r serves reads. w serves writes; for SQLite it holds exactly one
	// connection (SQLite allows one writer at a time, and queueing writers in
	// Go is cheaper than retrying on SQLITE_BUSY). For PostgreSQL r == w.
	r, w *sqlx.DB
	// dsn is the PostgreSQL connection string, for Listen; "" for SQLite.
	dsn string

	stmts     stmtCache    // SQLite: prepared statements of hot queries
	stmtCount atomic.Int64 // how many stmts holds
	group     *groupCommitter
	revs      revisionCache // DatabasesRevision between changes
	// revsHeard is set on PostgreSQL while Listen hears the other control
	// planes, whose changes of instances then clear revs too; while it
	// is not, revisions are read from the database.
	revsHeard atomic.Bool
	ckpt      *checkpointer // SQLite: the background checkpoints; nil for PostgreSQL

	results   atomic.Pointer[Sealer] // seals job results (SealJobResults); nil: plain text
	onPublish atomic.Pointer[func()] // called after events are stored; nil: none
	observer  *atomic.Pointer[QueryObserver]
}

// Open connects to the database named by databaseURL: empty means the SQLite
// file capstan.db in dataDir, postgres:// or postgresql:// means PostgreSQL.
// It does not apply migrations; call Migrate.
func Open(ctx context.Context, databaseURL, dataDir string) (*Store, error) {
	switch {
	case databaseURL == "" || strings.HasPrefix(databaseURL, "sqlite:") || strings.HasPrefix(databaseURL, "file:"):
		path := strings.TrimPrefix(strings.TrimPrefix(databaseURL, "sqlite:"), "file:")
		if path == "" {
			path = filepath.Join(dataDir, FileName)
		}
		return openSQLite(ctx, path)
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		return openPostgres(ctx, databaseURL)
	default:
		return nil, fmt.Errorf("unsupported database URL scheme (want postgres:// or empty for SQLite)")
	}
}

// busyTimeout is how long, in milliseconds, an SQLite connection waits for
// a lock another holds.
const busyTimeout = 10000

func openSQLite(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	for _, p := range []string{fmt.Sprintf("busy_timeout(%d)", busyTimeout), "journal_mode(WAL)", "foreign_keys(ON)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	base := "file:" + path + "?" + q.Encode()
	obs := &atomic.Pointer[QueryObserver]{}
	// The writer does not checkpoint after its commits: the checkpointer
	// below does, in the background and now and then through the writer.
	w, err := openTimed("sqlite", base+"&_txlock=immediate&_pragma=wal_autocheckpoint(0)", obs)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	r, err := openTimed("sqlite", base, obs)
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	c, err := sql.Open("sqlite", base)
	if err != nil {
		w.Close()
		r.Close()
		return nil, err
	}
	s := &Store{dialect: SQLite, r: r, w: w, observer: obs}
	s.group = newGroupCommitter(s)
	if err := s.Ping(ctx); err != nil {
		c.Close()
		s.Close()
		return nil, err
	}
	s.ckpt = startCheckpointer(c, w.DB, checkpointEvery)
	return s, nil
}

func openPostgres(ctx context.Context, dsn string) (*Store, error) {
	obs := &atomic.Pointer[QueryObserver]{}
	db, err := openTimed("pgx", dsn, obs)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(32)
	// As many idle as open: under load, a connection closed for being
	// one idle too many is opened again at once, and every new connection
	// starts a PostgreSQL server process.
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{dialect: Postgres, r: db, w: db, dsn: dsn, observer: obs}
	s.revs.maxAge = sharedRevisionAge
	s.group = newGroupCommitter(s)
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Dialect reports which database this store uses.
func (s *Store) Dialect() Dialect { return s.dialect }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return err
	}
	var one int
	return s.r.GetContext(ctx, &one, "SELECT 1")
}

// Close closes the connections.
func (s *Store) Close() error {
	if s.group != nil {
		s.group.stop()
	}
	if s.ckpt != nil {
		s.ckpt.stop()
	}
	s.closeStmts()
	err := s.w.Close()
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	return err
}

func (s *Store) provider() (*goose.Provider, error) {
	sub, err := fs.Sub(migrations, "migrations/"+string(s.dialect))
	if err != nil {
		return nil, err
	}
	return s.providerOf(sub)
}

// providerOf is the migration provider over the migration files in sub.
// Migrations apply out of order: capabilities are built side by side and
// each migration touches only its own tables, so a store migrated past a
// version that landed later still takes it.
func (s *Store) providerOf(sub fs.FS) (*goose.Provider, error) {
	opts := []goose.ProviderOption{goose.WithAllowOutofOrder(true)}
	if s.dialect == Postgres {
		// Several control planes may start at once: one migrates, the
		// others wait on the advisory lock.
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		return goose.NewProvider(goose.DialectPostgres, s.w.DB, sub, append(opts, goose.WithSessionLocker(locker))...)
	}
	return goose.NewProvider(goose.DialectSQLite3, s.w.DB, sub, opts...)
}

// Migrate applies every pending migration and returns the schema version.
func (s *Store) Migrate(ctx context.Context) (int64, error) {
	p, err := s.provider()
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	return p.GetDBVersion(ctx)
}

// SchemaVersion returns the applied schema version and the latest version
// this binary knows.
func (s *Store) SchemaVersion(ctx context.Context) (current, latest int64, err error) {
	p, err := s.provider()
	if err != nil {
		return 0, 0, err
	}
	current, err = p.GetDBVersion(ctx)
	if err != nil {
		return 0, 0, err
	}
	srcs := p.ListSources()
	if len(srcs) > 0 {
		latest = srcs[len(srcs)-1].Version
	}
	return current, latest, nil
}

// tx runs fn in a write transaction, committing when fn returns nil.
func (s *Store) tx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	tx, err := s.w.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// rebind turns ? placeholders into the dialect's.
func (s *Store) rebind(q string) string { return s.r.Rebind(q) }

// isConstraintViolation reports whether err is the violation of a
// constraint that PostgreSQL reports with the SQLSTATE pgCode and SQLite
// with one of sqliteCodes (extended result codes).
func isConstraintViolation(err error, pgCode string, sqliteCodes ...int) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == pgCode
	}
	var sqErr *sqlite.Error
	if errors.As(err, &sqErr) {
		return slices.Contains(sqliteCodes, sqErr.Code())
	}
	return false
}

// isUniqueViolation reports whether err is a unique-constraint violation.
func isUniqueViolation(err error) bool {
	return isConstraintViolation(err, "23505", sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// isForeignKeyViolation reports whether err is a foreign-key violation.
func isForeignKeyViolation(err error) bool {
	return isConstraintViolation(err, "23503", sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY)
}

// isUniqueViolationOf reports whether err is a unique violation of the
// PostgreSQL constraint (or index) named constraint, or of SQLite's on
// column (as its message names it: table.column).
func isUniqueViolationOf(err error, constraint, column string) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505" && pgErr.ConstraintName == constraint
	}
	return isUniqueViolation(err) && strings.Contains(err.Error(), column)
}

// ms converts a time to the stored form.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS converts the stored form to a UTC time.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// nullMS converts a nullable stored time.
func nullMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

// notFound maps sql.ErrNoRows to ok=false.
func notFound(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// DialectName returns the dialect as a string.
func (s *Store) DialectName() string { return string(s.dialect) }
