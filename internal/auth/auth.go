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
	ID       string `json:"id"`
	Email    string `json:"email"`
	Admin    bool   `json:"admin"`
	Disabled bool   `json:"disabled"`
	// Locked is true when failed sign-in attempts locked the account; an
	// administrator lifts it with capstan user unlock.
	Locked    bool      `json:"locked"`
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
	// FailedSignIns counts failed credential checks in a row, from any
	// address, including checks under way; a completed sign-in resets it.
	FailedSignIns int
	LockedAt      *time.Time // nil unless LockAfterFailures locked it
	UpdatedAt     time.Time
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

// Store persists accounts, challenges, sessions, tokens and sign-in
// throttles.
type Store interface {
	Throttles

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
	// TakeChallengeAttempt counts one code attempt before the code is
	// checked, if the challenge is unused, unexpired at now and has fewer
	// than max failures; false (nothing counted) otherwise.
	TakeChallengeAttempt(ctx context.Context, hash string, max int, now time.Time) (bool, error)
	// ConsumeChallenge marks the challenge used and takes back the attempt
	// of the code that was right; false if it already was used.
	ConsumeChallenge(ctx context.Context, hash string, now time.Time) (bool, error)

	// TakeSignInAttempt counts one credential attempt against the account
	// before it is checked, if the account is not locked and has fewer
	// than ceiling failures in a row; it returns the new count, or false
	// (nothing counted) otherwise.
	TakeSignInAttempt(ctx context.Context, userID string, ceiling int) (n int, ok bool, err error)
	// ReturnSignInAttempt takes back an attempt whose credential was right
	// or never checked.
	ReturnSignInAttempt(ctx context.Context, userID string) error
	// ResetSignInFailures sets the failures in a row to zero after a
	// completed sign-in; a locked account stays as it is.
	ResetSignInFailures(ctx context.Context, userID string) error
	// LockAccount locks the account; false if it already was locked.
	LockAccount(ctx context.Context, userID string, now time.Time) (bool, error)
	// UnlockAccount lifts the lock and zeroes the failures; it reports
	// whether the account was locked (fault.NotFound if there is none).
	UnlockAccount(ctx context.Context, userID string, now time.Time) (bool, error)

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
