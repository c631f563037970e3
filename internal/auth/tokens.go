package auth

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
)

// Scopes of API tokens. What a token may do is what its scopes allow
// and its owner's role allows, at the moment of use.
const (
	ScopeRead        = "read"         // what a member reads
	ScopeReadSecrets = "read:secrets" // environment values, connection details, job output; audited on every use
	ScopeDeploy      = "deploy"       // deploy, roll back and cancel deployments
	ScopeOperate     = "operate"      // server, service, container and database actions, backups, queries
	ScopeWrite       = "write"        // every change an administrator makes but users, tokens and the recovery kit
	ScopeAdmin       = "admin"        // everything a token may do
)

// Scopes lists every scope, narrowest first.
var Scopes = []string{ScopeRead, ScopeReadSecrets, ScopeDeploy, ScopeOperate, ScopeWrite, ScopeAdmin}

// implied is what each scope allows besides itself: every scope reads,
// write covers deploy and operate, admin covers everything.
var implied = map[string][]string{
	ScopeRead:        nil,
	ScopeReadSecrets: {ScopeRead},
	ScopeDeploy:      {ScopeRead},
	ScopeOperate:     {ScopeRead},
	ScopeWrite:       {ScopeRead, ScopeDeploy, ScopeOperate},
	ScopeAdmin:       {ScopeRead, ScopeReadSecrets, ScopeDeploy, ScopeOperate, ScopeWrite},
}

// Resource kinds a token may be narrowed to: "app:ID", "server:ID",
// "db:ID" and "server-tag:TAG".
const (
	ResourceApp       = "app"
	ResourceServer    = "server"
	ResourceDatabase  = "db"
	ResourceServerTag = "server-tag"
)

// Token limits.
const (
	TokenDefaultTTL   = 90 * 24 * time.Hour
	TokenMaxDays      = 365
	MaxTokensPerUser  = 100
	MaxTokenResources = 100
	tokenPrefix       = "cpt"
	TokenIDPrefix     = "tok"
)

// TokenTouchEvery is how old a token's recorded last use may get before
// a use from the same address records it again.
const TokenTouchEvery = time.Minute

// Problem codes of tokens.
const (
	CodeTokenLimit      = "token-limit"
	CodeSessionRequired = "session-required" // the operation is not for tokens
)

// APIToken is a credential for automation. Its secret is only ever
// stored as a hash and shown once, at creation.
type APIToken struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	UserID     string     `json:"user_id" doc:"The owner: the token never does more than this user's role allows"`
	UserEmail  string     `json:"user_email"`
	Scopes     []string   `json:"scopes"`
	Resources  []string   `json:"resources" doc:"What the token is narrowed to (app:ID, server:ID, db:ID, server-tag:TAG); empty: everything its scopes allow"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty" doc:"Absent: the token does not expire"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	LastUsedIP string     `json:"last_used_ip,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`

	Hash string `json:"-"`
}

// NewToken is what a token is made from.
type NewToken struct {
	Name      string
	Scopes    []string
	Resources []string
	// ExpiresInDays is 1 to 365; 0 means the default (90).
	ExpiresInDays int
	// NoExpiry makes a token that does not expire: administrators only,
	// and never together with ExpiresInDays.
	NoExpiry bool
}

// CreatedToken is a new token with its secret, which is never shown again.
type CreatedToken struct {
	APIToken
	Token string `json:"token" doc:"The token (cpt_…): shown only now"`
}

// TokenStore persists API tokens.
type TokenStore interface {
	// CreateAPIToken stores a token, refusing one more than max live
	// tokens of its owner (409 token-limit), atomically.
	CreateAPIToken(ctx context.Context, t APIToken, max int, now time.Time) error
	// APITokens lists the tokens of userID ("" for everyone's), newest
	// first, revoked and expired ones included.
	APITokens(ctx context.Context, userID string) ([]APIToken, error)
	// RevokeAPIToken revokes a live token of userID ("" for anyone's);
	// not found if there is none.
	RevokeAPIToken(ctx context.Context, id, userID string, now time.Time) (APIToken, error)
	// TokenPrincipal resolves a live token of an enabled user.
	TokenPrincipal(ctx context.Context, hash string, now time.Time) (Principal, error)
	// TokenPrincipalByID is TokenPrincipal by the token's id.
	TokenPrincipalByID(ctx context.Context, id string, now time.Time) (Principal, error)
	// TouchAPIToken records a use from ip at now. It reports true for the
	// one use that finds the token last used from another address.
	TouchAPIToken(ctx context.Context, id, ip string, now time.Time) (bool, error)
}

// Allows reports whether the caller may act with scope: a session by its
// user's role (an administrator may do everything, a member read), a
// token by its scopes within its owner's role at the moment of use.
func (p Principal) Allows(scope string) bool {
	if !p.User.Admin && scope != ScopeRead {
		return false
	}
	if p.Token == nil {
		return true
	}
	for _, s := range p.Token.Scopes {
		if s == scope || slices.Contains(implied[s], scope) {
			return true
		}
	}
	return false
}

var (
	tokenNameRE = regexp.MustCompile(`^[\p{L}\p{N}][\p{L}\p{N} ._:/@()-]{0,63}$`)
	resourceRE  = regexp.MustCompile(`^(app|server|db):[a-z]{2,5}_[A-Za-z0-9]{1,40}$|^server-tag:[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// ValidResource reports whether r has the form of a token's resource.
func ValidResource(r string) bool { return resourceRE.MatchString(r) }

// ParseResource splits "kind:value".
func ParseResource(r string) (kind, value string) {
	kind, value, _ = strings.Cut(r, ":")
	return kind, value
}

// CreateToken makes an API token for the signed-in user p. Only a
// session may call it: a token cannot make tokens.
func (s *Service) CreateToken(ctx context.Context, c audit.Caller, p Principal, n NewToken) (CreatedToken, error) {
	if p.Token != nil {
		return CreatedToken{}, fault.Forbiddenf(CodeSessionRequired, "Tokens are made from a signed-in session, not with a token.")
	}
	n.Name = strings.TrimSpace(n.Name)
	if !tokenNameRE.MatchString(n.Name) {
		return CreatedToken{}, fault.Invalidf("body.name", "The name is 1 to 64 letters, digits, spaces or ._:/@()- and starts with a letter or digit.")
	}
	if len(n.Scopes) == 0 {
		return CreatedToken{}, fault.Invalidf("body.scopes", "Name at least one scope: %s.", strings.Join(Scopes, ", "))
	}
	scopes := make([]string, 0, len(n.Scopes))
	for i, sc := range n.Scopes {
		if _, ok := implied[sc]; !ok {
			return CreatedToken{}, fault.Invalidf("body.scopes["+strconv.Itoa(i)+"]", "Unknown scope %q: one of %s.", sc, strings.Join(Scopes, ", "))
		}
		if slices.Contains(scopes, sc) {
			return CreatedToken{}, fault.Invalidf("body.scopes["+strconv.Itoa(i)+"]", "The scope %q is named twice.", sc)
		}
		if !p.User.Admin && sc != ScopeRead {
			return CreatedToken{}, fault.Invalidf("body.scopes["+strconv.Itoa(i)+"]", "A member's token can only read: the scope %q needs an administrator.", sc)
		}
		scopes = append(scopes, sc)
	}
	slices.SortFunc(scopes, func(a, b string) int { return slices.Index(Scopes, a) - slices.Index(Scopes, b) })
	if len(n.Resources) > MaxTokenResources {
		return CreatedToken{}, fault.Invalidf("body.resources", "At most %d resources.", MaxTokenResources)
	}
	resources := make([]string, 0, len(n.Resources))
	for i, r := range n.Resources {
		if !resourceRE.MatchString(r) {
			return CreatedToken{}, fault.Invalidf("body.resources["+strconv.Itoa(i)+"]",
				"%q is not a resource: app:ID, server:ID, db:ID or server-tag:TAG.", r)
		}
		if slices.Contains(resources, r) {
			return CreatedToken{}, fault.Invalidf("body.resources["+strconv.Itoa(i)+"]", "%q is named twice.", r)
		}
		resources = append(resources, r)
	}
	now := s.now()
	var expires *time.Time
	switch {
	case n.NoExpiry && n.ExpiresInDays != 0:
		return CreatedToken{}, fault.Invalidf("body.never_expires", "A token either expires after expires_in_days or never: not both.")
	case n.NoExpiry && !p.User.Admin:
		return CreatedToken{}, fault.Invalidf("body.never_expires", "Only an administrator may make a token that never expires.")
	case n.NoExpiry:
	case n.ExpiresInDays < 0 || n.ExpiresInDays > TokenMaxDays:
		return CreatedToken{}, fault.Invalidf("body.expires_in_days", "A token expires after 1 to %d days.", TokenMaxDays)
	default:
		ttl := TokenDefaultTTL
		if n.ExpiresInDays > 0 {
			ttl = time.Duration(n.ExpiresInDays) * 24 * time.Hour
		}
		e := now.Add(ttl)
		expires = &e
	}
	secret := ids.Token(tokenPrefix)
	t := APIToken{ID: ids.NewAt(TokenIDPrefix, now), Name: n.Name, UserID: p.User.ID, UserEmail: p.User.Email,
		Scopes: scopes, Resources: resources, CreatedAt: now, ExpiresAt: expires, Hash: ids.Hash(secret)}
	if err := s.store.CreateAPIToken(ctx, t, MaxTokensPerUser, now); err != nil {
		return CreatedToken{}, err
	}
	err := s.audit.Append(ctx, audit.Entry{Actor: userActor(p.User), Action: audit.TokenCreated, IP: c.IP, UserAgent: c.UserAgent,
		Target:  audit.Target{Type: "token", ID: t.ID},
		Details: map[string]any{"name": t.Name, "scopes": t.Scopes, "resources": t.Resources, "expires_at": t.ExpiresAt}})
	if err != nil {
		return CreatedToken{}, err
	}
	return CreatedToken{APIToken: t, Token: secret}, nil
}

// Tokens lists the tokens the signed-in user sees: an administrator
// everyone's, a member their own.
func (s *Service) Tokens(ctx context.Context, p Principal) ([]APIToken, error) {
	owner := p.User.ID
	if p.User.Admin {
		owner = ""
	}
	return s.store.APITokens(ctx, owner)
}

// RevokeToken revokes a token: a member their own, an administrator
// anyone's. It takes effect at the token's next use, on every replica.
func (s *Service) RevokeToken(ctx context.Context, c audit.Caller, p Principal, id string) (APIToken, error) {
	owner := p.User.ID
	if p.User.Admin {
		owner = ""
	}
	t, err := s.store.RevokeAPIToken(ctx, id, owner, s.now())
	if err != nil {
		return APIToken{}, err
	}
	err = s.audit.Append(ctx, audit.Entry{Actor: userActor(p.User), Action: audit.TokenRevoked, IP: c.IP, UserAgent: c.UserAgent,
		Target: audit.Target{Type: "token", ID: t.ID}, Details: map[string]any{"name": t.Name, "owner": t.UserEmail}})
	return t, err
}

// AuthenticateToken resolves an API token presented from c. A use from
// an address other than the token's last one is audited, once.
func (s *Service) AuthenticateToken(ctx context.Context, c audit.Caller, token string) (Principal, error) {
	if !IsAPIToken(token) || len(token) > 100 {
		return Principal{}, errBadToken
	}
	now := s.now()
	p, err := s.store.TokenPrincipal(ctx, ids.Hash(token), now)
	if fault.Is(err, fault.NotFound) || fault.Is(err, fault.Unauthenticated) {
		return Principal{}, errBadToken
	}
	if err != nil {
		return Principal{}, err
	}
	t := p.Token
	if t.LastUsedIP == c.IP && t.LastUsedAt != nil && now.Sub(*t.LastUsedAt) < TokenTouchEvery {
		return p, nil // recorded recently enough: no write
	}
	fresh, err := s.store.TouchAPIToken(ctx, t.ID, c.IP, now)
	if err != nil {
		return Principal{}, err
	}
	if fresh {
		err := s.audit.Append(ctx, audit.Entry{Actor: TokenActor(p), Action: audit.TokenNewAddress, IP: c.IP, UserAgent: c.UserAgent,
			Target: audit.Target{Type: "token", ID: p.Token.ID}, Details: map[string]any{"previous_ip": p.Token.LastUsedIP}})
		if err != nil {
			return Principal{}, err
		}
	}
	return p, nil
}

// TokenByID resolves a live token by its id (a stream ticket's), with
// its owner's role as it is now.
func (s *Service) TokenByID(ctx context.Context, id string) (Principal, error) {
	return s.store.TokenPrincipalByID(ctx, id, s.now())
}

// IsAPIToken reports whether a bearer credential is an API token (not a
// session's access token).
func IsAPIToken(token string) bool { return strings.HasPrefix(token, tokenPrefix+"_") }

// TokenActor is the audit actor of a principal: the user, and the token
// they act through if any.
func TokenActor(p Principal) audit.Actor {
	a := userActor(p.User)
	if p.Token != nil {
		a.TokenID, a.TokenName = p.Token.ID, p.Token.Name
	}
	return a
}

func userActor(u User) audit.Actor {
	return audit.Actor{Type: audit.ActorUser, ID: u.ID, Email: u.Email}
}
