package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
)

type auditListInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Entries per page: 1 to 200; default 50 when absent"`
	Before string `query:"before" maxLength:"128" doc:"Cursor from next_cursor of the previous page"`
	Action string `query:"action" maxLength:"100" doc:"Exact action, or a prefix ending in .* (auth.*)"`
}

type auditListOutput struct {
	Body struct {
		Entries    []audit.Entry `json:"entries" doc:"Newest first"`
		NextCursor string        `json:"next_cursor,omitempty" doc:"Pass as before= for the next page; absent on the last page"`
	}
}

func (s *Server) registerAudit() {
	op(s, huma.Operation{
		OperationID: "list-audit-logs", Method: http.MethodGet, Path: "/api/v1/audit-logs", Tags: []string{"Audit"},
		Summary: "Audit log, newest first",
	}, Admin, func(ctx context.Context, in *auditListInput) (*auditListOutput, error) {
		entries, next, err := s.deps.Audit.List(ctx, in.Limit, in.Before, in.Action)
		if err != nil {
			return nil, err
		}
		out := &auditListOutput{}
		out.Body.Entries, out.Body.NextCursor = entries, next
		if out.Body.Entries == nil {
			out.Body.Entries = []audit.Entry{}
		}
		return out, nil
	})
}
