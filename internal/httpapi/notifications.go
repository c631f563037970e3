package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/notify"
)

var errNoNotify = errors.New("httpapi: Deps.Inbox is not set")

type inboxInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Items per page: 1 to 200; default 50 when absent"`
	Before string `query:"before" maxLength:"64" doc:"Cursor from next_cursor of the previous page; a cursor that is not an item of your inbox is a 422"`
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
			"body, the path of its object in the web console (link) and the event's subject. A member's items of failed deployments and backups " +
			"leave out the error.",
	}, SignedIn, needs(s.hasInbox, func(ctx context.Context, in *inboxInput) (*inboxOutput, error) {
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
	}))
	op(s, huma.Operation{
		OperationID: "mark-notifications-read", Method: http.MethodPost, Path: "/api/v1/notifications/read", Tags: tags,
		Summary:     "Mark inbox items read",
		Description: "Body {ids: [...]} marks those items of the caller's inbox read, {all: true} every item. Neither, or both: 422.",
	}, SignedIn, needs(s.hasInbox, func(ctx context.Context, in *readInput) (*readOutput, error) {
		marked, unread, err := s.deps.Inbox.MarkRead(ctx, principal(ctx).User.ID, in.Body.IDs, in.Body.All, time.Now().UTC())
		if err != nil {
			return nil, err
		}
		out := &readOutput{}
		out.Body.Marked, out.Body.UnreadCount = marked, unread
		return out, nil
	}))
}

type channelIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type channelListOutput struct {
	Body struct {
		Channels []notify.Channel `json:"channels" doc:"Oldest first; destinations are never returned"`
	}
}

// CreatedChannel is a channel as created or rotated: a webhook's signing
// secret is shown here once.
type CreatedChannel struct {
	notify.Channel
	Secret string `json:"secret,omitempty" doc:"webhook: the signing secret (whsec_…), shown only in this answer"`
}

type channelCreateInput struct {
	Body notify.NewChannel
}

type channelPatchInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body notify.ChannelPatch
}

const channelsDoc = "Kinds: team_chat (config {url}: a Slack-compatible incoming-webhook URL; the message has text and blocks), " +
	"messenger (config {bot_token, chat_id, api_base_url}: a Telegram-compatible bot API's sendMessage; api_base_url defaults to " +
	"https://api.telegram.org, so a self-hosted Bot API server works), webhook (config {url}: any HTTPS endpoint). URLs must be " +
	"https://. config is stored encrypted and never returned: config_set says which fields are set.\n\n" +
	"Webhooks follow the Standard Webhooks specification: a POST of {type, timestamp, data} with the headers webhook-id (the " +
	"delivery's id, the same on every retry), webhook-timestamp (Unix seconds) and webhook-signature (space-separated \"v1,\" and " +
	"the base64 HMAC-SHA256 of \"id.timestamp.body\" keyed with the base64-decoded part of the whsec_ secret; during a rotation's " +
	"grace period with both secrets).\n\n" +
	"A delivery that fails (no 2xx answer) is retried with exponential backoff (10 s, 20 s, 40 s … at most an hour apart) for up " +
	"to 24 hours; the channel's detail lists its latest deliveries. Deliveries refuse loopback, private, link-local (metadata) " +
	"and other internal addresses, checked after DNS resolution on every connection and redirect, unless the operator allows " +
	"them (capstan serve --notify-allow-destinations)."

func (s *Server) registerChannels() {
	tags := []string{"Notifications"}
	op(s, huma.Operation{
		OperationID: "list-notification-channels", Method: http.MethodGet, Path: "/api/v1/notifications/channels", Tags: tags,
		Summary: "Notification channels", Description: channelsDoc,
	}, Admin, func(ctx context.Context, _ *struct{}) (*channelListOutput, error) {
		if s.deps.Channels == nil {
			return nil, errNoNotify
		}
		list, err := s.deps.Channels.List(ctx)
		if err != nil {
			return nil, err
		}
		out := &channelListOutput{}
		out.Body.Channels = list
		if out.Body.Channels == nil {
			out.Body.Channels = []notify.Channel{}
		}
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "create-notification-channel", Method: http.MethodPost, Path: "/api/v1/notifications/channels", Tags: tags,
		Summary: "Create a notification channel",
		Description: "events lists event types from the catalogue; an unknown one is a 422. A webhook channel's answer holds its " +
			"signing secret, shown once. A name in use: 409. Audited.\n\n" + channelsDoc + "\n\n" + eventCatalogueDoc(),
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasChannels, func(ctx context.Context, in *channelCreateInput) (*bodyOutput[CreatedChannel], error) {
		ch, secret, err := s.deps.Channels.Create(ctx, caller(ctx), in.Body)
		if err != nil {
			return nil, err
		}
		return &bodyOutput[CreatedChannel]{Body: CreatedChannel{Channel: ch, Secret: secret}}, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-notification-channel", Method: http.MethodGet, Path: "/api/v1/notifications/channels/{id}", Tags: tags,
		Summary:     "A notification channel with its latest deliveries",
		Description: "Each delivery has its event, status (pending, delivered, failed), attempts, the last response code and error.",
		Errors:      []int{http.StatusNotFound},
	}, Admin, needs(s.hasChannels, func(ctx context.Context, in *channelIDInput) (*bodyOutput[notify.ChannelDetail], error) {
		return reply(s.deps.Channels.Get(ctx, in.ID))
	}))
	op(s, huma.Operation{
		OperationID: "update-notification-channel", Method: http.MethodPatch, Path: "/api/v1/notifications/channels/{id}", Tags: tags,
		Summary: "Change a notification channel",
		Description: "name, events, enabled, config (a new destination, replacing the whole config), and for a webhook rotate_secret: " +
			"the answer holds the new secret once, and the old one keeps signing for grace_seconds (default a day). Audited.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasChannels, func(ctx context.Context, in *channelPatchInput) (*bodyOutput[CreatedChannel], error) {
		ch, secret, err := s.deps.Channels.Update(ctx, caller(ctx), in.ID, in.Body)
		if err != nil {
			return nil, err
		}
		return &bodyOutput[CreatedChannel]{Body: CreatedChannel{Channel: ch, Secret: secret}}, nil
	}))
	op(s, huma.Operation{
		OperationID: "delete-notification-channel", Method: http.MethodDelete, Path: "/api/v1/notifications/channels/{id}", Tags: tags,
		Summary: "Delete a notification channel", Description: "Its pending deliveries fail. Audited.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, Admin, func(ctx context.Context, in *channelIDInput) (*struct{}, error) {
		if s.deps.Channels == nil {
			return nil, errNoNotify
		}
		return &struct{}{}, s.deps.Channels.Delete(ctx, caller(ctx), in.ID)
	})
	op(s, huma.Operation{
		OperationID: "test-notification-channel", Method: http.MethodPost, Path: "/api/v1/notifications/channels/{id}/test", Tags: tags,
		Summary:     "Send a test message now",
		Description: "Sends at once (no retries) an event of type channel.test and answers with what came of it.",
		Errors:      []int{http.StatusNotFound},
	}, Admin, needs(s.hasChannels, func(ctx context.Context, in *channelIDInput) (*bodyOutput[notify.ChannelTestResult], error) {
		return reply(s.deps.Channels.Test(ctx, in.ID))
	}))
}

type settingsInput struct {
	Body notify.Settings
}

func (s *Server) registerNotificationSettings() {
	tags := []string{"Notifications"}
	op(s, huma.Operation{
		OperationID: "get-notification-settings", Method: http.MethodGet, Path: "/api/v1/notifications/settings", Tags: tags,
		Summary:     "The caller's e-mail preferences",
		Description: "Which events are mailed to the caller (when the control plane has SMTP settings): deployments that succeed (default off), deployments that fail (default on), alerts opening and resolving (default on).",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*bodyOutput[notify.Settings], error) {
		if s.deps.Preferences == nil {
			return nil, errNoNotify
		}
		return reply(s.deps.Preferences.Get(ctx, principal(ctx).User.ID))
	})
	op(s, huma.Operation{
		OperationID: "put-notification-settings", Method: http.MethodPut, Path: "/api/v1/notifications/settings", Tags: tags,
		Summary:     "Replace the caller's e-mail preferences",
		Description: "All three booleans are required and set as given.",
	}, SignedIn, needs(s.hasPreferences, func(ctx context.Context, in *settingsInput) (*bodyOutput[notify.Settings], error) {
		return reply(s.deps.Preferences.Put(ctx, principal(ctx).User.ID, in.Body))
	}))
}

type mailTestInput struct {
	Body struct {
		To string `json:"to" minLength:"3" maxLength:"254" doc:"The address to send the test e-mail to"`
	}
}

func (s *Server) registerEmail() {
	tags := []string{"Notifications"}
	op(s, huma.Operation{
		OperationID: "get-email-settings", Method: http.MethodGet, Path: "/api/v1/notifications/email", Tags: tags,
		Summary: "The control plane's SMTP settings",
		Description: "Host, port, security, user and from address as the control plane was started with (--smtp-* flags or " +
			"CAPSTAN_SMTP_* variables); the password never, only whether one is set. enabled is false without an SMTP host.",
	}, Admin, func(ctx context.Context, _ *struct{}) (*bodyOutput[notify.SMTPSettings], error) {
		return &bodyOutput[notify.SMTPSettings]{Body: s.deps.SMTP.Settings()}, nil
	})
	op(s, huma.Operation{
		OperationID: "test-email", Method: http.MethodPost, Path: "/api/v1/notifications/email/test", Tags: tags,
		Summary: "Send a test e-mail now",
		Description: "Sends a test e-mail to the address given at once (no retries), with the control plane's SMTP settings, and " +
			"answers with what came of it: delivered, or the error (the connection's or the SMTP server's answer). 409 " +
			"email-not-configured without an SMTP host. Audited.",
		Errors: []int{http.StatusConflict},
	}, Admin, func(ctx context.Context, in *mailTestInput) (*bodyOutput[notify.MailTestResult], error) {
		r, err := s.deps.SMTP.Test(ctx, in.Body.To)
		if err != nil {
			return nil, err
		}
		if err := s.deps.Audit.Record(ctx, caller(ctx), "notification.email.tested", audit.Target{Type: "email"},
			map[string]any{"to": r.To, "delivered": r.Delivered}); err != nil {
			return nil, err
		}
		return &bodyOutput[notify.MailTestResult]{Body: r}, nil
	})
}
