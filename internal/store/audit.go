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
	where, args := []string{"1 = 1"}, []any{}
	if q.BeforeID != "" {
		where, args = append(where, "id < ?"), append(args, q.BeforeID)
	}
	switch {
	case strings.HasSuffix(q.Action, ".*"):
		// Prefix match by comparing the leading characters: exact in every
		// collation, and free of LIKE wildcards.
		prefix := strings.TrimSuffix(q.Action, "*")
		where, args = append(where, "SUBSTR(action, 1, ?) = ?"), append(args, len(prefix), prefix)
	case q.Action != "":
		where, args = append(where, "action = ?"), append(args, q.Action)
	}
	if q.Actor != "" {
		where, args = append(where, "(actor_id = ? OR actor_email = ?)"), append(args, q.Actor, q.Actor)
	}
	if q.TargetType != "" {
		where, args = append(where, "target_type = ?"), append(args, q.TargetType)
	}
	if q.TargetID != "" {
		where, args = append(where, "target_id = ?"), append(args, q.TargetID)
	}
	if !q.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, ms(q.Since))
	}
	if !q.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, ms(q.Until))
	}
	args = append(args, q.Limit)
	var rows []auditRow
	err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT id, at, actor_type, actor_id, actor_email, actor_token_id, actor_token_name, action, target_type, target_id, ip, user_agent, details
		FROM audit_log WHERE `+strings.Join(where, " AND ")+` ORDER BY id DESC LIMIT ?`), args...)
	if err != nil {
		return nil, err
	}
	out := make([]audit.Entry, len(rows))
	for i, r := range rows {
		e := audit.Entry{ID: r.ID, At: fromMS(r.At), Actor: audit.Actor{Type: r.ActorType, ID: r.ActorID, Email: r.ActorEmail,
			TokenID: r.TokenID, TokenName: r.TokenName},
			Action: r.Action, Target: audit.Target{Type: r.TargetType, ID: r.TargetID}, IP: r.IP, UserAgent: r.UserAgent}
		if err := json.Unmarshal([]byte(r.Details), &e.Details); err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}
