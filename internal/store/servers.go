package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/servers"
)

var _ servers.Store = (*Store)(nil)

const serverColumns = `id, name, tags, status, facts, agent_version, enrolled_at, last_seen_at, revoked_at, created_at, updated_at`

type serverRow struct {
	ID           string        `db:"id"`
	Name         string        `db:"name"`
	Tags         string        `db:"tags"`
	Status       string        `db:"status"`
	Facts        string        `db:"facts"`
	AgentVersion string        `db:"agent_version"`
	EnrolledAt   sql.NullInt64 `db:"enrolled_at"`
	LastSeenAt   sql.NullInt64 `db:"last_seen_at"`
	RevokedAt    sql.NullInt64 `db:"revoked_at"`
	CreatedAt    int64         `db:"created_at"`
	UpdatedAt    int64         `db:"updated_at"`
}

func (r serverRow) server() (servers.Server, error) {
	s := servers.Server{ID: r.ID, Name: r.Name, Status: r.Status, AgentVersion: r.AgentVersion,
		EnrolledAt: nullMS(r.EnrolledAt), LastSeenAt: nullMS(r.LastSeenAt), RevokedAt: nullMS(r.RevokedAt),
		CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt)}
	if err := json.Unmarshal([]byte(r.Tags), &s.Tags); err != nil {
		return s, err
	}
	if r.Facts != "" && r.Facts != "{}" {
		s.Facts = &agentproto.Facts{}
		if err := json.Unmarshal([]byte(r.Facts), s.Facts); err != nil {
			return s, err
		}
	}
	return s, nil
}

// CreateServer stores a pending server.
func (s *Store) CreateServer(ctx context.Context, srv servers.Server, enrollHash string, expires time.Time) error {
	tags, err := json.Marshal(srv.Tags)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, s.rebind(`INSERT INTO servers (id, name, tags, status, enrollment_token_hash, enrollment_expires_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), srv.ID, srv.Name, string(tags), srv.Status, enrollHash, ms(expires), ms(srv.CreatedAt), ms(srv.UpdatedAt))
	if isUniqueViolation(err) {
		return fault.Conflictf("server-name-taken", "A server named %q exists.", srv.Name)
	}
	return err
}

func (s *Store) serverWhere(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) (servers.Server, error) {
	return getOne(ctx, q, serverRow.server, "server", s.rebind(`SELECT `+serverColumns+` FROM servers WHERE `+where), args...)
}

// ServerAgent returns a server's name, its agent's version and the job
// types the agent reported it runs.
func (s *Store) ServerAgent(ctx context.Context, id string) (name, version string, jobTypes []string, err error) {
	var row struct {
		Name         string `db:"name"`
		Facts        string `db:"facts"`
		AgentVersion string `db:"agent_version"`
	}
	err = s.r.GetContext(ctx, &row, s.rebind(`SELECT name, facts, agent_version FROM servers WHERE id = ?`), id)
	if notFound(err) {
		return "", "", nil, fault.NotFoundf("No such server.")
	}
	if err != nil {
		return "", "", nil, err
	}
	var f struct {
		JobTypes []string `json:"job_types"`
	}
	if row.Facts != "" {
		if err := json.Unmarshal([]byte(row.Facts), &f); err != nil {
			return "", "", nil, fmt.Errorf("server %s: reading its facts: %w", id, err)
		}
	}
	return row.Name, row.AgentVersion, f.JobTypes, nil
}

// Server returns a server.
func (s *Store) Server(ctx context.Context, id string) (servers.Server, error) {
	return s.serverWhere(ctx, s.r, "id = ?", id)
}

// ListServers returns every server, oldest first.
func (s *Store) ListServers(ctx context.Context) ([]servers.Server, error) {
	return selectAll(ctx, s.r, serverRow.server, `SELECT `+serverColumns+` FROM servers ORDER BY id`)
}

// ListServerStates lists every server with only what its presence needs:
// id, name, stored status and last heartbeat (tags and facts, most of a
// row, are left out). The presence check runs it every few seconds, and
// with the whole rows it read and decoded every server's facts each time.
func (s *Store) ListServerStates(ctx context.Context) ([]servers.Server, error) {
	var rows []struct {
		ID         string        `db:"id"`
		Name       string        `db:"name"`
		Status     string        `db:"status"`
		LastSeenAt sql.NullInt64 `db:"last_seen_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT id, name, status, last_seen_at FROM servers ORDER BY id`); err != nil {
		return nil, err
	}
	out := make([]servers.Server, len(rows))
	for i, r := range rows {
		out[i] = servers.Server{ID: r.ID, Name: r.Name, Status: r.Status, LastSeenAt: nullMS(r.LastSeenAt)}
	}
	return out, nil
}

// ReplaceEnrollment gives a pending server a new enrollment token.
func (s *Store) ReplaceEnrollment(ctx context.Context, id, enrollHash string, expires, now time.Time) (servers.Server, error) {
	var srv servers.Server
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		cur, err := s.serverWhere(ctx, tx, "id = ?", id)
		if err != nil {
			return err
		}
		if cur.Status != servers.Pending {
			return fault.Conflictf("server-already-enrolled", "The server is %s; only a server that has not enrolled gets a new enrollment token.", cur.Status)
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE servers SET enrollment_token_hash = ?, enrollment_expires_at = ?, updated_at = ? WHERE id = ?`),
			enrollHash, ms(expires), ms(now), id); err != nil {
			return err
		}
		srv, err = s.serverWhere(ctx, tx, "id = ?", id)
		return err
	})
	return srv, err
}

// RedeemEnrollment exchanges an enrollment token for an agent token, once.
func (s *Store) RedeemEnrollment(ctx context.Context, enrollHash, agentHash string, facts agentproto.Facts, now time.Time) (servers.Server, error) {
	var srv servers.Server
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE servers SET enrollment_token_hash = NULL, enrollment_expires_at = NULL,
			agent_token_hash = ?, status = 'online', facts = ?, agent_version = ?, enrolled_at = ?, last_seen_at = ?, updated_at = ?
			WHERE enrollment_token_hash = ? AND enrollment_expires_at > ? AND status = 'pending'`),
			agentHash, servers.RawFacts(&facts), facts.AgentVersion, ms(now), ms(now), ms(now), enrollHash, ms(now))
		if err := unlessNone(res, err, fault.Unauthenticatedf("invalid-enrollment-token", "The enrollment token is unknown, used or expired.")); err != nil {
			return err
		}
		srv, err = s.serverWhere(ctx, tx, "agent_token_hash = ?", agentHash)
		if err != nil {
			return err
		}
		// Enrolled is online: server.online is published only when it
		// comes back after going offline.
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO server_presence (server_id, online, changed_at) VALUES (?, 1, ?)`),
			srv.ID, ms(now)); err != nil {
			return err
		}
		return publishServerTx(ctx, tx, events.ServerEnrolled, srv, now)
	})
	if err == nil {
		s.published()
	}
	return srv, err
}

// ServerByAgentToken resolves an agent token to its server's ID and status.
func (s *Store) ServerByAgentToken(ctx context.Context, agentHash string) (servers.Server, bool, error) {
	var r struct {
		ID     string `db:"id"`
		Status string `db:"status"`
	}
	err := s.getR(ctx, &r, `SELECT id, status FROM servers WHERE agent_token_hash = ?`, agentHash)
	if err == nil {
		srv := servers.Server{ID: r.ID, Status: r.Status}
		return srv, srv.Status == servers.Revoked, nil
	}
	if !notFound(err) {
		return servers.Server{}, false, err
	}
	var serverID string
	err = s.r.GetContext(ctx, &serverID, s.rebind(`SELECT server_id FROM revoked_agent_tokens WHERE token_hash = ?`), agentHash)
	if notFound(err) {
		return servers.Server{}, false, fault.NotFoundf("No such agent token.")
	}
	if err != nil {
		return servers.Server{}, false, err
	}
	return servers.Server{ID: serverID, Status: servers.Revoked}, true, nil
}

// TouchServer records a heartbeat.
func (s *Store) TouchServer(ctx context.Context, id, agentVersion string, facts *agentproto.Facts, now time.Time) error {
	var err error
	if facts != nil {
		_, err = s.w.ExecContext(ctx, s.rebind(`UPDATE servers SET last_seen_at = ?, agent_version = ?, facts = ?, status = 'online' WHERE id = ? AND status != 'revoked'`),
			ms(now), agentVersion, servers.RawFacts(facts), id)
	} else {
		_, err = s.w.ExecContext(ctx, s.rebind(`UPDATE servers SET last_seen_at = ?, agent_version = ?, status = 'online' WHERE id = ? AND status != 'revoked'`),
			ms(now), agentVersion, id)
	}
	return err
}

// touchSQL records one heartbeat of a batch.
const touchSQL = `UPDATE servers SET last_seen_at = ?, agent_version = ?, status = 'online'
	WHERE id = ? AND status != 'revoked' AND (last_seen_at IS NULL OR last_seen_at < ?)`

// touchChunk is how many heartbeats one statement of TouchServers writes
// on PostgreSQL; on SQLite, where each is a statement of its own, one
// transaction writes touchChunkSQLite, so that the single writer is not
// held for more than a millisecond or two at a time.
const (
	touchChunk       = 250
	touchChunkSQLite = 100
)

// TouchServers records many heartbeats, in id order (so that concurrent
// batches of several control planes lock rows in the same order). A
// heartbeat older than the stored one, or of a revoked server, changes
// nothing.
func (s *Store) TouchServers(ctx context.Context, touches []servers.Touch) error {
	touches = slices.Clone(touches)
	slices.SortFunc(touches, func(a, b servers.Touch) int { return strings.Compare(a.ServerID, b.ServerID) })
	size := touchChunk
	if s.dialect == SQLite {
		size = touchChunkSQLite
	}
	for len(touches) > 0 {
		chunk := touches[:min(size, len(touches))]
		touches = touches[len(chunk):]
		var err error
		if s.dialect == Postgres {
			ids, versions, ats := make([]string, len(chunk)), make([]string, len(chunk)), make([]int64, len(chunk))
			for i, t := range chunk {
				ids[i], versions[i], ats[i] = t.ServerID, t.AgentVersion, ms(t.At)
			}
			_, err = s.w.ExecContext(ctx, `UPDATE servers SET last_seen_at = t.at, agent_version = t.version, status = 'online'
				FROM unnest($1::text[], $2::text[], $3::bigint[]) AS t(id, version, at)
				WHERE servers.id = t.id AND servers.status != 'revoked' AND (servers.last_seen_at IS NULL OR servers.last_seen_at < t.at)`,
				ids, versions, ats)
		} else {
			if err := s.prepareWrites(ctx, touchSQL); err != nil {
				return err
			}
			err = s.tx(ctx, func(tx *sqlx.Tx) error {
				for _, t := range chunk {
					if _, err := s.execIn(ctx, tx, touchSQL, ms(t.At), t.AgentVersion, t.ServerID, ms(t.At)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// publishServerTx publishes a server.* event in tx.
func publishServerTx(ctx context.Context, tx *sqlx.Tx, typ events.Type, srv servers.Server, now time.Time) error {
	ev, err := events.New(typ, events.Subject{Type: "server", ID: srv.ID},
		events.ServerPayload{ServerID: srv.ID, ServerName: srv.Name, LastSeenAt: srv.LastSeenAt}, now)
	if err != nil {
		return err
	}
	return publishTx(ctx, tx, ev)
}

// revokeServerTx revokes the agent credential of the server with this id,
// in tx. Revoking an enrolled server publishes server.revoked.
func (s *Store) revokeServerTx(ctx context.Context, tx *sqlx.Tx, id string, now time.Time) error {
	srv, err := s.serverWhere(ctx, tx, "id = ?", id)
	if err != nil {
		return err
	}
	if srv.HasAgent() {
		if err := publishServerTx(ctx, tx, events.ServerRevoked, srv, now); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO revoked_agent_tokens (token_hash, server_id, revoked_at)
		SELECT agent_token_hash, id, ? FROM servers WHERE id = ? AND agent_token_hash IS NOT NULL
		AND agent_token_hash NOT IN (SELECT token_hash FROM revoked_agent_tokens)`), ms(now), id); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE servers SET status = 'revoked', revoked_at = COALESCE(revoked_at, ?),
		enrollment_token_hash = NULL, enrollment_expires_at = NULL, updated_at = ? WHERE id = ?`), ms(now), ms(now), id)
	return err
}

// RevokeServer invalidates a server's agent token.
func (s *Store) RevokeServer(ctx context.Context, id string, now time.Time) (servers.Server, error) {
	var srv servers.Server
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if err := s.revokeServerTx(ctx, tx, id, now); err != nil {
			return err
		}
		var err error
		srv, err = s.serverWhere(ctx, tx, "id = ?", id)
		return err
	})
	if err == nil {
		s.published()
	}
	return srv, err
}

// DeleteServer revokes a server and deletes its record.
func (s *Store) DeleteServer(ctx context.Context, id string, now time.Time) error {
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if err := s.revokeServerTx(ctx, tx, id, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM servers WHERE id = ?`), id)
		if isForeignKeyViolation(err) {
			// Database instances refer to the server: they go first.
			return fault.Conflictf("server-has-databases", "Database instances are registered on this server; delete them first.")
		}
		return err
	})
	if err == nil {
		s.published()
	}
	return err
}
