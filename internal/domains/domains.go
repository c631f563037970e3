// Package domains owns the hostnames applications are served under: their
// validation and uniqueness across the control plane, the reverse-proxy
// state of each server (queued as proxy.apply jobs whenever a domain
// changes), DNS and certificate checks (domain.check), and the request
// traffic agents report per host and minute.
//
// Hostnames are lowercase ASCII (internationalized names in their xn--
// form), at most 253 characters, at least two labels of 1 to 63 letters,
// digits and '-' (not at either end), no IP addresses and no wildcards.
// Uppercase is refused, not folded, so that what is stored is what was
// typed. A domain with redirect_www also takes www.<hostname>, so its
// hostname must not itself start with "www.", and no other domain may use
// that name.
package domains

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// IDPrefix prefixes domain ids.
const IDPrefix = "dom"

// MaxHostnameLen bounds a hostname.
const MaxHostnameLen = 253

// Domain is one hostname of an application.
type Domain struct {
	ID            string       `json:"id"`
	Hostname      string       `json:"hostname"`
	ApplicationID string       `json:"application_id"`
	ServerID      string       `json:"server_id" doc:"The application's server, whose proxy serves the domain"`
	TLSMode       string       `json:"tls_mode" enum:"auto,internal,off" doc:"auto: a publicly trusted certificate through ACME; internal: from the proxy's local CA; off: plain HTTP"`
	RedirectWWW   bool         `json:"redirect_www" doc:"www.<hostname> permanently redirects to hostname"`
	CheckJobID    *string      `json:"check_job_id" doc:"The latest domain.check job"`
	Check         *DomainCheck `json:"check" doc:"The result of the latest finished check; null if none"`
	Proxy         ProxyState   `json:"proxy" doc:"Whether the server's proxy took the domain's latest change"`
	CreatedBy     string       `json:"created_by,omitempty"`
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`
}

// Address kinds a check compares with.
const (
	ComparedPublic  = "public"
	ComparedPrivate = "private"
	ComparedNone    = "none"
)

// DomainCheck is what a domain.check found.
type DomainCheck struct {
	JobID           string     `json:"job_id"`
	Status          string     `json:"status" enum:"succeeded,failed,cancelled" doc:"The check job's outcome"`
	Addresses       []string   `json:"addresses" doc:"What the server's resolver answers for the hostname"`
	ServerAddresses []string   `json:"server_addresses" doc:"The server's addresses it was compared with"`
	ComparedWith    string     `json:"compared_with" enum:"public,private,none" doc:"public addresses from the server's facts; private ones when it reports no public address; none when it reports neither"`
	PointsToServer  bool       `json:"points_to_server" doc:"Every address resolved is one of the server's (and there is at least one)"`
	CertIssuer      string     `json:"cert_issuer,omitempty"`
	CertNotAfter    *time.Time `json:"cert_not_after" doc:"Expiry of the certificate the proxy serves; null if none"`
	CertNotBefore   *time.Time `json:"cert_not_before" doc:"Start of the validity of the certificate the proxy serves (with cert_not_after, its lifetime, which tls_expiring judges it by); null if none, or checked by an agent that does not report it"`
	CertDNSNames    []string   `json:"cert_dns_names"`
	Errors          []string   `json:"errors" doc:"DNS, certificate and job errors"`
	Notes           []string   `json:"notes" doc:"e.g. that private addresses were compared"`
	CheckedAt       time.Time  `json:"checked_at"`
}

// Proxy states of a domain's latest change.
const (
	ProxyApplying = "applying" // its proxy.apply job has not ended
	ProxyApplied  = "applied"  // the server's proxy took it
	ProxyFailed   = "failed"   // its proxy.apply job failed: the proxy does not serve it as set
)

// ProxyState is whether the server's proxy took a domain's latest change.
type ProxyState struct {
	Status string  `json:"status" enum:"applying,applied,failed" doc:"applying: the change's proxy.apply job has not ended; applied: the proxy took it (or a later state); failed: the job failed and the proxy does not serve the domain as set"`
	JobID  *string `json:"job_id" doc:"The proxy.apply job of the latest change; null for domains from before it was recorded"`
	Error  *string `json:"error" doc:"Why the proxy did not take the change; null unless failed"`
}

// Store persists domains and request traffic.
type Store interface {
	// InsertDomain stores a domain and the names it takes; a name taken
	// by another domain is fault.Conflict "hostname-taken".
	InsertDomain(ctx context.Context, d Domain, names []string) error
	Domain(ctx context.Context, id string) (Domain, error)
	// ListDomains returns domains by hostname; appID "" means all.
	ListDomains(ctx context.Context, appID string) ([]Domain, error)
	UpdateDomainTLS(ctx context.Context, id, mode string, now time.Time) error
	DeleteDomain(ctx context.Context, id string) error
	SetDomainCheckJob(ctx context.Context, id, jobID string, now time.Time) error
	// SetDomainProxyJob records the proxy.apply job of a domain's latest
	// change (status applying).
	SetDomainProxyJob(ctx context.Context, id, jobID string, now time.Time) error
	// FinishDomainProxy records the end of a server's proxy.apply job
	// queued at queuedAt on the domains whose change it carries (when it
	// succeeded, on every domain of the server changed before it too) and
	// returns the domains it changed.
	FinishDomainProxy(ctx context.Context, serverID, jobID string, queuedAt time.Time, ok bool, msg string, now time.Time) ([]Domain, error)
	// DomainByCheckJob returns the domain whose latest check is jobID.
	DomainByCheckJob(ctx context.Context, jobID string) (Domain, error)
	// SetDomainCheck stores a check's result if jobID is still the
	// domain's latest check.
	SetDomainCheck(ctx context.Context, id, jobID string, c DomainCheck, now time.Time) error

	// PutRequestMinutes upserts per (server, host, minute), replacing what
	// was stored.
	PutRequestMinutes(ctx context.Context, serverID string, minutes []agentproto.RequestMinute, now time.Time) error
	// RequestBuckets sums the requests to hosts on a server in [from, to)
	// per bucket (aligned to multiples of bucket since the epoch), oldest
	// first; empty buckets are left out. P95Ms is the largest per-minute
	// p95 of the bucket.
	RequestBuckets(ctx context.Context, serverID string, hosts []string, from, to time.Time, bucket time.Duration) ([]TrafficPoint, error)
	// PruneRequestMinutes deletes up to limit minutes before before and
	// returns how many it deleted.
	PruneRequestMinutes(ctx context.Context, before time.Time, limit int) (int, error)
}

// HostnameProblem says what is wrong with a hostname; "" if nothing.
func HostnameProblem(h string) string {
	switch {
	case h == "":
		return "is required"
	case len(h) > MaxHostnameLen:
		return fmt.Sprintf("must be at most %d characters", MaxHostnameLen)
	case strings.Contains(h, "*"):
		return "wildcard domains are not supported; add each hostname"
	case strings.ToLower(h) != h:
		return fmt.Sprintf("must be lowercase (%q)", strings.ToLower(h))
	case net.ParseIP(strings.Trim(h, "[]")) != nil:
		return "must be a domain name, not an IP address"
	case strings.HasSuffix(h, "."):
		return "must not end with '.'"
	case strings.ContainsAny(h, ":/ "):
		return "must be a bare hostname: no scheme, port, path or spaces"
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 {
		return "must have at least two labels, e.g. example.com"
	}
	for _, l := range labels {
		if p := labelProblem(l); p != "" {
			return p
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "the top-level label must not be all digits"
	}
	return ""
}

func labelProblem(l string) string {
	if l == "" {
		return "must not have empty labels ('..')"
	}
	if len(l) > 63 {
		return "labels must be at most 63 characters"
	}
	for _, r := range l {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-') {
			return fmt.Sprintf("label %q: only letters a-z, digits and '-' (internationalized names in their xn-- form)", l)
		}
	}
	if strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
		return fmt.Sprintf("label %q must not start or end with '-'", l)
	}
	return ""
}

// TLSModeProblem says what is wrong with a TLS mode.
func TLSModeProblem(m string) string {
	switch m {
	case agentproto.TLSAuto, agentproto.TLSInternal, agentproto.TLSOff:
		return ""
	}
	return "must be auto, internal or off"
}

// names returns every name a domain takes.
func names(hostname string, redirectWWW bool) []string {
	if redirectWWW {
		return []string{hostname, "www." + hostname}
	}
	return []string{hostname}
}
