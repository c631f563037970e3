package githost

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Audit actions of this package. Details never hold secrets or tokens.
const (
	ActionAppConnected         = "githost.app.connected"
	ActionAppDisconnected      = "githost.app.disconnected"
	ActionInstallationRecorded = "githost.installation.recorded"
	ActionInstallationRemoved  = "githost.installation.removed"
)

// WebhookPath is where the provider delivers webhooks, under the public
// URL.
const WebhookPath = "/api/v1/githost/webhook"

// Paths of the control plane's pages the provider sends the browser back
// to after creating the app (with ?code=&state=) and after installing it
// (with ?installation_id=&setup_action=).
const (
	ManifestRedirectPath = "/githost/manifest/callback"
	SetupPath            = "/githost/setup"
)

var (
	// A GitHub login: letters, digits and single hyphens, at most 39.
	loginPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,38}$`)
	codePattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	statePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
)

// Service manages the connected app.
type Service struct {
	store     Store
	provider  Provider
	key       *secrets.Key
	audit     *audit.Log
	publicURL string
	now       func() time.Time
	log       *slog.Logger

	mu     sync.Mutex // guards tokens
	tokens map[tokenKey]*cachedToken
	// push queues the deploys of a push; nil: pushes do nothing.
	push PushHandler
}

type tokenKey struct {
	appID, installationID, repoID int64
}

// cachedToken is one installation token; mu is held while it is minted,
// so concurrent users of one key wait for one mint.
type cachedToken struct {
	mu    sync.Mutex
	token Token
}

// NewService returns the git host service. publicURL is the control
// plane's public URL, which the manifest's webhook and redirect URLs are
// built on.
func NewService(st Store, p Provider, key *secrets.Key, log *audit.Log, publicURL string, now func() time.Time, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{store: st, provider: p, key: key, audit: log, publicURL: strings.TrimRight(publicURL, "/"), now: now,
		log: logger, tokens: map[tokenKey]*cachedToken{}}
}

// Provider returns the provider.
func (s *Service) Provider() Provider { return s.provider }

// WebOrigin is the origin of the provider's web pages, which the
// console's form posting the manifest goes to.
func (s *Service) WebOrigin() string { return s.provider.WebOrigin() }

// AppInfo is the connected app, without its secrets.
type AppInfo struct {
	Provider    string    `json:"provider" doc:"github"`
	ID          int64     `json:"id" doc:"The provider's app id"`
	Slug        string    `json:"slug"`
	Name        string    `json:"name"`
	Owner       string    `json:"owner" doc:"The account that owns the app"`
	HTMLURL     string    `json:"html_url" doc:"The app's page on the provider"`
	InstallURL  string    `json:"install_url" doc:"Where the app is installed on accounts and repositories"`
	ConnectedAt time.Time `json:"connected_at"`
}

// Status is whether an app is connected, with its installations.
type Status struct {
	Connected     bool           `json:"connected"`
	App           *AppInfo       `json:"app" doc:"null when no app is connected"`
	Installations []Installation `json:"installations" doc:"By id; empty when none"`
	WebhookURL    string         `json:"webhook_url" doc:"The URL the provider delivers webhooks to"`
}

// WebhookURL is the URL the provider delivers webhooks to.
func (s *Service) WebhookURL() string { return s.publicURL + WebhookPath }

// Status returns the connection's status.
func (s *Service) Status(ctx context.Context) (Status, error) {
	st := Status{WebhookURL: s.WebhookURL(), Installations: []Installation{}}
	a, err := s.store.GitHostApp(ctx)
	if fault.Is(err, fault.NotFound) {
		return st, nil
	}
	if err != nil {
		return Status{}, err
	}
	st.Connected = true
	st.App = &AppInfo{Provider: a.Provider, ID: a.AppID, Slug: a.Slug, Name: a.Name, Owner: a.OwnerLogin, HTMLURL: a.HTMLURL,
		InstallURL: s.provider.InstallURL(a), ConnectedAt: a.CreatedAt}
	list, err := s.store.GitHostInstallations(ctx)
	if err != nil {
		return Status{}, err
	}
	if list != nil {
		st.Installations = list
	}
	return st, nil
}

// Manifest is the start of the manifest flow: the browser posts Manifest
// (as the form field "manifest") to PostURL.
type Manifest struct {
	Manifest map[string]any `json:"manifest" doc:"The app manifest, to post as the form field \"manifest\""`
	PostURL  string         `json:"post_url" doc:"The provider's page to post the manifest to (it carries the state)"`
	State    string         `json:"state" doc:"Single-use, bound to this session, valid 30 minutes; the provider returns it with the code"`
}

func hashState(state string) string {
	sum := sha256.Sum256([]byte(state))
	return hex.EncodeToString(sum[:])
}

// StartManifest starts the manifest flow for an organization or ("") the
// admin's own account. 409 app-connected when an app is connected.
func (s *Service) StartManifest(ctx context.Context, c audit.Caller, organization string) (Manifest, error) {
	if organization != "" && !loginPattern.MatchString(organization) {
		return Manifest{}, fault.Invalidf("organization", "must be an account name: letters, digits and single hyphens, at most 39")
	}
	if _, err := s.store.GitHostApp(ctx); err == nil {
		return Manifest{}, errConnected()
	} else if !fault.Is(err, fault.NotFound) {
		return Manifest{}, err
	}
	if c.SessionID == "" {
		return Manifest{}, fault.Forbiddenf("session-required", "The manifest flow is bound to a signed-in session.")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Manifest{}, err
	}
	state := base64.RawURLEncoding.EncodeToString(b[:])
	if err := s.store.InsertGitHostState(ctx, hashState(state), c.SessionID, c.Actor.ID, organization, s.now().Add(StateTTL)); err != nil {
		return Manifest{}, err
	}
	return Manifest{Manifest: s.manifest(), PostURL: s.provider.ManifestPostURL(organization, state), State: state}, nil
}

// manifest is the app manifest: read access to code and metadata, push
// events delivered to the webhook receiver.
func (s *Service) manifest() map[string]any {
	name := "Capstan"
	if u, err := url.Parse(s.publicURL); err == nil && u.Hostname() != "" {
		name += " " + u.Hostname()
	}
	if len(name) > 34 { // GitHub's limit on app names
		name = name[:34]
	}
	return map[string]any{
		"name":            name,
		"url":             s.publicURL,
		"description":     "Deploys this account's repositories with Capstan at " + s.publicURL,
		"hook_attributes": map[string]any{"url": s.WebhookURL(), "active": true},
		"redirect_url":    s.publicURL + ManifestRedirectPath,
		"setup_url":       s.publicURL + SetupPath,
		"setup_on_update": true,
		"public":          false,
		"default_permissions": map[string]string{
			"contents": "read",
			"metadata": "read",
		},
		"default_events": []string{"push"},
	}
}

func errConnected() error {
	return fault.Conflictf("app-connected", "An app is connected already; disconnect it first (DELETE /api/v1/githost/app).")
}

func errNotConnected() error {
	return fault.Conflictf("app-not-connected", "No git host app is connected; connect one first (POST /api/v1/githost/manifest).")
}

// CompleteManifest finishes the manifest flow: it uses the state up (it
// must be unused, unexpired and this session's), exchanges the code for
// the app's credentials and stores them sealed.
func (s *Service) CompleteManifest(ctx context.Context, c audit.Caller, code, state string) (Status, error) {
	var errs fault.Fields
	if !codePattern.MatchString(code) {
		errs.Add("code", "must be the code the provider returned (letters, digits, '-' and '_')")
	}
	if !statePattern.MatchString(state) {
		errs.Add("state", "must be the state POST /api/v1/githost/manifest returned")
	}
	if err := errs.Err(); err != nil {
		return Status{}, err
	}
	ok, err := s.store.UseGitHostState(ctx, hashState(state), c.SessionID, s.now())
	if err != nil {
		return Status{}, err
	}
	if !ok {
		return Status{}, fault.Invalidf("state", "is unknown, used already, expired, or was issued to another session; start again")
	}
	if _, err := s.store.GitHostApp(ctx); err == nil {
		return Status{}, errConnected()
	} else if !fault.Is(err, fault.NotFound) {
		return Status{}, err
	}
	cred, err := s.provider.ConvertManifest(ctx, code)
	if err != nil {
		switch providerStatus(err) {
		case http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusGone:
			return Status{}, fault.Invalidf("code", "the provider did not accept it: it is wrong, used already or expired (codes last an hour)")
		}
		return Status{}, upstream("exchanging the manifest code", err)
	}
	if _, err := parseKey(cred.PrivateKey); err != nil {
		return Status{}, upstream("exchanging the manifest code", err)
	}
	a := App{Provider: s.provider.Name(), AppID: cred.AppID, Slug: cred.Slug, Name: cred.Name, OwnerLogin: cred.OwnerLogin,
		OwnerType: cred.OwnerType, HTMLURL: cred.HTMLURL, ClientID: cred.ClientID, CreatedBy: c.Actor.ID, CreatedAt: s.now().UTC()}
	a.SealedPrivateKey = s.key.Seal(sealContext(a.AppID, "private_key"), cred.PrivateKey)
	a.SealedWebhookSecret = s.key.Seal(sealContext(a.AppID, "webhook_secret"), []byte(cred.WebhookSecret))
	a.SealedClientSecret = s.key.Seal(sealContext(a.AppID, "client_secret"), []byte(cred.ClientSecret))
	if err := s.store.InsertGitHostApp(ctx, a); err != nil {
		return Status{}, err
	}
	if err := s.audit.Record(ctx, c, ActionAppConnected, audit.Target{Type: "githost_app", ID: strconv.FormatInt(a.AppID, 10)}, map[string]any{"slug": a.Slug, "owner": a.OwnerLogin, "provider": a.Provider}); err != nil {
		return Status{}, err
	}
	return s.Status(ctx)
}

func sealContext(appID int64, field string) string {
	return "githost_apps:" + strconv.FormatInt(appID, 10) + ":" + field
}

// upstream is a fault for a provider that failed: its status and message
// are safe to show (they never carry credentials).
func upstream(doing string, err error) error {
	return &fault.Error{Kind: fault.Upstream, Code: "provider-failed", Message: fmt.Sprintf("The git host failed while %s: %v", doing, err), Err: err}
}

// appKey returns the connected app and its signing key.
func (s *Service) appKey(ctx context.Context) (App, AppKey, error) {
	a, err := s.store.GitHostApp(ctx)
	if fault.Is(err, fault.NotFound) {
		return App{}, AppKey{}, errNotConnected()
	}
	if err != nil {
		return App{}, AppKey{}, err
	}
	pem, err := s.key.Open(sealContext(a.AppID, "private_key"), a.SealedPrivateKey)
	if err != nil {
		return App{}, AppKey{}, err
	}
	return a, AppKey{AppID: a.AppID, PrivateKey: pem}, nil
}

// WebhookSecret returns the connected app's webhook secret.
func (s *Service) WebhookSecret(ctx context.Context) ([]byte, error) {
	a, err := s.store.GitHostApp(ctx)
	if fault.Is(err, fault.NotFound) {
		return nil, errNotConnected()
	}
	if err != nil {
		return nil, err
	}
	return s.key.Open(sealContext(a.AppID, "webhook_secret"), a.SealedWebhookSecret)
}

// Setup actions the provider's setup redirect carries.
const (
	SetupInstall = "install"
	SetupUpdate  = "update"
)

// AddInstallation records an installation after the provider sent the
// browser back, once the provider confirms it is an installation of this
// app.
func (s *Service) AddInstallation(ctx context.Context, c audit.Caller, id int64, setupAction string) (Status, error) {
	if id < 1 {
		return Status{}, fault.Invalidf("installation_id", "must be at least 1")
	}
	if setupAction != SetupInstall && setupAction != SetupUpdate {
		return Status{}, fault.Invalidf("setup_action", "must be install or update (a requested installation waits for an owner's approval)")
	}
	_, key, err := s.appKey(ctx)
	if err != nil {
		return Status{}, err
	}
	in, err := s.provider.Installation(ctx, key, id)
	if err != nil {
		if st := providerStatus(err); st == http.StatusNotFound {
			return Status{}, fault.Invalidf("installation_id", "the provider knows no installation %d of this app", id)
		}
		return Status{}, upstream("verifying the installation", err)
	}
	if in.ID != id {
		return Status{}, upstream("verifying the installation", fmt.Errorf("asked for installation %d, got %d", id, in.ID))
	}
	if err := s.recordInstallation(ctx, in); err != nil {
		return Status{}, err
	}
	if err := s.audit.Record(ctx, c, ActionInstallationRecorded, audit.Target{Type: "githost_installation", ID: strconv.FormatInt(id, 10)}, map[string]any{"account": in.Account, "repository_selection": in.RepositorySelection, "setup_action": setupAction}); err != nil {
		return Status{}, err
	}
	return s.Status(ctx)
}

func (s *Service) recordInstallation(ctx context.Context, in Installation) error {
	now := s.now().UTC()
	in.CreatedAt, in.UpdatedAt = now, now
	return s.store.UpsertGitHostInstallation(ctx, in)
}

// token returns an installation token for the installation, scoped to
// repoID when it is not 0: the cached one while it has more than
// TokenMargin left, a new one otherwise.
func (s *Service) token(ctx context.Context, key AppKey, installationID, repoID int64) (Token, error) {
	k := tokenKey{appID: key.AppID, installationID: installationID, repoID: repoID}
	s.mu.Lock()
	ct := s.tokens[k]
	if ct == nil {
		ct = &cachedToken{}
		s.tokens[k] = ct
	}
	s.mu.Unlock()
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.token.Value != "" && s.now().Before(ct.token.ExpiresAt.Add(-TokenMargin)) {
		return ct.token, nil
	}
	var repos []int64
	if repoID != 0 {
		repos = []int64{repoID}
	}
	t, err := s.provider.InstallationToken(ctx, key, installationID, repos)
	if err != nil {
		return Token{}, err
	}
	ct.token = t
	return t, nil
}

// errMint marks the errors of minting a token.
var errMint = errors.New("minting an installation token")

// withToken runs fn with an installation token (see token). A cached
// token the provider no longer accepts (401: revoked, as on an uninstall)
// is dropped and fn runs once more with a new one. Errors of the mint
// wrap errMint.
func (s *Service) withToken(ctx context.Context, key AppKey, installationID, repoID int64, fn func(Token) error) error {
	for attempt := 0; ; attempt++ {
		tok, err := s.token(ctx, key, installationID, repoID)
		if err != nil {
			return fmt.Errorf("%w: %w", errMint, err)
		}
		err = fn(tok)
		if providerStatus(err) != http.StatusUnauthorized || attempt > 0 {
			return err
		}
		s.dropToken(tokenKey{appID: key.AppID, installationID: installationID, repoID: repoID}, tok)
	}
}

// dropToken forgets a cached token if it is still tok.
func (s *Service) dropToken(k tokenKey, tok Token) {
	s.mu.Lock()
	ct := s.tokens[k]
	s.mu.Unlock()
	if ct == nil {
		return
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.token.Value == tok.Value {
		ct.token = Token{}
	}
}

// forgetTokens drops the cached tokens of an installation, or of every
// installation when id is 0.
func (s *Service) forgetTokens(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.tokens {
		if id == 0 || k.installationID == id {
			delete(s.tokens, k)
		}
	}
}

// installation returns a recorded installation; 404 if unknown.
func (s *Service) installation(ctx context.Context, id int64) (Installation, error) {
	in, err := s.store.GitHostInstallation(ctx, id)
	if fault.Is(err, fault.NotFound) {
		return Installation{}, fault.NotFoundf("No installation %d is recorded; record it with POST /api/v1/githost/installations.", id)
	}
	return in, err
}

// Repositories lists every repository the recorded installations can
// read, by full name. An installation the provider no longer knows (it was
// uninstalled while no webhook came through) is forgotten on the way.
func (s *Service) Repositories(ctx context.Context) ([]Repository, error) {
	_, key, err := s.appKey(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.store.GitHostInstallations(ctx)
	if err != nil {
		return nil, err
	}
	out := []Repository{}
	for _, in := range list {
		var repos []Repository
		err := s.withToken(ctx, key, in.ID, 0, func(tok Token) (err error) {
			repos, err = s.provider.Repositories(ctx, tok.Value)
			return err
		})
		if errors.Is(err, errMint) && providerStatus(err) == http.StatusNotFound {
			if err := s.forgetInstallation(ctx, in.ID, "provider"); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, upstream(fmt.Sprintf("listing the repositories of installation %d", in.ID), err)
		}
		for _, r := range repos {
			r.InstallationID = in.ID
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.ToLower(out[i].FullName) < strings.ToLower(out[j].FullName) })
	return out, nil
}

// RepoAccess is a repository an installation can read, with a token
// scoped to it.
type RepoAccess struct {
	Repository Repository
	Token      Token
}

// Access returns a repository of an installation with a token scoped to
// it. An unknown installation is 404; a repository it cannot read is a
// fault.Invalid on field (or a 404 when field is "").
func (s *Service) Access(ctx context.Context, installationID, repoID int64, field string) (RepoAccess, error) {
	_, key, err := s.appKey(ctx)
	if err != nil {
		return RepoAccess{}, err
	}
	if _, err := s.installation(ctx, installationID); err != nil {
		if field != "" && fault.Is(err, fault.NotFound) {
			return RepoAccess{}, fault.Invalidf(strings.TrimSuffix(field, "repo_id")+"installation_id",
				"no installation %d is recorded", installationID)
		}
		return RepoAccess{}, err
	}
	cannot := func() error {
		if field != "" {
			return fault.Invalidf(field, "installation %d cannot access repository %d", installationID, repoID)
		}
		return fault.NotFoundf("Installation %d cannot access repository %d.", installationID, repoID)
	}
	var repo Repository
	var tok Token
	err = s.withToken(ctx, key, installationID, repoID, func(t Token) (err error) {
		tok = t
		repo, err = s.provider.Repository(ctx, t.Value, repoID)
		return err
	})
	if err != nil {
		// GitHub answers a token for a repository outside the
		// installation 422, and a repository it cannot see 404.
		switch providerStatus(err) {
		case http.StatusUnprocessableEntity, http.StatusNotFound:
			return RepoAccess{}, cannot()
		}
		return RepoAccess{}, upstream(fmt.Sprintf("reading repository %d through installation %d", repoID, installationID), err)
	}
	repo.InstallationID = installationID
	return RepoAccess{Repository: repo, Token: tok}, nil
}

// Branches lists a repository's branches with their head commits.
func (s *Service) Branches(ctx context.Context, installationID, repoID int64) ([]Branch, error) {
	ra, err := s.Access(ctx, installationID, repoID, "")
	if err != nil {
		return nil, err
	}
	list, err := s.provider.Branches(ctx, ra.Token.Value, ra.Repository)
	if err != nil {
		return nil, upstream(fmt.Sprintf("listing the branches of %s", ra.Repository.FullName), err)
	}
	if list == nil {
		list = []Branch{}
	}
	return list, nil
}

// Disconnection is the answer to forgetting the app.
type Disconnection struct {
	Disconnected bool   `json:"disconnected"`
	SettingsURL  string `json:"settings_url" doc:"The app's settings page on the provider, where it is deleted"`
	Message      string `json:"message"`
}

// Disconnect forgets the app, its secrets and installations. The app
// itself stays on the provider until deleted there. 404 when none is
// connected.
func (s *Service) Disconnect(ctx context.Context, c audit.Caller) (Disconnection, error) {
	a, err := s.store.GitHostApp(ctx)
	if fault.Is(err, fault.NotFound) {
		return Disconnection{}, fault.NotFoundf("No git host app is connected.")
	}
	if err != nil {
		return Disconnection{}, err
	}
	ok, err := s.store.DeleteGitHostApp(ctx)
	if err != nil {
		return Disconnection{}, err
	}
	if !ok {
		return Disconnection{}, fault.NotFoundf("No git host app is connected.")
	}
	s.forgetTokens(0)
	if err := s.audit.Record(ctx, c, ActionAppDisconnected, audit.Target{Type: "githost_app", ID: strconv.FormatInt(a.AppID, 10)}, map[string]any{"slug": a.Slug}); err != nil {
		return Disconnection{}, err
	}
	settings := s.provider.SettingsURL(a)
	return Disconnection{Disconnected: true, SettingsURL: settings,
		Message: "The app's credentials are forgotten here. The app itself still exists on the git host: delete it at " + settings +
			". Applications built from git keep their running image; new deploys of them fail until an app is connected again."}, nil
}

// Resolve resolves a branch, tag or commit of a repository to its commit.
// A ref the repository does not have is a fault.Invalid on "ref" with the
// provider's message.
func (s *Service) Resolve(ctx context.Context, ra RepoAccess, ref string) (Commit, error) {
	c, err := s.provider.Commit(ctx, ra.Token.Value, ra.Repository, ref)
	if err != nil {
		var pe *ProviderError
		if errors.As(err, &pe) && (pe.Status == http.StatusUnprocessableEntity || pe.Status == http.StatusNotFound || pe.Status == http.StatusConflict) {
			return Commit{}, fault.Invalidf("ref", "repository %s has no branch, tag or commit %q (the git host says: %s)", ra.Repository.FullName, ref, pe.Message)
		}
		return Commit{}, upstream(fmt.Sprintf("resolving %s of %s", ref, ra.Repository.FullName), err)
	}
	return c, nil
}

// Compare says where commit head stands relative to commit base in the
// repository. A commit the repository does not have, or two commits
// without a common ancestor, is fault NotFound.
func (s *Service) Compare(ctx context.Context, ra RepoAccess, base, head string) (Comparison, error) {
	c, err := s.provider.Compare(ctx, ra.Token.Value, ra.Repository, base, head)
	if err != nil {
		var pe *ProviderError
		if errors.As(err, &pe) && (pe.Status == http.StatusNotFound || pe.Status == http.StatusUnprocessableEntity) {
			return Comparison{}, fault.NotFoundf("Repository %s cannot compare %s with %s (the git host says: %s).",
				ra.Repository.FullName, base, head, pe.Message)
		}
		return Comparison{}, upstream(fmt.Sprintf("comparing %s with %s in %s", base, head, ra.Repository.FullName), err)
	}
	return c, nil
}

// forgetInstallation forgets an installation that is gone on the provider;
// by says who said so (webhook, provider).
func (s *Service) forgetInstallation(ctx context.Context, id int64, by string) error {
	ok, err := s.store.DeleteGitHostInstallation(ctx, id)
	if err != nil || !ok {
		return err
	}
	s.forgetTokens(id)
	return s.audit.Record(ctx, audit.System, ActionInstallationRemoved, audit.Target{Type: "githost_installation", ID: strconv.FormatInt(id, 10)}, map[string]any{"by": by})
}
