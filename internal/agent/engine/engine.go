// Package engine is how the agent speaks to database instances: it
// connects to PostgreSQL, MySQL/MariaDB and Redis/Valkey instances as a
// DBTarget says, and holds what each engine is asked: queries, catalogs,
// key reads, logins, samples, the snapshots and manifests of backups, and
// the command lines of the engines' dump and load tools. There is one
// driver per engine family (pgx, go-sql-driver/mysql, go-redis); each
// connection lives for one job. The console, managed instances, dumps,
// backups and metrics reach the engines through this package only.
//
// Rules every driver keeps:
//   - Read-only is enforced by the engine, in a read-only transaction,
//     never by looking at the SQL; a statement is sent on its own, so it
//     cannot end that transaction and go on writing.
//   - Identifiers a job names (database, schema, table) reach the engine
//     as parameters or in the connection handshake, never inside a
//     statement's text.
//   - Errors of the engine keep its own code, message and position
//     (EngineError); they end in a failed job's data as DBFailure.
//
// The package imports agentproto and the engines' client libraries, never
// server code.
package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Conn is a connection to an instance, open for one job.
type Conn interface {
	// ServerVersion is what the engine reports of itself.
	ServerVersion() string
	// TLS says whether the connection uses TLS.
	TLS() bool
	Close()
}

// SQLConn is a connection to a SQL engine.
type SQLConn interface {
	Conn
	Query(ctx context.Context, q Query) (*agentproto.DBQueryResult, error)
	Explore(ctx context.Context, p agentproto.DBExplorePayload) (*agentproto.DBExploreResult, error)
}

// KVConn is a connection to a key-value engine.
type KVConn interface {
	Conn
	KV(ctx context.Context, p agentproto.DBKVPayload) (*agentproto.DBKVResult, error)
}

// Query is a statement to run, with its limits already checked.
type Query struct {
	SQL      string
	ReadOnly bool
	// MaxRows is 1 to MaxRowsLimit.
	MaxRows int
	// Timeout is the statement timeout, above zero.
	Timeout time.Duration
}

// Limits of a query.
const (
	DefaultMaxRows = 100
	MaxRowsLimit   = 1000
	DefaultTimeout = 30 * time.Second
	MaxTimeout     = 5 * time.Minute
)

// ConnectTimeout bounds establishing a connection and authenticating.
const ConnectTimeout = 15 * time.Second

// Connect opens a connection to target's instance as target.Username
// with password. database overrides target.Database for SQL engines
// ("" keeps it); key-value engines ignore it.
func Connect(ctx context.Context, target agentproto.DBTarget, password, database string) (Conn, error) {
	if target.Host == "" || target.Port <= 0 || target.Port > 65535 {
		return nil, fmt.Errorf("invalid target: host %q port %d", target.Host, target.Port)
	}
	if database == "" {
		database = target.Database
	}
	tc, err := tlsConfig(target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	switch target.Engine {
	case agentproto.EnginePostgres:
		return connectPostgres(ctx, target, password, database, tc)
	case agentproto.EngineMySQL, agentproto.EngineMariaDB:
		return connectMySQL(ctx, target, password, database, tc)
	case agentproto.EngineRedis, agentproto.EngineValkey:
		return connectRedis(ctx, target, password, tc)
	}
	return nil, fmt.Errorf("unknown engine %q", target.Engine)
}

// address is host:port of target.
func address(t agentproto.DBTarget) string {
	return net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
}

// tlsConfig maps target's TLS mode, with PostgreSQL's sslmode meaning, to
// a client configuration; nil means no TLS.
func tlsConfig(t agentproto.DBTarget) (*tls.Config, error) {
	switch t.TLSMode {
	case "", agentproto.DBTLSDisable:
		return nil, nil
	case agentproto.DBTLSRequire:
		// Encrypted, the certificate not checked: sslmode=require.
		return &tls.Config{ServerName: t.Host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil
	case agentproto.DBTLSVerifyCA, agentproto.DBTLSVerifyFull:
	default:
		return nil, fmt.Errorf("unknown TLS mode %q", t.TLSMode)
	}
	roots, err := caPool(t.CA)
	if err != nil {
		return nil, err
	}
	if t.TLSMode == agentproto.DBTLSVerifyFull {
		return &tls.Config{ServerName: t.Host, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
	}
	// verify-ca: the chain must lead to the CA; the name is not checked.
	return &tls.Config{
		ServerName:         t.Host,
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}, nil
}

// caPool is the pool of the PEM bundle ca, or the system's roots when ca
// is empty.
func caPool(ca string) (*x509.CertPool, error) {
	if ca == "" {
		return x509.SystemCertPool()
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		return nil, errors.New("invalid CA: no PEM certificate in it")
	}
	return pool, nil
}

// EngineError is an error the engine returned, with its own code, message
// and position.
type EngineError struct {
	agentproto.DBError
}

func (e *EngineError) Error() string {
	if e.Code != "" {
		return e.Code + ": " + e.Message
	}
	return e.Message
}

// Failure is the DBFailure of err: the engine's code, message and
// position when err is the engine's, else its text.
func Failure(err error) agentproto.DBFailure {
	var ee *EngineError
	if errors.As(err, &ee) {
		return agentproto.DBFailure{Error: ee.DBError}
	}
	if e, ok := engineError(err); ok {
		return agentproto.DBFailure{Error: e.DBError}
	}
	return agentproto.DBFailure{Error: agentproto.DBError{Message: err.Error()}}
}

// engineError finds the engine's error in err, from any driver.
func engineError(err error) (*EngineError, bool) {
	if e, ok := pgError(err); ok {
		return e, true
	}
	if e, ok := mysqlError(err); ok {
		return e, true
	}
	if e, ok := redisError(err); ok {
		return e, true
	}
	return nil, false
}

// Handle registers h as the handler of t. A job that fails, an invalid
// payload's too, carries its DBFailure as data and the failure's message
// as its error; whatever else h returned is not sent.
func Handle[P, R any](r agent.Registry, t agentproto.JobType[P, R], h func(context.Context, agent.Call[P]) (R, error)) {
	agent.Handle(r, t, h, agent.FailWith(dbFailure))
}

func dbFailure(err error) *agent.Failure {
	f := Failure(err)
	return &agent.Failure{Err: errors.New(f.Error.Message), Data: f}
}

// rows are what pgx's and database/sql's query results have alike.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// collectRows reads every row into a T, whose fields gives the
// destinations of a row's columns; no rows is an empty slice.
func collectRows[T any](r rows, fields func(*T) []any) ([]T, error) {
	out := []T{}
	for r.Next() {
		var v T
		if err := r.Scan(fields(&v)...); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, r.Err()
}
