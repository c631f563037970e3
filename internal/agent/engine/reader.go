package engine

import (
	"context"
	"strconv"
)

// EnsureReader makes name a login that reads every database and changes
// nothing, with password pw, as c's login. It returns false, changing
// nothing, when the engine has no such role (PostgreSQL before 14).
func EnsureReader(ctx context.Context, c SQLConn, name, pw string) (bool, error) {
	switch c := c.(type) {
	case *postgresConn:
		var num string
		if err := c.conn.QueryRow(ctx, "SELECT current_setting('server_version_num')").Scan(&num); err != nil {
			return false, err
		}
		if n, _ := strconv.Atoi(num); n < 140000 {
			return false, nil
		}
		var exists bool
		if err := c.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
			return false, err
		}
		if !exists {
			// Another job making it at the same moment is fine: the ALTER
			// below then sets the same password.
			_ = c.pgFormatExec(ctx, "CREATE ROLE %I LOGIN", name)
		}
		if err := c.pgFormatExec(ctx, "ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD %L",
			name, pw); err != nil {
			return false, err
		}
		return true, c.exec(ctx, "GRANT pg_read_all_data TO "+pgIdent(name))
	case *mysqlConn:
		acct, err := c.myAccount(ctx, name)
		if err != nil {
			return false, err
		}
		lit, err := c.myLiteral(ctx, pw)
		if err != nil {
			return false, err
		}
		for _, stmt := range []string{"CREATE USER IF NOT EXISTS " + acct + " IDENTIFIED BY " + lit,
			"ALTER USER " + acct + " IDENTIFIED BY " + lit, "GRANT SELECT, SHOW VIEW ON *.* TO " + acct} {
			if _, err := c.conn.ExecContext(ctx, stmt); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	return false, nil
}
