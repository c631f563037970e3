// Package servers owns the fleet: enrollment of servers with one-time
// tokens, agent credentials, liveness, revocation, and validation of the
// actions that can be queued on a server.
package servers

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Status values of a server.
const (
	Pending = "pending" // enrollment created, agent not yet enrolled
	Online  = "online"  // agent heard from within 3 heartbeat intervals
	Offline = "offline" // enrolled, agent silent for longer
	Revoked = "revoked" // credential revoked; the agent has been told to stop
)

// Server is one managed host.
type Server struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Tags         []string          `json:"tags"`
	Status       string            `json:"status" enum:"pending,online,offline,revoked"`
	Facts        *agentproto.Facts `json:"facts" doc:"Host facts reported by the agent; null until enrolled"`
	AgentVersion string            `json:"agent_version,omitempty"`
	EnrolledAt   *time.Time        `json:"enrolled_at"`
	LastSeenAt   *time.Time        `json:"last_seen_at"`
	RevokedAt    *time.Time        `json:"revoked_at"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

// Store persists servers and their credentials.
type Store interface {
	// CreateServer stores a pending server with its enrollment token hash;
	// a taken name is fault.Conflict.
	CreateServer(ctx context.Context, s Server, enrollHash string, expires time.Time) error
	Server(ctx context.Context, id string) (Server, error)
	ListServers(ctx context.Context) ([]Server, error)
	ListServerStates(ctx context.Context) ([]Server, error)
	// ReplaceEnrollment sets a new enrollment token on a pending server;
	// fault.Conflict when the server is not pending.
	ReplaceEnrollment(ctx context.Context, id, enrollHash string, expires, now time.Time) (Server, error)
	// RedeemEnrollment exchanges a live enrollment token for the agent
	// token, once; fault.Unauthenticated if unknown, used or expired.
	RedeemEnrollment(ctx context.Context, enrollHash, agentHash string, facts agentproto.Facts, now time.Time) (Server, error)
	// ServerByAgentToken resolves an agent token to its server's ID and
	// status, the only fields it reads (it runs on every agent call the
	// token cache does not answer); revoked reports a token of a revoked
	// or deleted server. fault.NotFound when unknown.
	ServerByAgentToken(ctx context.Context, agentHash string) (srv Server, revoked bool, err error)
	// TouchServer records a heartbeat, and new facts when not nil.
	TouchServer(ctx context.Context, id, agentVersion string, facts *agentproto.Facts, now time.Time) error
	// TouchServers records many heartbeats at once. None moves a server's
	// last_seen_at back or touches a revoked server.
	TouchServers(ctx context.Context, touches []Touch) error
	// RevokeServer invalidates the agent token at once.
	RevokeServer(ctx context.Context, id string, now time.Time) (Server, error)
	// DeleteServer revokes and deletes the record.
	DeleteServer(ctx context.Context, id string, now time.Time) error
}

// rawFacts is the stored form of facts.
func rawFacts(f *agentproto.Facts) string {
	if f == nil {
		return "{}"
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// RawFacts marshals facts for storage ("{}" for nil).
func RawFacts(f *agentproto.Facts) string { return rawFacts(f) }
