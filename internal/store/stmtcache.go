package store

import (
	"context"
	"database/sql"
	"sync"

	"github.com/jmoiron/sqlx"
)

// Prepared statements of the hot queries, for SQLite: its driver parses
// every statement it runs, and parsing costs as much as running the short
// statements of the agent protocol. A prepared statement is parsed once per
// connection. (PostgreSQL's driver caches prepared statements itself.)
//
// A statement is created on its pool outside any transaction (prepare);
// inside a write transaction, execIn and queryIn only use statements
// created before and run any other query as is: on SQLite the transaction
// holds the only writer connection, and creating a statement there would
// wait for a connection forever.

type stmtKey struct {
	db    *sqlx.DB
	query string
}

// stmtCache maps a pool and query to its prepared statement.
type stmtCache struct {
	m sync.Map // stmtKey → *sqlx.Stmt
}

// maxCachedStmts bounds the cache; the queries cached are constants, and
// the multi-row inserts have at most insertChunk shapes.
const maxCachedStmts = 512

// prepared returns the statement of query on db, preparing it the first
// time. It must not be called inside a write transaction on SQLite. Outside
// SQLite it returns nil: run the query as is.
func (s *Store) prepared(ctx context.Context, db *sqlx.DB, query string) (*sqlx.Stmt, error) {
	if s.dialect != SQLite {
		return nil, nil
	}
	k := stmtKey{db, query}
	if v, ok := s.stmts.m.Load(k); ok {
		return v.(*sqlx.Stmt), nil
	}
	if s.stmtCount.Load() >= maxCachedStmts {
		return nil, nil
	}
	st, err := db.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if v, loaded := s.stmts.m.LoadOrStore(k, st); loaded {
		st.Close()
		return v.(*sqlx.Stmt), nil
	}
	s.stmtCount.Add(1)
	return st, nil
}

// prepareWrites makes sure the statements of a write transaction are
// prepared on the writer, before the transaction begins.
func (s *Store) prepareWrites(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		if _, err := s.prepared(ctx, s.w, q); err != nil {
			return err
		}
	}
	return nil
}

// cachedIn returns the prepared writer statement of query for use in tx,
// or nil when there is none.
func (s *Store) cachedIn(ctx context.Context, tx *sqlx.Tx, query string) *sqlx.Stmt {
	if s.dialect != SQLite {
		return nil
	}
	v, ok := s.stmts.m.Load(stmtKey{s.w, query})
	if !ok {
		return nil
	}
	return tx.StmtxContext(ctx, v.(*sqlx.Stmt))
}

// execIn runs a statement in a write transaction, prepared if it was
// prepared before (see prepareWrites).
func (s *Store) execIn(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error) {
	if st := s.cachedIn(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, tx.Rebind(query), args...)
}

// queryIn runs a query in a write transaction, prepared if it was prepared
// before (see prepareWrites).
func (s *Store) queryIn(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (*sql.Rows, error) {
	if st := s.cachedIn(ctx, tx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, tx.Rebind(query), args...)
}

// getR runs a single-row read on the read pool, prepared on SQLite.
func (s *Store) getR(ctx context.Context, dest any, query string, args ...any) error {
	st, err := s.prepared(ctx, s.r, query)
	if err != nil {
		return err
	}
	if st != nil {
		return st.GetContext(ctx, dest, args...)
	}
	return s.r.GetContext(ctx, dest, s.rebind(query), args...)
}

// closeStmts closes the cached statements.
func (s *Store) closeStmts() {
	s.stmts.m.Range(func(k, v any) bool {
		v.(*sqlx.Stmt).Close()
		s.stmts.m.Delete(k)
		return true
	})
}
