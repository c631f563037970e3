// Package githost connects the control plane to a git hosting provider
// through an app of the provider's (for GitHub, a GitHub App): the app
// manifest flow that creates it, its installations, the repositories and
// branches they can read, the short-lived installation tokens that deploys
// fetch code with, and the webhooks the provider sends.
//
// The provider sits behind Provider, so that another forge can follow
// without touching deploys; GitHub is the first implementation. The app's
// private key, webhook secret and client secret are sealed at rest and
// never leave the control plane; installation tokens are minted on demand,
// cached in memory until shortly before they expire, and handed to agents
// only through job secrets.
package githost

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Names of providers.
const (
	ProviderGitHub = "github"
)

// Defaults of the GitHub provider's base URLs; a GitHub Enterprise Server
// has its API under https://HOST/api/v3.
const (
	DefaultAPIURL = "https://api.github.com"
	DefaultWebURL = "https://github.com"
)

// Limits and lifetimes.
const (
	// StateTTL is how long a manifest flow's state stays usable.
	StateTTL = 30 * time.Minute
	// TokenMargin is how long before its expiry a cached installation
	// token is replaced by a new one: a deploy that takes it has at least
	// this long to fetch with it.
	TokenMargin = 5 * time.Minute
	// MaxRepositories bounds one listing of an installation's
	// repositories.
	MaxRepositories = 5000
	// MaxBranches bounds one listing of a repository's branches.
	MaxBranches = 5000
)

// App is the connected app as stored. The secrets are sealed.
type App struct {
	Provider   string
	AppID      int64
	Slug       string
	Name       string
	OwnerLogin string
	OwnerType  string
	HTMLURL    string
	ClientID   string
	// Sealed secrets (secrets.Key.Seal, bound to the app).
	SealedClientSecret  string
	SealedPrivateKey    string
	SealedWebhookSecret string
	CreatedBy           string
	CreatedAt           time.Time
}

// Installation is an installation of the app on an account.
type Installation struct {
	ID                  int64     `json:"id" doc:"The provider's installation id"`
	Account             string    `json:"account" doc:"The user or organization the app is installed on"`
	AccountType         string    `json:"account_type" doc:"User or Organization"`
	RepositorySelection string    `json:"repository_selection" enum:"all,selected," doc:"all: every repository of the account; selected: the ones chosen on the provider"`
	CreatedAt           time.Time `json:"created_at" doc:"When it was first recorded here"`
	UpdatedAt           time.Time `json:"updated_at" doc:"When the provider last described it"`
}

// Repository is a repository an installation can read.
type Repository struct {
	InstallationID int64  `json:"installation_id"`
	ID             int64  `json:"repo_id" doc:"The provider's repository id"`
	FullName       string `json:"full_name" doc:"owner/name"`
	DefaultBranch  string `json:"default_branch"`
	Private        bool   `json:"private"`
	// CloneURL is the HTTPS URL to fetch from.
	CloneURL string `json:"clone_url" doc:"HTTPS URL of the repository"`
}

// Branch is a branch with its head commit.
type Branch struct {
	Name      string `json:"name"`
	CommitSHA string `json:"commit_sha" doc:"The head commit's full sha"`
	Protected bool   `json:"protected"`
}

// Commit is a commit a ref names.
type Commit struct {
	SHA     string
	Message string
	Author  string // "Name <email>", or the name alone
}

// Statuses of a comparison of two commits: where head stands relative to
// base.
const (
	CompareIdentical = "identical" // the same commit
	CompareAhead     = "ahead"     // base is an ancestor of head
	CompareBehind    = "behind"    // head is an ancestor of base
	CompareDiverged  = "diverged"  // neither is an ancestor of the other
)

// Comparison is where a commit (head) stands relative to another (base).
type Comparison struct {
	Status string // CompareIdentical, CompareAhead, CompareBehind or CompareDiverged
	// AheadBy and BehindBy count the commits of head not in base and of
	// base not in head.
	AheadBy, BehindBy int
}

// AppKey is what the app signs its requests to the provider with.
type AppKey struct {
	AppID      int64
	PrivateKey []byte // PEM
}

// Credentials is what the provider returns when a manifest is converted
// into an app.
type Credentials struct {
	AppID         int64
	Slug          string
	Name          string
	OwnerLogin    string
	OwnerType     string
	HTMLURL       string
	ClientID      string
	ClientSecret  string
	WebhookSecret string
	PrivateKey    []byte // PEM
}

// Token is an installation access token.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// Provider is a git hosting provider's API, as the app uses it.
type Provider interface {
	// Name is the provider's name (ProviderGitHub).
	Name() string
	// ManifestPostURL is the provider's page a browser posts an app
	// manifest to, for an organization or ("") the signed-in user.
	ManifestPostURL(organization, state string) string
	// WebOrigin is the origin (scheme://host[:port]) of the provider's
	// web pages, where browsers post manifests and install the app.
	WebOrigin() string
	// ConvertManifest exchanges the code the provider returned after
	// creating an app from a manifest for the app's credentials.
	ConvertManifest(ctx context.Context, code string) (Credentials, error)
	// Installation describes an installation of the app.
	Installation(ctx context.Context, key AppKey, id int64) (Installation, error)
	// InstallationToken mints an installation access token, scoped to
	// the repositories repoIDs when there are any.
	InstallationToken(ctx context.Context, key AppKey, installationID int64, repoIDs []int64) (Token, error)
	// Repositories lists every repository a token can read, through all
	// of the provider's pages.
	Repositories(ctx context.Context, token string) ([]Repository, error)
	// Repository describes one repository by id.
	Repository(ctx context.Context, token string, id int64) (Repository, error)
	// Branches lists a repository's branches through all pages.
	Branches(ctx context.Context, token string, repo Repository) ([]Branch, error)
	// Commit resolves a branch, tag or commit of a repository to its
	// commit.
	Commit(ctx context.Context, token string, repo Repository, ref string) (Commit, error)
	// Compare says where commit head stands relative to commit base in
	// a repository's history.
	Compare(ctx context.Context, token string, repo Repository, base, head string) (Comparison, error)
	// InstallURL is the page where the app is installed on accounts.
	InstallURL(app App) string
	// SettingsURL is the provider's page of the app, where it is deleted.
	SettingsURL(app App) string
}

// ProviderError is a provider's answer that was not a success.
type ProviderError struct {
	// Status is the HTTP status the provider answered; 0 when it could
	// not be reached.
	Status int
	// Message is the provider's message (never a credential).
	Message string
}

func (e *ProviderError) Error() string {
	if e.Status == 0 {
		return "the git host could not be reached: " + e.Message
	}
	return fmt.Sprintf("the git host answered %d: %s", e.Status, e.Message)
}

// providerStatus returns the status of a provider error; 0 if err is none.
func providerStatus(err error) int {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Status
	}
	return 0
}

// Store persists the app, its installations, manifest states and webhook
// deliveries.
type Store interface {
	// InsertGitHostApp stores the app; fault.Conflict "app-connected" when
	// one is stored already.
	InsertGitHostApp(ctx context.Context, a App) error
	// GitHostApp returns the app; fault.NotFound if none is connected.
	GitHostApp(ctx context.Context) (App, error)
	// DeleteGitHostApp forgets the app and its installations; false when
	// none was stored.
	DeleteGitHostApp(ctx context.Context) (bool, error)
	// UpsertGitHostInstallation records an installation or refreshes it;
	// fault.Conflict "app-not-connected" when no app is stored.
	UpsertGitHostInstallation(ctx context.Context, in Installation) error
	// DeleteGitHostInstallation forgets an installation; false if unknown.
	DeleteGitHostInstallation(ctx context.Context, id int64) (bool, error)
	// GitHostInstallation returns one installation; fault.NotFound if
	// unknown.
	GitHostInstallation(ctx context.Context, id int64) (Installation, error)
	// GitHostInstallations returns the installations by id.
	GitHostInstallations(ctx context.Context) ([]Installation, error)
	// InsertGitHostState stores a manifest state's hash.
	InsertGitHostState(ctx context.Context, hash, sessionID, userID, organization string, expiresAt time.Time) error
	// UseGitHostState marks a state used if it is unused, unexpired at
	// now, and was issued to sessionID; false otherwise (nothing changes).
	// Expired states are deleted on the way.
	UseGitHostState(ctx context.Context, hash, sessionID string, now time.Time) (bool, error)
	// RememberGitHostDelivery records a webhook delivery by the hex
	// SHA-256 of its body, with its delivery id and event; false when a
	// delivery of the same body was recorded before (nothing changes).
	// Deliveries older than forgetBefore are deleted.
	RememberGitHostDelivery(ctx context.Context, bodySHA256, deliveryID, event string, now, forgetBefore time.Time) (bool, error)
	// ForgetGitHostDelivery forgets a delivery by its body's SHA-256 (its
	// handling failed); false if it was not recorded.
	ForgetGitHostDelivery(ctx context.Context, bodySHA256 string) (bool, error)
}
