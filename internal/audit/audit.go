// Package audit owns the append-only audit log: who did what, to what, when
// (UTC) and from where. Entries never hold secrets or tokens; callers put only
// identifiers and non-secret facts into Details.
package audit

import (
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
)

// Actor types.
const (
	ActorUser   = "user"
	ActorAgent  = "agent"
	ActorSystem = "system"
)

// Actions recorded by the control plane. New actions are added at the end of
// their group; names are stable because clients filter on them.
const (
	LoginSucceeded        = "auth.login.succeeded"
	LoginFailed           = "auth.login.failed"
	SecondFactorFailed    = "auth.2fa.failed"
	RefreshReused         = "auth.refresh.reused"
	Logout                = "auth.logout"
	SessionRevoked        = "auth.session.revoked" // a user ended one of their sessions
	UserCreated           = "user.created"
	UserDisabled          = "user.disabled"
	UserTOTPReset         = "user.2fa.reset"
	UserEnabled           = "user.enabled"
	UserRoleChanged       = "user.role_changed"
	UserDeleted           = "user.deleted"
	UserUnlocked          = "user.unlocked" // an administrator lifted strangers' sign-in delay
	UserInvited           = "user.invited"
	InvitationRevoked     = "user.invitation_revoked"
	InvitationAccepted    = "user.invitation_accepted" // the invitee's account was created
	PasswordChanged       = "user.password.changed"
	PasswordChangeRefused = "user.password.refused" // wrong current password or code
	RecoveryKitDownloaded = "platform.recovery_kit.downloaded"
	RecoveryKitRefused    = "platform.recovery_kit.refused"
	TokenCreated          = "token.created"
	TokenRevoked          = "token.revoked"
	TokenNewAddress       = "token.new_address"  // a token was used from an address other than its last one
	TokenSecretsRead      = "token.secrets_read" // a token read with its read:secrets scope
)

// Actor is who performed an action.
type Actor struct {
	Type  string `json:"type" enum:"user,agent,system"`
	ID    string `json:"id"`
	Email string `json:"email,omitempty"`
	// TokenID and TokenName name the API token a user acted through.
	TokenID   string `json:"token_id,omitempty"`
	TokenName string `json:"token_name,omitempty"`
}

// Caller is who asks for an operation and from where: the actor, the
// client's address and user agent, and the session the request came with
// (empty for tokens, agents and the control plane itself). Every operation
// that changes something takes one, and its audit entry is made from it.
type Caller struct {
	Actor     Actor
	IP        string
	UserAgent string
	SessionID string
}

// System is the caller of the work the control plane starts by itself
// (schedules, reapers, completion hooks).
var System = Caller{Actor: Actor{Type: ActorSystem}}

// Entry returns the audit entry of c performing action on target.
func (c Caller) Entry(action string, target Target, details map[string]any) Entry {
	return Entry{Actor: c.Actor, Action: action, Target: target, IP: c.IP, UserAgent: c.UserAgent, Details: details}
}

// Target is what an action was performed on. Both fields may be empty.
type Target struct {
	Type string `json:"type,omitempty"`
	ID   string `json:"id,omitempty"`
}

// Entry is one audit record.
type Entry struct {
	ID        string         `json:"id"`
	At        time.Time      `json:"at"`
	Actor     Actor          `json:"actor"`
	Action    string         `json:"action"`
	Target    Target         `json:"target"`
	IP        string         `json:"ip"`
	UserAgent string         `json:"user_agent"`
	Details   map[string]any `json:"details"`
}

// Query selects entries, newest first.
type Query struct {
	Limit int
	// BeforeID, when set, returns only entries older than this id.
	BeforeID string
	// Action matches exactly, or every action under a prefix when it ends
	// in ".*" ("auth.*").
	Action string
	// Actor, when set, is an actor's id or a user's e-mail address.
	Actor string
	// TargetType and TargetID, when set, match the target exactly.
	TargetType, TargetID string
	// Since and Until, when not zero, bound the entries' times: at or
	// after Since, before Until.
	Since, Until time.Time
}

// Filter selects the entries a page lists; the zero Filter selects every
// entry.
type Filter struct {
	Action               string
	Actor                string
	TargetType, TargetID string
	Since, Until         time.Time
}

// Store persists entries.
type Store interface {
	AppendAudit(ctx context.Context, e Entry) error
	ListAudit(ctx context.Context, q Query) ([]Entry, error)
}

// Log records and lists audit entries.
type Log struct {
	store Store
	now   func() time.Time
}

// NewLog returns a Log writing to store, with now as its clock.
func NewLog(store Store, now func() time.Time) *Log {
	return &Log{store: store, now: now}
}

// Record appends the entry of c performing action on target.
func (l *Log) Record(ctx context.Context, c Caller, action string, target Target, details map[string]any) error {
	return l.Append(ctx, c.Entry(action, target, details))
}

// Append appends an entry, filling in its id and time.
func (l *Log) Append(ctx context.Context, e Entry) error {
	at := l.now().UTC()
	e.ID = ids.NewAt(ids.Audit, at)
	e.At = at
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	return l.store.AppendAudit(ctx, e)
}

// Page limits.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

var actionPattern = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*(\.\*)?$`)

// List returns one page of entries, newest first, and the cursor for the
// next page ("" when there is none). before is a cursor from a previous page.
func (l *Log) List(ctx context.Context, limit int, before, action string) ([]Entry, string, error) {
	return l.Search(ctx, limit, before, Filter{Action: action})
}

var (
	actorPattern  = regexp.MustCompile(`^[A-Za-z0-9_.@+-]{1,254}$`)
	targetPattern = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)
)

// Search is List with a filter: by action, actor (id or e-mail), target
// and time.
func (l *Log) Search(ctx context.Context, limit int, before string, f Filter) ([]Entry, string, error) {
	action := f.Action
	var errs fault.Fields
	if limit == 0 {
		limit = DefaultLimit
	}
	if limit < 1 || limit > MaxLimit {
		errs.Add("limit", "must be between 1 and %d", MaxLimit)
	}
	if f.Actor != "" && !actorPattern.MatchString(f.Actor) {
		errs.Add("actor", "must be an actor id or an e-mail address")
	}
	if f.TargetType != "" && !targetPattern.MatchString(f.TargetType) {
		errs.Add("target_type", "must be an object type such as server or application")
	}
	if f.TargetID != "" && !targetPattern.MatchString(f.TargetID) {
		errs.Add("target_id", "must be an object id")
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		errs.Add("until", "must be later than since")
	}
	q := Query{Limit: limit, Action: action, Actor: f.Actor, TargetType: f.TargetType, TargetID: f.TargetID,
		Since: f.Since, Until: f.Until}
	if before != "" {
		id, ok := decodeCursor(before)
		if !ok {
			errs.Add("before", "is not a cursor returned by this endpoint")
		}
		q.BeforeID = id
	}
	if action != "" && (len(action) > 100 || !actionPattern.MatchString(action)) {
		errs.Add("action", "must be an action name such as auth.login.failed, or a prefix such as auth.*")
	}
	if err := errs.Err(); err != nil {
		return nil, "", err
	}
	q.Limit = limit + 1 // one more tells whether there is a next page
	entries, err := l.store.ListAudit(ctx, q)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(entries) > limit {
		entries = entries[:limit]
		next = encodeCursor(entries[limit-1].ID)
	}
	return entries, next, nil
}

func encodeCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("a1:" + id))
}

var auditIDPattern = regexp.MustCompile(`^` + ids.Audit + `_[0-9a-hjkmnp-tv-z]{26}$`)

func decodeCursor(c string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !strings.HasPrefix(string(b), "a1:") {
		return "", false
	}
	id := strings.TrimPrefix(string(b), "a1:")
	return id, auditIDPattern.MatchString(id)
}
