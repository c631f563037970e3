package monitoring

import (
	"time"
)

// Alert states.
const (
	Open     = "open"
	Resolved = "resolved"
)

// AlertIDPrefix starts every alert id.
const AlertIDPrefix = "alr"

// AlertSubject is what an alert is about.
type AlertSubject struct {
	Type string `json:"type" enum:"server,filesystem,application,domain,database" doc:"server; filesystem (id is the server's, detail the mount point); application; domain; database (id is the instance's, detail the database's name)"`
	ID   string `json:"id" doc:"The server, application, domain or database instance id"`
	Name string `json:"name" doc:"Its name (server name, application name, hostname) when the alert opened"`
	// Detail is the mount point of a filesystem; empty otherwise.
	Detail string `json:"detail,omitempty" doc:"The filesystem's mount point, for disk_high and inode_high; the database's name, for backup_stale"`
}

// Alert is an open or resolved alert.
type Alert struct {
	ID             string       `json:"id" doc:"Alert id (alr_…)"`
	RuleID         string       `json:"rule_id" doc:"The rule that opened it (it may have been deleted since)"`
	Kind           Kind         `json:"kind"`
	Severity       string       `json:"severity" enum:"info,warning,critical"`
	Subject        AlertSubject `json:"subject"`
	Value          float64      `json:"value" doc:"The value that opened the alert, in the kind's unit (minutes offline, percent, days left; for app_down, minutes failing)"`
	Threshold      float64      `json:"threshold" doc:"The rule's threshold when the alert opened"`
	Unit           string       `json:"unit" doc:"percent, minutes, days, or none"`
	State          string       `json:"state" enum:"open,resolved"`
	OpenedAt       time.Time    `json:"opened_at"`
	ResolvedAt     *time.Time   `json:"resolved_at" doc:"null while open"`
	AcknowledgedBy *string      `json:"acknowledged_by" doc:"User id of whoever acknowledged it; null if nobody did"`
	AcknowledgedAt *time.Time   `json:"acknowledged_at"`
	// Key identifies the subject among the rule's subjects: one open alert
	// per (rule, key).
	Key string `json:"-"`
}

// Condition is a rule's condition holding for a subject since a time,
// before its alert opens.
type Condition struct {
	RuleID string
	Key    string
	Since  time.Time
}

// Changes are what one evaluation changes, applied at once.
type Changes struct {
	Now time.Time
	// Start records conditions that began to hold; Drop forgets ones that
	// stopped holding or whose alert opened.
	Start []Condition
	Drop  []Condition
	// Open are new alerts; one whose (rule, key) has an open alert already
	// is skipped.
	Open []Alert
	// Resolve are ids of open alerts to resolve.
	Resolve []string
}

// Outcome is what an evaluation opened and resolved.
type Outcome struct {
	Opened   []Alert `json:"opened" doc:"Alerts this evaluation opened"`
	Resolved []Alert `json:"resolved" doc:"Alerts this evaluation resolved"`
}
