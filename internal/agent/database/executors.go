package database

import (
	"context"
	"encoding/json"
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
	r.Register(agentproto.JobDBConnect, e.Connect())
	r.Register(agentproto.JobDBQuery, e.Query())
	r.Register(agentproto.JobDBExplore, e.Explore())
	r.Register(agentproto.JobDBKV, e.KV())
	e.registerAdmin(r)
}

// run decodes the job's payload into pl and runs fn; an error of fn
// becomes the job's error with its DBFailure as data.
func run[P any](job agentproto.Job, pl *P, fn func() (any, error)) (any, any, error) {
	if len(job.Payload) == 0 || string(job.Payload) == "null" {
		return failed(fmt.Errorf("invalid %s payload: missing", job.Type))
	}
	if err := json.Unmarshal(job.Payload, pl); err != nil {
		return failed(fmt.Errorf("invalid %s payload: %w", job.Type, err))
	}
	data, err := fn()
	if err != nil {
		return failed(err)
	}
	return data, nil, nil
}

func failed(err error) (any, any, error) {
	f := Failure(err)
	return f, nil, errors.New(f.Error.Message)
}

// connect opens the connection of a job to target, in database ("":
// the target's), with the password of the job's secrets.
func connect(ctx context.Context, target agentproto.DBTarget, secrets map[string]string, database string) (Conn, error) {
	return Connect(ctx, target, secrets[agentproto.SecretDBPassword], database)
}

// Connect is the executor of db.connect: it connects, authenticates and
// reports the server's version and whether TLS is used.
func (Executors) Connect() agent.Executor {
	return agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, secrets map[string]string, events agent.EventSink) (any, any, error) {
		var pl agentproto.DBConnectPayload
		return run(job, &pl, func() (any, error) {
			conn, err := connect(ctx, pl.Target, secrets, "")
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			res := agentproto.DBConnectResult{ServerVersion: conn.ServerVersion(), TLS: conn.TLS()}
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("connected to %s %s (tls: %t)", pl.Target.Engine, res.ServerVersion, res.TLS), nil)
			return res, nil
		})
	})
}

// Query is the executor of db.query.
func (Executors) Query() agent.Executor {
	return agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, secrets map[string]string, _ agent.EventSink) (any, any, error) {
		var pl agentproto.DBQueryPayload
		return run(job, &pl, func() (any, error) {
			q, err := checkQuery(pl)
			if err != nil {
				return nil, err
			}
			conn, ranAs, notices, err := queryConn(ctx, pl, secrets)
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			res, err := conn.Query(ctx, q)
			if res != nil {
				res.RanAs = ranAs
				if len(notices) > 0 {
					res.Notices = append(notices, res.Notices...)
				}
			}
			return res, err
		})
	})
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

// Explore is the executor of db.explore.
func (Executors) Explore() agent.Executor {
	return agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, secrets map[string]string, _ agent.EventSink) (any, any, error) {
		var pl agentproto.DBExplorePayload
		return run(job, &pl, func() (any, error) {
			conn, err := sqlConnect(ctx, pl.Target, secrets, pl.Database)
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			return conn.Explore(ctx, pl)
		})
	})
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

// KV is the executor of db.kv.
func (Executors) KV() agent.Executor {
	return agent.ExecutorFunc(func(ctx context.Context, job agentproto.Job, secrets map[string]string, _ agent.EventSink) (any, any, error) {
		var pl agentproto.DBKVPayload
		return run(job, &pl, func() (any, error) {
			if agentproto.EngineKind(pl.Target.Engine) != agentproto.EngineKindKV {
				return nil, fmt.Errorf("%s is not a key-value engine: db.kv works on redis and valkey", pl.Target.Engine)
			}
			conn, err := connect(ctx, pl.Target, secrets, "")
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			return conn.(KVConn).KV(ctx, pl)
		})
	})
}
