package engine

import (
	"context"
	"fmt"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// RestoreAdmin makes, drops and swaps the databases of a restore.
type RestoreAdmin interface {
	Exists(ctx context.Context, name string) (bool, error)
	CreateDatabase(ctx context.Context, name, owner string) ([]string, error)
	DropDatabase(ctx context.Context, name string) ([]string, bool, error)
	// swap puts restored in target's place and target's content in old,
	// all at once.
	Swap(ctx context.Context, target, restored, old string) error
	// ServerVersion is what the engine reports of itself.
	ServerVersion() string
	Close()
}

// exists says whether a database exists.
func (c *postgresConn) Exists(ctx context.Context, name string) (bool, error) {
	var exists bool
	err := c.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	return exists, err
}

// swap renames target away and restored into its place, in one
// transaction, after ending the sessions connected to target; sessions
// that connect in between make it try again.
func (c *postgresConn) Swap(ctx context.Context, target, restored, old string) error {
	var err error
	for range 5 {
		if _, err = c.conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
			target); err != nil {
			return err
		}
		err = func() error {
			tx, err := c.conn.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
			if _, err := tx.Exec(ctx, "ALTER DATABASE "+pgIdent(target)+" RENAME TO "+pgIdent(old)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "ALTER DATABASE "+pgIdent(restored)+" RENAME TO "+pgIdent(target)); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}()
		if e, ok := pgError(err); !ok || e.Code != "55006" { // object_in_use: a session came back
			return err
		}
	}
	return err
}

// SQLManifest counts and checksums the tables of a database.
func SQLManifest(ctx context.Context, target agentproto.DBTarget, password, database string) (agentproto.BackupManifest, error) {
	c, err := Connect(ctx, target, password, database)
	if err != nil {
		return agentproto.BackupManifest{}, err
	}
	defer c.Close()
	switch c := c.(type) {
	case *postgresConn:
		return postgresManifest(ctx, c.conn)
	case *mysqlConn:
		return mysqlManifest(ctx, c, database)
	}
	return agentproto.BackupManifest{}, fmt.Errorf("%s has no SQL manifest", target.Engine)
}
