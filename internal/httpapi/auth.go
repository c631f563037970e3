package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/auth"
)

// cookieConfig decides the names and attributes of the sign-in cookies
// (the refresh cookie and the device cookie). Over HTTPS their names carry
// the __Host- prefix: browsers then insist on Secure, Path=/ and no
// Domain, so an app on a sibling subdomain cannot plant one. Over plain
// HTTP they are scoped to the endpoints that read them.
type cookieConfig struct {
	prefix string
	path   string
	secure bool
}

// Base names of the sign-in cookies.
const (
	refreshCookieBase = "capstan_refresh"
	deviceCookieBase  = "capstan_device"
)

// authCookiePath scopes the cookies to the endpoints that read them when
// the __Host- prefix does not force Path=/.
const authCookiePath = "/api/v1/auth"

func newCookieConfig(publicURL string) cookieConfig {
	u, err := url.Parse(publicURL)
	if err == nil && u.Scheme == "https" {
		return cookieConfig{prefix: "__Host-", path: "/", secure: true}
	}
	return cookieConfig{path: authCookiePath}
}

func (c cookieConfig) set(base, value string, expires time.Time) http.Cookie {
	return http.Cookie{Name: c.prefix + base, Value: value, Path: c.path, Expires: expires.UTC(),
		MaxAge: int(time.Until(expires).Seconds()), HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteStrictMode}
}

func (c cookieConfig) clear(base string) http.Cookie {
	return http.Cookie{Name: c.prefix + base, Value: "", Path: c.path, MaxAge: -1, HttpOnly: true,
		Secure: c.secure, SameSite: http.SameSiteStrictMode}
}

func (c cookieConfig) read(r *http.Request, base string) string {
	ck, err := r.Cookie(c.prefix + base)
	if err != nil {
		return ""
	}
	return ck.Value
}

type loginInput struct {
	Body struct {
		Email    string `json:"email" minLength:"1" maxLength:"254" doc:"Account e-mail address"`
		Password string `json:"password" minLength:"1" maxLength:"1024" doc:"Account password"`
	}
}

type loginOutput struct {
	Body struct {
		Status      string    `json:"status" enum:"two_factor_required"`
		ChallengeID string    `json:"challenge_id" doc:"Send it with the code to /api/v1/auth/2fa/verify"`
		Method      string    `json:"method" enum:"totp" doc:"Second-factor method the challenge expects"`
		ExpiresAt   time.Time `json:"expires_at" doc:"When the challenge expires (5 minutes)"`
	}
}

type verifyInput struct {
	Body struct {
		ChallengeID string `json:"challenge_id" minLength:"1" maxLength:"128"`
		Code        string `json:"code" pattern:"^[0-9]{6}$" doc:"Six-digit TOTP code from the authenticator app"`
	}
}

type tokenBody struct {
	Status      string    `json:"status" enum:"authenticated"`
	AccessToken string    `json:"access_token" doc:"Bearer token for Authorization headers"`
	TokenType   string    `json:"token_type" enum:"Bearer"`
	ExpiresIn   int       `json:"expires_in" doc:"Lifetime of the access token in seconds (900)"`
	User        auth.User `json:"user"`
}

type tokenOutput struct {
	SetCookie []http.Cookie `header:"Set-Cookie" doc:"The refresh cookie and, after a sign-in, the device cookie (capstan_refresh and capstan_device, HttpOnly, SameSite=Strict, Path=/api/v1/auth; __Host-capstan_refresh and __Host-capstan_device, also Secure with Path=/, when the public URL is https)"`
	Body      tokenBody
}

type refreshInput struct{}

type meOutput struct {
	Body struct {
		User auth.User `json:"user"`
		// SessionExpiresAt is when the current access token expires.
		AccessExpiresAt time.Time `json:"access_expires_at"`
	}
}

type logoutOutput struct {
	SetCookie http.Cookie `header:"Set-Cookie" doc:"Clears the refresh cookie (the device cookie stays: this device signed in before)"`
}

type sessionsOutput struct {
	Body struct {
		Sessions []auth.SessionInfo `json:"sessions" doc:"The caller's live sessions, newest first"`
	}
}

type sessionInput struct {
	ID string `path:"id" maxLength:"64" doc:"Session id from GET /api/v1/auth/sessions"`
}

type passwordInput struct {
	Body struct {
		CurrentPassword string `json:"current_password" minLength:"1" maxLength:"1024" doc:"The account's password now"`
		Code            string `json:"code" pattern:"^[0-9]{6}$" doc:"Six-digit TOTP code from the authenticator app"`
		NewPassword     string `json:"new_password" minLength:"1" maxLength:"1024" doc:"12 to 128 characters, not a commonly used password, not the e-mail address"`
	}
}

func (s *Server) tokens(t auth.Tokens) *tokenOutput {
	out := &tokenOutput{SetCookie: []http.Cookie{s.cookie.set(refreshCookieBase, t.RefreshToken, t.RefreshExpiresAt)}}
	if t.Device != "" {
		out.SetCookie = append(out.SetCookie, s.cookie.set(deviceCookieBase, t.Device, t.DeviceExpiresAt))
	}
	out.Body = tokenBody{Status: "authenticated", AccessToken: t.AccessToken, TokenType: "Bearer",
		ExpiresIn: int(auth.AccessTTL / time.Second), User: t.User}
	return out
}

func (s *Server) registerAuth() {
	tags := []string{"Authentication"}
	op(s, huma.Operation{
		OperationID: "login", Method: http.MethodPost, Path: "/api/v1/auth/login", Tags: tags,
		Summary: "Sign in, step 1: password",
		Description: "Checks the e-mail and password and starts a second-factor challenge. Unknown e-mail addresses get the same answers, throttles and timing as known ones. " +
			"From a device that completed a sign-in to the account before (its device cookie, set by /api/v1/auth/2fa/verify), failed attempts are throttled per device (10, then 1 a minute) and nothing else. " +
			"From any other client they are throttled per account and client address (5, then 1 a minute), per address (20, then 1 every 15 s) " +
			"and per account over all such clients (100, then 1 every 30 s), an IPv6 address counting as its /64: " +
			"429 `too-many-attempts` with Retry-After. Strangers' failures never hold back sign-ins from the account's known devices. " +
			"Attempts are counted before the password is checked, so parallel attempts get no more checks. " +
			"When too many password checks are waiting: 429 `sign-in-busy` with Retry-After.",
		Errors: []int{http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *loginInput) (*loginOutput, error) {
		res, err := s.deps.Auth.Login(ctx, clientOf(ctx), in.Body.Email, in.Body.Password, s.cookie.read(requestFrom(ctx), deviceCookieBase))
		if err != nil {
			return nil, err
		}
		out := &loginOutput{}
		out.Body.Status, out.Body.ChallengeID, out.Body.Method, out.Body.ExpiresAt = "two_factor_required", res.ChallengeID, "totp", res.ExpiresAt
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "verify-2fa", Method: http.MethodPost, Path: "/api/v1/auth/2fa/verify", Tags: tags,
		Summary: "Sign in, step 2: TOTP code",
		Description: "Checks the code of a challenge. A code is accepted once; a challenge expires after 5 minutes or 5 wrong codes " +
			"(counted before each code is checked, also for codes sent at once). Wrong codes count toward the same throttles as wrong passwords. " +
			"On success returns an access token and sets the refresh cookie and the device cookie (kept 180 days after the last sign-in with it), " +
			"which marks this client as one of the account's known devices at its next sign-in.",
		Errors: []int{http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *verifyInput) (*tokenOutput, error) {
		t, err := s.deps.Auth.Verify(ctx, clientOf(ctx), in.Body.ChallengeID, in.Body.Code, s.cookie.read(requestFrom(ctx), deviceCookieBase))
		if err != nil {
			return nil, err
		}
		return s.tokens(t), nil
	})

	op(s, huma.Operation{
		OperationID: "refresh", Method: http.MethodPost, Path: "/api/v1/auth/refresh", Tags: tags,
		Summary: "Exchange the refresh cookie for a new access token",
		Description: "Rotates the refresh cookie on every use. A refresh token presented again within 30 s of its first use " +
			"(two tabs refreshing at once) gets another new pair; presented later, it revokes its whole session (401 `refresh-token-reused`).",
	}, Public, func(ctx context.Context, _ *refreshInput) (*tokenOutput, error) {
		t, err := s.deps.Auth.Refresh(ctx, clientOf(ctx), s.cookie.read(requestFrom(ctx), refreshCookieBase))
		if err != nil {
			return nil, err
		}
		return s.tokens(t), nil
	})

	op(s, huma.Operation{
		OperationID: "logout", Method: http.MethodPost, Path: "/api/v1/auth/logout", Tags: tags,
		Summary:       "Sign out",
		Description:   "Revokes the caller's session: its access token and every refresh token of its family.",
		DefaultStatus: http.StatusNoContent,
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*logoutOutput, error) {
		if err := s.deps.Auth.Logout(ctx, clientOf(ctx), principal(ctx)); err != nil {
			return nil, err
		}
		s.sessions.poke()
		return &logoutOutput{SetCookie: s.cookie.clear(refreshCookieBase)}, nil
	})

	op(s, huma.Operation{
		OperationID: "me", Method: http.MethodGet, Path: "/api/v1/auth/me", Tags: tags,
		Summary: "The signed-in user",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*meOutput, error) {
		p := principal(ctx)
		out := &meOutput{}
		out.Body.User, out.Body.AccessExpiresAt = p.User, p.ExpiresAt
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "list-sessions", Method: http.MethodGet, Path: "/api/v1/auth/sessions", Tags: tags,
		Summary:     "The signed-in user's sessions",
		Description: "Every live session of the caller (one per completed sign-in), with where it signed in from; `current` marks the session of this request.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*sessionsOutput, error) {
		list, err := s.deps.Auth.Sessions(ctx, principal(ctx))
		if err != nil {
			return nil, err
		}
		out := &sessionsOutput{}
		out.Body.Sessions = list
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "revoke-session", Method: http.MethodDelete, Path: "/api/v1/auth/sessions/{id}", Tags: tags,
		Summary: "End one of the signed-in user's sessions",
		Description: "Revokes the session's access token and refresh tokens at once; its live streams close within seconds. " +
			"Only the caller's own live sessions: any other id is 404. Recorded in the audit log (`auth.session.revoked`).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, SignedIn, func(ctx context.Context, in *sessionInput) (*struct{}, error) {
		if err := s.deps.Auth.RevokeSession(ctx, clientOf(ctx), principal(ctx), in.ID); err != nil {
			return nil, err
		}
		s.sessions.poke()
		return nil, nil
	})

	op(s, huma.Operation{
		OperationID: "change-password", Method: http.MethodPost, Path: "/api/v1/auth/password", Tags: tags,
		Summary: "Change the signed-in user's password",
		Description: "Needs the current password and a TOTP code (accepted once, like at sign-in). Ends every other session of the user " +
			"(their streams close within seconds) and forgets every other device it signed in from; the caller's session and device stay. " +
			"403 `wrong-password` or `wrong-code` change nothing; both checks are throttled per session (5, then 1 a minute: 429 `too-many-attempts`). " +
			"422 for a new password that breaks the rules. Recorded in the audit log (`user.password.changed`, refusals `user.password.refused`).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusForbidden, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
	}, SignedIn, func(ctx context.Context, in *passwordInput) (*struct{}, error) {
		if err := s.deps.Auth.ChangePassword(ctx, clientOf(ctx), principal(ctx), s.cookie.read(requestFrom(ctx), deviceCookieBase),
			in.Body.CurrentPassword, in.Body.Code, in.Body.NewPassword); err != nil {
			return nil, err
		}
		s.sessions.poke()
		return nil, nil
	})
}
