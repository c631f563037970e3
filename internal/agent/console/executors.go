// Package console runs the database jobs of the query console: db.connect,
// db.query, db.explore and db.kv on an instance, and the databases and
// logins made, rotated and dropped on it (db.database.*, db.user.*).
package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Executors are the executors of the database job types. A job that
// fails carries a DBFailure as its data: the engine's code, message and
// position, or the agent's own message.
type Executors struct{}

// Register adds the database job types to r.
func (e Executors) Register(r agent.Registry) {
	engine.Handle(r, agentproto.DBConnect, e.runConnect)
	engine.Handle(r, agentproto.DBQuery, e.runQuery)
	engine.Handle(r, agentproto.DBExplore, e.runExplore)
	engine.Handle(r, agentproto.DBKV, e.runKV)
	e.registerAdmin(r)
}

// value is the result a connection returned, nil as the zero value.
func value[R any](res *R, err error) (R, error) {
	if res == nil {
		var zero R
		return zero, err
	}
	return *res, err
}

// connect opens the connection of a job to target, in database ("":
// the target's), with the password of the job's secrets.
func connect(ctx context.Context, target agentproto.DBTarget, secrets map[string]string, database string) (engine.Conn, error) {
	return engine.Connect(ctx, target, secrets[agentproto.SecretDBPassword], database)
}

// runConnect runs db.connect: it connects, authenticates and
// reports the server's version and whether TLS is used.
func (Executors) runConnect(ctx context.Context, c agent.Call[agentproto.DBConnectPayload]) (agentproto.DBConnectResult, error) {
	pl, secrets, events := c.Payload, c.Secrets, c.Events
	conn, err := connect(ctx, pl.Target, secrets, "")
	if err != nil {
		return agentproto.DBConnectResult{}, err
	}
	defer conn.Close()
	res := agentproto.DBConnectResult{ServerVersion: conn.ServerVersion(), TLS: conn.TLS()}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("connected to %s %s (tls: %t)", pl.Target.Engine, res.ServerVersion, res.TLS), nil)
	return res, nil
}

// runQuery runs db.query.
func (Executors) runQuery(ctx context.Context, c agent.Call[agentproto.DBQueryPayload]) (agentproto.DBQueryResult, error) {
	pl, secrets := c.Payload, c.Secrets
	q, err := checkQuery(pl)
	if err != nil {
		return agentproto.DBQueryResult{}, err
	}
	conn, ranAs, notices, err := queryConn(ctx, pl, secrets)
	if err != nil {
		return agentproto.DBQueryResult{}, err
	}
	defer conn.Close()
	res, err := conn.Query(ctx, q)
	if res != nil {
		res.RanAs = ranAs
		if len(notices) > 0 {
			res.Notices = append(notices, res.Notices...)
		}
	}
	return value(res, err)
}

// checkQuery checks a db.query payload and fills its defaults.
func checkQuery(pl agentproto.DBQueryPayload) (engine.Query, error) {
	q := engine.Query{SQL: pl.SQL, ReadOnly: pl.ReadOnly, MaxRows: pl.MaxRows, Timeout: time.Duration(pl.TimeoutMS) * time.Millisecond}
	if q.SQL == "" {
		return q, errors.New("invalid db.query payload: no sql")
	}
	if q.MaxRows == 0 {
		q.MaxRows = engine.DefaultMaxRows
	}
	if q.MaxRows < 1 || q.MaxRows > engine.MaxRowsLimit {
		return q, fmt.Errorf("invalid db.query payload: max_rows %d (1 to %d)", pl.MaxRows, engine.MaxRowsLimit)
	}
	if q.Timeout == 0 {
		q.Timeout = engine.DefaultTimeout
	}
	if q.Timeout < 0 || q.Timeout > engine.MaxTimeout {
		return q, fmt.Errorf("invalid db.query payload: timeout_ms %d (up to %d)", pl.TimeoutMS, engine.MaxTimeout.Milliseconds())
	}
	return q, nil
}

// runExplore runs db.explore.
func (Executors) runExplore(ctx context.Context, c agent.Call[agentproto.DBExplorePayload]) (agentproto.DBExploreResult, error) {
	pl, secrets := c.Payload, c.Secrets
	conn, err := sqlConnect(ctx, pl.Target, secrets, pl.Database)
	if err != nil {
		return agentproto.DBExploreResult{}, err
	}
	defer conn.Close()
	return value(conn.Explore(ctx, pl))
}

// sqlConnect connects to a SQL engine; a key-value one is refused before
// any connection is made.
func sqlConnect(ctx context.Context, target agentproto.DBTarget, secrets map[string]string, database string) (engine.SQLConn, error) {
	if agentproto.EngineKind(target.Engine) != agentproto.EngineKindSQL {
		return nil, fmt.Errorf("%s is not a SQL engine: it has no query console or explorer (use db.kv)", target.Engine)
	}
	conn, err := connect(ctx, target, secrets, database)
	if err != nil {
		return nil, err
	}
	return conn.(engine.SQLConn), nil
}

// runKV runs db.kv.
func (Executors) runKV(ctx context.Context, c agent.Call[agentproto.DBKVPayload]) (agentproto.DBKVResult, error) {
	pl, secrets := c.Payload, c.Secrets
	if agentproto.EngineKind(pl.Target.Engine) != agentproto.EngineKindKV {
		return agentproto.DBKVResult{}, fmt.Errorf("%s is not a key-value engine: db.kv works on redis and valkey", pl.Target.Engine)
	}
	conn, err := connect(ctx, pl.Target, secrets, "")
	if err != nil {
		return agentproto.DBKVResult{}, err
	}
	defer conn.Close()
	return value(conn.(engine.KVConn).KV(ctx, pl))
}

// queryConn connects for a db.query and says as which login. A read-only
// statement with a reader login runs as that login, so that the engine
// itself refuses what a read-only transaction lets a superuser do
// (COPY … TO PROGRAM, pg_terminate_backend, SET GLOBAL, SHUTDOWN). When
// the reader cannot sign in (it does not exist yet, or its password is
// not the one the control plane derives), it is made, or its password
// reset, as the target's login. An engine without a read-only role, or a
// target login that may not make one, runs the statement as the target's
// login in a read-only transaction, with a notice saying why.
func queryConn(ctx context.Context, pl agentproto.DBQueryPayload, secrets map[string]string) (engine.SQLConn, string, []string, error) {
	pw := secrets[agentproto.SecretDBReaderPassword]
	if !pl.ReadOnly || pl.Reader == "" || pw == "" {
		c, err := sqlConnect(ctx, pl.Target, secrets, pl.Database)
		return c, pl.Target.Username, nil, err
	}
	reader := pl.Target
	reader.Username = pl.Reader
	readerSecrets := map[string]string{agentproto.SecretDBPassword: pw}
	if c, err := sqlConnect(ctx, reader, readerSecrets, pl.Database); err == nil {
		return c, pl.Reader, nil, nil
	}
	admin, err := sqlConnect(ctx, pl.Target, secrets, pl.Database)
	if err != nil {
		return nil, "", nil, err
	}
	fallback := func(why string) (engine.SQLConn, string, []string, error) {
		return admin, pl.Target.Username, []string{fmt.Sprintf("NOTICE: ran as %s in a read-only transaction: %s",
			pl.Target.Username, why)}, nil
	}
	made, err := engine.EnsureReader(ctx, admin, pl.Reader, pw)
	switch {
	case err != nil:
		return fallback(fmt.Sprintf("the read-only login %s could not be made: %v", pl.Reader, err))
	case !made:
		return fallback("this engine version has no read-only role")
	}
	c, err := sqlConnect(ctx, reader, readerSecrets, pl.Database)
	if err != nil {
		return fallback(fmt.Sprintf("the read-only login %s cannot sign in: %v", pl.Reader, err))
	}
	admin.Close()
	return c, pl.Reader, nil, nil
}
