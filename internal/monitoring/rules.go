package monitoring

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstan-dev/capstan/internal/fault"
)

// Kind is what a rule watches.
type Kind string

// The rule kinds. The list grows at the end.
const (
	AgentOffline Kind = "agent_offline"
	CPUHigh      Kind = "cpu_high"
	MemoryHigh   Kind = "memory_high"
	DiskHigh     Kind = "disk_high"
	InodeHigh    Kind = "inode_high"
	SwapHigh     Kind = "swap_high"
	AppDown      Kind = "app_down"
	TLSExpiring  Kind = "tls_expiring"
	BackupStale  Kind = "backup_stale"
)

// Scopes: which subjects a rule watches.
const (
	ScopeAll         = "all"         // every subject of the kind
	ScopeTag         = "tag"         // subjects on servers with the tag scope_id
	ScopeServer      = "server"      // subjects on the server scope_id
	ScopeApplication = "application" // the application scope_id (or its domains)
	ScopeDomain      = "domain"      // the domain scope_id
	ScopeInstance    = "instance"    // the database instance scope_id
)

// Severities.
const (
	Info     = "info"
	Warning  = "warning"
	Critical = "critical"
)

// Severities lists the severities, least first.
var Severities = []string{Info, Warning, Critical}

// KindSpec documents a kind: its unit, bounds and defaults.
type KindSpec struct {
	Kind    Kind     `json:"kind"`
	Subject string   `json:"subject" doc:"What one alert of the kind is about: server, filesystem (of a server), application, domain or database (of an instance)"`
	Unit    string   `json:"unit" doc:"Unit of threshold and value: percent, minutes, days, hours; none when the kind has no threshold"`
	Min     float64  `json:"min" doc:"Smallest threshold"`
	Max     float64  `json:"max" doc:"Largest threshold"`
	Scopes  []string `json:"scopes" doc:"The scopes a rule of the kind may have"`
	// Threshold and Duration are the defaults of a new rule.
	Threshold float64       `json:"default_threshold"`
	Duration  time.Duration `json:"-"`
	// Hysteresis is how far below the threshold the value must fall (or
	// above, for tls_expiring) before an open alert resolves.
	Hysteresis float64 `json:"hysteresis" doc:"How far past the threshold the value must come back before an open alert resolves"`
	Severity   string  `json:"default_severity"`
	Condition  string  `json:"condition" doc:"When the condition holds"`
}

var serverScopes = []string{ScopeAll, ScopeTag, ScopeServer}

// Kinds lists every kind with its unit, bounds and defaults.
var Kinds = []KindSpec{
	{Kind: AgentOffline, Subject: "server", Unit: "minutes", Min: 1, Max: 1440, Scopes: serverScopes, Threshold: 5, Severity: Critical,
		Condition: "the server's agent has sent no heartbeat for at least threshold minutes; resolves when it is heard from again"},
	{Kind: CPUHigh, Subject: "server", Unit: "percent", Min: 1, Max: 100, Scopes: serverScopes, Threshold: 90, Duration: 5 * time.Minute,
		Hysteresis: 5, Severity: Warning, Condition: "CPU use is at or above threshold percent"},
	{Kind: MemoryHigh, Subject: "server", Unit: "percent", Min: 1, Max: 100, Scopes: serverScopes, Threshold: 90, Duration: 5 * time.Minute,
		Hysteresis: 5, Severity: Warning, Condition: "memory used without cache (total minus available) is at or above threshold percent"},
	{Kind: DiskHigh, Subject: "filesystem", Unit: "percent", Min: 1, Max: 100, Scopes: serverScopes, Threshold: 90, Duration: 5 * time.Minute,
		Hysteresis: 5, Severity: Critical, Condition: "a filesystem's used bytes are at or above threshold percent (one alert per filesystem)"},
	{Kind: InodeHigh, Subject: "filesystem", Unit: "percent", Min: 1, Max: 100, Scopes: serverScopes, Threshold: 90, Duration: 5 * time.Minute,
		Hysteresis: 5, Severity: Critical, Condition: "a filesystem's used inodes are at or above threshold percent (one alert per filesystem)"},
	{Kind: SwapHigh, Subject: "server", Unit: "percent", Min: 1, Max: 100, Scopes: serverScopes, Threshold: 80, Duration: 10 * time.Minute,
		Hysteresis: 5, Severity: Warning, Condition: "swap used is at or above threshold percent (servers without swap never match)"},
	{Kind: AppDown, Subject: "application", Unit: "none", Min: 0, Max: 0, Scopes: []string{ScopeAll, ScopeTag, ScopeServer, ScopeApplication},
		Duration: 2 * time.Minute, Severity: Critical,
		Condition: "the health probes of the application's running container (its health_path on its loopback port, every 30 s) fail; " +
			"threshold is always 0"},
	{Kind: TLSExpiring, Subject: "domain", Unit: "days", Min: 1, Max: 90,
		Scopes: []string{ScopeAll, ScopeTag, ScopeServer, ScopeApplication, ScopeDomain}, Threshold: 14, Hysteresis: 1, Severity: Warning,
		Condition: "the certificate a domain serves (auto or internal TLS; checked at least daily) expires within threshold days, or has expired; " +
			"the threshold is capped at a third of the certificate's lifetime (not_before to not_after), when renewers start renewing, so a " +
			"short-lived certificate (12 hours from Caddy's local CA) alerts only once less than a third of its life remains"},
	{Kind: BackupStale, Subject: "database", Unit: "hours", Min: 1, Max: 8760, Scopes: []string{ScopeAll, ScopeInstance}, Threshold: 1,
		Severity: Warning,
		Condition: "a database of an enabled backup policy has no verified backup (one that succeeded and whose last verification " +
			"restored it) taken within threshold hours, nor within twice its policy's every_hours (the policy's own allowance: a " +
			"database is never stale before it); without any, counted from when the policy was enabled. Resolves when a newer " +
			"verified backup exists or the policy is disabled"},
}

// SpecOf returns the spec of a kind.
func SpecOf(k Kind) (KindSpec, bool) {
	for _, s := range Kinds {
		if s.Kind == k {
			return s, true
		}
	}
	return KindSpec{}, false
}

// KindNames lists the kinds.
func KindNames() []string {
	out := make([]string, len(Kinds))
	for i, s := range Kinds {
		out[i] = string(s.Kind)
	}
	return out
}

// RuleIDPrefix starts every rule id.
const RuleIDPrefix = "rul"

// MaxDuration bounds a rule's duration.
const MaxDuration = 24 * time.Hour

// Rule is an alert rule.
type Rule struct {
	ID        string    `json:"id" doc:"Rule id (rul_…)"`
	Kind      Kind      `json:"kind" doc:"What the rule watches"`
	Name      string    `json:"name"`
	Scope     string    `json:"scope" enum:"all,tag,server,application,domain,instance" doc:"Which subjects the rule watches"`
	ScopeID   string    `json:"scope_id,omitempty" doc:"The tag, server, application, domain or database instance of the scope; absent for all"`
	Threshold float64   `json:"threshold" doc:"In the kind's unit (see unit)"`
	Unit      string    `json:"unit" doc:"percent, minutes, days, hours, or none"`
	Duration  int       `json:"duration" doc:"Seconds the condition must hold before an alert opens"`
	Severity  string    `json:"severity" enum:"info,warning,critical"`
	Enabled   bool      `json:"enabled"`
	CreatedBy string    `json:"created_by,omitempty" doc:"User who created it; absent for the default rules"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// NewRule is what creating a rule takes; nil fields take the kind's
// defaults.
type NewRule struct {
	Kind      Kind     `json:"kind" maxLength:"32" doc:"One of agent_offline, cpu_high, memory_high, disk_high, inode_high, swap_high, app_down, tls_expiring, backup_stale"`
	Name      string   `json:"name,omitempty" maxLength:"100" doc:"Default: the kind"`
	Scope     string   `json:"scope,omitempty" enum:"all,tag,server,application,domain,instance" doc:"all (default), tag, server, application, domain or instance, as the kind allows"`
	ScopeID   string   `json:"scope_id,omitempty" maxLength:"64" doc:"The tag, server id, application id, domain id or database instance id; required unless scope is all"`
	Threshold *float64 `json:"threshold,omitempty" doc:"Default: the kind's"`
	Duration  *int     `json:"duration,omitempty" doc:"Seconds, 0 to 86400; default: the kind's"`
	Severity  string   `json:"severity,omitempty" enum:"info,warning,critical" doc:"info, warning or critical; default: the kind's"`
	Enabled   *bool    `json:"enabled,omitempty" doc:"Default true"`
}

// RulePatch changes a rule; nil fields stay.
type RulePatch struct {
	Name      *string  `json:"name,omitempty" maxLength:"100"`
	Threshold *float64 `json:"threshold,omitempty" doc:"In the kind's unit, within its bounds"`
	Duration  *int     `json:"duration,omitempty" doc:"Seconds, 0 to 86400"`
	Severity  *string  `json:"severity,omitempty" enum:"info,warning,critical" doc:"info, warning or critical"`
	Enabled   *bool    `json:"enabled,omitempty"`
}

// validate checks a rule against its kind.
func (r Rule) validate() error {
	var errs fault.Fields
	spec, ok := SpecOf(r.Kind)
	if !ok {
		errs.Add("kind", "must be one of %s", strings.Join(KindNames(), ", "))
		return errs.Err()
	}
	if n := utf8.RuneCountInString(r.Name); n < 1 || n > 100 || strings.ContainsFunc(r.Name, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		errs.Add("name", "must be 1 to 100 characters without control characters")
	}
	switch {
	case !slices.Contains(spec.Scopes, r.Scope):
		errs.Add("scope", "must be one of %s for %s", strings.Join(spec.Scopes, ", "), r.Kind)
	case r.Scope == ScopeAll && r.ScopeID != "":
		errs.Add("scope_id", "must be absent when scope is all")
	case r.Scope != ScopeAll && (r.ScopeID == "" || len(r.ScopeID) > 64):
		errs.Add("scope_id", "is required for scope %s (1 to 64 characters)", r.Scope)
	}
	switch {
	case math.IsNaN(r.Threshold) || math.IsInf(r.Threshold, 0):
		errs.Add("threshold", "must be a number")
	case spec.Unit == "none" && r.Threshold != 0:
		errs.Add("threshold", "must be 0: %s has no threshold", r.Kind)
	case r.Threshold < spec.Min || r.Threshold > spec.Max:
		errs.Add("threshold", "must be %g to %g %s for %s", spec.Min, spec.Max, spec.Unit, r.Kind)
	}
	if r.Duration < 0 || r.Duration > int(MaxDuration/time.Second) {
		errs.Add("duration", "must be 0 to %d seconds", int(MaxDuration/time.Second))
	}
	if !slices.Contains(Severities, r.Severity) {
		errs.Add("severity", "must be info, warning or critical")
	}
	return errs.Err()
}

// Defaults returns the default rule of every kind, enabled, as a fresh
// control plane has them.
func Defaults(now time.Time) []Rule {
	out := make([]Rule, len(Kinds))
	for i, s := range Kinds {
		out[i] = Rule{ID: RuleIDPrefix + "_default_" + string(s.Kind), Kind: s.Kind, Name: string(s.Kind), Scope: ScopeAll,
			Threshold: s.Threshold, Unit: s.Unit, Duration: int(s.Duration / time.Second), Severity: s.Severity, Enabled: true,
			CreatedAt: now, UpdatedAt: now}
	}
	return out
}

// withUnit fills in the rule's unit from its kind.
func withUnit(r Rule) Rule {
	if s, ok := SpecOf(r.Kind); ok {
		r.Unit = s.Unit
	}
	return r
}

// ruleOf makes a rule from a create request and the kind's defaults.
func ruleOf(n NewRule, id, createdBy string, now time.Time) (Rule, error) {
	spec, ok := SpecOf(n.Kind)
	if !ok {
		return Rule{}, fault.Invalidf("kind", "must be one of %s", strings.Join(KindNames(), ", "))
	}
	r := Rule{ID: id, Kind: n.Kind, Name: n.Name, Scope: n.Scope, ScopeID: n.ScopeID, Threshold: spec.Threshold,
		Duration: int(spec.Duration / time.Second), Severity: spec.Severity, Enabled: true, CreatedBy: createdBy, CreatedAt: now, UpdatedAt: now}
	if r.Name == "" {
		r.Name = string(n.Kind)
	}
	if r.Scope == "" {
		r.Scope = ScopeAll
	}
	if n.Threshold != nil {
		r.Threshold = *n.Threshold
	}
	if n.Duration != nil {
		r.Duration = *n.Duration
	}
	if n.Severity != "" {
		r.Severity = n.Severity
	}
	if n.Enabled != nil {
		r.Enabled = *n.Enabled
	}
	r = withUnit(r)
	return r, r.validate()
}

// apply applies a patch to a rule.
func (p RulePatch) apply(r Rule, now time.Time) (Rule, error) {
	if p.Name != nil {
		r.Name = *p.Name
	}
	if p.Threshold != nil {
		r.Threshold = *p.Threshold
	}
	if p.Duration != nil {
		r.Duration = *p.Duration
	}
	if p.Severity != nil {
		r.Severity = *p.Severity
	}
	if p.Enabled != nil {
		r.Enabled = *p.Enabled
	}
	r.UpdatedAt = now
	return withUnit(r), r.validate()
}

// String names a rule in logs.
func (r Rule) String() string { return fmt.Sprintf("%s (%s)", r.ID, r.Kind) }
