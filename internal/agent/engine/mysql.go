package engine

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// mysqlConn is a connection to a MySQL or MariaDB server.
type mysqlConn struct {
	db *sql.DB
	// conn is the job's session; db opens a second one only to stop a
	// statement of it (KILL QUERY).
	conn    *sql.Conn
	id      int64
	version string
	mariadb bool
	tls     bool
}

func connectMySQL(ctx context.Context, t agentproto.DBTarget, password, database string, tc *tls.Config) (*mysqlConn, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = t.Username, password
	cfg.Net, cfg.Addr = "tcp", address(t)
	cfg.DBName = database
	cfg.TLS = tc
	cfg.Timeout = ConnectTimeout
	// Timestamps come back in UTC: TIMESTAMP values are reported with
	// a Z.
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(0)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	c := &mysqlConn{db: db, conn: conn}
	var cipher string
	err = conn.QueryRowContext(ctx, "SELECT CONNECTION_ID(), VERSION(), COALESCE((SELECT variable_value FROM information_schema.session_status WHERE variable_name = 'Ssl_cipher'), '')").Scan(&c.id, &c.version, &cipher)
	if err != nil {
		// MySQL 8 keeps session status in performance_schema only.
		var name string
		err = conn.QueryRowContext(ctx, "SELECT CONNECTION_ID(), VERSION()").Scan(&c.id, &c.version)
		if err == nil {
			err = conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.tls = cipher != ""
	c.mariadb = strings.Contains(c.version, "MariaDB")
	return c, nil
}

func (c *mysqlConn) ServerVersion() string { return c.version }
func (c *mysqlConn) TLS() bool             { return c.tls }

func (c *mysqlConn) Close() {
	c.conn.Close()
	c.db.Close()
}

// mysqlError is err's MySQL error, if it holds one.
func mysqlError(err error) (*EngineError, bool) {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return nil, false
	}
	return &EngineError{agentproto.DBError{Code: strconv.Itoa(int(me.Number)), Message: me.Message}}, true
}

// kill stops the statement the session runs, from a second connection.
func (c *mysqlConn) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	_, _ = c.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(c.id, 10))
}

// Query runs q.SQL in a transaction: read-only ones are rolled back, the
// others committed. The driver sends one statement per call (multiple
// statements are off), so the statement cannot end the transaction and
// go on. The session's sql_select_limit makes the server send at most
// MaxRows+1 rows of a SELECT without its own LIMIT; when a read-only
// statement has more rows than that, the connection is dropped rather
// than read to the end.
func (c *mysqlConn) Query(ctx context.Context, q Query) (*agentproto.DBQueryResult, error) {
	exec := func(s string) error { _, err := c.conn.ExecContext(ctx, s); return err }
	// The engine's own timeout first (MariaDB's covers every statement,
	// MySQL's only SELECT); KILL QUERY when it passes, for the rest.
	timeout := fmt.Sprintf("SET SESSION max_execution_time = %d", q.Timeout.Milliseconds())
	if c.mariadb {
		timeout = fmt.Sprintf("SET SESSION max_statement_time = %.3f", q.Timeout.Seconds())
	}
	setup := []string{timeout, fmt.Sprintf("SET SESSION sql_select_limit = %d", q.MaxRows+1)}
	if q.ReadOnly {
		// The session default covers a statement that commits the
		// transaction implicitly.
		setup = append(setup, "SET SESSION TRANSACTION READ ONLY", "START TRANSACTION READ ONLY")
	} else {
		setup = append(setup, "START TRANSACTION READ WRITE")
	}
	for _, s := range setup {
		if err := exec(s); err != nil {
			return nil, err
		}
	}
	var killed atomic.Bool
	timer := time.AfterFunc(q.Timeout+time.Second, func() { killed.Store(true); c.kill() })
	defer timer.Stop()
	qctx, drop := context.WithCancel(ctx)
	defer drop()

	start := time.Now()
	res, dropped, err := c.run(qctx, q, drop)
	timer.Stop()
	if err != nil {
		if killed.Load() {
			err = fmt.Errorf("statement cancelled after the %s timeout: %w", q.Timeout, err)
		}
		_ = exec("ROLLBACK")
		return nil, err
	}
	if dropped {
		// The rest of the rows were not read: the connection is gone and
		// the server rolled the transaction back.
		res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		return res, nil
	}
	if res.RowsAffected != nil {
		if err := c.conn.QueryRowContext(ctx, "SELECT ROW_COUNT()").Scan(res.RowsAffected); err != nil {
			return nil, err
		}
	}
	if res.Notices, err = c.warnings(ctx); err != nil {
		return nil, err
	}
	end := "COMMIT"
	if q.ReadOnly {
		end = "ROLLBACK"
	}
	if err := exec(end); err != nil {
		return nil, err
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}

// run runs the statement and reads at most MaxRows rows of it; dropped
// says the connection was given up with rows unread: drop, which cancels
// ctx, was called.
func (c *mysqlConn) run(ctx context.Context, q Query, drop func()) (res *agentproto.DBQueryResult, dropped bool, err error) {
	rows, err := c.conn.QueryContext(ctx, q.SQL)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, false, err
	}
	res = &agentproto.DBQueryResult{Columns: []agentproto.DBColumn{}, Rows: [][]any{}, Notices: []string{}}
	for _, t := range types {
		res.Columns = append(res.Columns, agentproto.DBColumn{Name: t.Name(), Type: t.DatabaseTypeName()})
	}
	if len(types) == 0 {
		var n int64
		res.RowsAffected = &n
		return res, false, rows.Err()
	}
	raw := make([]sql.RawBytes, len(types))
	dest := make([]any, len(types))
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		if len(res.Rows) == q.MaxRows {
			res.Truncated = true
			break
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, false, err
		}
		row := make([]any, len(raw))
		for i, v := range raw {
			row[i] = mysqlValue(types[i].DatabaseTypeName(), v)
		}
		res.Rows = append(res.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	res.RowCount = len(res.Rows)
	if res.Truncated && q.ReadOnly {
		// Cancelling the statement's context closes the connection
		// before rows.Close would read the remaining rows.
		drop()
		return res, true, nil
	}
	return res, false, nil
}

// warnings are the warnings of the session's last statement.
func (c *mysqlConn) warnings(ctx context.Context) ([]string, error) {
	rows, err := c.conn.QueryContext(ctx, "SHOW WARNINGS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	notices := []string{}
	for rows.Next() {
		var level, code, msg string
		if err := rows.Scan(&level, &code, &msg); err != nil {
			return nil, err
		}
		notices = append(notices, level+" "+code+": "+msg)
	}
	return notices, rows.Err()
}

// mysqlValue is the JSON value of a column value in the text protocol,
// by the column's type name.
func mysqlValue(typ string, v sql.RawBytes) any {
	if v == nil {
		return nil
	}
	s := string(v)
	switch {
	case strings.Contains(typ, "INT"), typ == "DECIMAL", typ == "DOUBLE", typ == "FLOAT", typ == "YEAR":
		return number(s)
	case typ == "DATETIME", typ == "TIMESTAMP":
		if strings.HasPrefix(s, "0000-") {
			return s // the zero date has no RFC 3339 form
		}
		s = strings.Replace(s, " ", "T", 1)
		if typ == "TIMESTAMP" {
			s += "Z" // the session's time zone is UTC
		}
		return s
	case typ == "BLOB", typ == "BINARY", typ == "VARBINARY", typ == "BIT", typ == "GEOMETRY",
		typ == "TINYBLOB", typ == "MEDIUMBLOB", typ == "LONGBLOB":
		return binary(append([]byte(nil), v...))
	}
	return s
}
