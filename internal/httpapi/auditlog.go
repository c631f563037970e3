package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
)

type auditListInput struct {
	Limit      int       `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Entries per page: 1 to 200; default 50 when absent"`
	Before     string    `query:"before" maxLength:"128" doc:"Cursor from next_cursor of the previous page"`
	Action     string    `query:"action" maxLength:"100" doc:"Exact action, or a prefix ending in .* (auth.*)"`
	Actor      string    `query:"actor" maxLength:"254" doc:"Who acted: a user's e-mail address, or an actor id (usr_…, srv_…)"`
	TargetType string    `query:"target_type" maxLength:"128" doc:"The object's type, e.g. server, application, notification_channel"`
	TargetID   string    `query:"target_id" maxLength:"128" doc:"The object's id"`
	Since      time.Time `query:"since" doc:"Entries at or after this time (RFC 3339)"`
	Until      time.Time `query:"until" doc:"Entries before this time (RFC 3339); later than since"`
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
		Description: "Filters combine: action (exact, or a prefix such as auth.*), actor (e-mail or id), the object " +
			"(target_type, target_id) and the time (since, until). A page's next_cursor, passed as before with the same " +
			"filters, gives the next older page.",
	}, Admin, func(ctx context.Context, in *auditListInput) (*auditListOutput, error) {
		entries, next, err := s.deps.Audit.Search(ctx, in.Limit, in.Before, audit.Filter{Action: in.Action, Actor: in.Actor,
			TargetType: in.TargetType, TargetID: in.TargetID, Since: in.Since, Until: in.Until})
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
