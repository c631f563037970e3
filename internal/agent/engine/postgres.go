package engine

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// postgresConn is a connection to a PostgreSQL server.
type postgresConn struct {
	conn *pgx.Conn
	// notices collects the server's notices; OnNotice runs on the
	// goroutine that reads the connection, the job's.
	notices []string
}

func connectPostgres(ctx context.Context, t agentproto.DBTarget, password, database string, tc *tls.Config) (*postgresConn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port = t.Host, uint16(t.Port)
	cfg.User, cfg.Password = t.Username, password
	cfg.Database = database
	if cfg.Database == "" {
		cfg.Database = "postgres"
	}
	cfg.TLSConfig, cfg.Fallbacks = tc, nil
	cfg.ConnectTimeout = ConnectTimeout
	// Timestamps come back in UTC and ISO form whatever the server's
	// defaults are.
	cfg.RuntimeParams = map[string]string{"application_name": "capstan-agent", "TimeZone": "UTC", "DateStyle": "ISO, YMD"}
	c := &postgresConn{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		c.notices = append(c.notices, n.Severity+": "+n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return c, nil
}

func (c *postgresConn) ServerVersion() string {
	return c.conn.PgConn().ParameterStatus("server_version")
}

func (c *postgresConn) TLS() bool {
	_, ok := c.conn.PgConn().Conn().(*tls.Conn)
	return ok
}

func (c *postgresConn) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.conn.Close(ctx)
}

// pgError is err's PostgreSQL error, if it holds one.
func pgError(err error) (*EngineError, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil, false
	}
	return &EngineError{agentproto.DBError{Code: pe.Code, Message: pe.Message, Position: int(pe.Position)}}, true
}

// exec runs sql (statements made here, never a job's text) with the
// simple protocol.
func (c *postgresConn) exec(ctx context.Context, sql string) error {
	_, err := c.conn.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

// Query runs q.SQL in a transaction: read-only ones are rolled back,
// the others committed. The statement goes through the extended protocol,
// which takes one statement only, and its portal is executed for
// MaxRows+1 rows: the server computes no row past those.
func (c *postgresConn) Query(ctx context.Context, q Query) (*agentproto.DBQueryResult, error) {
	// The context ends a little after the server's own timeout, so that
	// the engine's error is the one reported; it is a backstop.
	ctx, cancel := context.WithTimeout(ctx, q.Timeout+5*time.Second)
	defer cancel()
	if err := c.exec(ctx, fmt.Sprintf("SET statement_timeout = %d", q.Timeout.Milliseconds())); err != nil {
		return nil, err
	}
	begin := "BEGIN READ WRITE"
	if q.ReadOnly {
		// The SELECT takes the transaction's first snapshot: from then
		// on SET TRANSACTION READ WRITE is refused by the server.
		begin = "BEGIN READ ONLY; SELECT 1"
	}
	if err := c.exec(ctx, begin); err != nil {
		return nil, err
	}
	c.notices = nil
	start := time.Now()
	res, err := c.run(ctx, q)
	if err != nil {
		_ = c.exec(ctx, "ROLLBACK")
		return nil, err
	}
	end := "COMMIT"
	if q.ReadOnly {
		end = "ROLLBACK"
	}
	if err := c.exec(ctx, end); err != nil {
		return nil, err
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	res.Notices = append([]string{}, c.notices...)
	if err := c.nameTypes(ctx, res.Columns); err != nil {
		return nil, err
	}
	return res, nil
}

// run sends the statement and reads its result.
func (c *postgresConn) run(ctx context.Context, q Query) (*agentproto.DBQueryResult, error) {
	pc := c.conn.PgConn()
	fe := pc.Frontend()
	fe.SendParse(&pgproto3.Parse{Query: q.SQL})
	fe.SendBind(&pgproto3.Bind{})
	fe.SendDescribe(&pgproto3.Describe{ObjectType: 'P'})
	fe.SendExecute(&pgproto3.Execute{MaxRows: uint32(q.MaxRows) + 1})
	fe.SendSync(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		return nil, err
	}
	res := &agentproto.DBQueryResult{Columns: []agentproto.DBColumn{}, Rows: [][]any{}}
	var (
		oids    []uint32
		rowDesc bool
		tag     string
		failed  error
	)
	m := c.conn.TypeMap()
	for {
		msg, err := pc.ReceiveMessage(ctx)
		if err != nil {
			return nil, err
		}
		switch msg := msg.(type) {
		case *pgproto3.RowDescription:
			rowDesc = true
			for _, f := range msg.Fields {
				res.Columns = append(res.Columns, agentproto.DBColumn{Name: string(f.Name), Type: strconv.FormatUint(uint64(f.DataTypeOID), 10)})
				oids = append(oids, f.DataTypeOID)
			}
		case *pgproto3.DataRow:
			if len(res.Rows) == q.MaxRows {
				res.Truncated = true
				continue
			}
			row := make([]any, len(msg.Values))
			for i, v := range msg.Values {
				row[i] = pgValue(m, oids[i], v)
			}
			res.Rows = append(res.Rows, row)
		case *pgproto3.PortalSuspended:
			res.Truncated = true
		case *pgproto3.CommandComplete:
			tag = string(msg.CommandTag)
		case *pgproto3.ErrorResponse:
			failed = pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.ReadyForQuery:
			if failed != nil {
				return nil, failed
			}
			res.RowCount = len(res.Rows)
			ct := pgconn.NewCommandTag(tag)
			if !rowDesc || ct.Insert() || ct.Update() || ct.Delete() || strings.HasPrefix(tag, "MERGE") {
				n := ct.RowsAffected()
				res.RowsAffected = &n
			}
			return res, nil
		}
	}
}

// nameTypes replaces the type OIDs in cols by the types' names.
func (c *postgresConn) nameTypes(ctx context.Context, cols []agentproto.DBColumn) error {
	var unknown []uint32
	for i := range cols {
		oid, _ := strconv.ParseUint(cols[i].Type, 10, 32)
		if t, ok := c.conn.TypeMap().TypeForOID(uint32(oid)); ok {
			cols[i].Type = t.Name
		} else {
			unknown = append(unknown, uint32(oid))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	rows, err := c.conn.Query(ctx, "SELECT oid::text, typname FROM pg_type WHERE oid = ANY($1)", unknown)
	if err != nil {
		return err
	}
	names := map[string]string{}
	var oid, name string
	if _, err := pgx.ForEachRow(rows, []any{&oid, &name}, func() error { names[oid] = name; return nil }); err != nil {
		return err
	}
	for i := range cols {
		if n, ok := names[cols[i].Type]; ok {
			cols[i].Type = n
		}
	}
	return nil
}

// pgValue is the JSON value of a column value in text form.
func pgValue(m *pgtype.Map, oid uint32, raw []byte) any {
	if raw == nil {
		return nil
	}
	s := string(raw)
	switch oid {
	case pgtype.BoolOID:
		return s == "t"
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID,
		pgtype.Float4OID, pgtype.Float8OID, pgtype.NumericOID:
		return number(s)
	case pgtype.TimestamptzOID, pgtype.TimestampOID:
		t, ok := m.TypeForOID(oid)
		if !ok {
			return s
		}
		v, err := t.Codec.DecodeValue(m, oid, pgtype.TextFormatCode, raw)
		tm, isTime := v.(time.Time)
		if err != nil || !isTime {
			return s // infinity, -infinity
		}
		if oid == pgtype.TimestampOID {
			// A timestamp without time zone is a wall-clock time: it
			// keeps no offset.
			return tm.Format("2006-01-02T15:04:05.999999999")
		}
		return tm.UTC().Format(time.RFC3339Nano)
	case pgtype.ByteaOID:
		v, err := pgtype.ByteaCodec{}.DecodeValue(m, oid, pgtype.TextFormatCode, raw)
		if b, ok := v.([]byte); ok && err == nil {
			return binary(b)
		}
	}
	return s
}

// number is s as a JSON number when it is one, else as a string (NaN,
// Infinity).
func number(s string) any {
	if json.Valid([]byte(s)) && s != "" && s[0] != '"' {
		return json.Number(s)
	}
	return s
}

// binary is a binary value in JSON.
func binary(b []byte) any {
	return map[string]string{"$base64": base64.StdEncoding.EncodeToString(b)}
}
