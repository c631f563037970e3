package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
)

type createTokenInput struct {
	Body struct {
		Name      string   `json:"name" minLength:"1" maxLength:"64" doc:"What the token is for (\"deploy from CI\")"`
		Scopes    []string `json:"scopes" minItems:"1" maxItems:"6" doc:"read, read:secrets, deploy, operate, write, admin; a member's token can only read"`
		Resources []string `json:"resources,omitempty" maxItems:"100" doc:"Narrow the token to these: app:ID, server:ID (the server and what runs on it), db:ID, server-tag:TAG"`
		// ExpiresInDays and NeverExpires: 90 days unless said otherwise.
		ExpiresInDays int  `json:"expires_in_days,omitempty" minimum:"1" maximum:"365" doc:"Days until the token expires: 1 to 365 (default 90)"`
		NeverExpires  bool `json:"never_expires,omitempty" doc:"The token never expires (administrators only; not with expires_in_days)"`
	}
}

type tokensOutput struct {
	Body struct {
		Tokens []auth.APIToken `json:"tokens"`
	}
}

type tokenIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type currentTokenOutput struct {
	Body struct {
		Token auth.APIToken `json:"token"`
		Role  string        `json:"role" enum:"admin,member" doc:"The owner's role now: the token never does more than it allows"`
		// Allowed is what the token may do now: its scopes and what they
		// imply, within the owner's role.
		Allowed []string `json:"allowed" doc:"The scopes in effect now: the token's and what they imply, within its owner's role"`
	}
}

func (s *Server) registerTokens() {
	tags := []string{"API tokens"}
	op(s, huma.Operation{
		OperationID: "create-token", Method: http.MethodPost, Path: "/api/v1/tokens", Tags: tags,
		Summary: "Make an API token",
		Description: "The token (`cpt_…`) is in this answer only; it is stored as a hash. It acts as its owner with the rights of its " +
			"scopes, never more than the owner's role at the moment of use: a member's token only reads, and demoting or disabling " +
			"the owner narrows or stops their tokens at the next call. `resources` narrow it to applications, servers (with what runs " +
			"on them), database instances or servers with a tag; such a token is refused operations that act on none of them. " +
			"At most 100 live tokens per user (409 token-limit).",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict},
	}, SignedIn, func(ctx context.Context, in *createTokenInput) (*bodyOutput[auth.CreatedToken], error) {
		b := in.Body
		for i, r := range b.Resources {
			if err := s.resourceExists(ctx, r); fault.Is(err, fault.Invalid) {
				return nil, fault.Invalidf("body.resources["+strconv.Itoa(i)+"]", "%s names nothing that exists.", r)
			} else if err != nil {
				return nil, err
			}
		}
		t, err := s.deps.Auth.CreateToken(ctx, clientOf(ctx), principal(ctx), auth.NewToken{Name: b.Name, Scopes: b.Scopes,
			Resources: b.Resources, ExpiresInDays: b.ExpiresInDays, NoExpiry: b.NeverExpires})
		if err != nil {
			return nil, err
		}
		return &bodyOutput[auth.CreatedToken]{Body: t}, nil
	})
	op(s, huma.Operation{
		OperationID: "list-tokens", Method: http.MethodGet, Path: "/api/v1/tokens", Tags: tags,
		Summary:     "List API tokens",
		Description: "An administrator sees everyone's tokens, a member their own; revoked and expired ones too. Never the tokens themselves.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*tokensOutput, error) {
		list, err := s.deps.Auth.Tokens(ctx, principal(ctx))
		if err != nil {
			return nil, err
		}
		out := &tokensOutput{}
		out.Body.Tokens = list
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "current-token", Method: http.MethodGet, Path: "/api/v1/tokens/current", Tags: tags,
		Summary:     "What the presented API token may do",
		Description: "For a token's own introspection: its scopes, resources, expiry and what is in effect now. 404 for a session.",
		Errors:      []int{http.StatusNotFound},
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*currentTokenOutput, error) {
		p := principal(ctx)
		if p.Token == nil {
			return nil, fault.NotFoundf("This request carries a session's access token, not an API token.")
		}
		out := &currentTokenOutput{}
		out.Body.Token, out.Body.Role = *p.Token, "member"
		if p.User.Admin {
			out.Body.Role = "admin"
		}
		out.Body.Allowed = []string{}
		for _, sc := range auth.Scopes {
			if p.Allows(sc) {
				out.Body.Allowed = append(out.Body.Allowed, sc)
			}
		}
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "revoke-token", Method: http.MethodDelete, Path: "/api/v1/tokens/{id}", Tags: tags,
		Summary:     "Revoke an API token",
		Description: "A member revokes their own tokens, an administrator anyone's. The token is refused from its next call, on every control plane. 404 for a token that is not live.",
		Errors:      []int{http.StatusNotFound},
	}, SignedIn, func(ctx context.Context, in *tokenIDInput) (*bodyOutput[auth.APIToken], error) {
		t, err := s.deps.Auth.RevokeToken(ctx, clientOf(ctx), principal(ctx), in.ID)
		if err != nil {
			return nil, err
		}
		s.sessions.poke()
		return &bodyOutput[auth.APIToken]{Body: t}, nil
	})
}

// resourceExists checks that a token's resource names something that
// exists; its form is the auth service's to check, and a tag always
// exists (servers may get it later).
func (s *Server) resourceExists(ctx context.Context, r string) error {
	if !auth.ValidResource(r) {
		return nil // the auth service says what is wrong with it
	}
	kind, id := auth.ParseResource(r)
	var err error
	switch kind {
	case auth.ResourceServer:
		_, err = s.deps.Servers.Get(ctx, id)
	case auth.ResourceApp, auth.ResourceDatabase:
		_, err = s.targetOf(ctx, kind, id)
	default:
		return nil
	}
	if fault.Is(err, fault.NotFound) {
		return fault.Invalidf("", "%s names nothing that exists.", r)
	}
	return err
}
