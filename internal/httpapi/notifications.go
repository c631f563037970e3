package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/notify"
)

var errNoNotify = errors.New("httpapi: Deps.Inbox is not set")

type inboxInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Items per page: 1 to 200; default 50 when absent"`
	Before string `query:"before" maxLength:"64" doc:"Cursor from next_cursor of the previous page"`
}

type inboxOutput struct {
	Body struct {
		Notifications []notify.Notification `json:"notifications" doc:"Newest first"`
		UnreadCount   int                   `json:"unread_count" doc:"Unread items in the whole inbox"`
		NextCursor    string                `json:"next_cursor,omitempty" doc:"Pass as before= for the next page; absent on the last page"`
	}
}

type readInput struct {
	Body struct {
		IDs []string `json:"ids,omitempty" maxItems:"200" doc:"Items to mark read (1 to 200); items already read, or not the caller's, are skipped"`
		All bool     `json:"all,omitempty" doc:"true marks every item read; give either ids or all"`
	}
}

type readOutput struct {
	Body struct {
		Marked      int `json:"marked" doc:"Items this call marked read"`
		UnreadCount int `json:"unread_count" doc:"Unread items left"`
	}
}

func inboxEventsDoc() string {
	names := make([]string, len(notify.InboxEvents))
	for i, t := range notify.InboxEvents {
		names[i] = "`" + string(t) + "`"
	}
	return strings.Join(names, ", ")
}

func (s *Server) registerNotifications() {
	tags := []string{"Notifications"}
	op(s, huma.Operation{
		OperationID: "list-notifications", Method: http.MethodGet, Path: "/api/v1/notifications", Tags: tags,
		Summary: "The caller's inbox, newest first, with the unread count",
		Description: "Every active user gets an item for each of these events: " + inboxEventsDoc() + ". Each item has a title, a " +
			"body, the path of its object in the web console (link) and the event's subject. A member's items of failed deployments " +
			"leave out the error.",
	}, SignedIn, func(ctx context.Context, in *inboxInput) (*inboxOutput, error) {
		if s.deps.Inbox == nil {
			return nil, errNoNotify
		}
		list, unread, err := s.deps.Inbox.List(ctx, principal(ctx).User.ID, in.Limit+1, in.Before)
		if err != nil {
			return nil, err
		}
		out := &inboxOutput{}
		if len(list) > in.Limit {
			list = list[:in.Limit]
			out.Body.NextCursor = list[len(list)-1].ID
		}
		out.Body.Notifications, out.Body.UnreadCount = list, unread
		if out.Body.Notifications == nil {
			out.Body.Notifications = []notify.Notification{}
		}
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "mark-notifications-read", Method: http.MethodPost, Path: "/api/v1/notifications/read", Tags: tags,
		Summary:     "Mark inbox items read",
		Description: "Body {ids: [...]} marks those items of the caller's inbox read, {all: true} every item. Neither, or both: 422.",
	}, SignedIn, func(ctx context.Context, in *readInput) (*readOutput, error) {
		if s.deps.Inbox == nil {
			return nil, errNoNotify
		}
		marked, unread, err := s.deps.Inbox.MarkRead(ctx, principal(ctx).User.ID, in.Body.IDs, in.Body.All, time.Now().UTC())
		if err != nil {
			return nil, err
		}
		out := &readOutput{}
		out.Body.Marked, out.Body.UnreadCount = marked, unread
		return out, nil
	})
}
