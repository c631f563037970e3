package testlab

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// GitHost is a stand-in for GitHub: its web pages that create an app from
// a manifest and install it on an account, and the REST API endpoints a GitHub App uses (manifest
// conversion, installations, installation access tokens, installation
// repositories, repositories by id, branches, commits, comparisons of two
// commits), served over HTTPS
// on 127.0.0.1 with a certificate of a CA the test made. Answers have the
// shapes of GitHub's REST API reference (apiVersion 2022-11-28), pagination
// through Link headers included.
//
// It checks what GitHub checks: the app's JWT is verified against the
// public key of the private key it issued (RS256, iss the app id, expiry
// at most 10 minutes ahead); installation tokens expire and are scoped to
// the repositories asked for; a manifest code works once.
type GitHost struct {
	// URL is the web base URL (https://127.0.0.1:PORT).
	URL string
	// APIURL is the REST API's base URL (URL + "/api/v3", as on GitHub
	// Enterprise Server).
	APIURL string
	// CA signed the server's certificate; CAFile holds it in PEM, for
	// SSL_CERT_FILE.
	CA     *TestCA
	CAFile string
	// Client trusts CA.
	Client *http.Client

	mints    atomic.Int64
	requests sync.Map // "METHOD /path" → *atomic.Int64

	mu            sync.Mutex // guards what follows
	nextID        int64
	codes         map[string]*hostedApp // manifest code → app, until used
	app           *hostedApp
	lastManifest  map[string]any
	installations map[int64]*hostedInstallation
	repos         map[int64]*HostedRepo
	gitRepos      map[int64]*gitRepo
	tokens        map[string]hostedToken
	tokenTTL      time.Duration
	now           func() time.Time // the time of token expiry (UseClock)
}

type hostedApp struct {
	id            int64
	slug, name    string
	owner         string
	ownerType     string
	key           *rsa.PrivateKey
	webhookSecret string
	clientID      string
	clientSecret  string
	manifest      map[string]any
	codeExpires   time.Time
}

type hostedInstallation struct {
	id          int64
	account     string
	accountType string
	// repos is nil for repository_selection "all" (every repository of
	// the account).
	repos     []int64
	createdAt time.Time
}

type hostedToken struct {
	installation int64
	repos        []int64 // nil: every repository of the installation
	expires      time.Time
}

// HostedRepo is a repository of the stand-in.
type HostedRepo struct {
	ID            int64
	Owner, Name   string
	Private       bool
	DefaultBranch string
	// CloneURL is what the API gives as clone_url; empty means a URL on
	// the stand-in itself.
	CloneURL string
	// Branches maps branch names to head commit shas.
	Branches map[string]string
	// Commits are the commits the commits endpoint knows, by sha.
	Commits map[string]HostedCommit
	// Resolve, when set, resolves a ref the maps do not know (a real
	// repository's branch, tag or sha); ok false answers 422.
	Resolve func(ref string) (c HostedCommit, ok bool)
}

// HostedCommit is a commit of a HostedRepo.
type HostedCommit struct {
	SHA, Message, AuthorName, AuthorEmail string
	// Parents are the shas of its parent commits, which the compare
	// endpoint walks; none for a root commit.
	Parents []string
}

// FullName is owner/name.
func (r *HostedRepo) FullName() string { return r.Owner + "/" + r.Name }

// StartGitHost starts the stand-in on a loopback port; it stops when the
// test ends.
func StartGitHost(t testing.TB) *GitHost {
	t.Helper()
	hs := newHTTPSStandIn(t, "githost")
	g := &GitHost{
		URL: "https://" + hs.Addr(), CA: hs.CA, CAFile: hs.CAFile, Client: hs.Client(),
		nextID: 1000, codes: map[string]*hostedApp{}, installations: map[int64]*hostedInstallation{},
		repos: map[int64]*HostedRepo{}, gitRepos: map[int64]*gitRepo{}, tokens: map[string]hostedToken{}, tokenTTL: time.Hour, now: time.Now,
	}
	g.APIURL = g.URL + "/api/v3"
	hs.Serve(t, g)
	return g
}

// SetTokenTTL sets the lifetime of the installation tokens minted from
// now on (GitHub's is an hour).
func (g *GitHost) SetTokenTTL(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tokenTTL = d
}

// UseClock makes the stand-in read the time from now, for the expiry of
// the installation tokens it mints and checks: a test that moves its own
// clock moves the provider's with it.
func (g *GitHost) UseClock(now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = now
}

// Mints is how many installation tokens were minted.
func (g *GitHost) Mints() int64 { return g.mints.Load() }

// Requests is how many requests "METHOD /path" (the path without the API
// prefix or query) received.
func (g *GitHost) Requests(methodPath string) int64 {
	if v, ok := g.requests.Load(methodPath); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (g *GitHost) id() int64 {
	g.nextID++
	return g.nextID
}

// AddRepo adds a repository with its branches (name → head sha).
func (g *GitHost) AddRepo(owner, name string, private bool, branches map[string]string) *HostedRepo {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &HostedRepo{ID: g.id(), Owner: owner, Name: name, Private: private, DefaultBranch: "main",
		Branches: map[string]string{}, Commits: map[string]HostedCommit{}}
	for b, sha := range branches {
		r.Branches[b] = sha
	}
	g.repos[r.ID] = r
	return r
}

// UpdateRepo runs f on a repository while no request reads it.
func (g *GitHost) UpdateRepo(r *HostedRepo, f func(r *HostedRepo)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(r)
}

// Install installs the app on account; with repos, on those repositories
// only (repository_selection "selected"), otherwise on every repository
// of the account. It returns the installation id.
func (g *GitHost) Install(t testing.TB, account string, repos ...*HostedRepo) int64 {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.app == nil {
		t.Fatal("testlab.GitHost: install before an app was created")
	}
	in := &hostedInstallation{id: g.id(), account: account, accountType: "Organization", createdAt: time.Now().UTC()}
	for _, r := range repos {
		in.repos = append(in.repos, r.ID)
	}
	g.installations[in.id] = in
	return in.id
}

// Uninstall removes an installation and revokes its tokens.
func (g *GitHost) Uninstall(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.installations, id)
	for k, tok := range g.tokens {
		if tok.installation == id {
			delete(g.tokens, k)
		}
	}
}

// AppID is the id of the app created from a manifest; 0 before.
func (g *GitHost) AppID() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.app == nil {
		return 0
	}
	return g.app.id
}

// WebhookSecret is the app's webhook secret.
func (g *GitHost) WebhookSecret() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.app == nil {
		return ""
	}
	return g.app.webhookSecret
}

// Manifest is the last manifest an app was created from.
func (g *GitHost) Manifest() map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastManifest
}

// TokenAllows reports whether token is a live installation token that may
// read the repository.
func (g *GitHost) TokenAllows(token string, repoID int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	tok, ok := g.tokens[token]
	if !ok || g.now().After(tok.expires) {
		return false
	}
	return g.tokenSees(tok, repoID)
}

// IssuedTokens returns every installation token minted so far.
func (g *GitHost) IssuedTokens() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.tokens))
	for k := range g.tokens {
		out = append(out, k)
	}
	return out
}

// tokenSees reports whether a token reaches a repository; g.mu is held.
func (g *GitHost) tokenSees(tok hostedToken, repoID int64) bool {
	in, ok := g.installations[tok.installation]
	if !ok || !g.installationSees(in, repoID) {
		return false
	}
	if tok.repos == nil {
		return true
	}
	for _, id := range tok.repos {
		if id == repoID {
			return true
		}
	}
	return false
}

// installationSees: g.mu is held.
func (g *GitHost) installationSees(in *hostedInstallation, repoID int64) bool {
	r, ok := g.repos[repoID]
	if !ok {
		return false
	}
	if in.repos == nil {
		return strings.EqualFold(r.Owner, in.account)
	}
	for _, id := range in.repos {
		if id == repoID {
			return true
		}
	}
	return false
}

// ServeHTTP serves the web pages and, under /api/v3, the REST API.
func (g *GitHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, api := strings.CutPrefix(r.URL.Path, "/api/v3")
	key := r.Method + " " + path
	v, _ := g.requests.LoadOrStore(key, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	if !api {
		if !g.serveGit(w, r) {
			g.serveWeb(w, r)
		}
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "app-manifests" && parts[2] == "conversions":
		g.convert(w, parts[1])
	case r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "app" && parts[1] == "installations":
		g.getInstallation(w, r, parts[2])
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "app" && parts[1] == "installations" && parts[3] == "access_tokens":
		g.mintToken(w, r, parts[2])
	case r.Method == http.MethodGet && path == "/installation/repositories":
		g.listInstallationRepos(w, r)
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "repositories":
		g.getRepo(w, r, parts[1])
	case r.Method == http.MethodGet && len(parts) == 4 && parts[0] == "repos" && parts[3] == "branches":
		g.listBranches(w, r, parts[1], parts[2])
	case r.Method == http.MethodGet && len(parts) >= 5 && parts[0] == "repos" && parts[3] == "commits":
		g.getCommit(w, r, parts[1], parts[2], strings.Join(parts[4:], "/"))
	case r.Method == http.MethodGet && len(parts) >= 5 && parts[0] == "repos" && parts[3] == "compare":
		g.compare(w, r, parts[1], parts[2], strings.Join(parts[4:], "/"))
	default:
		ghError(w, http.StatusNotFound, "Not Found")
	}
}

// ghError answers as GitHub's API does.
func ghError(w http.ResponseWriter, status int, msg string) {
	writeGH(w, status, map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest", "status": strconv.Itoa(status)})
}

func writeGH(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-GitHub-Api-Version-Selected", "2022-11-28")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errchkjson // test server
}

// serveWeb serves the app's install page (serveInstall) and the pages
// that create an app from a manifest: POST /settings/apps/new?state= and
// POST /organizations/{org}/settings/apps/new?state= with the form field
// manifest. As GitHub does after the user confirms, it creates the app
// and redirects to the manifest's redirect_url with ?code=&state=.
func (g *GitHost) serveWeb(w http.ResponseWriter, r *http.Request) {
	owner, ownerType := "capstan-admin", "User"
	switch {
	case strings.HasPrefix(r.URL.Path, "/apps/") && strings.HasSuffix(r.URL.Path, "/installations/new"):
		g.serveInstall(w, r, strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/apps/"), "/installations/new"))
		return
	case r.URL.Path == "/settings/apps/new":
	case strings.HasPrefix(r.URL.Path, "/organizations/") && strings.HasSuffix(r.URL.Path, "/settings/apps/new"):
		owner = strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/organizations/"), "/settings/apps/new")
		ownerType = "Organization"
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "post the manifest", http.StatusMethodNotAllowed)
		return
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.FormValue("manifest")), &m); err != nil {
		http.Error(w, "the manifest is not JSON", http.StatusBadRequest)
		return
	}
	if err := checkManifest(m); err != nil {
		http.Error(w, "invalid manifest: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	g.mu.Lock()
	name := m["name"].(string)
	app := &hostedApp{id: g.id(), slug: strings.ToLower(strings.ReplaceAll(name, " ", "-")), name: name, owner: owner, ownerType: ownerType,
		key: key, webhookSecret: randomHex(20), clientID: "Iv1." + randomHex(8), clientSecret: randomHex(20), manifest: m,
		codeExpires: time.Now().Add(time.Hour)}
	code := randomHex(20)
	g.codes[code] = app
	g.lastManifest = m
	g.mu.Unlock()
	q := url.Values{"code": {code}}
	if st := r.URL.Query().Get("state"); st != "" {
		q.Set("state", st)
	}
	http.Redirect(w, r, m["redirect_url"].(string)+"?"+q.Encode(), http.StatusFound)
}

// accountPattern is a GitHub account name.
var accountPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,39}$`)

// installPage is the stand-in's page that installs the app on an
// account, as GitHub's /apps/{slug}/installations/new does.
var installPage = template.Must(template.New("install").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Install {{.Name}}</title></head>
<body><main><h1>Install {{.Name}}</h1>
<form method="post"><label for="account">Account</label> <input id="account" name="account" value="{{.Owner}}">
<button type="submit">Install</button></form></main></body></html>
`))

// serveInstall serves the app's install page (GET) and installs it
// (POST, form field account) on every repository of the account; then,
// as GitHub does, it redirects to the manifest's setup_url with
// ?installation_id=&setup_action=install.
func (g *GitHost) serveInstall(w http.ResponseWriter, r *http.Request, slug string) {
	g.mu.Lock()
	app := g.app
	g.mu.Unlock()
	if app == nil || app.slug != slug {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		installPage.Execute(w, map[string]string{"Name": app.name, "Owner": app.owner}) //nolint:errcheck // test server
	case http.MethodPost:
		account := r.FormValue("account")
		if !accountPattern.MatchString(account) {
			http.Error(w, "no such account", http.StatusUnprocessableEntity)
			return
		}
		g.mu.Lock()
		in := &hostedInstallation{id: g.id(), account: account, accountType: "User", createdAt: time.Now().UTC()}
		if account != app.owner || app.ownerType == "Organization" {
			in.accountType = "Organization"
		}
		g.installations[in.id] = in
		g.mu.Unlock()
		setup, _ := app.manifest["setup_url"].(string)
		if setup == "" {
			http.Error(w, "installed; the app has no setup_url", http.StatusOK)
			return
		}
		q := url.Values{"installation_id": {strconv.FormatInt(in.id, 10)}, "setup_action": {"install"}}
		http.Redirect(w, r, setup+"?"+q.Encode(), http.StatusFound)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func checkManifest(m map[string]any) error {
	for _, k := range []string{"name", "url", "redirect_url"} {
		if s, _ := m[k].(string); s == "" {
			return fmt.Errorf("%s is required", k)
		}
	}
	if name := m["name"].(string); len(name) > 34 {
		return errors.New("name is longer than 34 characters")
	}
	hook, _ := m["hook_attributes"].(map[string]any)
	if u, _ := hook["url"].(string); u == "" {
		return errors.New("hook_attributes.url is required")
	}
	return nil
}

func (g *GitHost) convert(w http.ResponseWriter, code string) {
	g.mu.Lock()
	app, ok := g.codes[code]
	delete(g.codes, code)
	if ok && time.Now().Before(app.codeExpires) {
		g.app = app
	}
	g.mu.Unlock()
	if !ok || time.Now().After(app.codeExpires) {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(app.key)})
	now := time.Now().UTC().Format(time.RFC3339)
	writeGH(w, http.StatusCreated, map[string]any{
		"id": app.id, "slug": app.slug, "node_id": "A_" + randomHex(6), "name": app.name,
		"owner":       g.account(app.owner, app.ownerType),
		"description": app.manifest["description"], "external_url": app.manifest["url"],
		"html_url":   g.URL + "/apps/" + app.slug,
		"created_at": now, "updated_at": now,
		"permissions": app.manifest["default_permissions"], "events": app.manifest["default_events"],
		"client_id": app.clientID, "client_secret": app.clientSecret, "webhook_secret": app.webhookSecret,
		"pem": string(keyPEM),
	})
}

func (g *GitHost) account(login, typ string) map[string]any {
	return map[string]any{"login": login, "id": len(login) + 100, "node_id": "U_" + login, "type": typ,
		"html_url": g.URL + "/" + login, "site_admin": false}
}

// appAuth verifies the app's JWT: RS256 with the issued key, iss the
// app's id, issued in the past, expiring within 10 minutes.
func (g *GitHost) appAuth(w http.ResponseWriter, r *http.Request) (*hostedApp, bool) {
	g.mu.Lock()
	app := g.app
	g.mu.Unlock()
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if app == nil || !ok {
		ghError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return nil, false
	}
	claims := jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return &app.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuedAt(), jwt.WithExpirationRequired(),
		jwt.WithIssuer(strconv.FormatInt(app.id, 10)))
	if err != nil {
		ghError(w, http.StatusUnauthorized, "A JSON web token could not be decoded: "+err.Error())
		return nil, false
	}
	if claims.IssuedAt == nil || time.Until(claims.ExpiresAt.Time) > 10*time.Minute+5*time.Second ||
		claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 11*time.Minute {
		ghError(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future")
		return nil, false
	}
	return app, true
}

// tokenAuth checks an installation token (Bearer or token scheme).
func (g *GitHost) tokenAuth(w http.ResponseWriter, r *http.Request) (hostedToken, bool) {
	h := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		raw, ok = strings.CutPrefix(h, "token ")
	}
	g.mu.Lock()
	tok, found := g.tokens[raw]
	g.mu.Unlock()
	if !ok || !found || g.now().After(tok.expires) {
		ghError(w, http.StatusUnauthorized, "Bad credentials")
		return hostedToken{}, false
	}
	return tok, true
}

func (g *GitHost) installationJSON(app *hostedApp, in *hostedInstallation) map[string]any {
	sel := "all"
	if in.repos != nil {
		sel = "selected"
	}
	return map[string]any{
		"id": in.id, "account": g.account(in.account, in.accountType), "repository_selection": sel,
		"access_tokens_url": fmt.Sprintf("%s/app/installations/%d/access_tokens", g.APIURL, in.id),
		"repositories_url":  g.APIURL + "/installation/repositories",
		"html_url":          fmt.Sprintf("%s/organizations/%s/settings/installations/%d", g.URL, in.account, in.id),
		"app_id":            app.id, "app_slug": app.slug, "target_id": len(in.account) + 100, "target_type": in.accountType,
		"permissions": map[string]string{"contents": "read", "metadata": "read"}, "events": []string{"push"},
		"created_at": in.createdAt.Format(time.RFC3339), "updated_at": in.createdAt.Format(time.RFC3339),
		"single_file_name": nil, "has_multiple_single_files": false, "single_file_paths": []string{},
		"suspended_by": nil, "suspended_at": nil,
	}
}

func (g *GitHost) getInstallation(w http.ResponseWriter, r *http.Request, rawID string) {
	app, ok := g.appAuth(w, r)
	if !ok {
		return
	}
	id, _ := strconv.ParseInt(rawID, 10, 64)
	g.mu.Lock()
	in, found := g.installations[id]
	g.mu.Unlock()
	if !found {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeGH(w, http.StatusOK, g.installationJSON(app, in))
}

func (g *GitHost) mintToken(w http.ResponseWriter, r *http.Request, rawID string) {
	if _, ok := g.appAuth(w, r); !ok {
		return
	}
	id, _ := strconv.ParseInt(rawID, 10, 64)
	var body struct {
		RepositoryIDs []int64  `json:"repository_ids"`
		Repositories  []string `json:"repositories"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			ghError(w, http.StatusBadRequest, "Problems parsing JSON")
			return
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	in, found := g.installations[id]
	if !found {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	var repos []map[string]any
	for _, rid := range body.RepositoryIDs {
		if !g.installationSees(in, rid) {
			ghError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
		repos = append(repos, g.repoJSON(g.repos[rid]))
	}
	tok := hostedToken{installation: id, repos: body.RepositoryIDs, expires: g.now().Add(g.tokenTTL).Truncate(time.Second)}
	value := "ghs_" + randomHex(18)
	g.tokens[value] = tok
	g.mints.Add(1)
	sel := "all"
	if in.repos != nil || len(body.RepositoryIDs) > 0 {
		sel = "selected"
	}
	out := map[string]any{"token": value, "expires_at": tok.expires.UTC().Format(time.RFC3339),
		"permissions": map[string]string{"contents": "read", "metadata": "read"}, "repository_selection": sel}
	if repos != nil {
		out["repositories"] = repos
	}
	writeGH(w, http.StatusCreated, out)
}

func (g *GitHost) repoJSON(r *HostedRepo) map[string]any {
	clone := r.CloneURL
	if clone == "" {
		clone = g.URL + "/" + r.FullName() + ".git"
	}
	vis := "public"
	if r.Private {
		vis = "private"
	}
	return map[string]any{
		"id": r.ID, "node_id": "R_" + strconv.FormatInt(r.ID, 10), "name": r.Name, "full_name": r.FullName(),
		"private": r.Private, "owner": g.account(r.Owner, "Organization"), "html_url": g.URL + "/" + r.FullName(),
		"description": nil, "fork": false, "url": g.APIURL + "/repos/" + r.FullName(), "clone_url": clone,
		"git_url": "git://127.0.0.1/" + r.FullName() + ".git", "ssh_url": "git@127.0.0.1:" + r.FullName() + ".git",
		"default_branch": r.DefaultBranch, "visibility": vis, "archived": false, "disabled": false,
		"created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z", "pushed_at": "2026-01-02T03:04:05Z",
	}
}

// page cuts a list as GitHub's pagination does (per_page default 30,
// at most 100) and sets the Link header.
func page[T any](w http.ResponseWriter, r *http.Request, base string, list []T) []T {
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	per = min(per, 100)
	p, _ := strconv.Atoi(r.URL.Query().Get("page"))
	p = max(p, 1)
	last := max((len(list)+per-1)/per, 1)
	link := func(n int, rel string) string {
		return fmt.Sprintf(`<%s?per_page=%d&page=%d>; rel="%s"`, base, per, n, rel)
	}
	var links []string
	if p < last {
		links = append(links, link(p+1, "next"), link(last, "last"))
	}
	if p > 1 {
		links = append(links, link(1, "first"), link(p-1, "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	from := min((p-1)*per, len(list))
	return list[from:min(from+per, len(list))]
}

func (g *GitHost) listInstallationRepos(w http.ResponseWriter, r *http.Request) {
	tok, ok := g.tokenAuth(w, r)
	if !ok {
		return
	}
	g.mu.Lock()
	var ids []int64
	for id := range g.repos {
		if g.tokenSees(tok, id) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	all := make([]map[string]any, len(ids))
	for i, id := range ids {
		all[i] = g.repoJSON(g.repos[id])
	}
	sel := "all"
	if in := g.installations[tok.installation]; in != nil && in.repos != nil {
		sel = "selected"
	}
	g.mu.Unlock()
	writeGH(w, http.StatusOK, map[string]any{"total_count": len(all), "repository_selection": sel,
		"repositories": page(w, r, g.APIURL+"/installation/repositories", all)})
}

// visibleRepo finds a repository the token may read; g.mu is held.
func (g *GitHost) visibleRepo(tok hostedToken, owner, name string) *HostedRepo {
	for id, repo := range g.repos {
		if strings.EqualFold(repo.Owner, owner) && strings.EqualFold(repo.Name, name) && g.tokenSees(tok, id) {
			return repo
		}
	}
	return nil
}

func (g *GitHost) getRepo(w http.ResponseWriter, r *http.Request, rawID string) {
	tok, ok := g.tokenAuth(w, r)
	if !ok {
		return
	}
	id, _ := strconv.ParseInt(rawID, 10, 64)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.tokenSees(tok, id) {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeGH(w, http.StatusOK, g.repoJSON(g.repos[id]))
}

func (g *GitHost) listBranches(w http.ResponseWriter, r *http.Request, owner, name string) {
	tok, ok := g.tokenAuth(w, r)
	if !ok {
		return
	}
	g.mu.Lock()
	repo := g.visibleRepo(tok, owner, name)
	var list []map[string]any
	if repo != nil {
		names := make([]string, 0, len(repo.Branches))
		for b := range repo.Branches {
			names = append(names, b)
		}
		sort.Strings(names)
		for _, b := range names {
			sha := repo.Branches[b]
			list = append(list, map[string]any{"name": b, "protected": false,
				"commit": map[string]any{"sha": sha, "url": g.APIURL + "/repos/" + repo.FullName() + "/commits/" + sha}})
		}
	}
	g.mu.Unlock()
	if repo == nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	if list == nil {
		list = []map[string]any{}
	}
	writeGH(w, http.StatusOK, page(w, r, g.APIURL+"/repos/"+repo.FullName()+"/branches", list))
}

// commit finds a branch, tag or commit of a repository; g.mu is held.
func (g *GitHost) commit(repo *HostedRepo, ref string) (HostedCommit, bool) {
	if sha, ok := repo.Branches[ref]; ok {
		ref = sha
	}
	c, found := repo.Commits[ref]
	if !found && repo.Resolve != nil {
		c, found = repo.Resolve(ref)
	}
	return c, found
}

// commitJSON is a commit as the commits and compare endpoints show it.
func (g *GitHost) commitJSON(repo *HostedRepo, c HostedCommit) map[string]any {
	person := map[string]any{"name": c.AuthorName, "email": c.AuthorEmail, "date": "2026-01-02T03:04:05Z"}
	parents := []any{}
	for _, p := range c.Parents {
		parents = append(parents, map[string]any{"sha": p, "url": g.APIURL + "/repos/" + repo.FullName() + "/commits/" + p,
			"html_url": g.URL + "/" + repo.FullName() + "/commit/" + p})
	}
	return map[string]any{
		"sha": c.SHA, "node_id": "C_" + c.SHA[:8], "html_url": g.URL + "/" + repo.FullName() + "/commit/" + c.SHA,
		"url":    g.APIURL + "/repos/" + repo.FullName() + "/commits/" + c.SHA,
		"commit": map[string]any{"author": person, "committer": person, "message": c.Message, "comment_count": 0},
		"author": nil, "committer": nil, "parents": parents,
	}
}

func (g *GitHost) getCommit(w http.ResponseWriter, r *http.Request, owner, name, ref string) {
	tok, ok := g.tokenAuth(w, r)
	if !ok {
		return
	}
	g.mu.Lock()
	repo := g.visibleRepo(tok, owner, name)
	var c HostedCommit
	found := false
	if repo != nil {
		c, found = g.commit(repo, ref)
	}
	var body map[string]any
	if found {
		body = g.commitJSON(repo, c)
	}
	g.mu.Unlock()
	switch {
	case repo == nil:
		ghError(w, http.StatusNotFound, "Not Found")
	case !found:
		ghError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+ref)
	default:
		writeGH(w, http.StatusOK, body)
	}
}

// maxAncestry bounds the commits one comparison walks.
const maxAncestry = 10000

// ancestry lists the commits reachable from c (c included), nearest
// first, following the parents; g.mu is held.
func (g *GitHost) ancestry(repo *HostedRepo, c HostedCommit) ([]HostedCommit, map[string]bool) {
	seen := map[string]bool{c.SHA: true}
	list := []HostedCommit{c}
	for i := 0; i < len(list) && len(list) < maxAncestry; i++ {
		for _, p := range list[i].Parents {
			if seen[p] {
				continue
			}
			if pc, ok := g.commit(repo, p); ok {
				seen[p] = true
				list = append(list, pc)
			}
		}
	}
	return list, seen
}

// compare answers GET /repos/{owner}/{repo}/compare/{base}...{head} as
// GitHub does: where head stands relative to base (status identical,
// ahead, behind or diverged, with ahead_by and behind_by), the merge
// base, and the commits of head that base lacks, oldest first, a page of
// them at a time. Unknown commits are 404 Not Found, commits without a
// common ancestor 404 "No common ancestor".
func (g *GitHost) compare(w http.ResponseWriter, r *http.Request, owner, name, basehead string) {
	tok, ok := g.tokenAuth(w, r)
	if !ok {
		return
	}
	baseRef, headRef, ok := strings.Cut(basehead, "...")
	if !ok {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	repo := g.visibleRepo(tok, owner, name)
	if repo == nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	base, okBase := g.commit(repo, baseRef)
	head, okHead := g.commit(repo, headRef)
	if !okBase || !okHead {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	baseList, inBase := g.ancestry(repo, base)
	headList, inHead := g.ancestry(repo, head)
	var mergeBase *HostedCommit
	var ahead []HostedCommit
	for i, c := range headList {
		if !inBase[c.SHA] {
			ahead = append(ahead, c)
		} else if mergeBase == nil {
			mergeBase = &headList[i]
		}
	}
	if mergeBase == nil {
		ghError(w, http.StatusNotFound, "No common ancestor between "+baseRef+" and "+headRef+".")
		return
	}
	behind := 0
	for _, c := range baseList {
		if !inHead[c.SHA] {
			behind++
		}
	}
	status := "diverged"
	switch {
	case base.SHA == head.SHA:
		status = "identical"
	case behind == 0:
		status = "ahead"
	case len(ahead) == 0:
		status = "behind"
	}
	commits := make([]map[string]any, 0, len(ahead))
	for i := len(ahead) - 1; i >= 0; i-- {
		commits = append(commits, g.commitJSON(repo, ahead[i]))
	}
	web := g.URL + "/" + repo.FullName() + "/compare/" + basehead
	api := g.APIURL + "/repos/" + repo.FullName() + "/compare/" + basehead
	writeGH(w, http.StatusOK, map[string]any{
		"url": api, "html_url": web, "permalink_url": web, "diff_url": web + ".diff", "patch_url": web + ".patch",
		"base_commit": g.commitJSON(repo, base), "merge_base_commit": g.commitJSON(repo, *mergeBase),
		"status": status, "ahead_by": len(ahead), "behind_by": behind, "total_commits": len(ahead),
		"commits": page(w, r, api, commits), "files": []any{},
	})
}

// PostManifest posts a manifest to postURL as an admin's browser does and
// returns the code and state of the provider's redirect back, failing the
// test unless it redirects to redirectURL.
func (g *GitHost) PostManifest(t testing.TB, postURL string, manifest map[string]any, redirectURL string) (code, state string) {
	t.Helper()
	raw, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.Client.PostForm(postURL, url.Values{"manifest": {string(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("posting the manifest to %s: status %d, want %d", postURL, resp.StatusCode, http.StatusFound)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != redirectURL {
		t.Fatalf("the provider redirected to %s, want %s", got, redirectURL)
	}
	return loc.Query().Get("code"), loc.Query().Get("state")
}

// RevokeTokens revokes every installation token minted so far.
func (g *GitHost) RevokeTokens() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.tokens)
}
