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

// Challenge is a pending second-factor step after a correct password.
type Challenge struct {
	IDHash     string
	UserID     string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	Failures   int
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
	UsedAt    *time.Time // set when it was exchanged; a second use is reuse
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
}

// Store persists accounts, challenges, sessions and tokens.
type Store interface {
	CreateAccount(ctx context.Context, a Account) error
	AccountByEmail(ctx context.Context, email string) (Account, error)
	AccountByID(ctx context.Context, id string) (Account, error)
	ListUsers(ctx context.Context) ([]User, error)
	// SetTOTPSecret replaces the sealed secret and resets the replay guard.
	SetTOTPSecret(ctx context.Context, userID, sealed string, now time.Time) error
	// DisableUser marks the user disabled and revokes all its sessions.
	DisableUser(ctx context.Context, userID string, now time.Time) error
	// AdvanceTOTPStep records step as used if it is newer than the last
	// used step; it reports false when it is not (a replay).
	AdvanceTOTPStep(ctx context.Context, userID string, step int64) (bool, error)

	CreateChallenge(ctx context.Context, c Challenge) error
	ChallengeByHash(ctx context.Context, hash string) (Challenge, error)
	// FailChallenge counts one wrong code and returns the new count.
	FailChallenge(ctx context.Context, hash string) (int, error)
	// ConsumeChallenge marks the challenge used; false if it already was.
	ConsumeChallenge(ctx context.Context, hash string, now time.Time) (bool, error)

	CreateSession(ctx context.Context, s Session, r RefreshToken, a AccessToken) error
	RefreshTokenByHash(ctx context.Context, hash string) (RefreshToken, Session, error)
	// RotateRefresh marks oldHash used and stores its successor and a new
	// access token, touching the session; false if oldHash was already used.
	RotateRefresh(ctx context.Context, oldHash string, next RefreshToken, access AccessToken, now time.Time) (bool, error)
	RevokeSession(ctx context.Context, sessionID, reason string, now time.Time) error
	// Principal resolves a valid access token (not expired at now, not
	// revoked, session live, user enabled); fault.Unauthenticated otherwise.
	Principal(ctx context.Context, accessHash string, now time.Time) (Principal, error)
}
