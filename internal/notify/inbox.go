package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
)

// NotificationIDPrefix starts every inbox item's id.
const NotificationIDPrefix = "ntf"

// Notification is one item of a user's inbox.
type Notification struct {
	ID        string         `json:"id" doc:"Item id (ntf_…)"`
	EventID   string         `json:"event_id" doc:"The event it tells of (evt_…)"`
	EventType events.Type    `json:"event_type"`
	Title     string         `json:"title"`
	Body      string         `json:"body"`
	Link      string         `json:"link" doc:"Path of the object in the web console, e.g. /servers/srv_…"`
	Subject   events.Subject `json:"subject"`
	CreatedAt time.Time      `json:"created_at"`
	Read      bool           `json:"read"`
	ReadAt    *time.Time     `json:"read_at" doc:"null while unread"`
	UserID    string         `json:"-"`
}

// InboxStore persists inbox items.
type InboxStore interface {
	// InsertNotification stores an item; a second item of the same event
	// for the same user is ignored.
	InsertNotification(ctx context.Context, n Notification) error
	// ListNotifications returns up to limit items of a user, newest first,
	// before the cursor (an item id), and the user's unread count.
	ListNotifications(ctx context.Context, userID string, limit int, before string) ([]Notification, int, error)
	// MarkNotificationsRead marks the user's items read (all of them when
	// all is true) and returns how many it marked and the unread count
	// left.
	MarkNotificationsRead(ctx context.Context, userID string, ids []string, all bool, now time.Time) (int, int, error)
}

// Users lists the users to tell.
type Users interface {
	ListUsers(ctx context.Context) ([]auth.User, error)
}

// InboxEvents are the events that reach the inbox.
var InboxEvents = []events.Type{events.DeploySucceeded, events.DeployFailed, events.AlertOpened, events.AlertResolved,
	events.ServerOffline, events.ServerOnline, events.BackupFailed, events.ProxyFailed}

// Inbox is the destination that puts events in every active user's inbox.
type Inbox struct {
	store InboxStore
	users Users
}

// NewInbox returns the inbox destination.
func NewInbox(st InboxStore, users Users) *Inbox { return &Inbox{store: st, users: users} }

// Kind implements events.Destination.
func (*Inbox) Kind() string { return "inbox" }

// Route names every active user, for the events the inbox takes.
func (b *Inbox) Route(ctx context.Context, ev events.Event) ([]string, error) {
	if !slices.Contains(InboxEvents, ev.Type) {
		return nil, nil
	}
	users, err := b.users.ListUsers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range users {
		if !u.Disabled {
			out = append(out, u.ID)
		}
	}
	return out, nil
}

// Deliver puts the event in the user's inbox; a repeat is a no-op.
func (b *Inbox) Deliver(ctx context.Context, userID string, d events.Delivery, ev events.Event) (events.Result, error) {
	users, err := b.users.ListUsers(ctx)
	if err != nil {
		return events.Result{}, err
	}
	i := slices.IndexFunc(users, func(u auth.User) bool { return u.ID == userID })
	if i < 0 {
		return events.Result{}, fmt.Errorf("user %s: %w", userID, events.ErrGone)
	}
	m := Describe(ev, users[i].Admin)
	n := Notification{ID: ids.NewAt(NotificationIDPrefix, ev.OccurredAt), UserID: userID, EventID: ev.ID, EventType: ev.Type,
		Title: m.Title, Body: m.Body, Link: m.Link, Subject: ev.Subject, CreatedAt: ev.OccurredAt}
	return events.Result{}, b.store.InsertNotification(ctx, n)
}

// List returns a user's inbox, newest first, with the unread count.
func (b *Inbox) List(ctx context.Context, userID string, limit int, before string) ([]Notification, int, error) {
	return b.store.ListNotifications(ctx, userID, limit, before)
}

// MaxReadIDs bounds the ids of one read-marking call.
const MaxReadIDs = 200

// MarkRead marks items of a user's inbox read: the ids given, or all.
func (b *Inbox) MarkRead(ctx context.Context, userID string, list []string, all bool, now time.Time) (int, int, error) {
	switch {
	case all && len(list) > 0:
		return 0, 0, fault.Invalidf("ids", "give ids or all, not both")
	case !all && len(list) == 0:
		return 0, 0, fault.Invalidf("ids", "give the ids to mark read (1 to %d), or all: true", MaxReadIDs)
	case len(list) > MaxReadIDs:
		return 0, 0, fault.Invalidf("ids", "at most %d ids", MaxReadIDs)
	}
	return b.store.MarkNotificationsRead(ctx, userID, list, all, now)
}

// Message is an event told to people: a title, a body and the path of its
// object in the web console.
type Message struct {
	Title, Body, Link string
}

// Describe tells an event. Details only administrators may read (the error
// of a failed deployment or backup, which may hold a program's output) are
// left out when admin is false.
func Describe(ev events.Event, admin bool) Message {
	switch ev.Type {
	case events.DeploySucceeded, events.DeployFailed:
		var p events.DeployPayload
		_ = json.Unmarshal(ev.Payload, &p)
		m := Message{Link: "/applications/" + p.ApplicationID + "/deployments/" + p.DeploymentID}
		// Told by names; the link leads to the deployment by its id.
		what := p.ApplicationName
		if p.Ref != "" {
			what += " at " + p.Ref
		}
		if ev.Type == events.DeploySucceeded {
			m.Title = fmt.Sprintf("Deployed %s", p.ApplicationName)
			m.Body = fmt.Sprintf("The deployment of %s succeeded.", what)
		} else {
			m.Title = fmt.Sprintf("Deployment of %s failed", p.ApplicationName)
			m.Body = fmt.Sprintf("The deployment of %s failed; the previous release keeps serving.", what)
			if admin && p.Error != "" {
				m.Body += " " + p.Error
			}
		}
		return m
	case events.ServerOffline, events.ServerOnline, events.ServerEnrolled, events.ServerRevoked:
		var p events.ServerPayload
		_ = json.Unmarshal(ev.Payload, &p)
		m := Message{Link: "/servers/" + p.ServerID}
		switch ev.Type {
		case events.ServerOffline:
			m.Title, m.Body = fmt.Sprintf("%s is offline", p.ServerName), fmt.Sprintf("No heartbeat from the agent of %s.", p.ServerName)
			if p.LastSeenAt != nil {
				m.Body = fmt.Sprintf("No heartbeat from the agent of %s since %s.", p.ServerName, p.LastSeenAt.UTC().Format(time.RFC3339))
			}
		case events.ServerOnline:
			m.Title, m.Body = fmt.Sprintf("%s is back online", p.ServerName), fmt.Sprintf("The agent of %s is heard from again.", p.ServerName)
		case events.ServerEnrolled:
			m.Title, m.Body = fmt.Sprintf("%s enrolled", p.ServerName), fmt.Sprintf("The agent of %s enrolled.", p.ServerName)
		default:
			m.Title, m.Body = fmt.Sprintf("%s revoked", p.ServerName), fmt.Sprintf("The agent credential of %s was revoked.", p.ServerName)
		}
		return m
	case events.BackupFailed:
		var p events.BackupPayload
		_ = json.Unmarshal(ev.Payload, &p)
		m := Message{Link: "/databases/" + p.InstanceID + "/backups/" + p.RunID,
			Title: fmt.Sprintf("Backup of %s failed", p.Database),
			Body:  fmt.Sprintf("A %sbackup of database %s failed; it does not count as a backup.", trigger(p.Trigger), p.Database)}
		if admin && p.Error != "" {
			m.Body += " " + p.Error
		}
		return m
	case events.ProxyFailed:
		var p events.ProxyFailedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		hosts := make([]string, len(p.Domains))
		for i, d := range p.Domains {
			hosts[i] = d.Hostname
		}
		m := Message{Link: "/servers/" + p.ServerID,
			Title: fmt.Sprintf("The proxy of %s did not take a domain change", p.ServerName),
			Body:  fmt.Sprintf("The proxy of %s did not take the change of %s: not served as set.", p.ServerName, strings.Join(hosts, ", "))}
		if len(p.Domains) > 0 {
			m.Link = "/applications/" + p.Domains[0].ApplicationID + "/domains"
		}
		if admin && p.Error != "" {
			m.Body += " " + p.Error
		}
		return m
	case events.AlertOpened, events.AlertResolved:
		var p events.AlertPayload
		_ = json.Unmarshal(ev.Payload, &p)
		what := p.SubjectName
		if p.Detail != "" {
			what += " " + p.Detail
		}
		m := Message{Link: "/alerts/" + p.AlertID}
		if ev.Type == events.AlertOpened {
			m.Title = fmt.Sprintf("[%s] %s on %s", p.Severity, p.Kind, what)
			m.Body = fmt.Sprintf("An alert opened: %s on %s is %g (threshold %g).", p.Kind, what, p.Value, p.Threshold)
		} else {
			m.Title = fmt.Sprintf("Resolved: %s on %s", p.Kind, what)
			m.Body = fmt.Sprintf("The alert on %s of %s resolved.", p.Kind, what)
		}
		return m
	}
	return Message{Title: string(ev.Type), Body: fmt.Sprintf("%s about %s %s.", ev.Type, ev.Subject.Type, ev.Subject.ID)}
}

// trigger is how a backup was started, as a word before "backup" ("" for
// none).
func trigger(t string) string {
	switch t {
	case "":
		return ""
	case "schedule":
		return "scheduled "
	}
	return t + " "
}
