package domains

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Audit actions of this package.
const (
	ActionCreated      = "domain.created"
	ActionUpdated      = "domain.updated"
	ActionDeleted      = "domain.deleted"
	ActionCheckQueued  = "domain.check.queued"
	ActionProxyApplied = "proxy.apply.queued"
)

// Servers is what domains need of the fleet.
type Servers interface {
	Get(ctx context.Context, id string) (servers.Server, error)
}

// Service manages domains, proxy state and request traffic.
type Service struct {
	store   Store
	apps    *apps.Service
	jobs    *jobs.Service
	servers Servers
	audit   *audit.Log
	now     func() time.Time
	log     *slog.Logger
}

// Deps is what a domain service is made of.
type Deps struct {
	Store   Store
	Apps    *apps.Service
	Jobs    *jobs.Service
	Servers Servers
	Audit   *audit.Log
	Now     func() time.Time
	Log     *slog.Logger
}

// NewService returns a domain service and registers its job types
// (domain.check, proxy.apply) with the job service.
func NewService(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Service{store: d.Store, apps: d.Apps, jobs: d.Jobs, servers: d.Servers, audit: d.Audit, now: d.Now, log: d.Log}
	j := d.Jobs
	j.Register(agentproto.DomainCheck, jobs.Spec{Timeout: time.Minute, OnComplete: s.checkFinished})
	j.Register(agentproto.ProxyApply, jobs.Spec{Timeout: 2 * time.Minute, OnComplete: s.proxyFinished})
	return s
}

// NewDomain is a request to add a domain.
type NewDomain struct {
	Hostname      string
	ApplicationID string
	TLSMode       string
	RedirectWWW   bool
}

// DomainChange is a domain after a change, with the proxy.apply job that puts
// the server's proxy in step with it.
type DomainChange struct {
	Domain Domain    `json:"domain"`
	JobID  string    `json:"job_id" doc:"The proxy.apply job; empty when the server has no agent"`
	Job    *jobs.Job `json:"job"`
}

// enrolled reports whether the server has an agent to run jobs.
func (s *Service) enrolled(ctx context.Context, serverID string) (bool, error) {
	srv, err := s.servers.Get(ctx, serverID)
	if fault.Is(err, fault.NotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return srv.HasAgent(), nil
}

// applyProxy queues proxy.apply with the server's whole desired state.
func (s *Service) applyProxy(ctx context.Context, serverID, actorID string) (jobs.Job, error) {
	cfg, err := s.apps.ProxyConfig(ctx, serverID)
	if err != nil {
		return jobs.Job{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID,
		Work: jobs.Of(agentproto.ProxyApply, agentproto.ProxyApplyPayload{Proxy: cfg}), CreatedBy: actorID})
	return j, err
}

func (s *Service) change(ctx context.Context, d Domain, actorID string) (DomainChange, error) {
	ok, err := s.enrolled(ctx, d.ServerID)
	if err != nil || !ok {
		return DomainChange{Domain: d}, err
	}
	j, err := s.applyProxy(ctx, d.ServerID, actorID)
	if err != nil {
		return DomainChange{}, err
	}
	// A deleted domain has nothing to record.
	if err := s.store.SetDomainProxyJob(ctx, d.ID, j.ID, s.now().UTC()); err != nil && !fault.Is(err, fault.NotFound) {
		return DomainChange{}, err
	}
	d.Proxy = ProxyState{Status: ProxyApplying, JobID: &j.ID}
	return DomainChange{Domain: d, JobID: j.ID, Job: &j}, nil
}

// proxyFinished is the completion hook of proxy.apply: the domains whose
// change it carries are applied, or failed with its error (which raises
// proxy.failed, an inbox item).
func (s *Service) proxyFinished(ctx context.Context, j jobs.Job) error {
	// The hook runs on the agent's request; finish even if it hangs up.
	ctx = context.WithoutCancel(ctx)
	msg := ""
	if j.Status != jobs.Succeeded {
		msg = "proxy.apply " + string(j.Status)
		if j.Error != nil {
			msg = *j.Error
		}
	}
	_, err := s.store.FinishDomainProxy(ctx, j.ServerID, j.ID, j.CreatedAt, j.Status == jobs.Succeeded, msg, s.now().UTC())
	return err
}

// Create adds a domain to an application and queues proxy.apply.
func (s *Service) Create(ctx context.Context, c audit.Caller, n NewDomain) (DomainChange, error) {
	var errs fault.Fields
	if p := HostnameProblem(n.Hostname); p != "" {
		errs.Add("hostname", "%s", p)
	} else if n.RedirectWWW && strings.HasPrefix(n.Hostname, "www.") {
		errs.Add("hostname", "with redirect_www, give the name without \"www.\": www.<hostname> is redirected to it")
	} else if n.RedirectWWW && len(n.Hostname)+4 > MaxHostnameLen {
		errs.Add("hostname", "with redirect_www, must be at most %d characters", MaxHostnameLen-4)
	}
	if p := TLSModeProblem(n.TLSMode); p != "" {
		errs.Add("tls_mode", "%s", p)
	}
	var app apps.App
	if n.ApplicationID == "" {
		errs.Add("application_id", "is required")
	} else {
		var err error
		app, err = s.apps.App(ctx, n.ApplicationID)
		if fault.Is(err, fault.NotFound) {
			errs.Add("application_id", "no such application")
		} else if err != nil {
			return DomainChange{}, err
		}
	}
	if err := errs.Err(); err != nil {
		return DomainChange{}, err
	}
	if app.State == apps.StateRemoving {
		return DomainChange{}, fault.Conflictf("application-removing", "The application is being removed.")
	}
	if ok, err := s.enrolled(ctx, app.ServerID); err != nil {
		return DomainChange{}, err
	} else if !ok {
		return DomainChange{}, fault.Conflictf("server-not-enrolled", "The application's server has no agent to serve the domain.")
	}
	now := s.now().UTC()
	d := Domain{ID: ids.NewAt(IDPrefix, now), Hostname: n.Hostname, ApplicationID: app.ID, ServerID: app.ServerID,
		TLSMode: n.TLSMode, RedirectWWW: n.RedirectWWW, CreatedBy: c.Actor.ID, CreatedAt: now, UpdatedAt: now}
	if err := s.store.InsertDomain(ctx, d, names(d.Hostname, d.RedirectWWW)); err != nil {
		return DomainChange{}, err
	}
	ch, err := s.change(ctx, d, c.Actor.ID)
	if err != nil {
		return DomainChange{}, err
	}
	return ch, s.audit.Record(ctx, c, ActionCreated, audit.Target{Type: "domain", ID: d.ID}, map[string]any{"hostname": d.Hostname,
		"application_id": d.ApplicationID, "tls_mode": d.TLSMode, "redirect_www": d.RedirectWWW, "job_id": ch.JobID})
}

// Get returns a domain.
func (s *Service) Get(ctx context.Context, id string) (Domain, error) { return s.store.Domain(ctx, id) }

// List returns domains by hostname; appID "" means all.
func (s *Service) List(ctx context.Context, appID string) ([]Domain, error) {
	if appID != "" {
		if _, err := s.apps.App(ctx, appID); fault.Is(err, fault.NotFound) {
			return nil, fault.Invalidf("application_id", "no such application")
		} else if err != nil {
			return nil, err
		}
	}
	list, err := s.store.ListDomains(ctx, appID)
	if list == nil {
		list = []Domain{}
	}
	return list, err
}

// UpdateTLS changes a domain's TLS mode and queues proxy.apply.
func (s *Service) UpdateTLS(ctx context.Context, c audit.Caller, id, mode string) (DomainChange, error) {
	if p := TLSModeProblem(mode); p != "" {
		return DomainChange{}, fault.Invalidf("tls_mode", "%s", p)
	}
	if _, err := s.store.Domain(ctx, id); err != nil {
		return DomainChange{}, err
	}
	if err := s.store.UpdateDomainTLS(ctx, id, mode, s.now().UTC()); err != nil {
		return DomainChange{}, err
	}
	d, err := s.store.Domain(ctx, id)
	if err != nil {
		return DomainChange{}, err
	}
	ch, err := s.change(ctx, d, c.Actor.ID)
	if err != nil {
		return DomainChange{}, err
	}
	return ch, s.audit.Record(ctx, c, ActionUpdated, audit.Target{Type: "domain", ID: id}, map[string]any{"hostname": d.Hostname, "tls_mode": mode, "job_id": ch.JobID})
}

// Delete removes a domain and queues proxy.apply without it.
func (s *Service) Delete(ctx context.Context, c audit.Caller, id string) (DomainChange, error) {
	d, err := s.store.Domain(ctx, id)
	if err != nil {
		return DomainChange{}, err
	}
	if err := s.store.DeleteDomain(ctx, id); err != nil {
		return DomainChange{}, err
	}
	ch, err := s.change(ctx, d, c.Actor.ID)
	if err != nil {
		return DomainChange{}, err
	}
	return ch, s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "domain", ID: id}, map[string]any{"hostname": d.Hostname, "application_id": d.ApplicationID, "job_id": ch.JobID})
}

// Apply queues proxy.apply with a server's whole desired proxy state.
func (s *Service) Apply(ctx context.Context, c audit.Caller, serverID string) (jobs.Job, error) {
	if _, err := servers.RequireAgent(ctx, s.servers, "", serverID, "apply the proxy state"); err != nil {
		return jobs.Job{}, err
	}
	j, err := s.applyProxy(ctx, serverID, c.Actor.ID)
	if err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionProxyApplied, audit.Target{Type: "server", ID: serverID}, map[string]any{"job_id": j.ID})
}

// DesiredProxy returns a server's current desired proxy state with its
// revision, as its agent fetches it (GET /agent/v1/proxy) when it switches
// a release or removes an application.
func (s *Service) DesiredProxy(ctx context.Context, serverID string) (agentproto.ProxyConfig, error) {
	return s.apps.ProxyConfig(ctx, serverID)
}

// QueueCheck queues domain.check on the domain's server.
func (s *Service) QueueCheck(ctx context.Context, c audit.Caller, id string) (jobs.Job, error) {
	d, err := s.store.Domain(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	if ok, err := s.enrolled(ctx, d.ServerID); err != nil {
		return jobs.Job{}, err
	} else if !ok {
		return jobs.Job{}, fault.Conflictf("server-not-enrolled", "The domain's server has no agent to check it.")
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: d.ServerID, AppID: d.ApplicationID, CreatedBy: c.Actor.ID,
		Work: jobs.Of(agentproto.DomainCheck, agentproto.DomainCheckPayload{Hostname: d.Hostname, TLSMode: d.TLSMode})})
	if err != nil {
		return jobs.Job{}, err
	}
	if err := s.store.SetDomainCheckJob(ctx, id, j.ID, s.now().UTC()); err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionCheckQueued, audit.Target{Type: "domain", ID: id}, map[string]any{"hostname": d.Hostname, "job_id": j.ID})
}

// checkFinished is the completion hook of domain.check: it stores what
// the check found on the domain, compared with the server's addresses.
func (s *Service) checkFinished(ctx context.Context, j jobs.Job) error {
	// The hook runs on the agent's request; finish even if it hangs up.
	ctx = context.WithoutCancel(ctx)
	d, err := s.store.DomainByCheckJob(ctx, j.ID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c := DomainCheck{JobID: j.ID, Status: string(j.Status), Addresses: []string{}, ServerAddresses: []string{},
		CertDNSNames: []string{}, Errors: []string{}, Notes: []string{}, ComparedWith: ComparedNone, CheckedAt: s.now().UTC()}
	if j.FinishedAt != nil {
		c.CheckedAt = *j.FinishedAt
	}
	if j.Status != jobs.Succeeded {
		msg := string(j.Status)
		if j.Error != nil {
			msg = *j.Error
		}
		c.Errors = append(c.Errors, "check "+string(j.Status)+": "+msg)
		return s.store.SetDomainCheck(ctx, d.ID, j.ID, c, s.now().UTC())
	}
	var r agentproto.DomainCheckResult
	if len(j.Data) > 0 {
		if err := json.Unmarshal(j.Data, &r); err != nil {
			c.Errors = append(c.Errors, "the agent's result is not a domain check result")
		}
	}
	if r.Addresses != nil {
		c.Addresses = r.Addresses
	}
	if r.DNSError != "" {
		c.Errors = append(c.Errors, "dns: "+r.DNSError)
	}
	if r.CertError != "" {
		c.Errors = append(c.Errors, "certificate: "+r.CertError)
	}
	c.CertIssuer = r.CertIssuer
	if !r.CertNotAfter.IsZero() {
		t := r.CertNotAfter.UTC()
		c.CertNotAfter = &t
	}
	if !r.CertNotBefore.IsZero() {
		t := r.CertNotBefore.UTC()
		c.CertNotBefore = &t
	}
	if r.CertDNSNames != nil {
		c.CertDNSNames = r.CertDNSNames
	}
	if !r.CheckedAt.IsZero() {
		c.CheckedAt = r.CheckedAt.UTC()
	}
	srv, err := s.servers.Get(ctx, d.ServerID)
	if err != nil && !fault.Is(err, fault.NotFound) {
		return err
	}
	var facts agentproto.Facts
	if err == nil && srv.Facts != nil {
		facts = *srv.Facts
	}
	switch {
	case len(facts.PublicAddresses) > 0:
		c.ComparedWith, c.ServerAddresses = ComparedPublic, facts.PublicAddresses
	case len(facts.PrivateAddresses) > 0:
		c.ComparedWith, c.ServerAddresses = ComparedPrivate, facts.PrivateAddresses
		c.Notes = append(c.Notes, "the server reports no public address; the hostname was compared with its private addresses")
	default:
		c.Notes = append(c.Notes, "the server reports no addresses; nothing to compare the hostname with")
	}
	c.PointsToServer = len(c.Addresses) > 0 && len(c.ServerAddresses) > 0
	for _, a := range c.Addresses {
		if !slices.ContainsFunc(c.ServerAddresses, func(sa string) bool { return sameIP(a, sa) }) {
			c.PointsToServer = false
		}
	}
	return s.store.SetDomainCheck(ctx, d.ID, j.ID, c, s.now().UTC())
}

// sameIP compares two addresses as IPs (an address may carry a prefix
// length, as interface addresses do).
func sameIP(a, b string) bool {
	strip := func(s string) string {
		if i := strings.IndexByte(s, '/'); i >= 0 {
			return s[:i]
		}
		return s
	}
	pa, pb := parseIP(strip(a)), parseIP(strip(b))
	if pa == nil || pb == nil {
		return strip(a) == strip(b)
	}
	return pa.Equal(pb)
}
