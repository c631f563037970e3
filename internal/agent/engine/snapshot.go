package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Snapshot is the snapshot a backup's manifest is taken in,
// shared with its dump.
type Snapshot interface {
	// DumpCall makes call read the snapshot.
	DumpCall(call ToolCall) ToolCall
	// Watch wraps the dump's output, which tells when the dump has its
	// snapshot.
	Watch(w io.Writer) io.Writer
	// Manifest counts and checksums every table in the snapshot.
	Manifest(ctx context.Context) (agentproto.BackupManifest, error)
	// Close ends the snapshot; it may be called more than once.
	Close() error
}

// OpenSnapshot opens the snapshot of database that a backup's manifest
// and dump share.
func OpenSnapshot(ctx context.Context, target agentproto.DBTarget, password, database string) (Snapshot, error) {
	switch target.Engine {
	case agentproto.EnginePostgres:
		return pgSnapshotOf(ctx, target, password, database)
	case agentproto.EngineMySQL, agentproto.EngineMariaDB:
		return mysqlSnapshotOf(ctx, target, password, database)
	}
	return nil, fmt.Errorf("%s backups are not supported by this agent", target.Engine)
}

// pgSnapshot is a REPEATABLE READ transaction whose snapshot is exported
// for pg_dump --snapshot; it stays open until the dump ended.
type pgSnapshot struct {
	conn *postgresConn
	tx   pgx.Tx
	id   string
	done bool
}

func pgSnapshotOf(ctx context.Context, target agentproto.DBTarget, password, database string) (*pgSnapshot, error) {
	c, err := Connect(ctx, target, password, database)
	if err != nil {
		return nil, err
	}
	conn := c.(*postgresConn)
	tx, err := conn.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &pgSnapshot{conn: conn, tx: tx}
	if err := tx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&s.id); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *pgSnapshot) DumpCall(call ToolCall) ToolCall {
	call.Args = append(call.Args, "--snapshot="+s.id)
	return call
}

func (s *pgSnapshot) Watch(w io.Writer) io.Writer { return w }

// Close ends the transaction and the connection.
func (s *pgSnapshot) Close() error {
	if s.done {
		return nil
	}
	s.done = true
	err := s.tx.Commit(context.Background())
	s.conn.Close()
	return err
}

// manifest counts and checksums every table in the snapshot.
func (s *pgSnapshot) Manifest(ctx context.Context) (agentproto.BackupManifest, error) {
	return postgresManifest(ctx, s.tx)
}

// pgQuerier is a transaction or a connection.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// postgresManifest lists the ordinary tables outside the system schemas
// with their row counts and checksums.
func postgresManifest(ctx context.Context, q pgQuerier) (agentproto.BackupManifest, error) {
	m := agentproto.BackupManifest{Kind: agentproto.BackupManifestSQL, Tables: []agentproto.BackupTable{}}
	rows, err := q.Query(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		AND n.nspname NOT LIKE 'pg\_temp\_%' ORDER BY 1, 2`)
	if err != nil {
		return m, err
	}
	var names [][2]string
	for rows.Next() {
		var n [2]string
		if err := rows.Scan(&n[0], &n[1]); err != nil {
			rows.Close()
			return m, err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return m, err
	}
	for _, n := range names {
		t := agentproto.BackupTable{Name: n[0] + "." + n[1]}
		ident := pgx.Identifier{n[0], n[1]}.Sanitize()
		err := q.QueryRow(ctx, `SELECT count(*), coalesce(sum(('x' || substr(md5(t::text), 1, 16))::bit(64)::bigint::numeric), 0)::text
			FROM ONLY `+ident+` t`).Scan(&t.Rows, &t.Checksum)
		if err != nil {
			return m, fmt.Errorf("%s: %w", t.Name, err)
		}
		m.Tables = append(m.Tables, t)
	}
	return m, nil
}
