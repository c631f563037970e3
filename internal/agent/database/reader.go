package database

import (
	"context"
	"fmt"
	"strconv"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// queryConn connects for a db.query and says as which login. A read-only
// statement with a reader login runs as that login, so that the engine
// itself refuses what a read-only transaction lets a superuser do
// (COPY … TO PROGRAM, pg_terminate_backend, SET GLOBAL, SHUTDOWN). When
// the reader cannot sign in (it does not exist yet, or its password is
// not the one the control plane derives), it is made, or its password
// reset, as the target's login. An engine without a read-only role, or a
// target login that may not make one, runs the statement as the target's
// login in a read-only transaction, with a notice saying why.
func queryConn(ctx context.Context, pl agentproto.DBQueryPayload, secrets map[string]string) (SQLConn, string, []string, error) {
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
	fallback := func(why string) (SQLConn, string, []string, error) {
		return admin, pl.Target.Username, []string{fmt.Sprintf("NOTICE: ran as %s in a read-only transaction: %s",
			pl.Target.Username, why)}, nil
	}
	made, err := ensureReader(ctx, admin, pl.Reader, pw)
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

// ensureReader makes name a login that reads every database and changes
// nothing, with password pw, as c's login. It returns false, changing
// nothing, when the engine has no such role (PostgreSQL before 14).
func ensureReader(ctx context.Context, c SQLConn, name, pw string) (bool, error) {
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
