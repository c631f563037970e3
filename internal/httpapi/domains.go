package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/domains"
)

type domainListInput struct {
	ApplicationID string `query:"application_id" maxLength:"64" doc:"Only this application's domains"`
}

type domainListOutput struct {
	Body struct {
		Domains []domains.Domain `json:"domains" doc:"By hostname"`
	}
}

type domainIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type createDomainInput struct {
	Body struct {
		Hostname      string `json:"hostname" maxLength:"253" doc:"Lowercase, at least two labels, no IP address or wildcard; with redirect_www, without a leading www."`
		ApplicationID string `json:"application_id" maxLength:"64"`
		TLSMode       string `json:"tls_mode,omitempty" enum:"auto,internal,off" doc:"auto, internal or off; default auto when absent (an empty string is refused)"`
		RedirectWWW   bool   `json:"redirect_www,omitempty" doc:"Also serve www.<hostname> as a permanent redirect to hostname"`
	}
}

type patchDomainInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		TLSMode string `json:"tls_mode" enum:"auto,internal,off"`
	}
}

type domainChangeOutput struct {
	Location string `header:"Location" doc:"The domain's URL (on create)"`
	Body     domains.DomainChange
}

type serverApplyInput struct {
	ServerID string `path:"server_id" maxLength:"64"`
}

func (s *Server) registerDomains() {
	tags := []string{"Domains"}
	op(s, huma.Operation{
		OperationID: "list-domains", Method: http.MethodGet, Path: "/api/v1/domains", Tags: tags,
		Summary: "Domains, with their latest check",
	}, SignedIn, needs(s.hasDomains, func(ctx context.Context, in *domainListInput) (*domainListOutput, error) {
		list, err := s.deps.Domains.List(ctx, in.ApplicationID)
		if err != nil {
			return nil, err
		}
		out := &domainListOutput{}
		out.Body.Domains = list
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "create-domain", Method: http.MethodPost, Path: "/api/v1/domains", Tags: tags,
		Summary: "Serve an application under a hostname",
		Description: "Stores the domain and queues proxy.apply with the server's whole proxy state (job in the reply). Hostnames " +
			"are unique across the control plane, counting the www. names of redirect_www domains (409). If the proxy job fails, " +
			"the previous proxy configuration keeps serving.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasDomains, func(ctx context.Context, in *createDomainInput) (*domainChangeOutput, error) {
		c := caller(ctx)
		b := in.Body
		if b.TLSMode == "" {
			b.TLSMode = "auto"
		}
		ch, err := s.deps.Domains.Create(ctx, c, domains.NewDomain{Hostname: b.Hostname, ApplicationID: b.ApplicationID,
			TLSMode: b.TLSMode, RedirectWWW: b.RedirectWWW})
		if err != nil {
			return nil, err
		}
		return &domainChangeOutput{Location: "/api/v1/domains/" + ch.Domain.ID, Body: ch}, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-domain", Method: http.MethodGet, Path: "/api/v1/domains/{id}", Tags: tags,
		Summary: "A domain with its latest check", Errors: []int{http.StatusNotFound},
	}, SignedIn, needs(s.hasDomains, func(ctx context.Context, in *domainIDInput) (*bodyOutput[domains.Domain], error) {
		return reply(s.deps.Domains.Get(ctx, in.ID))
	}))
	op(s, huma.Operation{
		OperationID: "update-domain", Method: http.MethodPatch, Path: "/api/v1/domains/{id}", Tags: tags,
		Summary: "Change a domain's TLS mode", Description: "Queues proxy.apply with the server's whole proxy state.",
		Errors: []int{http.StatusNotFound},
	}, Admin, needs(s.hasDomains, func(ctx context.Context, in *patchDomainInput) (*domainChangeOutput, error) {
		ch, err := s.deps.Domains.UpdateTLS(ctx, caller(ctx), in.ID, in.Body.TLSMode)
		if err != nil {
			return nil, err
		}
		return &domainChangeOutput{Body: ch}, nil
	}))
	op(s, huma.Operation{
		OperationID: "delete-domain", Method: http.MethodDelete, Path: "/api/v1/domains/{id}", Tags: tags,
		Summary: "Stop serving a hostname", Description: "Deletes the domain and queues proxy.apply without it (job in the reply).",
		Errors: []int{http.StatusNotFound},
	}, Admin, needs(s.hasDomains, func(ctx context.Context, in *domainIDInput) (*domainChangeOutput, error) {
		ch, err := s.deps.Domains.Delete(ctx, caller(ctx), in.ID)
		if err != nil {
			return nil, err
		}
		return &domainChangeOutput{Body: ch}, nil
	}))
	op(s, huma.Operation{
		OperationID: "check-domain", Method: http.MethodPost, Path: "/api/v1/domains/{id}/check", Tags: tags,
		Summary: "Check a domain's DNS and certificate from its server",
		Description: "Queues domain.check (202). When it finishes, GET the domain: `check` holds the addresses the server resolves " +
			"for the hostname, whether they are the server's (its public addresses, or its private ones when it reports no " +
			"public address), the certificate the proxy serves and any errors.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDomains, func(ctx context.Context, in *domainIDInput) (*acceptedOutput, error) {
		j, err := s.deps.Domains.QueueCheck(ctx, caller(ctx), in.ID)
		if err != nil {
			return nil, err
		}
		return accepted(j, true), nil
	}))
	op(s, huma.Operation{
		OperationID: "apply-server-proxy", Method: http.MethodPost, Path: "/api/v1/domains/servers/{server_id}/apply", Tags: tags,
		Summary:       "Apply a server's proxy state again",
		Description:   "Queues proxy.apply with every domain of the server's applications (202). 409 for a server without an agent.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDomains, func(ctx context.Context, in *serverApplyInput) (*acceptedOutput, error) {
		j, err := s.deps.Domains.Apply(ctx, caller(ctx), in.ServerID)
		if err != nil {
			return nil, err
		}
		return accepted(j, true), nil
	}))
}
