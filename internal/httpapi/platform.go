package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/platform"
	"github.com/capstan-dev/capstan/internal/servers"
)

// PlatformInfo is the platform description with the versions of the
// fleet's agents.
type PlatformInfo struct {
	platform.Info
	Agents []AgentVersion `json:"agents" doc:"Enrolled servers (not revoked) by the version of their agent, newest version first"`
}

// AgentVersion counts the servers whose agent runs one version.
type AgentVersion struct {
	Version string `json:"version" doc:"The agent's version as it reported it; empty when it did not"`
	Servers int    `json:"servers"`
	Online  int    `json:"online" doc:"Of those, the servers online now"`
}

// agentVersions counts servers by agent version, newest version first
// (by string order, which fits the build versions' date-and-commit form
// and vX.Y.Z tags of one width).
func agentVersions(list []servers.Server) []AgentVersion {
	by := map[string]*AgentVersion{}
	for _, srv := range list {
		if srv.Status != "online" && srv.Status != "offline" {
			continue
		}
		v := by[srv.AgentVersion]
		if v == nil {
			v = &AgentVersion{Version: srv.AgentVersion}
			by[srv.AgentVersion] = v
		}
		v.Servers++
		if srv.Status == "online" {
			v.Online++
		}
	}
	out := make([]AgentVersion, 0, len(by))
	for _, v := range by {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b AgentVersion) int { return strings.Compare(b.Version, a.Version) })
	return out
}

type healthOutput struct {
	Body struct {
		Status string `json:"status" enum:"ok"`
	}
}

type recoveryKitInput struct {
	Body struct {
		Password string `json:"password" minLength:"1" maxLength:"1024" doc:"The caller's own account password; it also encrypts the kit"`
	}
}

type recoveryKitOutput struct {
	ContentType        string `header:"Content-Type"`
	ContentDisposition string `header:"Content-Disposition"`
	Body               []byte `contentType:"application/octet-stream" doc:"age-encrypted (scrypt) recovery kit"`
}

func (s *Server) registerPlatform() {
	op(s, huma.Operation{
		OperationID: "healthz", Method: http.MethodGet, Path: "/healthz", Tags: []string{"Platform"},
		Summary: "Liveness and store health", Description: "200 when the control plane's store answers; 503 otherwise.",
		Errors: []int{http.StatusServiceUnavailable},
	}, Public, func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		if err := s.deps.Platform.Health(ctx); err != nil {
			s.log.WarnContext(ctx, "health check failed", "err", err.Error())
			return nil, newProblem(http.StatusServiceUnavailable, "store-unavailable", "The store does not answer.")
		}
		out := &healthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "get-platform", Method: http.MethodGet, Path: "/api/v1/platform", Tags: []string{"Platform"},
		Summary:     "Control plane name, public URL, versions and schema",
		Description: "With the enrolled servers counted by the version of their agent.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*bodyOutput[PlatformInfo], error) {
		info, err := s.deps.Platform.Info(ctx)
		if err != nil {
			return nil, err
		}
		out := &bodyOutput[PlatformInfo]{Body: PlatformInfo{Info: info, Agents: []AgentVersion{}}}
		if s.deps.Servers != nil {
			list, err := s.deps.Servers.List(ctx)
			if err != nil {
				return nil, err
			}
			out.Body.Agents = agentVersions(list)
		}
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "download-recovery-kit", Method: http.MethodPost, Path: "/api/v1/platform/recovery-kit", Tags: []string{"Platform"},
		Summary: "Download the recovery kit",
		Description: "Returns a file, encrypted with the caller's password, that holds the secret key, public URL and schema version: " +
			"what is needed to decrypt this control plane's secrets and artifacts. The password is checked again; " +
			"a wrong password is refused (403). Both outcomes are audited. Wrong passwords are throttled per session " +
			"(5, then 1 a minute: 429 with Retry-After). Open a kit with `capstan recovery-kit open`.",
		Errors: []int{http.StatusTooManyRequests},
	}, Admin, func(ctx context.Context, in *recoveryKitInput) (*recoveryKitOutput, error) {
		p, c := principal(ctx), caller(ctx)
		ok, err := s.deps.Auth.CheckOwnPassword(ctx, c, p, in.Body.Password)
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := s.deps.Audit.Record(ctx, c, audit.RecoveryKitRefused, audit.Target{Type: "platform"},
				map[string]any{"reason": "wrong_password"}); err != nil {
				return nil, err
			}
			return nil, fault.Forbiddenf("wrong-password", "The password is not this account's password.")
		}
		kit, err := s.deps.Platform.RecoveryKit(ctx, in.Body.Password)
		if err != nil {
			return nil, err
		}
		if err := s.deps.Audit.Record(ctx, c, audit.RecoveryKitDownloaded, audit.Target{Type: "platform"}, nil); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("capstan-recovery-kit-%s.age", time.Now().UTC().Format("20060102-150405"))
		return &recoveryKitOutput{ContentType: "application/octet-stream",
			ContentDisposition: fmt.Sprintf(`attachment; filename="%s"`, name), Body: kit}, nil
	})
}
