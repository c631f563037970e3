package githost

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-github/v89/github"
)

// GitHub is the GitHub provider: GitHub.com, or a GitHub Enterprise Server
// through its API and web base URLs. It trusts the TLS certificates the
// system trusts (SSL_CERT_FILE and SSL_CERT_DIR on Linux).
type GitHub struct {
	api  string // with a trailing slash
	web  string // without one
	http *http.Client
	now  func() time.Time
}

// NewGitHub returns the GitHub provider for an API base URL (DefaultAPIURL,
// or https://HOST/api/v3 for a GitHub Enterprise Server) and a web base URL
// (DefaultWebURL, or https://HOST).
func NewGitHub(apiURL, webURL string, now func() time.Time) (*GitHub, error) {
	return NewGitHubClient(apiURL, webURL, &http.Client{Timeout: 30 * time.Second}, now)
}

// NewGitHubClient is NewGitHub with the HTTP client requests go through.
func NewGitHubClient(apiURL, webURL string, hc *http.Client, now func() time.Time) (*GitHub, error) {
	a, err := baseURL("API", apiURL)
	if err != nil {
		return nil, err
	}
	w, err := baseURL("web", webURL)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &GitHub{api: a + "/", web: w, http: hc, now: now}, nil
}

func baseURL(what, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("the git host %s URL must be an absolute https:// URL without query or credentials", what)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Name implements Provider.
func (g *GitHub) Name() string { return ProviderGitHub }

func (g *GitHub) client(bearer string) *github.Client {
	opts := []github.ClientOptionsFunc{github.WithHTTPClient(g.http), github.WithURLs(&g.api, &g.api),
		github.WithUserAgent("capstan")}
	if bearer != "" {
		opts = append(opts, github.WithAuthToken(bearer))
	}
	c, err := github.NewClient(opts...)
	if err != nil {
		// The options are fixed and were checked by NewGitHub.
		panic(err)
	}
	return c
}

// appJWT signs the app's JSON web token: RS256, issued 60 s in the past
// against clock drift, expiring in 10 minutes (GitHub's limit).
func (g *GitHub) appJWT(key AppKey) (string, error) {
	pk, err := parseKey(key.PrivateKey)
	if err != nil {
		return "", err
	}
	now := g.now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		IssuedAt:  jwt.NewNumericDate(now.Add(-60 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(10 * time.Minute)),
		Issuer:    strconv.FormatInt(key.AppID, 10),
	})
	return tok.SignedString(pk)
}

// parseKey parses an app's private key (PEM, PKCS#1 or PKCS#8 RSA).
func parseKey(pemKey []byte) (*rsa.PrivateKey, error) {
	k, err := jwt.ParseRSAPrivateKeyFromPEM(pemKey)
	if err != nil {
		return nil, errors.New("the app's private key is not an RSA key in PEM")
	}
	return k, nil
}

// ManifestPostURL implements Provider.
func (g *GitHub) ManifestPostURL(organization, state string) string {
	q := url.Values{"state": {state}}.Encode()
	if organization != "" {
		return g.web + "/organizations/" + url.PathEscape(organization) + "/settings/apps/new?" + q
	}
	return g.web + "/settings/apps/new?" + q
}

// WebOrigin implements Provider.
func (g *GitHub) WebOrigin() string {
	u, err := url.Parse(g.web)
	if err != nil {
		// NewGitHub checked the URL.
		panic(err)
	}
	return u.Scheme + "://" + u.Host
}

// InstallURL implements Provider.
func (g *GitHub) InstallURL(app App) string {
	return g.web + "/apps/" + url.PathEscape(app.Slug) + "/installations/new"
}

// SettingsURL implements Provider.
func (g *GitHub) SettingsURL(app App) string {
	if app.OwnerType == "Organization" {
		return g.web + "/organizations/" + url.PathEscape(app.OwnerLogin) + "/settings/apps/" + url.PathEscape(app.Slug)
	}
	return g.web + "/settings/apps/" + url.PathEscape(app.Slug)
}

// ConvertManifest implements Provider (POST /app-manifests/{code}/conversions).
func (g *GitHub) ConvertManifest(ctx context.Context, code string) (Credentials, error) {
	cfg, _, err := g.client("").Apps.CompleteAppManifest(ctx, code)
	if err != nil {
		return Credentials{}, providerError(err)
	}
	c := Credentials{AppID: cfg.GetID(), Slug: cfg.GetSlug(), Name: cfg.GetName(), HTMLURL: cfg.GetHTMLURL(),
		ClientID: cfg.GetClientID(), ClientSecret: cfg.GetClientSecret(), WebhookSecret: cfg.GetWebhookSecret(),
		PrivateKey: []byte(cfg.GetPEM())}
	if o := cfg.GetOwner(); o != nil {
		c.OwnerLogin, c.OwnerType = o.GetLogin(), o.GetType()
	}
	if c.AppID == 0 || c.Slug == "" || len(c.PrivateKey) == 0 {
		return Credentials{}, &ProviderError{Status: http.StatusBadGateway, Message: "the manifest conversion returned no app id, slug or key"}
	}
	return c, nil
}

// Installation implements Provider (GET /app/installations/{id}, as the app).
func (g *GitHub) Installation(ctx context.Context, key AppKey, id int64) (Installation, error) {
	tok, err := g.appJWT(key)
	if err != nil {
		return Installation{}, err
	}
	in, _, err := g.client(tok).Apps.GetInstallation(ctx, id)
	if err != nil {
		return Installation{}, providerError(err)
	}
	return Installation{ID: in.GetID(), Account: in.GetAccount().GetLogin(), AccountType: in.GetAccount().GetType(),
		RepositorySelection: in.GetRepositorySelection()}, nil
}

// InstallationToken implements Provider
// (POST /app/installations/{id}/access_tokens, as the app).
func (g *GitHub) InstallationToken(ctx context.Context, key AppKey, installationID int64, repoIDs []int64) (Token, error) {
	tok, err := g.appJWT(key)
	if err != nil {
		return Token{}, err
	}
	var opts *github.InstallationTokenOptions
	if len(repoIDs) > 0 {
		opts = &github.InstallationTokenOptions{RepositoryIDs: repoIDs}
	}
	it, _, err := g.client(tok).Apps.CreateInstallationToken(ctx, installationID, opts)
	if err != nil {
		return Token{}, providerError(err)
	}
	if it.GetToken() == "" || it.ExpiresAt == nil {
		return Token{}, &ProviderError{Status: http.StatusBadGateway, Message: "the installation token answer has no token or expiry"}
	}
	return Token{Value: it.GetToken(), ExpiresAt: it.GetExpiresAt().UTC()}, nil
}

func repositoryOf(r *github.Repository) Repository {
	return Repository{ID: r.GetID(), FullName: r.GetFullName(), DefaultBranch: r.GetDefaultBranch(), Private: r.GetPrivate(),
		CloneURL: r.GetCloneURL()}
}

// Repositories implements Provider (GET /installation/repositories, every
// page).
func (g *GitHub) Repositories(ctx context.Context, token string) ([]Repository, error) {
	c := g.client(token)
	opts := &github.ListOptions{PerPage: 100}
	var out []Repository
	for {
		page, resp, err := c.Apps.ListRepos(ctx, opts)
		if err != nil {
			return nil, providerError(err)
		}
		for _, r := range page.Repositories {
			out = append(out, repositoryOf(r))
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		if len(out) >= MaxRepositories {
			return nil, &ProviderError{Status: http.StatusBadGateway, Message: fmt.Sprintf("more than %d repositories", MaxRepositories)}
		}
		opts.Page = resp.NextPage
	}
}

// Repository implements Provider (GET /repositories/{id}).
func (g *GitHub) Repository(ctx context.Context, token string, id int64) (Repository, error) {
	r, _, err := g.client(token).Repositories.GetByID(ctx, id)
	if err != nil {
		return Repository{}, providerError(err)
	}
	return repositoryOf(r), nil
}

func splitFullName(full string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(full, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository name %q is not owner/name", full)
	}
	return owner, name, nil
}

// Branches implements Provider (GET /repos/{owner}/{repo}/branches, every
// page).
func (g *GitHub) Branches(ctx context.Context, token string, repo Repository) ([]Branch, error) {
	owner, name, err := splitFullName(repo.FullName)
	if err != nil {
		return nil, err
	}
	c := g.client(token)
	opts := &github.BranchListOptions{ListOptions: github.ListOptions{PerPage: 100}}
	var out []Branch
	for {
		page, resp, err := c.Repositories.ListBranches(ctx, owner, name, opts)
		if err != nil {
			return nil, providerError(err)
		}
		for _, b := range page {
			out = append(out, Branch{Name: b.GetName(), CommitSHA: b.GetCommit().GetSHA(), Protected: b.GetProtected()})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		if len(out) >= MaxBranches {
			return nil, &ProviderError{Status: http.StatusBadGateway, Message: fmt.Sprintf("more than %d branches", MaxBranches)}
		}
		opts.Page = resp.NextPage
	}
}

// Commit implements Provider (GET /repos/{owner}/{repo}/commits/{ref}).
func (g *GitHub) Commit(ctx context.Context, token string, repo Repository, ref string) (Commit, error) {
	owner, name, err := splitFullName(repo.FullName)
	if err != nil {
		return Commit{}, err
	}
	rc, _, err := g.client(token).Repositories.GetCommit(ctx, owner, name, ref, &github.ListOptions{PerPage: 1})
	if err != nil {
		return Commit{}, providerError(err)
	}
	c := Commit{SHA: rc.GetSHA(), Message: rc.GetCommit().GetMessage()}
	if a := rc.GetCommit().GetAuthor(); a != nil {
		c.Author = a.GetName()
		if a.GetEmail() != "" {
			c.Author += " <" + a.GetEmail() + ">"
		}
	}
	if len(c.SHA) != 40 {
		return Commit{}, &ProviderError{Status: http.StatusBadGateway, Message: "the commit answer has no sha"}
	}
	return c, nil
}

// Compare implements Provider (GET /repos/{owner}/{repo}/compare/{base}...{head},
// one commit per page: only the status and counts are read).
func (g *GitHub) Compare(ctx context.Context, token string, repo Repository, base, head string) (Comparison, error) {
	owner, name, err := splitFullName(repo.FullName)
	if err != nil {
		return Comparison{}, err
	}
	cc, _, err := g.client(token).Repositories.CompareCommits(ctx, owner, name, base, head, &github.ListOptions{PerPage: 1})
	if err != nil {
		return Comparison{}, providerError(err)
	}
	c := Comparison{Status: cc.GetStatus(), AheadBy: cc.GetAheadBy(), BehindBy: cc.GetBehindBy()}
	switch c.Status {
	case CompareIdentical, CompareAhead, CompareBehind, CompareDiverged:
		return c, nil
	}
	return Comparison{}, &ProviderError{Status: http.StatusBadGateway, Message: fmt.Sprintf("the comparison answer has an unknown status %q", c.Status)}
}

// providerError turns a go-github error into a ProviderError with the
// provider's status and message.
func providerError(err error) error {
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return &ProviderError{Status: er.Response.StatusCode, Message: er.Message}
	}
	var rl *github.RateLimitError
	if errors.As(err, &rl) && rl.Response != nil {
		return &ProviderError{Status: rl.Response.StatusCode, Message: "rate limited until " + rl.Rate.Reset.UTC().Format(time.RFC3339)}
	}
	var ar *github.AbuseRateLimitError
	if errors.As(err, &ar) && ar.Response != nil {
		return &ProviderError{Status: ar.Response.StatusCode, Message: "secondary rate limit: " + ar.Message}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return &ProviderError{Message: ue.Err.Error()}
	}
	return &ProviderError{Message: err.Error()}
}
