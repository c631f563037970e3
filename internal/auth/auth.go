// Package auth owns accounts and sign-in: argon2id passwords, TOTP second
// factor, short-lived opaque access tokens, rotating refresh tokens grouped
// in session families, and throttling of failed attempts. Tokens are only
// ever stored as hashes; TOTP secrets are stored sealed with the secret key.
//
// It does not know HTTP: cookies, headers and status codes are the HTTP
// layer's business.
package auth

import (
	"context"
	"time"
)

// User is an account as the API shows it.
type User struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	Admin     bool      `json:"admin"`
	Disabled  bool      `json:"disabled"`
	CreatedAt time.Time `json:"created_at"`
	// LastSignInAt is the user's latest sign-in of the sessions kept;
	// set by ListUsers only.
	LastSignInAt *time.Time `json:"last_sign_in_at,omitempty"`
}

// Account is a user with its credentials, as stored.
type Account struct {
	User
	PasswordHash string
	// TOTPSecret is sealed with the secret key, bound to the user id.
	TOTPSecret string
	// TOTPLastStep is the last accepted TOTP time step; codes of this step or
	// earlier are refused (replay guard).
	TOTPLastStep int64
	DisabledAt   *time.Time
	UpdatedAt    time.Time
}

// Device is a browser or client that completed a sign-in to an account:
// it holds a device cookie whose hash is stored here. Sign-ins from a
// known device have a failure budget of their own and are not held back
// by strangers' failures on the account (OWASP's "device cookies").
type Device struct {
	Hash       string
	UserID     string
	CreatedAt  time.Time
	LastUsedAt time.Time
	ExpiresAt  time.Time
	RevokedAt  *time.Time
}

// Challenge is a pending second-factor step after a correct password.
type Challenge struct {
	IDHash     string
	UserID     string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	Failures   int        // wrong codes, and codes being checked
	ConsumedAt *time.Time // nil until a correct code used it
}

// Session is a refresh-token family: every refresh token and access token
// issued from one sign-in. Revoking the session revokes them all.
type Session struct {
	ID         string
	UserID     string
	CreatedAt  time.Time
	LastUsedAt time.Time
	ExpiresAt  time.Time // absolute end of the session
	RevokedAt  *time.Time
	IP         string
	UserAgent  string
}

// RefreshToken is one link of a session's rotation chain.
type RefreshToken struct {
	Hash      string
	SessionID string
	CreatedAt time.Time
	// UsedAt is set when it was first exchanged; another use within
	// RefreshGrace of it is a concurrent refresh, a later one is reuse.
	UsedAt *time.Time
}

// AccessToken is a bearer token for the API.
type AccessToken struct {
	Hash      string
	SessionID string
	UserID    string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Principal is the authenticated caller of a request.
type Principal struct {
	User      User
	SessionID string
	TokenHash string
	ExpiresAt time.Time
	// Token is the API token the caller presented; nil for a session.
	Token *APIToken
}

// Store persists accounts, challenges, sessions, tokens and sign-in
// throttles.
type Store interface {
	Throttles
	InvitationStore
	TokenStore

	CreateAccount(ctx context.Context, a Account) error
	AccountByEmail(ctx context.Context, email string) (Account, error)
	AccountByID(ctx context.Context, id string) (Account, error)
	ListUsers(ctx context.Context) ([]User, error)
	// SetTOTPSecret replaces the sealed secret and resets the replay guard.
	SetTOTPSecret(ctx context.Context, userID, sealed string, now time.Time) error
	// DisableUser marks the user disabled and revokes all its sessions.
	DisableUser(ctx context.Context, userID string, now time.Time) error
	// SetUserAccess changes a user's role and whether it is disabled (nil:
	// unchanged), refusing to leave no enabled administrator (409
	// last-admin); disabling revokes its sessions and devices.
	SetUserAccess(ctx context.Context, userID string, admin, disabled *bool, now time.Time) (User, error)
	// DeleteUser deletes a user and what is its own (sessions, devices,
	// inbox), refusing the last enabled administrator (409 last-admin).
	DeleteUser(ctx context.Context, userID string) (User, error)
	// AdvanceTOTPStep records step as used if it is newer than the last
	// used step; it reports false when it is not (a replay).
	AdvanceTOTPStep(ctx context.Context, userID string, step int64) (bool, error)

	CreateChallenge(ctx context.Context, c Challenge) error
	ChallengeByHash(ctx context.Context, hash string) (Challenge, error)
	// TakeChallengeAttempt counts one code attempt before the code is
	// checked, if the challenge is unused, unexpired at now and has fewer
	// than max failures; false (nothing counted) otherwise.
	TakeChallengeAttempt(ctx context.Context, hash string, max int, now time.Time) (bool, error)
	// ConsumeChallenge marks the challenge used and takes back the attempt
	// of the code that was right; false if it already was used.
	ConsumeChallenge(ctx context.Context, hash string, now time.Time) (bool, error)

	// SetPassword replaces the account's password hash.
	SetPassword(ctx context.Context, userID, hash string, now time.Time) error

	CreateDevice(ctx context.Context, d Device) error
	DeviceByHash(ctx context.Context, hash string) (Device, error)
	// TouchDevice records a completed sign-in from a live device and moves
	// its expiry to expires.
	TouchDevice(ctx context.Context, hash string, now, expires time.Time) error
	// RevokeDevices revokes every live device of the user except keep
	// ("" keeps none).
	RevokeDevices(ctx context.Context, userID, keep string, now time.Time) error

	CreateSession(ctx context.Context, s Session, r RefreshToken, a AccessToken) error
	RefreshTokenByHash(ctx context.Context, hash string) (RefreshToken, Session, error)
	// RotateRefresh marks oldHash used and stores its successor and a new
	// access token, touching the session; false if oldHash was first used
	// at or before graceSince (a token used after it may be exchanged
	// again, for a concurrent refresh).
	RotateRefresh(ctx context.Context, oldHash string, next RefreshToken, access AccessToken, graceSince, now time.Time) (bool, error)
	RevokeSession(ctx context.Context, sessionID, reason string, now time.Time) error
	// RevokeUserSession revokes one live session of the user; false if the
	// user has no such live session (another user's session included).
	RevokeUserSession(ctx context.Context, userID, sessionID, reason string, now time.Time) (bool, error)
	// RevokeUserSessions revokes every live session of the user except
	// keep ("" keeps none) and returns how many it revoked.
	RevokeUserSessions(ctx context.Context, userID, keep, reason string, now time.Time) (int, error)
	// ListSessions returns the user's live sessions at now, newest first.
	ListSessions(ctx context.Context, userID string, now time.Time) ([]Session, error)
	// EndedSessions returns those of ids that have ended at now: revoked,
	// past their absolute end, or of a disabled user.
	EndedSessions(ctx context.Context, ids []string, now time.Time) ([]string, error)
	// Principal resolves a valid access token (not expired at now, not
	// revoked, session live, user enabled); fault.Unauthenticated otherwise.
	Principal(ctx context.Context, accessHash string, now time.Time) (Principal, error)
}
