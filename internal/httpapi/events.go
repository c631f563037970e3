package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
)

var errNoEvents = errors.New("httpapi: Deps.Events is not set")

// EventReader lists stored events.
type EventReader interface {
	ListEvents(ctx context.Context, limit int, before, typ string) ([]events.Event, error)
}

type eventListInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Events per page: 1 to 200; default 50 when absent"`
	Before string `query:"before" maxLength:"64" doc:"Cursor from next_cursor of the previous page"`
	Type   string `query:"type" maxLength:"64" doc:"Only events of this type (see the catalogue in the operation's description)"`
}

// PublishedEvent is an event as the API shows it.
type PublishedEvent struct {
	events.Event
}

type eventListOutput struct {
	Body struct {
		Events     []PublishedEvent `json:"events" doc:"Newest first"`
		NextCursor string           `json:"next_cursor,omitempty" doc:"Pass as before= for the next page; absent on the last page"`
	}
}

// eventCatalogueDoc introduces the catalogue wherever events are named.
func eventCatalogueDoc() string {
	return "Events the control plane publishes (each has an id, a type, a subject {type, id}, occurred_at and a payload " +
		"with the fields listed):\n\n" + events.CatalogueMarkdown()
}

func (s *Server) registerEvents() {
	op(s, huma.Operation{
		OperationID: "list-events", Method: http.MethodGet, Path: "/api/v1/events", Tags: []string{"Events"},
		Summary: "Events the control plane published, newest first",
		Description: "Every event is stored before it is delivered to the inbox, e-mail and notification channels, and kept " +
			"30 days (longer while a delivery of it is still being retried).\n\n" + eventCatalogueDoc(),
		Errors: []int{http.StatusUnprocessableEntity},
	}, Admin, needs(s.hasEvents, func(ctx context.Context, in *eventListInput) (*eventListOutput, error) {
		if in.Type != "" && !events.Known(events.Type(in.Type)) {
			return nil, fault.Invalidf("type", "unknown event type")
		}
		list, err := s.deps.Events.ListEvents(ctx, in.Limit+1, in.Before, in.Type)
		if err != nil {
			return nil, err
		}
		out := &eventListOutput{}
		if len(list) > in.Limit {
			list = list[:in.Limit]
			out.Body.NextCursor = list[len(list)-1].ID
		}
		out.Body.Events = make([]PublishedEvent, len(list))
		for i, ev := range list {
			out.Body.Events[i] = PublishedEvent{ev}
		}
		return out, nil
	}))
}
