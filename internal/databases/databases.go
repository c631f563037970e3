// Package databases owns database instances on the control plane: the
// engines Capstan knows (PostgreSQL, MySQL, MariaDB, Redis, Valkey) with
// the container image of each version, external instances registered by
// address, their logins, and the jobs that reach them (db.connect,
// db.query, db.explore, db.kv).
//
// The agent on an instance's server is the one that connects to it; the
// control plane never does. An external instance is registered in state
// checking with a db.connect job; the job's completion hook makes it ready
// (with the version the engine reports) or unreachable (with the engine's
// own error text). Only a ready instance takes queries, explore and
// key-value calls. A new TLS setting tests the connection again.
//
// Passwords are secrets: sealed at rest, bound to their login's id, handed
// to the agent only through a job's secrets (agentproto.SecretDBPassword),
// and shown only to administrators by the audited connection read. They
// never appear in payloads, logs, audit entries or any other view.
//
// An instance refers to its server: a server with instances cannot be
// deleted (the store refuses with a conflict) until its instances are.
package databases

import (
	"context"
	"time"
)

// IDPrefix prefixes instance ids; CredentialIDPrefix prefixes login ids.
const (
	IDPrefix           = "db"
	CredentialIDPrefix = "dbc"
)

// Instance states.
const (
	// StateChecking: a db.connect job tests the connection.
	StateChecking = "checking"
	// StateReady: the last test connected; the instance takes queries.
	StateReady = "ready"
	// StateUnreachable: the last test failed; LastError says why. A new
	// TLS setting (PUT …/tls) tests again.
	StateUnreachable = "unreachable"
)

// Access levels of a login.
const (
	// AccessAdmin is the login an instance was registered with (or that
	// Capstan created it with): whatever the engine grants it.
	AccessAdmin = "admin"
)

// Instance is a database instance as stored.
type Instance struct {
	ID       string
	Name     string
	ServerID string
	Engine   string
	// Version is the engine's version as Capstan lists it (a major, e.g.
	// "16" or "10.11"); for an external instance it comes from the version
	// the engine reported, and is "" until the first successful check.
	Version string
	Managed bool
	// Host and Port are how the server's agent reaches the instance.
	Host     string
	Port     int
	Database string // the initial database; "" for key-value engines
	TLSMode  string
	CA       string // PEM; "" for the system's roots
	State    string
	// LastError is the engine's error of the last failed check; "" otherwise.
	LastError string
	// ServerVersion is what the engine reported of itself at the last
	// successful check.
	ServerVersion string
	// CheckJobID is the latest db.connect job.
	CheckJobID string
	CreatedBy  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Credential is a login of an instance as stored.
type Credential struct {
	ID         string
	InstanceID string
	Username   string
	Database   string
	Access     string
	// SealedPassword is the password sealed with the secret key, bound to
	// the credential's id (see passwordContext).
	SealedPassword string
	// State is LoginReady, LoginCreating or LoginDropping; JobID is the
	// job of creating or dropping.
	State string
	JobID string
	// KeyPattern is the key glob of a key-value login.
	KeyPattern string
	// RotateJobID is the db.user.rotate job of a rotation under way.
	RotateJobID string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// CheckResult is the outcome of a db.connect job.
type CheckResult struct {
	State         string // StateReady or StateUnreachable
	Version       string // with StateReady
	ServerVersion string // with StateReady
	LastError     string // with StateUnreachable
}

// Store persists instances and their logins.
type Store interface {
	// InsertDatabaseInstance stores an instance with its first login. A
	// name in use is fault.Conflict "name-taken"; a server that does not
	// exist is fault.NotFound.
	InsertDatabaseInstance(ctx context.Context, inst Instance, login Credential) error
	DatabaseInstance(ctx context.Context, id string) (Instance, error)
	// ListDatabaseInstances returns every instance by name.
	ListDatabaseInstances(ctx context.Context) ([]Instance, error)
	// DatabaseCredentials returns the logins of an instance, oldest first;
	// instanceID "" means every instance's.
	DatabaseCredentials(ctx context.Context, instanceID string) ([]Credential, error)
	// RecheckDatabaseInstance sets an external instance's TLS settings and
	// starts a check by jobID (state checking). fault.NotFound if there is
	// no such instance, fault.Conflict "managed-instance" if it is managed.
	RecheckDatabaseInstance(ctx context.Context, id, tlsMode, ca, jobID string, now time.Time) error
	// FinishDatabaseCheck records the outcome of the check jobID if it is
	// still the instance's latest check and the instance is checking; false
	// otherwise (a newer check started, the outcome was recorded already,
	// or the instance is gone).
	FinishDatabaseCheck(ctx context.Context, id, jobID string, r CheckResult, now time.Time) (bool, error)
	// DeleteDatabaseInstance deletes an instance and its logins.
	DeleteDatabaseInstance(ctx context.Context, id string) error
	LoginStore
	AttachmentStore
	ArtifactStore
	// ManagedStore holds the operations of managed instances.
	ManagedStore
	// MetricsStore holds the instances' metric samples.
	MetricsStore
}

// passwordContext binds a sealed password to its login.
func passwordContext(credentialID string) string {
	return "database_credentials.password:" + credentialID
}
