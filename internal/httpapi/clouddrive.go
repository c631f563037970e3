package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/clouddrive"
)

type cloudDriveConnectOutput struct {
	SetCookie http.Cookie `header:"Set-Cookie" doc:"The browser binding of this sign-in (HttpOnly, SameSite=Lax, Path=/api/v1/backups/clouddrive/callback, 15 minutes): the callback must carry it"`
	Body      clouddrive.DriveConsent
}

type cloudDriveCallbackInput struct {
	Code             string `query:"code" maxLength:"2048" doc:"The authorization code"`
	State            string `query:"state" maxLength:"64" doc:"The state the consent URL carried"`
	Error            string `query:"error" maxLength:"64" doc:"Set instead of code when the consent was declined (access_denied)"`
	ErrorDescription string `query:"error_description" maxLength:"512" doc:"The provider's explanation of error"`
	ErrorURI         string `query:"error_uri" maxLength:"512" doc:"Ignored"`
	Scope            string `query:"scope" maxLength:"2048" doc:"The scopes granted, as the provider reports them (checked against the token's)"`
	AuthUser         string `query:"authuser" maxLength:"16" doc:"Ignored (Google's account index)"`
	HD               string `query:"hd" maxLength:"256" doc:"Ignored (Google's hosted domain)"`
	Prompt           string `query:"prompt" maxLength:"64" doc:"Ignored"`
	ISS              string `query:"iss" maxLength:"256" doc:"Ignored (the issuer)"`
}

type cloudDriveCallbackOutput struct {
	ContentType  string      `header:"Content-Type"`
	CSP          string      `header:"Content-Security-Policy"`
	CacheControl string      `header:"Cache-Control"`
	SetCookie    http.Cookie `header:"Set-Cookie" doc:"Clears the browser binding"`
	Body         []byte
}

type cloudDriveDisconnectInput struct {
	Force bool `query:"force" doc:"Forget the connection even when the provider fails to revoke the grant"`
}

// cloudDriveCookie is the browser binding cookie's name and Secure
// attribute: "__Secure-" and Secure when the public URL is https.
func (s *Server) cloudDriveCookie(value string, maxAge int) http.Cookie {
	name := clouddrive.BrowserCookie
	if s.cookie.secure {
		name = "__Secure-" + name
	}
	return http.Cookie{Name: name, Value: value, Path: clouddrive.CallbackPath, MaxAge: maxAge, HttpOnly: true,
		Secure: s.cookie.secure, SameSite: http.SameSiteLaxMode}
}

// CloudDrive mounts the cloud drive's sign-in routes.
func CloudDrive(svc *clouddrive.Service) func(*Server) {
	return func(s *Server) { s.registerCloudDrive(svc) }
}

func (s *Server) registerCloudDrive(svc *clouddrive.Service) {
	tags := []string{"Backups"}
	op(s, huma.Operation{
		OperationID: "clouddrive-status", Method: http.MethodGet, Path: "/api/v1/backups/clouddrive", Tags: tags,
		Summary: "Whether a cloud drive is connected for backups",
		Description: "Whether an OAuth client is configured, whether a drive is connected (the account's address, the access granted, " +
			"when and by whom), and the redirect URI to register with the OAuth client. Never a token.",
	}, Admin, func(ctx context.Context, _ *struct{}) (*bodyOutput[clouddrive.DriveStatus], error) {
		return reply(svc.Status(ctx))
	})
	op(s, huma.Operation{
		OperationID: "clouddrive-connect", Method: http.MethodPost, Path: "/api/v1/backups/clouddrive/connect", Tags: tags,
		Summary: "Start connecting a cloud drive (Google Drive)",
		Description: "Returns the provider's consent URL: OAuth 2.0 authorization code with PKCE (S256), offline access, the " +
			"drive.file scope (only files this application creates), and a state that is single-use, valid 15 minutes and bound " +
			"to this session. The answer also sets a cookie binding the sign-in to this browser: open the consent URL in the " +
			"same browser. The provider sends it back to GET /api/v1/backups/clouddrive/callback. 409 when no OAuth client is " +
			"configured or a drive is connected already.",
		Errors: []int{http.StatusConflict},
	}, Admin, func(ctx context.Context, _ *struct{}) (*cloudDriveConnectOutput, error) {
		consent, browser, err := svc.Connect(ctx, caller(ctx))
		if err != nil {
			return nil, err
		}
		return &cloudDriveConnectOutput{SetCookie: s.cloudDriveCookie(browser, int(clouddrive.StateTTL/time.Second)), Body: consent}, nil
	})
	op(s, huma.Operation{
		OperationID: "clouddrive-callback", Method: http.MethodGet, Path: clouddrive.CallbackPath, Tags: tags,
		Summary: "Where the provider sends the browser back (the OAuth redirect URI)",
		Description: "Register {public_url}/api/v1/backups/clouddrive/callback as the OAuth client's redirect URI. The browser " +
			"lands here from the consent screen with ?code=&state= (or ?error=). The state must be unused, unexpired, carried by " +
			"the browser that started the sign-in (its cookie), and its session still signed in as an administrator; otherwise " +
			"422 and nothing is stored. The code is exchanged with the PKCE verifier, the refresh token stored encrypted (never " +
			"shown), and a small page says the drive is connected and links back to the console's backup storage. 422 when the consent was declined, the code refused or the " +
			"drive permission not granted; 409 when a drive is connected already; 502 when the provider fails.",
		Errors: []int{http.StatusConflict, http.StatusBadGateway},
	}, Public, func(ctx context.Context, in *cloudDriveCallbackInput) (*cloudDriveCallbackOutput, error) {
		browser := ""
		if ck, err := requestFrom(ctx).Cookie(s.cloudDriveCookie("", 0).Name); err == nil {
			browser = ck.Value
		}
		st, err := svc.Complete(ctx, clouddrive.Callback{Code: in.Code, State: in.State, Error: in.Error, ErrorDescription: in.ErrorDescription},
			browser, caller(ctx))
		if err != nil {
			return nil, err
		}
		where := "the Google Drive"
		if st.AccountEmail != "" {
			where += " of " + st.AccountEmail
		}
		page, err := renderLanding(landingPage{Title: "Cloud drive connected",
			Lines: []string{"Backups can now be stored in " + where + "."}, Back: "/backups/storage", BackText: "Back to the backup storage"})
		if err != nil {
			return nil, err
		}
		return &cloudDriveCallbackOutput{ContentType: landingType, CSP: landingCSP, CacheControl: "no-store",
			SetCookie: s.cloudDriveCookie("", -1), Body: page}, nil
	})
	op(s, huma.Operation{
		OperationID: "clouddrive-disconnect", Method: http.MethodDelete, Path: "/api/v1/backups/clouddrive/connection", Tags: tags,
		Summary: "Disconnect the cloud drive and revoke its access",
		Description: "Revokes the grant at the provider (a grant the provider says is revoked or expired already counts as " +
			"revoked), then forgets it. When the provider fails to revoke it, the connection is kept and the answer is 502 with " +
			"the provider's error; with force=true it is forgotten anyway, and the answer says so (revoked: false) so the access " +
			"can be removed in the account's settings. Backups already in the drive stay there. 404 when none is connected.",
		Errors: []int{http.StatusNotFound, http.StatusBadGateway},
	}, Admin, func(ctx context.Context, in *cloudDriveDisconnectInput) (*bodyOutput[clouddrive.DriveDisconnection], error) {
		return reply(svc.Disconnect(ctx, caller(ctx), in.Force))
	})
}
