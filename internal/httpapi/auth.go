package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/auth"
)

// cookieConfig decides the refresh cookie's name and attributes. Over HTTPS
// the name carries the __Secure- prefix (browsers then insist on Secure);
// __Host- is not used because it would force Path=/.
type cookieConfig struct {
	name   string
	secure bool
}

const refreshCookieBase = "capstan_refresh"

// refreshCookiePath scopes the cookie to the endpoints that read it.
const refreshCookiePath = "/api/v1/auth"

func newCookieConfig(publicURL string) cookieConfig {
	u, err := url.Parse(publicURL)
	if err == nil && u.Scheme == "https" {
		return cookieConfig{name: "__Secure-" + refreshCookieBase, secure: true}
	}
	return cookieConfig{name: refreshCookieBase}
}

func (c cookieConfig) set(token string, expires time.Time) http.Cookie {
	return http.Cookie{Name: c.name, Value: token, Path: refreshCookiePath, Expires: expires.UTC(),
		MaxAge: int(time.Until(expires).Seconds()), HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteStrictMode}
}

func (c cookieConfig) clear() http.Cookie {
	return http.Cookie{Name: c.name, Value: "", Path: refreshCookiePath, MaxAge: -1, HttpOnly: true,
		Secure: c.secure, SameSite: http.SameSiteStrictMode}
}

func (c cookieConfig) read(r *http.Request) string {
	ck, err := r.Cookie(c.name)
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
	SetCookie http.Cookie `header:"Set-Cookie" doc:"The refresh cookie (HttpOnly, SameSite=Strict, Path=/api/v1/auth)"`
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
	SetCookie http.Cookie `header:"Set-Cookie" doc:"Clears the refresh cookie"`
}

func (s *Server) tokens(t auth.Tokens) *tokenOutput {
	out := &tokenOutput{SetCookie: s.cookie.set(t.RefreshToken, t.RefreshExpiresAt)}
	out.Body = tokenBody{Status: "authenticated", AccessToken: t.AccessToken, TokenType: "Bearer",
		ExpiresIn: int(auth.AccessTTL / time.Second), User: t.User}
	return out
}

func (s *Server) registerAuth() {
	tags := []string{"Authentication"}
	op(s, huma.Operation{
		OperationID: "login", Method: http.MethodPost, Path: "/api/v1/auth/login", Tags: tags,
		Summary: "Sign in, step 1: password",
		Description: "Checks the e-mail and password and starts a second-factor challenge. " +
			"Failed attempts are throttled per account and client address (5, then 1 a minute) and per address (20, then 1 every 15 s): " +
			"429 `too-many-attempts` with Retry-After. Attempts are counted before the password is checked, so parallel attempts get no more checks. " +
			"100 failures in a row from any addresses lock the account (429 `account-locked`, even for the right password) until `capstan user unlock`. " +
			"When too many password checks are waiting: 429 `sign-in-busy` with Retry-After.",
		Errors: []int{http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *loginInput) (*loginOutput, error) {
		res, err := s.deps.Auth.Login(ctx, clientOf(ctx), in.Body.Email, in.Body.Password)
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
			"(counted before each code is checked, also for codes sent at once). Wrong codes count toward the same throttles and account lock as wrong passwords. " +
			"On success returns an access token and sets the refresh cookie.",
		Errors: []int{http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *verifyInput) (*tokenOutput, error) {
		t, err := s.deps.Auth.Verify(ctx, clientOf(ctx), in.Body.ChallengeID, in.Body.Code)
		if err != nil {
			return nil, err
		}
		return s.tokens(t), nil
	})

	op(s, huma.Operation{
		OperationID: "refresh", Method: http.MethodPost, Path: "/api/v1/auth/refresh", Tags: tags,
		Summary:     "Exchange the refresh cookie for a new access token",
		Description: "Rotates the refresh cookie on every use. Presenting a refresh token that was already used revokes its whole session.",
	}, Public, func(ctx context.Context, _ *refreshInput) (*tokenOutput, error) {
		t, err := s.deps.Auth.Refresh(ctx, clientOf(ctx), s.cookie.read(requestFrom(ctx)))
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
		return &logoutOutput{SetCookie: s.cookie.clear()}, nil
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
}
