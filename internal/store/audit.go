package store

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/capstan-dev/capstan/internal/audit"
)

var _ audit.Store = (*Store)(nil)

type auditRow struct {
	ID         string `db:"id"`
	At         int64  `db:"at"`
	ActorType  string `db:"actor_type"`
	ActorID    string `db:"actor_id"`
	ActorEmail string `db:"actor_email"`
	TokenID    string `db:"actor_token_id"`
	TokenName  string `db:"actor_token_name"`
	Action     string `db:"action"`
	TargetType string `db:"target_type"`
	TargetID   string `db:"target_id"`
	IP         string `db:"ip"`
	UserAgent  string `db:"user_agent"`
	Details    string `db:"details"`
}

// AppendAudit appends one entry to the audit log.
func (s *Store) AppendAudit(ctx context.Context, e audit.Entry) error {
	details, err := json.Marshal(e.Details)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, s.rebind(`INSERT INTO audit_log (id, at, actor_type, actor_id, actor_email, actor_token_id, actor_token_name,
		action, target_type, target_id, ip, user_agent, details)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		e.ID, ms(e.At), e.Actor.Type, e.Actor.ID, e.Actor.Email, e.Actor.TokenID, e.Actor.TokenName, e.Action, e.Target.Type, e.Target.ID, e.IP, truncate(e.UserAgent, 512), string(details))
	return err
}

// ListAudit returns entries newest first.
func (s *Store) ListAudit(ctx context.Context, q audit.Query) ([]audit.Entry, error) {
	var c conds
	if q.BeforeID != "" {
		c.add("id < ?", q.BeforeID)
	}
	switch {
	case strings.HasSuffix(q.Action, ".*"):
		// Prefix match by comparing the leading characters: exact in every
		// collation, and free of LIKE wildcards.
		prefix := strings.TrimSuffix(q.Action, "*")
		c.add("SUBSTR(action, 1, ?) = ?", len(prefix), prefix)
	default:
		c.equal("action", q.Action)
	}
	if q.Actor != "" {
		c.add("(actor_id = ? OR actor_email = ?)", q.Actor, q.Actor)
	}
	c.equal("target_type", q.TargetType)
	c.equal("target_id", q.TargetID)
	if !q.Since.IsZero() {
		c.add("at >= ?", ms(q.Since))
	}
	if !q.Until.IsZero() {
		c.add("at < ?", ms(q.Until))
	}
	return selectAll(ctx, s.r, auditRow.entry, s.rebind(`SELECT id, at, actor_type, actor_id, actor_email, actor_token_id, actor_token_name, action, target_type, target_id, ip, user_agent, details
		FROM audit_log WHERE `+c.where()+` ORDER BY id DESC LIMIT ?`), append(c.args, q.Limit)...)
}

func (r auditRow) entry() (audit.Entry, error) {
	e := audit.Entry{ID: r.ID, At: fromMS(r.At), Actor: audit.Actor{Type: r.ActorType, ID: r.ActorID, Email: r.ActorEmail,
		TokenID: r.TokenID, TokenName: r.TokenName},
		Action: r.Action, Target: audit.Target{Type: r.TargetType, ID: r.TargetID}, IP: r.IP, UserAgent: r.UserAgent}
	err := json.Unmarshal([]byte(r.Details), &e.Details)
	return e, err
}
