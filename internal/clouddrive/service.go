package clouddrive

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Audit actions of this package. Details never hold tokens.
const (
	ActionConnected    = "clouddrive.connected"
	ActionDisconnected = "clouddrive.disconnected"
)

var (
	statePattern   = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
	browserPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
	codePattern    = regexp.MustCompile(`^[\x21-\x7e]+$`)
)

// Config is the control plane's OAuth client at the provider and the
// provider's endpoints.
type Config struct {
	// ClientID and ClientSecret are the OAuth client's; without a client
	// id the cloud drive cannot be connected.
	ClientID     string
	ClientSecret string
	// The provider's endpoints; "" is Google's.
	AuthURL, TokenURL, RevokeURL, APIURL string
	// PublicURL is the control plane's public URL; the redirect URI is
	// PublicURL + CallbackPath.
	PublicURL string
	// HTTPClient reaches the provider; nil is a client with a 30 s
	// timeout that trusts the system's CAs (SSL_CERT_FILE, SSL_CERT_DIR).
	HTTPClient *http.Client
}

// Service connects the cloud drive and mints access tokens from its
// grant.
type Service struct {
	store  Store
	key    *secrets.Key
	audit  *audit.Log
	cfg    Config
	oauth  *oauth2.Config
	client *http.Client
	now    func() time.Time
	log    *slog.Logger

	mint   sync.Mutex // held while an access token is minted, so concurrent callers wait for one
	mu     sync.Mutex // guards cached
	cached cachedToken
}

type cachedToken struct {
	grantID string
	token   string
	expiry  time.Time
}

// NewService checks cfg and returns the service.
func NewService(st Store, key *secrets.Key, log *audit.Log, cfg Config, now func() time.Time, logger *slog.Logger) (*Service, error) {
	if logger == nil {
		logger = slog.Default()
	}
	defaults := []struct {
		url  *string
		def  string
		name string
	}{{&cfg.AuthURL, DefaultAuthURL, "auth"}, {&cfg.TokenURL, DefaultTokenURL, "token"},
		{&cfg.RevokeURL, DefaultRevokeURL, "revoke"}, {&cfg.APIURL, DefaultAPIURL, "API"}}
	for _, d := range defaults {
		if *d.url == "" {
			*d.url = d.def
		}
		u, err := url.Parse(*d.url)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("the cloud drive's %s URL %q must be an absolute https:// URL", d.name, *d.url)
		}
	}
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if (cfg.ClientID == "") != (cfg.ClientSecret == "") {
		return nil, errors.New("the cloud drive's OAuth client needs both its id and its secret")
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	s := &Service{store: st, key: key, audit: log, cfg: cfg, client: client, now: now, log: logger}
	s.oauth = &oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, RedirectURL: s.RedirectURI(),
		Scopes:   []string{Scope},
		Endpoint: oauth2.Endpoint{AuthURL: cfg.AuthURL, TokenURL: cfg.TokenURL, AuthStyle: oauth2.AuthStyleInParams}}
	return s, nil
}

// Configured reports whether an OAuth client is configured.
func (s *Service) Configured() bool { return s.cfg.ClientID != "" }

// RedirectURI is the URI registered with the OAuth client.
func (s *Service) RedirectURI() string { return s.cfg.PublicURL + CallbackPath }

// APIURL is the provider's API base URL, for agents' Drive stores.
func (s *Service) APIURL() string { return s.cfg.APIURL }

// DriveStatus is whether a cloud drive is connected.
type DriveStatus struct {
	Configured   bool       `json:"configured" doc:"Whether this control plane has an OAuth client for the cloud drive (capstan serve --clouddrive-client-id); without one it cannot be connected"`
	Connected    bool       `json:"connected"`
	Provider     string     `json:"provider" doc:"google (Google Drive)"`
	AccountEmail string     `json:"account_email" doc:"The connected account's address; empty when not connected or the provider did not tell"`
	Scope        string     `json:"scope" doc:"The access granted; empty when not connected"`
	ConnectedAt  *time.Time `json:"connected_at" doc:"null when not connected"`
	ConnectedBy  string     `json:"connected_by" doc:"Id of the administrator who connected it; empty when not connected"`
	RedirectURI  string     `json:"redirect_uri" doc:"The redirect URI to register with the OAuth client"`
}

// Status returns the connection's status.
func (s *Service) Status(ctx context.Context) (DriveStatus, error) {
	st := DriveStatus{Configured: s.Configured(), Provider: ProviderGoogle, RedirectURI: s.RedirectURI()}
	c, err := s.store.CloudDriveConnection(ctx)
	if fault.Is(err, fault.NotFound) {
		return st, nil
	}
	if err != nil {
		return DriveStatus{}, err
	}
	at := c.ConnectedAt
	st.Connected, st.Provider, st.AccountEmail, st.Scope, st.ConnectedAt, st.ConnectedBy = true, c.Provider, c.AccountEmail, c.Scope, &at, c.ConnectedBy
	return st, nil
}

// DriveConsent is the start of the sign-in.
type DriveConsent struct {
	ConsentURL string    `json:"consent_url" doc:"The provider's consent page: open it in the browser that holds the cookie this answer sets. It returns to the callback."`
	ExpiresAt  time.Time `json:"expires_at" doc:"Until when the sign-in can be completed (15 minutes)"`
}

func errNotConfigured() error {
	return fault.Conflictf("clouddrive-unavailable", "No OAuth client for the cloud drive is configured on this control plane "+
		"(capstan serve --clouddrive-client-id and CAPSTAN_CLOUDDRIVE_CLIENT_SECRET or --clouddrive-client-secret-file).")
}

func errConnected() error {
	return fault.Conflictf("clouddrive-connected", "A cloud drive is connected already; disconnect it first (DELETE /api/v1/backups/clouddrive/connection).")
}

func errNotConnected() error {
	return fault.Conflictf("clouddrive-not-connected", "No cloud drive is connected; connect one first (POST /api/v1/backups/clouddrive/connect).")
}

func hash(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])
}

func random() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Connect starts the sign-in: a state bound to the caller's session, a
// PKCE verifier kept sealed with it, and a browser value the caller sets
// as the BrowserCookie, which the callback must carry. 409 when no OAuth
// client is configured or a drive is connected.
func (s *Service) Connect(ctx context.Context, c audit.Caller) (consent DriveConsent, browser string, _ error) {
	if !s.Configured() {
		return DriveConsent{}, "", errNotConfigured()
	}
	if c.SessionID == "" {
		return DriveConsent{}, "", fault.Forbiddenf("session-required", "The sign-in is bound to a signed-in session.")
	}
	if _, err := s.store.CloudDriveConnection(ctx); err == nil {
		return DriveConsent{}, "", errConnected()
	} else if !fault.Is(err, fault.NotFound) {
		return DriveConsent{}, "", err
	}
	state, err := random()
	if err != nil {
		return DriveConsent{}, "", err
	}
	if browser, err = random(); err != nil {
		return DriveConsent{}, "", err
	}
	verifier := oauth2.GenerateVerifier()
	expires := s.now().Add(StateTTL)
	if err := s.store.InsertCloudDriveState(ctx, State{Hash: hash(state), SessionID: c.SessionID, UserID: c.Actor.ID,
		BrowserHash: hash(browser), SealedVerifier: s.key.Seal(verifierContext(hash(state)), []byte(verifier)), ExpiresAt: expires}); err != nil {
		return DriveConsent{}, "", err
	}
	// Offline access with the consent screen shown every time: only then
	// does Google return a refresh token.
	u := s.oauth.AuthCodeURL(state, oauth2.AccessTypeOffline, oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("prompt", "consent"), oauth2.SetAuthURLParam("include_granted_scopes", "true"))
	return DriveConsent{ConsentURL: u, ExpiresAt: expires}, browser, nil
}

func verifierContext(stateHash string) string { return "clouddrive_states:" + stateHash + ":verifier" }

func refreshContext(grantID string) string {
	return "clouddrive_connections:" + grantID + ":refresh_token"
}

// Callback is what the provider sends the browser back with.
type Callback struct {
	Code             string
	State            string
	Error            string
	ErrorDescription string
}

// upstream is a fault for a provider that failed: its status and message
// are safe to show (they never carry tokens).
func upstream(doing string, err error) error {
	return &fault.Error{Kind: fault.Upstream, Code: "provider-failed", Message: fmt.Sprintf("The cloud drive's provider failed while %s: %v", doing, err), Err: err}
}

// oauthCode returns the OAuth error code of a token endpoint's answer
// ("invalid_grant"…), or "".
func oauthCode(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// retrieveMessage is a token endpoint's error without its raw body.
func retrieveMessage(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := re.ErrorCode
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		}
		if msg == "" && re.Response != nil {
			msg = re.Response.Status
		}
		return errors.New(msg)
	}
	return err
}

// Complete finishes the sign-in the provider sent the browser back from:
// it uses the state up (it must be unused, unexpired, set in this browser,
// and its session still an administrator's), exchanges the code with the
// PKCE verifier, and stores the refresh token sealed. client is the
// browser's address and user agent, for the audit log.
func (s *Service) Complete(ctx context.Context, cb Callback, browser string, client audit.Caller) (DriveStatus, error) {
	if !s.Configured() {
		return DriveStatus{}, errNotConfigured()
	}
	if !statePattern.MatchString(cb.State) {
		return DriveStatus{}, fault.Invalidf("state", "must be the state the consent URL carried")
	}
	if !browserPattern.MatchString(browser) {
		return DriveStatus{}, fault.Invalidf("state", "was issued to another browser: this browser does not hold the %s cookie of POST /api/v1/backups/clouddrive/connect", BrowserCookie)
	}
	st, ok, err := s.store.UseCloudDriveState(ctx, hash(cb.State), hash(browser), s.now())
	if err != nil {
		return DriveStatus{}, err
	}
	if !ok {
		return DriveStatus{}, fault.Invalidf("state", "is unknown, used already, expired, issued to another browser, or its session has ended; start again")
	}
	if cb.Error != "" {
		return DriveStatus{}, fault.Invalidf("error", "the provider did not grant access: %s %s", cb.Error, cb.ErrorDescription)
	}
	if len(cb.Code) > 2048 || !codePattern.MatchString(cb.Code) {
		return DriveStatus{}, fault.Invalidf("code", "must be the code the provider returned")
	}
	verifier, err := s.key.Open(verifierContext(st.Hash), st.SealedVerifier)
	if err != nil {
		return DriveStatus{}, err
	}
	octx := context.WithValue(ctx, oauth2.HTTPClient, s.client)
	tok, err := s.oauth.Exchange(octx, cb.Code, oauth2.VerifierOption(string(verifier)))
	if err != nil {
		if oauthCode(err) == "invalid_grant" {
			return DriveStatus{}, fault.Invalidf("code", "the provider did not accept it: it is wrong, used already or expired (%v)", retrieveMessage(err))
		}
		return DriveStatus{}, upstream("exchanging the code", retrieveMessage(err))
	}
	if tok.RefreshToken == "" {
		return DriveStatus{}, upstream("exchanging the code", errors.New("the answer had no refresh token; remove the application's access "+
			"in the account's security settings and connect again"))
	}
	scope, _ := tok.Extra("scope").(string)
	if !slices.Contains(strings.Fields(scope), Scope) {
		s.revoke(ctx, tok.RefreshToken) //nolint:errcheck // best effort: the grant is of no use
		return DriveStatus{}, fault.Invalidf("scope", "the access to files this application creates in the drive was not granted; connect again and allow it")
	}
	email := s.accountEmail(ctx, tok.AccessToken)
	c := Connection{GrantID: ids.New("cdg"), Provider: ProviderGoogle, AccountEmail: email, Scope: scope, ConnectedBy: st.UserID,
		ConnectedAt: s.now().UTC()}
	c.SealedRefreshToken = s.key.Seal(refreshContext(c.GrantID), []byte(tok.RefreshToken))
	if err := s.store.InsertCloudDriveConnection(ctx, c); err != nil {
		if fault.Is(err, fault.Conflict) {
			s.revoke(ctx, tok.RefreshToken) //nolint:errcheck // best effort: the grant is of no use
		}
		return DriveStatus{}, err
	}
	s.mu.Lock()
	s.cached = cachedToken{grantID: c.GrantID, token: tok.AccessToken, expiry: tok.Expiry}
	s.mu.Unlock()
	if err := s.audit.Append(ctx, audit.Entry{Actor: audit.Actor{Type: audit.ActorUser, ID: st.UserID}, Action: ActionConnected,
		Target: audit.Target{Type: "clouddrive", ID: c.GrantID}, IP: client.IP, UserAgent: client.UserAgent,
		Details: map[string]any{"provider": c.Provider, "account_email": email, "scope": scope}}); err != nil {
		return DriveStatus{}, err
	}
	return s.Status(ctx)
}

// accountEmail asks the Drive API for the signed-in account's address;
// "" when it cannot tell (the connection works without it).
func (s *Service) accountEmail(ctx context.Context, accessToken string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.APIURL+"/drive/v3/about?fields=user(emailAddress)", nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+accessToken)
	resp, err := s.client.Do(req)
	if err != nil {
		s.log.Warn("reading the cloud drive account's address", "err", err.Error())
		return ""
	}
	defer resp.Body.Close()
	var about struct {
		User struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"user"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&about) != nil {
		s.log.Warn("reading the cloud drive account's address", "status", resp.StatusCode)
		return ""
	}
	return about.User.EmailAddress
}

// revokeError is a revocation the provider refused or could not take.
type revokeError struct {
	status int // 0: not reached
	msg    string
}

func (e *revokeError) Error() string {
	if e.status == 0 {
		return "the provider could not be reached: " + e.msg
	}
	return fmt.Sprintf("the provider answered %d: %s", e.status, e.msg)
}

// revoke revokes a token's grant at the provider. A token the provider
// answers invalid_token for is revoked or expired already: that is a
// success.
func (s *Service) revoke(ctx context.Context, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.RevokeURL, strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := s.client.Do(req)
	if err != nil {
		// The error names the URL, never the token (it is in the body).
		return &revokeError{msg: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &e)
	if resp.StatusCode == http.StatusBadRequest && e.Error == "invalid_token" {
		return nil
	}
	msg := strings.TrimSpace(e.Error + " " + e.Description)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &revokeError{status: resp.StatusCode, msg: msg}
}

// DriveDisconnection is the answer to disconnecting the drive.
type DriveDisconnection struct {
	Disconnected bool   `json:"disconnected"`
	Revoked      bool   `json:"revoked" doc:"Whether the provider revoked the grant (or had already); false only when forced"`
	RevokeError  string `json:"revoke_error,omitempty" doc:"The provider's error when it could not revoke the grant (forced disconnections only)"`
	Message      string `json:"message"`
}

// Disconnect revokes the grant at the provider and forgets it. When the
// provider fails to revoke it, the connection is kept and the provider's
// error returned (502), unless force: then it is forgotten anyway and the
// answer says the grant may still be live at the provider. 404 when none
// is connected.
func (s *Service) Disconnect(ctx context.Context, c audit.Caller, force bool) (DriveDisconnection, error) {
	conn, err := s.store.CloudDriveConnection(ctx)
	if fault.Is(err, fault.NotFound) {
		return DriveDisconnection{}, fault.NotFoundf("No cloud drive is connected.")
	}
	if err != nil {
		return DriveDisconnection{}, err
	}
	d := DriveDisconnection{Disconnected: true, Revoked: true,
		Message: "The grant was revoked at the provider and forgotten here. Backups already in the drive stay there."}
	refresh, err := s.key.Open(refreshContext(conn.GrantID), conn.SealedRefreshToken)
	if err != nil {
		return DriveDisconnection{}, err
	}
	if err := s.revoke(ctx, string(refresh)); err != nil {
		if !force {
			return DriveDisconnection{}, &fault.Error{Kind: fault.Upstream, Code: "revoke-failed", Err: err,
				Message: fmt.Sprintf("The provider did not revoke the grant (%v), so the connection is kept. Try again, or "+
					"disconnect with force=true to forget it anyway and remove the access in the account's security settings.", err)}
		}
		d.Revoked, d.RevokeError = false, err.Error()
		d.Message = "The grant was forgotten here, but the provider did not revoke it: remove this application's access in the " +
			"account's security settings (for Google: https://myaccount.google.com/permissions)."
	}
	ok, err := s.store.DeleteCloudDriveConnection(ctx, conn.GrantID)
	if err != nil {
		return DriveDisconnection{}, err
	}
	if !ok {
		return DriveDisconnection{}, fault.NotFoundf("No cloud drive is connected.")
	}
	s.mu.Lock()
	s.cached = cachedToken{}
	s.mu.Unlock()
	if err := s.audit.Record(ctx, c, ActionDisconnected, audit.Target{Type: "clouddrive", ID: conn.GrantID},
		map[string]any{"account_email": conn.AccountEmail, "revoked": d.Revoked, "forced": force}); err != nil {
		return DriveDisconnection{}, err
	}
	return d, nil
}

// AccessToken returns a short-lived access token of the connected drive,
// for an agent's job secrets: the cached one while it has more than
// TokenMargin left, a new one minted from the refresh token otherwise.
// 409 clouddrive-not-connected when none is connected, 409
// clouddrive-grant-revoked when the provider no longer honours the grant,
// 502 when the provider fails.
func (s *Service) AccessToken(ctx context.Context) (token string, expiry time.Time, _ error) {
	conn, err := s.store.CloudDriveConnection(ctx)
	if fault.Is(err, fault.NotFound) {
		return "", time.Time{}, errNotConnected()
	}
	if err != nil {
		return "", time.Time{}, err
	}
	fresh := func() (string, time.Time, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		c := s.cached
		return c.token, c.expiry, c.grantID == conn.GrantID && c.token != "" && s.now().Before(c.expiry.Add(-TokenMargin))
	}
	if t, e, ok := fresh(); ok {
		return t, e, nil
	}
	s.mint.Lock()
	defer s.mint.Unlock()
	if t, e, ok := fresh(); ok {
		return t, e, nil
	}
	refresh, err := s.key.Open(refreshContext(conn.GrantID), conn.SealedRefreshToken)
	if err != nil {
		return "", time.Time{}, err
	}
	octx := context.WithValue(ctx, oauth2.HTTPClient, s.client)
	tok, err := s.oauth.TokenSource(octx, &oauth2.Token{RefreshToken: string(refresh)}).Token()
	if err != nil {
		if oauthCode(err) == "invalid_grant" {
			return "", time.Time{}, fault.Conflictf("clouddrive-grant-revoked", "The cloud drive's provider no longer honours the grant "+
				"(it was revoked or has expired): disconnect it and connect again.")
		}
		return "", time.Time{}, upstream("minting an access token", retrieveMessage(err))
	}
	if tok.RefreshToken != "" && tok.RefreshToken != string(refresh) {
		// The provider rotated the refresh token; keep the new one.
		if _, err := s.store.UpdateCloudDriveRefreshToken(ctx, conn.GrantID, s.key.Seal(refreshContext(conn.GrantID), []byte(tok.RefreshToken))); err != nil {
			return "", time.Time{}, err
		}
	}
	s.mu.Lock()
	s.cached = cachedToken{grantID: conn.GrantID, token: tok.AccessToken, expiry: tok.Expiry}
	s.mu.Unlock()
	return tok.AccessToken, tok.Expiry, nil
}
