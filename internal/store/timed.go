package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// QueryObserver is told how long each store operation took: op is exec,
// query (until the rows are ready), begin or commit.
type QueryObserver func(op string, d time.Duration)

// ObserveQueries makes the store report the time of every operation to o
// (nil: stop reporting).
func (s *Store) ObserveQueries(o QueryObserver) {
	if o == nil {
		s.observer.Store(nil)
		return
	}
	s.observer.Store(&o)
}

// DBs returns the store's connection pools by role (read, write; one pool
// under both names on PostgreSQL is returned once, as "pool"), for pool
// statistics.
func (s *Store) DBs() map[string]*sql.DB {
	if s.r == s.w {
		return map[string]*sql.DB{"pool": s.w.DB}
	}
	return map[string]*sql.DB{"read": s.r.DB, "write": s.w.DB}
}

// openTimed opens a database whose connections report the time of their
// operations to the observer obs points to.
func openTimed(driverName, dsn string, obs *atomic.Pointer[QueryObserver]) (*sqlx.DB, error) {
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	probe.Close()
	var c driver.Connector
	if dc, ok := drv.(driver.DriverContext); ok {
		if c, err = dc.OpenConnector(dsn); err != nil {
			return nil, err
		}
	} else {
		c = dsnConnector{drv: drv, dsn: dsn}
	}
	return sqlx.NewDb(sql.OpenDB(timedConnector{c: c, obs: obs}), driverName), nil
}

type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (d dsnConnector) Connect(context.Context) (driver.Conn, error) { return d.drv.Open(d.dsn) }
func (d dsnConnector) Driver() driver.Driver                        { return d.drv }

type timedConnector struct {
	c   driver.Connector
	obs *atomic.Pointer[QueryObserver]
}

func (t timedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := t.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &timedConn{c: c, obs: t.obs}, nil
}

func (t timedConnector) Driver() driver.Driver { return t.c.Driver() }

// timedConn forwards every optional interface of the driver's connection
// and times statements and transactions.
type timedConn struct {
	c   driver.Conn
	obs *atomic.Pointer[QueryObserver]
}

func (t *timedConn) observe(op string, start time.Time) {
	if o := t.obs.Load(); o != nil {
		(*o)(op, time.Since(start))
	}
}

func (t *timedConn) Prepare(query string) (driver.Stmt, error) {
	st, err := t.c.Prepare(query)
	if err != nil {
		return nil, err
	}
	return &timedStmt{s: st, conn: t}, nil
}

func (t *timedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if pc, ok := t.c.(driver.ConnPrepareContext); ok {
		st, err = pc.PrepareContext(ctx, query)
	} else {
		st, err = t.c.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &timedStmt{s: st, conn: t}, nil
}

func (t *timedConn) Close() error { return t.c.Close() }

func (t *timedConn) Begin() (driver.Tx, error) {
	return t.BeginTx(context.Background(), driver.TxOptions{})
}

func (t *timedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	start := time.Now()
	var tx driver.Tx
	var err error
	if bt, ok := t.c.(driver.ConnBeginTx); ok {
		tx, err = bt.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the driver has nothing newer
		tx, err = t.c.Begin()
	}
	t.observe("begin", start)
	if err != nil {
		return nil, err
	}
	return timedTx{tx: tx, conn: t}, nil
}

func (t *timedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ec, ok := t.c.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	start := time.Now()
	res, err := ec.ExecContext(ctx, query, args)
	if err != driver.ErrSkip { //nolint:errorlint // the driver returns ErrSkip itself
		t.observe("exec", start)
	}
	return res, err
}

func (t *timedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := t.c.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	start := time.Now()
	rows, err := qc.QueryContext(ctx, query, args)
	if err != driver.ErrSkip { //nolint:errorlint // the driver returns ErrSkip itself
		t.observe("query", start)
	}
	return rows, err
}

func (t *timedConn) Ping(ctx context.Context) error {
	if p, ok := t.c.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (t *timedConn) ResetSession(ctx context.Context) error {
	if r, ok := t.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (t *timedConn) IsValid() bool {
	if v, ok := t.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (t *timedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := t.c.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type timedTx struct {
	tx   driver.Tx
	conn *timedConn
}

func (t timedTx) Commit() error {
	start := time.Now()
	err := t.tx.Commit()
	t.conn.observe("commit", start)
	return err
}

func (t timedTx) Rollback() error { return t.tx.Rollback() }

// timedStmt times a prepared statement's executions.
type timedStmt struct {
	s    driver.Stmt
	conn *timedConn
}

func (t *timedStmt) Close() error  { return t.s.Close() }
func (t *timedStmt) NumInput() int { return t.s.NumInput() }

func (t *timedStmt) Exec(args []driver.Value) (driver.Result, error) {
	start := time.Now()
	//lint:ignore SA1019 the driver may have nothing newer
	res, err := t.s.Exec(args)
	t.conn.observe("exec", start)
	return res, err
}

func (t *timedStmt) Query(args []driver.Value) (driver.Rows, error) {
	start := time.Now()
	//lint:ignore SA1019 the driver may have nothing newer
	rows, err := t.s.Query(args)
	t.conn.observe("query", start)
	return rows, err
}

func (t *timedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	sc, ok := t.s.(driver.StmtExecContext)
	if !ok {
		vals, err := namedToValues(args)
		if err != nil {
			return nil, err
		}
		return t.Exec(vals)
	}
	start := time.Now()
	res, err := sc.ExecContext(ctx, args)
	t.conn.observe("exec", start)
	return res, err
}

func (t *timedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	sc, ok := t.s.(driver.StmtQueryContext)
	if !ok {
		vals, err := namedToValues(args)
		if err != nil {
			return nil, err
		}
		return t.Query(vals)
	}
	start := time.Now()
	rows, err := sc.QueryContext(ctx, args)
	t.conn.observe("query", start)
	return rows, err
}

func (t *timedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := t.s.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return t.conn.CheckNamedValue(nv)
}

func namedToValues(args []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, driver.ErrSkip
		}
		out[i] = a.Value
	}
	return out, nil
}
