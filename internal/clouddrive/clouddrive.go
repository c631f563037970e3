// Package clouddrive connects the control plane to a cloud drive that
// backups are stored in: the OAuth 2.0 sign-in (authorization code with
// PKCE, a state bound to the administrator's session and browser), the
// refresh token it yields, sealed at rest, and the short-lived access
// tokens minted from it for the agents that upload and read backups.
// Google Drive is the first provider: its OAuth endpoints and the Drive v3
// REST API, reached at configurable base URLs.
//
// The refresh token never leaves the control plane: it is not returned,
// logged or put in a job; agents get access tokens through job secrets.
package clouddrive

import (
	"context"
	"time"
)

// ProviderGoogle names Google Drive.
const ProviderGoogle = "google"

// Defaults of Google's endpoints.
const (
	DefaultAuthURL   = "https://accounts.google.com/o/oauth2/v2/auth"
	DefaultTokenURL  = "https://oauth2.googleapis.com/token"
	DefaultRevokeURL = "https://oauth2.googleapis.com/revoke"
	DefaultAPIURL    = "https://www.googleapis.com"
)

// Scope is the one OAuth scope asked for: files this application creates
// or opens, and nothing else of the account's drive.
const Scope = "https://www.googleapis.com/auth/drive.file"

// CallbackPath is where the provider sends the browser back after the
// consent screen, under the public URL: the OAuth redirect URI.
const CallbackPath = "/api/v1/backups/clouddrive/callback"

// BrowserCookie is the name of the cookie that binds a sign-in to the
// browser that started it ("__Secure-" is put in front of it when the
// public URL is https).
const BrowserCookie = "capstan_clouddrive"

// Lifetimes.
const (
	// StateTTL is how long a sign-in's state stays usable.
	StateTTL = 15 * time.Minute
	// TokenMargin is how long before its expiry a cached access token is
	// replaced: a caller has at least this long to use it.
	TokenMargin = 5 * time.Minute
)

// Connection is the connected drive as stored; the refresh token is
// sealed, bound to GrantID.
type Connection struct {
	GrantID            string
	Provider           string
	AccountEmail       string
	Scope              string
	SealedRefreshToken string
	ConnectedBy        string
	ConnectedAt        time.Time
}

// State is one sign-in's state as stored: its hash, the session and user
// that started it, the hash of the browser cookie set with it, and the
// sealed PKCE verifier.
type State struct {
	Hash           string
	SessionID      string
	UserID         string
	BrowserHash    string
	SealedVerifier string
	ExpiresAt      time.Time
}

// Store persists the connection and sign-in states.
type Store interface {
	// InsertCloudDriveState stores a sign-in state.
	InsertCloudDriveState(ctx context.Context, st State) error
	// UseCloudDriveState marks a state used and returns it, if it is
	// unused, unexpired at now, was set in the browser of browserHash, and
	// its session is still signed in as an enabled administrator; ok is
	// false otherwise and nothing changes. Expired states are deleted on
	// the way.
	UseCloudDriveState(ctx context.Context, hash, browserHash string, now time.Time) (State, bool, error)
	// InsertCloudDriveConnection stores the connection; fault.Conflict
	// "clouddrive-connected" when one is stored already.
	InsertCloudDriveConnection(ctx context.Context, c Connection) error
	// CloudDriveConnection returns the connection; fault.NotFound when
	// none is stored.
	CloudDriveConnection(ctx context.Context) (Connection, error)
	// UpdateCloudDriveRefreshToken replaces the sealed refresh token of
	// the grant; false when that grant is no longer the stored one.
	UpdateCloudDriveRefreshToken(ctx context.Context, grantID, sealed string) (bool, error)
	// DeleteCloudDriveConnection forgets the grant; false when it is not
	// the stored one.
	DeleteCloudDriveConnection(ctx context.Context, grantID string) (bool, error)
}
