package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Executors are the executors of the database job types. A job that
// fails carries a DBFailure as its data: the engine's code, message and
// position, or the agent's own message.
type Executors struct{}

// Register adds the database job types to r.
func (e Executors) Register(r agent.Registry) {
	handle(r, agentproto.DBConnect, e.runConnect)
	handle(r, agentproto.DBQuery, e.runQuery)
	handle(r, agentproto.DBExplore, e.runExplore)
	handle(r, agentproto.DBKV, e.runKV)
	e.registerAdmin(r)
}

// handle registers h as the handler of t. A job that fails, an invalid
// payload's too, carries its DBFailure as data and the failure's message
// as its error; whatever else h returned is not sent.
func handle[P, R any](r agent.Registry, t agentproto.JobType[P, R], h func(context.Context, agent.Call[P]) (R, error)) {
	agent.Handle(r, t, h, agent.FailWith(dbFailure))
}

func dbFailure(err error) *agent.Failure {
	f := Failure(err)
	return &agent.Failure{Err: errors.New(f.Error.Message), Data: f}
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
func connect(ctx context.Context, target agentproto.DBTarget, secrets map[string]string, database string) (Conn, error) {
	return Connect(ctx, target, secrets[agentproto.SecretDBPassword], database)
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
func checkQuery(pl agentproto.DBQueryPayload) (Query, error) {
	q := Query{SQL: pl.SQL, ReadOnly: pl.ReadOnly, MaxRows: pl.MaxRows, Timeout: time.Duration(pl.TimeoutMS) * time.Millisecond}
	if q.SQL == "" {
		return q, errors.New("invalid db.query payload: no sql")
	}
	if q.MaxRows == 0 {
		q.MaxRows = DefaultMaxRows
	}
	if q.MaxRows < 1 || q.MaxRows > MaxRowsLimit {
		return q, fmt.Errorf("invalid db.query payload: max_rows %d (1 to %d)", pl.MaxRows, MaxRowsLimit)
	}
	if q.Timeout == 0 {
		q.Timeout = DefaultTimeout
	}
	if q.Timeout < 0 || q.Timeout > MaxTimeout {
		return q, fmt.Errorf("invalid db.query payload: timeout_ms %d (up to %d)", pl.TimeoutMS, MaxTimeout.Milliseconds())
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
func sqlConnect(ctx context.Context, target agentproto.DBTarget, secrets map[string]string, database string) (SQLConn, error) {
	if agentproto.EngineKind(target.Engine) != agentproto.EngineKindSQL {
		return nil, fmt.Errorf("%s is not a SQL engine: it has no query console or explorer (use db.kv)", target.Engine)
	}
	conn, err := connect(ctx, target, secrets, database)
	if err != nil {
		return nil, err
	}
	return conn.(SQLConn), nil
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
	return value(conn.(KVConn).KV(ctx, pl))
}
