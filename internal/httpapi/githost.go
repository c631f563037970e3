package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
)

var errNoGitHost = fault.Conflictf("githost-unavailable", "The git host integration is not configured on this control plane.")

type manifestInput struct {
	Body struct {
		Organization string `json:"organization,omitempty" maxLength:"39" doc:"Create the app under this organization; default: the account signed in on the provider"`
	}
}

type manifestCompleteInput struct {
	Body struct {
		Code  string `json:"code" maxLength:"128" doc:"The code the provider appended to the redirect URL"`
		State string `json:"state" maxLength:"64" doc:"The state of POST /api/v1/githost/manifest, which the provider returned with the code"`
	}
}

type installationInput struct {
	Body struct {
		InstallationID int64  `json:"installation_id" minimum:"1" doc:"From the provider's redirect to the setup URL (at least 1)"`
		SetupAction    string `json:"setup_action" maxLength:"16" doc:"install or update, from the same redirect"`
		State          string `json:"state,omitempty" maxLength:"64" doc:"Returned by the provider when the install link carried one. Not needed: the installation is verified with the provider, as the app, before it is recorded."`
	}
}

type repositoriesOutput struct {
	Body struct {
		Repositories []githost.Repository `json:"repositories" doc:"Every repository of every recorded installation, by full name"`
	}
}

type branchesInput struct {
	InstallationID int64 `path:"installation_id" minimum:"1" doc:"A recorded installation (at least 1)"`
	RepoID         int64 `path:"repo_id" minimum:"1" doc:"A repository the installation can read (at least 1)"`
}

type branchesOutput struct {
	Body struct {
		Branches []githost.Branch `json:"branches"`
	}
}

type webhookInput struct {
	Event     string `header:"X-GitHub-Event" maxLength:"64" doc:"push, installation, installation_repositories (others are acknowledged and ignored)"`
	Delivery  string `header:"X-GitHub-Delivery" maxLength:"128" doc:"The delivery's id, for the log and the answer (the signature does not cover it: deliveries are told apart by their bodies)"`
	Signature string `header:"X-Hub-Signature-256" maxLength:"128" doc:"sha256= and the HMAC-SHA256 of the body with the app's webhook secret, in hex"`
	RawBody   []byte
}

func (s *Server) registerGitHost() {
	tags := []string{"Git host"}
	upstreamErr := http.StatusBadGateway
	op(s, huma.Operation{
		OperationID: "githost-status", Method: http.MethodGet, Path: "/api/v1/githost/status", Tags: tags,
		Summary:     "Whether a git host app is connected, and its installations",
		Description: "The connected app (never its secrets), its installations, and the webhook URL the provider delivers to.",
	}, Admin, func(ctx context.Context, _ *struct{}) (*bodyOutput[githost.Status], error) {
		if s.deps.GitHost == nil {
			return nil, errNoGitHost
		}
		return reply(s.deps.GitHost.Status(ctx))
	})
	op(s, huma.Operation{
		OperationID: "githost-manifest", Method: http.MethodPost, Path: "/api/v1/githost/manifest", Tags: tags,
		Summary: "Start connecting a git host app (manifest flow)",
		Description: "Returns the app manifest (read access to contents and metadata, push events to the webhook URL, redirect " +
			"and setup URLs back to this control plane), the provider's page to post it to as the form field \"manifest\", and a " +
			"single-use state bound to this session and valid 30 minutes. The provider creates the app and redirects the browser " +
			"back with ?code=&state=, which POST /api/v1/githost/manifest/complete takes. 409 when an app is connected.",
		Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasGitHost, func(ctx context.Context, in *manifestInput) (*bodyOutput[githost.Manifest], error) {
		return reply(s.deps.GitHost.StartManifest(ctx, caller(ctx), in.Body.Organization))
	}))
	op(s, huma.Operation{
		OperationID: "githost-manifest-complete", Method: http.MethodPost, Path: "/api/v1/githost/manifest/complete", Tags: tags,
		Summary: "Finish connecting the app with the provider's code",
		Description: "Uses the state up (422 when it is unknown, used, expired or another session's), exchanges the code with the " +
			"provider for the app's id, private key, webhook secret and client credentials, and stores them encrypted. 422 when the " +
			"provider refuses the code; 502 when the provider fails.",
		Errors: []int{http.StatusConflict, upstreamErr},
	}, Admin, needs(s.hasGitHost, func(ctx context.Context, in *manifestCompleteInput) (*bodyOutput[githost.Status], error) {
		return reply(s.deps.GitHost.CompleteManifest(ctx, caller(ctx), in.Body.Code, in.Body.State))
	}))
	op(s, huma.Operation{
		OperationID: "githost-add-installation", Method: http.MethodPost, Path: "/api/v1/githost/installations", Tags: tags,
		Summary: "Record an installation of the app",
		Description: "After the provider redirects to the setup URL with ?installation_id=&setup_action=. The installation is " +
			"verified with the provider, as the app, before it is recorded (422 for an installation the provider does not know " +
			"as this app's).",
		Errors: []int{http.StatusConflict, upstreamErr},
	}, Admin, needs(s.hasGitHost, func(ctx context.Context, in *installationInput) (*bodyOutput[githost.Status], error) {
		return reply(s.deps.GitHost.AddInstallation(ctx, caller(ctx), in.Body.InstallationID, in.Body.SetupAction))
	}))
	op(s, huma.Operation{
		OperationID: "githost-repositories", Method: http.MethodGet, Path: "/api/v1/githost/repositories", Tags: tags,
		Summary:     "Repositories the app's installations can read",
		Description: "Every page of every recorded installation's repositories, read from the provider with installation tokens.",
		Errors:      []int{http.StatusConflict, upstreamErr},
	}, Admin, func(ctx context.Context, _ *struct{}) (*repositoriesOutput, error) {
		if s.deps.GitHost == nil {
			return nil, errNoGitHost
		}
		list, err := s.deps.GitHost.Repositories(ctx)
		if err != nil {
			return nil, err
		}
		out := &repositoriesOutput{}
		out.Body.Repositories = list
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "githost-branches", Method: http.MethodGet, Path: "/api/v1/githost/repositories/{installation_id}/{repo_id}/branches",
		Tags: tags, Summary: "Branches of a repository, with their head commits",
		Description: "404 when the installation is not recorded or cannot read the repository.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, upstreamErr},
	}, Admin, needs(s.hasGitHost, func(ctx context.Context, in *branchesInput) (*branchesOutput, error) {
		list, err := s.deps.GitHost.Branches(ctx, in.InstallationID, in.RepoID)
		if err != nil {
			return nil, err
		}
		out := &branchesOutput{}
		out.Body.Branches = list
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "githost-webhook", Method: http.MethodPost, Path: "/api/v1/githost/webhook", Tags: tags,
		Summary: "Receive the git host's webhook deliveries",
		Description: "Called by the provider, not by users: no bearer token. At most a few deliveries are read and verified at " +
			"once; beyond them a delivery waits up to 2 s for its turn, then is answered 503 webhook-busy with Retry-After " +
			"without its body being read (GitHub does not deliver again by itself: redeliver it from the app's advanced " +
			"settings). A body must arrive within 10 s. The body's X-Hub-Signature-256 is checked with the app's webhook " +
			"secret, in constant time, before anything else (401 invalid-signature otherwise). A delivery is handled once per " +
			"body (its SHA-256, which the signature covers, unlike X-GitHub-Delivery): the same body again, under any delivery " +
			"id, is answered duplicate and does nothing. A push to a branch queues a deploy of the pushed commit for every " +
			"application from that branch with auto_deploy, unless the commit is older than the one the application deploys " +
			"already (see skipped); installation and installation_repositories events keep the installations current.",
		MaxBodyBytes: githost.MaxWebhookBody, BodyReadTimeout: webhookBodyTimeout,
		Metadata: map[string]any{bodySlotsKey: s.webhooks},
		Errors: []int{http.StatusUnauthorized, http.StatusConflict, http.StatusRequestTimeout, http.StatusRequestEntityTooLarge,
			http.StatusServiceUnavailable},
	}, Public, needs(s.hasGitHost, func(ctx context.Context, in *webhookInput) (*bodyOutput[githost.WebhookResult], error) {
		d := githost.Delivery{Event: in.Event, ID: in.Delivery, Signature: in.Signature, Body: in.RawBody}
		v, err := s.deps.GitHost.VerifyWebhook(ctx, d)
		// The body is checked: whether it was signed or not, the next
		// delivery may be read.
		releaseBody(ctx)
		if err != nil {
			return nil, err
		}
		return reply(s.deps.GitHost.HandleVerified(ctx, v))
	}))
	op(s, huma.Operation{
		OperationID: "githost-disconnect", Method: http.MethodDelete, Path: "/api/v1/githost/app", Tags: tags,
		Summary: "Disconnect the git host app",
		Description: "Forgets the app's credentials and installations. The app itself must be deleted on the provider (the " +
			"answer links its settings page). Applications built from git keep running their image; their new deploys fail " +
			"until an app is connected again.",
		Errors: []int{http.StatusNotFound},
	}, Admin, func(ctx context.Context, _ *struct{}) (*bodyOutput[githost.Disconnection], error) {
		if s.deps.GitHost == nil {
			return nil, errNoGitHost
		}
		return reply(s.deps.GitHost.Disconnect(ctx, caller(ctx)))
	})
}
