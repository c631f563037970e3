// Package events is the control plane's event bus. Capabilities publish
// what happened (a deployment succeeded, a server went offline) as events
// stored in an outbox, in the same transaction as the change they report
// wherever the store allows, so a restart loses none. A Dispatcher routes
// each stored event to the destinations that want it (the inbox, e-mail,
// notification channels) and delivers it once per destination: at least
// once from the outbox, with a delivery record per (event, destination)
// whose id stays the same across attempts, so a receiver can drop repeats.
//
// The package owns the event types, the catalogue that documents them and
// the dispatcher. It does not import the store; the store implements Store.
package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/ids"
)

// Type names an event; the catalogue lists every one.
type Type string

// The event types. The list grows at the end.
const (
	DeploySucceeded    Type = "deploy.succeeded"
	DeployFailed       Type = "deploy.failed"
	ServerEnrolled     Type = "server.enrolled"
	ServerRevoked      Type = "server.revoked"
	ServerOnline       Type = "server.online"
	ServerOffline      Type = "server.offline"
	AlertOpened        Type = "alert.opened"
	AlertResolved      Type = "alert.resolved"
	BackupFailed       Type = "backup.failed"
	BackupVerifyFailed Type = "backup.verify_failed"
	BackupStale        Type = "backup.stale"
	ProxyFailed        Type = "proxy.failed"
)

// IDPrefix starts every event id.
const IDPrefix = "evt"

// Retention is how long events are kept once every delivery of them ended.
const Retention = 30 * 24 * time.Hour

// Subject is the object an event is about.
type Subject struct {
	Type string `json:"type" doc:"Kind of object: deployment, server, alert" example:"server"`
	ID   string `json:"id" doc:"The object's id" example:"srv_01hx7c9q3m8e4a0000000000"`
}

// Event is one thing that happened, as stored in the outbox.
type Event struct {
	ID         string          `json:"id" doc:"Event id (evt_…); the same in every delivery of the event"`
	Type       Type            `json:"type" doc:"Event type, one of the catalogue's"`
	Subject    Subject         `json:"subject"`
	Payload    json.RawMessage `json:"payload" doc:"Fields of the event type, as the catalogue lists them"`
	OccurredAt time.Time       `json:"occurred_at" doc:"When the change happened (UTC)"`
}

// New makes an event of type t about subject, with payload encoded as its
// JSON payload.
func New(t Type, subject Subject, payload any, at time.Time) (Event, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("event %s payload: %w", t, err)
	}
	return Event{ID: ids.NewAt(IDPrefix, at), Type: t, Subject: subject, Payload: raw, OccurredAt: at.UTC()}, nil
}

// DeployPayload is the payload of deploy.succeeded and deploy.failed.
type DeployPayload struct {
	DeploymentID    string `json:"deployment_id"`
	ApplicationID   string `json:"application_id"`
	ApplicationName string `json:"application_name"`
	ServerID        string `json:"server_id"`
	Ref             string `json:"ref"`
	// Error says why a deployment failed; empty when it succeeded.
	Error string `json:"error,omitempty"`
}

// ServerPayload is the payload of the server.* events.
type ServerPayload struct {
	ServerID   string `json:"server_id"`
	ServerName string `json:"server_name"`
	// LastSeenAt is the agent's last heartbeat; nil when there was none.
	LastSeenAt *time.Time `json:"last_seen_at,omitempty"`
}

// AlertPayload is the payload of alert.opened and alert.resolved.
type AlertPayload struct {
	AlertID     string  `json:"alert_id"`
	RuleID      string  `json:"rule_id"`
	Kind        string  `json:"kind"`
	Severity    string  `json:"severity"`
	SubjectType string  `json:"subject_type"`
	SubjectID   string  `json:"subject_id"`
	SubjectName string  `json:"subject_name"`
	Detail      string  `json:"detail,omitempty"`
	Value       float64 `json:"value"`
	Threshold   float64 `json:"threshold"`
	// Acknowledged is set on alert.resolved when someone acknowledged the
	// alert while it was open.
	Acknowledged bool `json:"acknowledged,omitempty"`
}

// BackupPayload is the payload of backup.failed.
type BackupPayload struct {
	RunID      string `json:"run_id"`
	InstanceID string `json:"instance_id"`
	ServerID   string `json:"server_id"`
	Database   string `json:"database"`
	Trigger    string `json:"trigger"`
	// Error says why the backup failed.
	Error string `json:"error,omitempty"`
}

// BackupStalePayload is the payload of backup.stale.
type BackupStalePayload struct {
	InstanceID   string `json:"instance_id"`
	InstanceName string `json:"instance_name"`
	Database     string `json:"database"`
	EveryHours   int    `json:"every_hours"`
	// LastVerifiedAt is when the database's newest verified backup
	// finished; nil when it has none.
	LastVerifiedAt *time.Time `json:"last_verified_at"`
}

// ProxyFailedPayload is the payload of proxy.failed.
type ProxyFailedPayload struct {
	ServerID   string              `json:"server_id"`
	ServerName string              `json:"server_name"`
	JobID      string              `json:"job_id"`
	Domains    []ProxyFailedDomain `json:"domains"`
	// Error says why the proxy did not take the change.
	Error string `json:"error,omitempty"`
}

// ProxyFailedDomain is a domain whose change the proxy did not take.
type ProxyFailedDomain struct {
	DomainID      string `json:"domain_id"`
	Hostname      string `json:"hostname"`
	ApplicationID string `json:"application_id"`
}

// Spec documents one event type.
type Spec struct {
	Type    Type
	When    string
	Subject string
	Payload string
}

// Catalogue lists every event type the control plane publishes.
var Catalogue = []Spec{
	{DeploySucceeded, "a deployment finished and its container serves the application", "deployment",
		"deployment_id, application_id, application_name, server_id, ref"},
	{DeployFailed, "a deployment failed (the previous container keeps serving)", "deployment",
		"deployment_id, application_id, application_name, server_id, ref, error"},
	{ServerEnrolled, "a server's agent redeemed its enrollment token", "server", "server_id, server_name"},
	{ServerRevoked, "a server's agent credential was revoked (also when the server is deleted)", "server", "server_id, server_name"},
	{ServerOnline, "an enrolled server's agent is heard from again after it was offline", "server",
		"server_id, server_name, last_seen_at"},
	{ServerOffline, "no heartbeat from an enrolled server's agent for 30 seconds", "server", "server_id, server_name, last_seen_at"},
	{AlertOpened, "an alert rule's condition held for its duration and an alert opened", "alert",
		"alert_id, rule_id, kind, severity, subject_type, subject_id, subject_name, detail (a filesystem's mount point), value, threshold"},
	{AlertResolved, "an open alert's condition cleared (or its rule was disabled or deleted, or its subject is gone)", "alert",
		"the same as alert.opened, and acknowledged"},
	{BackupFailed, "a backup failed: its dump, upload or the storage's read-back (nothing of it counts as a backup)", "backup",
		"run_id, instance_id, server_id, database, trigger, error"},
	{BackupVerifyFailed, "a backup's verification failed: its checksum, its decryption, its restore or its comparison with the manifest",
		"backup", "run_id, instance_id, server_id, database, trigger, error"},
	{BackupStale, "a database of an enabled backup policy has no verified backup within twice the policy's every_hours (counted " +
		"from when the policy was enabled if that is later); published once until a newer verified backup makes it fresh again",
		"database", "instance_id, instance_name, database, every_hours, last_verified_at (null when it has none)"},
	{ProxyFailed, "a server's proxy did not take a change of its domains (its proxy.apply job failed): they are not served as set",
		"server", "server_id, server_name, job_id, domains (domain_id, hostname, application_id), error"},
}

// Known reports whether t is in the catalogue.
func Known(t Type) bool {
	for _, s := range Catalogue {
		if s.Type == t {
			return true
		}
	}
	return false
}

// Types lists the catalogue's types, in catalogue order.
func Types() []string {
	out := make([]string, len(Catalogue))
	for i, s := range Catalogue {
		out[i] = string(s.Type)
	}
	return out
}

// CatalogueMarkdown renders the catalogue as a Markdown table, for the
// OpenAPI descriptions.
func CatalogueMarkdown() string {
	var b strings.Builder
	b.WriteString("| event | when | subject | payload fields |\n|---|---|---|---|\n")
	for _, s := range Catalogue {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Type, s.When, s.Subject, s.Payload)
	}
	return b.String()
}
