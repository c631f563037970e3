package databases

import (
	"context"
	"fmt"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// ConsoleReader is the read-only login the query console's read-only
// statements run as: the agent makes it on the instance (PostgreSQL 14+:
// pg_read_all_data; MySQL/MariaDB: SELECT and SHOW VIEW on every
// database), with a password derived from the control plane's key for
// the instance.
const ConsoleReader = "capstan_console_ro"

// QueryRequest is a query console call. Nil pointers take the defaults.
type QueryRequest struct {
	SQL            string
	Database       string
	ReadOnly       *bool
	MaxRows        *int
	TimeoutSeconds *int
}

// Query queues db.query on a ready SQL instance.
func (s *Service) Query(ctx context.Context, c audit.Caller, id string, q QueryRequest) (jobs.Job, error) {
	var errs fault.Fields
	switch {
	case strings.TrimSpace(q.SQL) == "":
		errs.Add("sql", "is required")
	case len(q.SQL) > MaxSQLLen:
		errs.Add("sql", "must be at most %d bytes", MaxSQLLen)
	case strings.ContainsRune(q.SQL, 0):
		errs.Add("sql", "must not contain NUL")
	}
	if p := textProblem(q.Database, MaxDatabaseLen); p != "" {
		errs.Add("database", "%s", p)
	}
	readOnly, maxRows, timeout := true, DefaultMaxRows, DefaultTimeoutSeconds
	if q.ReadOnly != nil {
		readOnly = *q.ReadOnly
	}
	if q.MaxRows != nil {
		if maxRows = *q.MaxRows; maxRows < MinMaxRows || maxRows > MaxMaxRows {
			errs.Add("max_rows", "must be an integer between %d and %d", MinMaxRows, MaxMaxRows)
		}
	}
	if q.TimeoutSeconds != nil {
		if timeout = *q.TimeoutSeconds; timeout < MinTimeoutSeconds || timeout > MaxTimeoutSeconds {
			errs.Add("timeout_seconds", "must be an integer between %d and %d", MinTimeoutSeconds, MaxTimeoutSeconds)
		}
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindSQL, "query")
	if err != nil {
		return jobs.Job{}, err
	}
	pl := agentproto.DBQueryPayload{Target: target(inst, cred), Database: q.Database,
		SQL: q.SQL, ReadOnly: readOnly, MaxRows: maxRows, TimeoutMS: timeout * 1000}
	sec := map[string]string{agentproto.SecretDBPassword: password}
	if readOnly {
		pl.Reader = ConsoleReader
		sec[agentproto.SecretDBReaderPassword] = s.key.DerivedPassword("db-console-reader:" + inst.ID)
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: inst.ServerID, Work: jobs.Of(agentproto.DBQuery, pl),
		Secrets: sec, CreatedBy: c.Actor.ID})
	if err != nil {
		return jobs.Job{}, err
	}
	// The statement is not recorded: it may carry secrets of its own.
	return j, s.audit.Record(ctx, c, ActionQueryQueued, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "readonly": readOnly,
		"database": q.Database})
}

// ExploreRequest is an explore call.
type ExploreRequest struct {
	What     string
	Database string
	Schema   string
	Table    string
}

// Explore queues db.explore on a ready SQL instance.
func (s *Service) Explore(ctx context.Context, actorID, id string, q ExploreRequest) (jobs.Job, error) {
	var errs fault.Fields
	perTable := q.What == agentproto.ExploreTables || q.What == agentproto.ExploreColumns
	switch q.What {
	case agentproto.ExploreDatabases, agentproto.ExploreUsers, agentproto.ExploreStats, agentproto.ExploreTables, agentproto.ExploreColumns:
	case "":
		errs.Add("what", "is required: databases, users, stats, tables or columns")
	default:
		errs.Add("what", "must be databases, users, stats, tables or columns")
	}
	for _, f := range []struct{ name, v string }{{"database", q.Database}, {"schema", q.Schema}, {"table", q.Table}} {
		if f.v == "" {
			continue
		}
		if p := textProblem(f.v, MaxDatabaseLen); p != "" {
			errs.Add(f.name, "%s", p)
		} else if q.What != "" && !perTable {
			errs.Add(f.name, "applies only to tables and columns")
		}
	}
	if q.What == agentproto.ExploreColumns && q.Table == "" {
		errs.Add("table", "is required for columns")
	} else if q.What == agentproto.ExploreTables && q.Table != "" {
		errs.Add("table", "applies only to columns")
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindSQL, "explore")
	if err != nil {
		return jobs.Job{}, err
	}
	if q.Schema != "" && inst.Engine != agentproto.EnginePostgres {
		return jobs.Job{}, fault.Invalidf("schema", "applies only to PostgreSQL; on %s a schema is a database", inst.Engine)
	}
	return s.enqueue(ctx, inst, jobs.Of(agentproto.DBExplore, agentproto.DBExplorePayload{Target: target(inst, cred), What: q.What,
		Database: q.Database, Schema: q.Schema, Table: q.Table}), password, actorID)
}

// KVRequest is a key-value browser call. Nil pointers take the defaults.
type KVRequest struct {
	Action   string
	DB       *int
	Cursor   string
	Match    string
	Count    *int
	Key      string
	MaxItems *int
	MaxBytes *int
	Keys     []string
}

// KV queues db.kv on a ready key-value instance.
func (s *Service) KV(ctx context.Context, c audit.Caller, id string, q KVRequest) (jobs.Job, error) {
	var errs fault.Fields
	p := agentproto.DBKVPayload{Action: q.Action}
	bounded := func(field string, v *int, def, lo, hi int) int {
		if v == nil {
			return def
		}
		if *v < lo || *v > hi {
			errs.Add(field, "must be an integer between %d and %d", lo, hi)
		}
		return *v
	}
	p.DB = bounded("db", q.DB, 0, 0, MaxKVDB)
	switch q.Action {
	case agentproto.KVInfo, agentproto.KVACLList:
	case agentproto.KVScan:
		if strings.Trim(q.Cursor, "0123456789") != "" || len(q.Cursor) > 20 {
			errs.Add("cursor", "must be the cursor a previous scan returned (digits), or empty to start")
		}
		if len(q.Match) > MaxKVKeyLen {
			errs.Add("match", "must be at most %d bytes", MaxKVKeyLen)
		}
		p.Cursor, p.Match = q.Cursor, q.Match
		p.Count = bounded("count", q.Count, DefaultKVCount, 1, MaxKVCount)
	case agentproto.KVGet:
		if q.Key == "" {
			errs.Add("key", "is required")
		} else if len(q.Key) > MaxKVKeyLen {
			errs.Add("key", "must be at most %d bytes", MaxKVKeyLen)
		}
		p.Key = q.Key
		p.MaxItems = bounded("max_items", q.MaxItems, DefaultKVMaxItems, 1, MaxKVMaxItems)
		p.MaxBytes = bounded("max_bytes", q.MaxBytes, DefaultKVMaxBytes, 1, MaxKVMaxBytes)
	case agentproto.KVDelete:
		if len(q.Keys) == 0 {
			errs.Add("keys", "is required: the keys to delete, explicitly")
		} else if len(q.Keys) > MaxKVDeleteKeys {
			errs.Add("keys", "at most %d keys per call", MaxKVDeleteKeys)
		}
		for i, k := range q.Keys {
			if k == "" || len(k) > MaxKVKeyLen {
				errs.Add(fmt.Sprintf("keys[%d]", i), "must be 1 to %d bytes", MaxKVKeyLen)
			}
		}
		p.Keys = q.Keys
	case "":
		errs.Add("action", "is required: info, scan, get, delete or acl_list")
	default:
		errs.Add("action", "must be info, scan, get, delete or acl_list")
	}
	if q.Action != agentproto.KVDelete && len(q.Keys) > 0 {
		errs.Add("keys", "applies only to delete")
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindKV, "kv")
	if err != nil {
		return jobs.Job{}, err
	}
	p.Target = target(inst, cred)
	j, err := s.enqueue(ctx, inst, jobs.Of(agentproto.DBKV, p), password, c.Actor.ID)
	if err != nil {
		return jobs.Job{}, err
	}
	// Keys are not recorded: they may be data.
	return j, s.audit.Record(ctx, c, ActionKVQueued, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "action": q.Action, "keys": len(q.Keys)})
}
