package engine

import (
	"context"
	"fmt"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// catalog is what a SQL engine's connection tells of its server and of
// the database it is in, for db.explore. Names given by the job reach the
// engine only as query parameters.
type catalog interface {
	databases(ctx context.Context) ([]agentproto.DBDatabaseInfo, error)
	users(ctx context.Context) ([]agentproto.DBUserInfo, error)
	stats(ctx context.Context) (*agentproto.DBStats, error)
	// tables and columns take the schema; an engine whose schema is its
	// database (MySQL/MariaDB) ignores it.
	tables(ctx context.Context, schema string) ([]agentproto.DBTableInfo, error)
	columns(ctx context.Context, schema, table string) ([]agentproto.DBColumnInfo, error)
}

// explore answers p from c: the list p.What names.
func explore(ctx context.Context, c catalog, p agentproto.DBExplorePayload) (*agentproto.DBExploreResult, error) {
	res := &agentproto.DBExploreResult{What: p.What}
	var err error
	switch p.What {
	case agentproto.ExploreDatabases:
		res.Databases, err = c.databases(ctx)
	case agentproto.ExploreUsers:
		res.Users, err = c.users(ctx)
	case agentproto.ExploreStats:
		res.Stats, err = c.stats(ctx)
	case agentproto.ExploreTables:
		res.Tables, err = c.tables(ctx, p.Schema)
	case agentproto.ExploreColumns:
		res.Columns, err = c.columns(ctx, p.Schema, p.Table)
	default:
		return nil, fmt.Errorf("unknown explore %q", p.What)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}
