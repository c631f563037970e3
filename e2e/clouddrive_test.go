package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

const driveCallback = "/api/v1/backups/clouddrive/callback"

// cloudDriveOptions configure a control plane whose cloud drive provider
// is the stand-in, trusted through SSL_CERT_FILE, with the stand-in's
// OAuth client (the secret in the environment).
func cloudDriveOptions(d store.Dialect, drive *testlab.CloudDrive) Options {
	return Options{Dialect: d,
		Args: []string{"--clouddrive-client-id=" + drive.ClientID, "--clouddrive-auth-url=" + drive.AuthURL(),
			"--clouddrive-token-url=" + drive.TokenURL(), "--clouddrive-revoke-url=" + drive.RevokeURL(), "--clouddrive-api-url=" + drive.URL},
		Env: []string{"SSL_CERT_FILE=" + drive.CAFile, "CAPSTAN_CLOUDDRIVE_CLIENT_SECRET=" + drive.ClientSecret}}
}

// CloudDriveStatus is GET /api/v1/backups/clouddrive.
type CloudDriveStatus struct {
	Configured   bool    `json:"configured"`
	Connected    bool    `json:"connected"`
	Provider     string  `json:"provider"`
	AccountEmail string  `json:"account_email"`
	Scope        string  `json:"scope"`
	ConnectedAt  *string `json:"connected_at"`
	RedirectURI  string  `json:"redirect_uri"`
}

// driveSignIn is one sign-in as the admin's browser goes through it: the
// cookie POST connect set, and the callback the provider redirected to.
type driveSignIn struct {
	cookie   *http.Cookie
	callback string // path and query
}

// driveFlow records every answer, to search them for tokens.
type driveFlow struct {
	cp      *ControlPlane
	drive   *testlab.CloudDrive
	answers []string
}

func (f *driveFlow) do(t *testing.T, r Req) *Response {
	t.Helper()
	resp := f.cp.Do(t, r)
	f.answers = append(f.answers, string(resp.Body), strings.Join(resp.Header.Values("Set-Cookie"), "\n"), resp.Header.Get("Location"))
	return resp
}

func (f *driveFlow) status(t *testing.T, token string) CloudDriveStatus {
	t.Helper()
	r := f.do(t, Req{Method: http.MethodGet, Path: "/api/v1/backups/clouddrive", Token: token})
	expectStatus(t, r, http.StatusOK)
	var st CloudDriveStatus
	r.JSON(t, &st)
	return st
}

// start calls POST connect as token and follows the consent URL at the
// provider, which consents and redirects back.
func (f *driveFlow) start(t *testing.T, token string) driveSignIn {
	t.Helper()
	r := f.do(t, Req{Method: http.MethodPost, Path: "/api/v1/backups/clouddrive/connect", Token: token})
	expectStatus(t, r, http.StatusOK)
	var c struct {
		ConsentURL string `json:"consent_url"`
	}
	r.JSON(t, &c)
	cookie := r.Cookie("capstan_clouddrive")
	if cookie == nil || !cookie.HttpOnly || cookie.Path != driveCallback || cookie.SameSite != http.SameSiteLaxMode || cookie.MaxAge <= 0 {
		t.Fatalf("connect set no browser cookie scoped to the callback: %q", r.Header.Values("Set-Cookie"))
	}
	if !strings.HasPrefix(c.ConsentURL, f.drive.AuthURL()+"?") {
		t.Fatalf("consent URL %s is not at the provider's %s", c.ConsentURL, f.drive.AuthURL())
	}
	resp, err := f.drive.Client.Get(c.ConsentURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("the consent page answered %d", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loc.Scheme+"://"+loc.Host+loc.Path, f.cp.URL+driveCallback; got != want {
		t.Fatalf("the provider redirected to %s, want %s", got, want)
	}
	return driveSignIn{cookie: &http.Cookie{Name: cookie.Name, Value: cookie.Value}, callback: loc.Path + "?" + loc.RawQuery}
}

// finish is the browser landing on the callback with cookie (nil: none).
func (f *driveFlow) finish(t *testing.T, callback string, cookie *http.Cookie) *Response {
	t.Helper()
	var cookies []*http.Cookie
	if cookie != nil {
		cookies = []*http.Cookie{cookie}
	}
	return f.do(t, Req{Method: http.MethodGet, Path: callback, Cookies: cookies})
}

func withQuery(t *testing.T, callback, key, value string) string {
	t.Helper()
	u, err := url.Parse(callback)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestCloudDriveConnect connects Google Drive through the real capstan
// serve and the stand-in over HTTPS: the consent URL asks for offline
// access to drive.file with a PKCE S256 challenge; the callback refuses a
// state from another browser, without the browser's cookie, of a session
// that signed out, used twice (after a refused code) or declined, storing
// nothing each time; the stand-in checks the PKCE verifier at the code
// exchange; the connected account's address is recorded; the refresh
// token is in no answer and no log line; a disconnection the provider
// cannot revoke keeps the connection unless forced, and one it revokes
// forgets it.
func TestCloudDriveConnect(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		drive := testlab.StartCloudDrive(t)
		cp := startControlPlane(t, cloudDriveOptions(d, drive))
		f := &driveFlow{cp: cp, drive: drive}
		admin := signInUser(t, cp, newAdmin(t, cp, "admin@example.com")).AccessToken
		other := signInUser(t, cp, newAdmin(t, cp, "other@example.com")).AccessToken

		st := f.status(t, admin)
		if !st.Configured || st.Connected || st.ConnectedAt != nil || st.RedirectURI != cp.URL+driveCallback || st.Provider != "google" {
			t.Fatalf("status before connecting: %+v", st)
		}
		notStored := func(what string) {
			t.Helper()
			if st := f.status(t, admin); st.Connected {
				t.Fatalf("%s: the drive reads as connected", what)
			}
			if n := drive.LiveGrants(); n != 0 {
				t.Fatalf("%s: %d grants were issued", what, n)
			}
		}

		mine := f.start(t, admin)
		auth := drive.LastAuthorization()
		for k, want := range map[string]string{"code_challenge_method": "S256", "access_type": "offline", "prompt": "consent",
			"scope": "https://www.googleapis.com/auth/drive.file", "redirect_uri": cp.URL + driveCallback, "client_id": drive.ClientID} {
			if got := auth.Get(k); got != want {
				t.Errorf("consent URL %s: %q, want %q", k, got, want)
			}
		}
		// Another administrator's browser, and a browser without the
		// cookie, cannot use this state.
		theirs := f.start(t, other)
		p := expectProblem(t, f.finish(t, mine.callback, theirs.cookie), http.StatusUnprocessableEntity, "validation-failed")
		if p.Errors[0].Field != "state" {
			t.Fatalf("foreign browser: problem %+v, want one on state", p)
		}
		expectProblem(t, f.finish(t, mine.callback, nil), http.StatusUnprocessableEntity, "validation-failed")
		notStored("a foreign state")

		// A refused code uses the state up: the same state with the
		// right code is then refused too.
		p = expectProblem(t, f.finish(t, withQuery(t, mine.callback, "code", "4/0Awrong"), mine.cookie), http.StatusUnprocessableEntity, "validation-failed")
		if p.Errors[0].Field != "code" {
			t.Fatalf("wrong code: problem %+v, want one on code", p)
		}
		p = expectProblem(t, f.finish(t, mine.callback, mine.cookie), http.StatusUnprocessableEntity, "validation-failed")
		if p.Errors[0].Field != "state" {
			t.Fatalf("reused state: problem %+v, want one on state", p)
		}
		notStored("a reused state")

		// A session that signed out cannot finish its sign-in.
		third := signInUser(t, cp, newAdmin(t, cp, "third@example.com")).AccessToken
		gone := f.start(t, third)
		expectStatus(t, f.do(t, Req{Method: http.MethodPost, Path: "/api/v1/auth/logout", Token: third}), http.StatusNoContent)
		expectProblem(t, f.finish(t, gone.callback, gone.cookie), http.StatusUnprocessableEntity, "validation-failed")
		notStored("a signed-out session")

		// A declined consent.
		drive.Deny(true)
		declined := f.start(t, admin)
		drive.Deny(false)
		p = expectProblem(t, f.finish(t, declined.callback, declined.cookie), http.StatusUnprocessableEntity, "validation-failed")
		if p.Errors[0].Field != "error" || !strings.Contains(p.Errors[0].Message, "access_denied") {
			t.Fatalf("declined consent: problem %+v", p)
		}
		notStored("a declined consent")

		// The other administrator's own sign-in goes through.
		r := f.finish(t, theirs.callback, theirs.cookie)
		expectStatus(t, r, http.StatusOK)
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") || !strings.Contains(string(r.Body), "connected") ||
			!strings.Contains(string(r.Body), drive.Email) || !strings.Contains(string(r.Body), `<a href="/backups/storage">`) {
			t.Fatalf("callback page (%s), which names the account and links back to the console's storage: %s", ct, r.Body)
		}
		if ck := r.Cookie("capstan_clouddrive"); ck == nil || ck.MaxAge >= 0 {
			t.Fatalf("the callback did not clear the browser cookie: %q", r.Header.Values("Set-Cookie"))
		}
		st = f.status(t, admin)
		if !st.Connected || st.AccountEmail != drive.Email || st.Scope != "https://www.googleapis.com/auth/drive.file" || st.ConnectedAt == nil {
			t.Fatalf("status after connecting: %+v", st)
		}
		if n := drive.LiveGrants(); n != 1 {
			t.Fatalf("%d live grants, want 1", n)
		}
		expectProblem(t, f.finish(t, theirs.callback, theirs.cookie), http.StatusUnprocessableEntity, "validation-failed")
		expectProblem(t, f.do(t, Req{Method: http.MethodPost, Path: "/api/v1/backups/clouddrive/connect", Token: admin}),
			http.StatusConflict, "clouddrive-connected")
		if got := len(auditEntries(t, cp, admin, "clouddrive.connected")); got != 1 {
			t.Errorf("%d clouddrive.connected audit entries, want 1", got)
		}

		// A revocation the provider fails keeps the connection.
		drive.FailRevocations(http.StatusServiceUnavailable)
		r = f.do(t, Req{Method: http.MethodDelete, Path: "/api/v1/backups/clouddrive/connection", Token: admin})
		p = expectProblem(t, r, http.StatusBadGateway, "revoke-failed")
		if !strings.Contains(p.Detail, "503") {
			t.Fatalf("the problem does not carry the provider's answer: %s", r.Body)
		}
		if st := f.status(t, admin); !st.Connected {
			t.Fatal("a failed revocation forgot the connection")
		}
		drive.FailRevocations(0)
		r = f.do(t, Req{Method: http.MethodDelete, Path: "/api/v1/backups/clouddrive/connection", Token: admin})
		expectStatus(t, r, http.StatusOK)
		var disc struct {
			Disconnected bool `json:"disconnected"`
			Revoked      bool `json:"revoked"`
		}
		r.JSON(t, &disc)
		if !disc.Disconnected || !disc.Revoked || drive.Revocations() != 1 || drive.LiveGrants() != 0 {
			t.Fatalf("disconnection %s: %d revocations, %d live grants at the provider", r.Body, drive.Revocations(), drive.LiveGrants())
		}
		if st := f.status(t, admin); st.Connected {
			t.Fatal("connected after disconnecting")
		}
		expectProblem(t, f.do(t, Req{Method: http.MethodDelete, Path: "/api/v1/backups/clouddrive/connection", Token: admin}),
			http.StatusNotFound, "not-found")

		// Forced: forgotten although the provider failed.
		again := f.start(t, admin)
		expectStatus(t, f.finish(t, again.callback, again.cookie), http.StatusOK)
		drive.FailRevocations(http.StatusInternalServerError)
		r = f.do(t, Req{Method: http.MethodDelete, Path: "/api/v1/backups/clouddrive/connection?force=true", Token: admin})
		expectStatus(t, r, http.StatusOK)
		var forced struct {
			Disconnected bool   `json:"disconnected"`
			Revoked      bool   `json:"revoked"`
			RevokeError  string `json:"revoke_error"`
		}
		r.JSON(t, &forced)
		if !forced.Disconnected || forced.Revoked || !strings.Contains(forced.RevokeError, "500") {
			t.Fatalf("forced disconnection: %s", r.Body)
		}
		if st := f.status(t, admin); st.Connected {
			t.Fatal("connected after a forced disconnection")
		}

		// No refresh token in any answer or log line.
		tokens := drive.RefreshTokens()
		if len(tokens) != 2 {
			t.Fatalf("%d refresh tokens issued, want 2", len(tokens))
		}
		logs := cp.Logs()
		for _, tok := range tokens {
			for _, a := range f.answers {
				if strings.Contains(a, tok) {
					t.Fatalf("an answer holds a refresh token: %s", a)
				}
			}
			if strings.Contains(logs, tok) {
				t.Fatal("a refresh token is in the control plane's log")
			}
		}
	})
}

// TestCloudDriveSettings: the OAuth client and the provider's endpoints
// are serve flags with CAPSTAN_ equivalents, shown in --help; a client id
// without its secret, or an endpoint that is not https, stops serve.
func TestCloudDriveSettings(t *testing.T) {
	res := runCLI(t, nil, "", "serve", "--help")
	for _, want := range []string{"--clouddrive-client-id", "CAPSTAN_CLOUDDRIVE_CLIENT_ID", "--clouddrive-client-secret-file",
		"CAPSTAN_CLOUDDRIVE_CLIENT_SECRET", "--clouddrive-token-url", "https://oauth2.googleapis.com/token", "--clouddrive-api-url"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("capstan serve --help does not mention %s:\n%s", want, res.Stdout)
		}
	}
	res = runCLI(t, []string{"CAPSTAN_CLOUDDRIVE_CLIENT_ID=abc.apps.googleusercontent.com"}, "", "serve", "--listen", "127.0.0.1:0",
		"--data-dir", t.TempDir())
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "client secret") {
		t.Fatalf("serve with a client id and no secret: exit %d, stderr %s", res.ExitCode, res.Stderr)
	}
	res = runCLI(t, []string{"CAPSTAN_CLOUDDRIVE_CLIENT_ID=abc", "CAPSTAN_CLOUDDRIVE_CLIENT_SECRET=s", "CAPSTAN_CLOUDDRIVE_TOKEN_URL=http://127.0.0.1:1/token"},
		"", "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "token URL") {
		t.Fatalf("serve with an http:// token URL: exit %d, stderr %s", res.ExitCode, res.Stderr)
	}
}
