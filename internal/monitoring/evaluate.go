package monitoring

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/servers"
)

// ServerSample is a server's newest metric sample, as evaluation reads it.
type ServerSample struct {
	ServerID          string
	At                time.Time
	CPUPercent        float64
	MemoryUsedPercent *float64 // nil when unknown
	SwapUsedPercent   *float64 // nil when the server has no swap
	Filesystems       []agentproto.FilesystemSample
}

// AppHealth is the latest health probe of an application's running
// container, as its agent reported it.
type AppHealth struct {
	AppID        string
	AppName      string
	ServerID     string
	Healthy      bool
	FailingSince *time.Time // set while probes fail
	StatusCode   int
	LastError    string
	ProbedAt     time.Time
}

// DomainCertificate is the certificate a domain served at its last check.
type DomainCertificate struct {
	DomainID string
	Hostname string
	AppID    string
	ServerID string
	TLSMode  string
	// NotAfter is nil when no certificate was seen (no check yet, TLS off,
	// or the check failed).
	NotAfter *time.Time
	// NotBefore is nil when NotAfter is, or the check did not record it.
	NotBefore *time.Time
	CheckedAt *time.Time
}

// BackupAge is how long a database of an enabled backup policy has been
// without a newer verified backup, as evaluation reads it.
type BackupAge struct {
	InstanceID   string
	InstanceName string
	Database     string
	// EveryHours is the policy's interval: the database is not stale
	// before twice that.
	EveryHours int
	// Since is when its newest verified backup finished, or when the
	// policy was enabled if that is later (or there is none).
	Since time.Time
}

// Freshness bounds how old a sample or probe may be and still count: older
// data is unknown, which neither opens nor resolves an alert.
const Freshness = 2 * time.Minute

// observation states of a subject.
const (
	unknown = iota // no fresh data: nothing changes
	firing         // the condition holds
	band           // not holding, but an open alert stays (hysteresis)
	clear          // an open alert resolves
)

type observation struct {
	subject AlertSubject
	state   int
	value   float64
	since   time.Time // when the condition began to hold, as far as the data says
}

// fleet is what one evaluation reads.
type fleet struct {
	now     time.Time
	servers map[string]servers.Server
	samples map[string]ServerSample
	apps    []AppHealth
	domains []DomainCertificate
	backups []BackupAge
}

// inScope reports whether a subject on serverID (of appID, domainID) is
// watched by r.
func (f *fleet) inScope(r Rule, serverID, appID, domainID string) bool {
	switch r.Scope {
	case ScopeAll:
		return true
	case ScopeTag:
		return slices.Contains(f.servers[serverID].Tags, r.ScopeID)
	case ScopeServer:
		return serverID == r.ScopeID
	case ScopeApplication:
		return appID != "" && appID == r.ScopeID
	case ScopeDomain:
		return domainID != "" && domainID == r.ScopeID
	}
	return false
}

// level classifies v against a rule whose condition is v >= threshold
// and that resolves at or below threshold - hysteresis.
func level(v, threshold, hysteresis float64) int {
	switch {
	case v >= threshold:
		return firing
	case v <= threshold-hysteresis:
		return clear
	}
	return band
}

// observe returns a rule's observation of every subject it watches, and
// the servers whose filesystems are unknown (no fresh sample), whose
// filesystem alerts must stay as they are.
func (f *fleet) observe(r Rule) (map[string]observation, map[string]bool) {
	spec, _ := SpecOf(r.Kind)
	out := map[string]observation{}
	unknownServers := map[string]bool{}
	enrolled := func(srv servers.Server) bool { return srv.Status == servers.Online || srv.Status == servers.Offline }
	switch r.Kind {
	case AgentOffline, CPUHigh, MemoryHigh, SwapHigh, DiskHigh, InodeHigh:
		for id, srv := range f.servers {
			if !enrolled(srv) || !f.inScope(r, id, "", "") {
				continue
			}
			subj := AlertSubject{Type: "server", ID: id, Name: srv.Name}
			if r.Kind == AgentOffline {
				o := observation{subject: subj, state: clear}
				if srv.Status == servers.Offline {
					last := f.now
					if srv.LastSeenAt != nil {
						last = *srv.LastSeenAt
					}
					o.value = math.Floor(f.now.Sub(last).Minutes()*10) / 10
					o.since = last.Add(time.Duration(r.Threshold * float64(time.Minute)))
					o.state = band
					if !f.now.Before(o.since) {
						o.state = firing
					}
				}
				out[id] = o
				continue
			}
			sample, ok := f.samples[id]
			fresh := ok && srv.Status == servers.Online && f.now.Sub(sample.At) <= Freshness
			switch r.Kind {
			case DiskHigh, InodeHigh:
				if !fresh {
					unknownServers[id] = true
					continue
				}
				for _, fs := range sample.Filesystems {
					used, total := fs.BytesUsed, fs.BytesTotal
					if r.Kind == InodeHigh {
						used, total = fs.InodesUsed, fs.InodesTotal
					}
					if total == 0 {
						continue // no inode counts on this filesystem
					}
					v := math.Round(float64(used)/float64(total)*1000) / 10
					s := AlertSubject{Type: "filesystem", ID: id, Name: srv.Name, Detail: fs.Mount}
					out[id+":"+fs.Mount] = observation{subject: s, state: level(v, r.Threshold, spec.Hysteresis), value: v, since: sample.At}
				}
			default:
				o := observation{subject: subj}
				var v *float64
				switch r.Kind {
				case CPUHigh:
					v = &sample.CPUPercent
				case MemoryHigh:
					v = sample.MemoryUsedPercent
				case SwapHigh:
					v = sample.SwapUsedPercent
					if fresh && v == nil {
						o.state = clear // no swap
					}
				}
				if fresh && v != nil {
					o.value = math.Round(*v*10) / 10
					o.state, o.since = level(*v, r.Threshold, spec.Hysteresis), sample.At
				}
				out[id] = o
			}
		}
	case AppDown:
		for _, a := range f.apps {
			srv, ok := f.servers[a.ServerID]
			if !ok || !enrolled(srv) || !f.inScope(r, a.ServerID, a.AppID, "") {
				continue
			}
			o := observation{subject: AlertSubject{Type: "application", ID: a.AppID, Name: a.AppName}}
			if srv.Status == servers.Online && f.now.Sub(a.ProbedAt) <= Freshness {
				o.state = clear
				if !a.Healthy && a.FailingSince != nil {
					o.state, o.since = firing, *a.FailingSince
					o.value = math.Floor(f.now.Sub(*a.FailingSince).Minutes()*10) / 10
				}
			}
			out[a.AppID] = o
		}
	case TLSExpiring:
		for _, d := range f.domains {
			if d.TLSMode != agentproto.TLSAuto && d.TLSMode != agentproto.TLSInternal {
				continue
			}
			if _, ok := f.servers[d.ServerID]; !ok || !f.inScope(r, d.ServerID, d.AppID, d.DomainID) {
				continue
			}
			o := observation{subject: AlertSubject{Type: "domain", ID: d.DomainID, Name: d.Hostname}}
			if d.NotAfter != nil {
				o.state, o.value = tlsState(d, r.Threshold, spec.Hysteresis, f.now)
				o.since = f.now
			}
			out[d.DomainID] = o
		}
	case BackupStale:
		for _, b := range f.backups {
			if r.Scope == ScopeInstance && b.InstanceID != r.ScopeID {
				continue
			}
			hours := f.now.Sub(b.Since).Hours()
			// A database is never stale before its policy's allowance.
			threshold := max(r.Threshold, 2*float64(b.EveryHours))
			o := observation{subject: AlertSubject{Type: "database", ID: b.InstanceID, Name: b.InstanceName, Detail: b.Database},
				value: math.Floor(hours*10) / 10, state: level(hours, threshold, spec.Hysteresis)}
			o.since = b.Since.Add(time.Duration(threshold * float64(time.Hour)))
			out["backup/"+b.InstanceID+"/"+b.Database] = o
		}
	}
	return out, unknownServers
}

// plan decides what an evaluation changes, from the enabled rules, the
// conditions holding and the open alerts.
func plan(f *fleet, rules []Rule, conds []Condition, open []Alert, newID func() string) Changes {
	c := Changes{Now: f.now}
	condOf := map[[2]string]Condition{}
	for _, cd := range conds {
		condOf[[2]string{cd.RuleID, cd.Key}] = cd
	}
	openOf := map[[2]string]Alert{}
	for _, a := range open {
		openOf[[2]string{a.RuleID, a.Key}] = a
	}
	enabled := map[string]bool{}
	for _, r := range rules {
		if !r.Enabled {
			continue
		}
		enabled[r.ID] = true
		obs, unknownServers := f.observe(r)
		for key, o := range obs {
			k := [2]string{r.ID, key}
			cd, pending := condOf[k]
			if a, isOpen := openOf[k]; isOpen {
				if o.state == clear {
					c.Resolve = append(c.Resolve, a.ID)
				}
				if pending {
					c.Drop = append(c.Drop, cd)
				}
				continue
			}
			switch o.state {
			case firing:
				since := o.since
				if pending && cd.Since.Before(since) {
					since = cd.Since
				}
				if f.now.Sub(since) >= time.Duration(r.Duration)*time.Second {
					c.Open = append(c.Open, Alert{ID: newID(), RuleID: r.ID, Kind: r.Kind, Severity: r.Severity, Subject: o.subject,
						Value: o.value, Threshold: r.Threshold, Unit: r.Unit, State: Open, OpenedAt: f.now, Key: key})
					if pending {
						c.Drop = append(c.Drop, cd)
					}
				} else if !pending {
					c.Start = append(c.Start, Condition{RuleID: r.ID, Key: key, Since: since})
				}
			case band, clear:
				if pending {
					c.Drop = append(c.Drop, cd)
				}
			}
		}
		// Subjects the rule no longer watches (deleted, out of scope, a
		// filesystem unmounted) resolve, unless their data is unknown.
		gone := func(key string) bool {
			if _, ok := obs[key]; ok {
				return false
			}
			if srv, _, ok := strings.Cut(key, ":"); ok && unknownServers[srv] {
				return false
			}
			return true
		}
		for k, a := range openOf {
			if k[0] == r.ID && gone(k[1]) {
				c.Resolve = append(c.Resolve, a.ID)
			}
		}
		for k, cd := range condOf {
			if k[0] == r.ID && gone(k[1]) {
				c.Drop = append(c.Drop, cd)
			}
		}
	}
	// Alerts of rules disabled or deleted resolve.
	for k, a := range openOf {
		if !enabled[k[0]] {
			c.Resolve = append(c.Resolve, a.ID)
		}
	}
	for k, cd := range condOf {
		if !enabled[k[0]] {
			c.Drop = append(c.Drop, cd)
		}
	}
	slices.Sort(c.Resolve)
	c.Resolve = slices.Compact(c.Resolve)
	return c
}

// Snapshot is everything one evaluation reads, read at one moment.
type Snapshot struct {
	Rules      []Rule
	Conditions []Condition
	Open       []Alert
	// Servers are every server's id, name, tags, status and last seen
	// time (no facts), with the status as stored.
	Servers []servers.Server
	Samples []ServerSample
	Apps    []AppHealth
	Domains []DomainCertificate
	Backups []BackupAge
}

// Evaluator reads what evaluation needs.
type Evaluator interface {
	// EvaluationSnapshot reads what an evaluation needs in a few
	// set-based queries, one after the other on one connection: a busy
	// control plane's requests do not get between them.
	EvaluationSnapshot(ctx context.Context) (Snapshot, error)
	Rules(ctx context.Context) ([]Rule, error)
	Conditions(ctx context.Context) ([]Condition, error)
	OpenAlerts(ctx context.Context) ([]Alert, error)
	LatestServerSamples(ctx context.Context) ([]ServerSample, error)
	AppHealth(ctx context.Context) ([]AppHealth, error)
	DomainCertificates(ctx context.Context) ([]DomainCertificate, error)
	// BackupAges returns every database of an enabled backup policy.
	DatabaseBackupAges(ctx context.Context) ([]BackupAge, error)
	// ApplyEvaluation applies changes in one transaction and publishes
	// alert.opened and alert.resolved with them. It returns what it
	// opened and resolved: an alert another evaluation opened or resolved
	// first is not in it.
	ApplyEvaluation(ctx context.Context, c Changes) (Outcome, error)
}
