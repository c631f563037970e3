package servers

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Audit actions of this package.
const (
	ActionEnrollmentCreated = "server.enrollment.created"
	ActionEnrolled          = "server.enrolled"
	ActionRevoked           = "server.revoked"
	ActionDeleted           = "server.deleted"
	ActionQueued            = "server.action.queued"
)

// Agent intervals sent at enrollment and in every heartbeat reply.
const (
	HeartbeatSeconds  = int(jobs.HeartbeatInterval / time.Second)
	MetricsSeconds    = 15
	ClaimWaitSeconds  = 25
	MaxConcurrentJobs = 4
)

// Service manages servers.
type Service struct {
	store         Store
	jobs          *jobs.Service
	audit         *audit.Log
	now           func() time.Time
	publicURL     string
	enrollmentTTL time.Duration

	auth    *authCache                   // agent tokens checked recently
	touches atomic.Pointer[touchBatcher] // nil: heartbeats are written at once

	// bus tells the other control planes sharing the store about revoked
	// agents; nil: this is the only one.
	bus jobs.Bus
	// cacheOff turns the agent token cache off. It is off whenever other
	// control planes may share the store: a revocation there must refuse
	// the very next call here, and a bus message can arrive after it.
	cacheOff atomic.Bool

	// keptImages names the images a prune must keep (Deps.KeptImages).
	keptImages func(ctx context.Context, serverID string) ([]string, error)
}

// msgAgentRevoked is the bus message of a revoked or deleted server's
// agent; the key is the server id.
const msgAgentRevoked = "agent-revoked:"

// BusConnected tells the service whether its bus listens. When it comes
// back, revocations may have been missed while it was down: whatever is
// cached is dropped.
func (s *Service) BusConnected(up bool) {
	s.auth.clear()
}

// Deliver takes a message from the bus and reports whether it was one of
// the server service's: a revoked agent is forgotten here too.
func (s *Service) Deliver(msg string) bool {
	id, ok := strings.CutPrefix(msg, msgAgentRevoked)
	if ok {
		s.forgetAgent(id)
	}
	return ok
}

// revoked forgets a revoked server's agent here and in the other control
// planes.
func (s *Service) revoked(ctx context.Context, id string) {
	s.forgetAgent(id)
	if s.bus == nil {
		return
	}
	// The revocation is committed whatever happens here, and the others
	// check agent tokens against the store on every call.
	_ = s.bus.Notify(context.WithoutCancel(ctx), msgAgentRevoked+id)
}

// Deps is what a server service is made of.
type Deps struct {
	Store Store
	Jobs  *jobs.Service
	Audit *audit.Log
	Now   func() time.Time
	// PublicURL goes into install commands.
	PublicURL string
	// EnrollmentTTL is how long an enrollment token is valid; 0 is an
	// hour.
	EnrollmentTTL time.Duration
	// KeptImages names the images a prune on a server must keep: those
	// its applications keep for their releases. nil: a prune is refused.
	KeptImages func(ctx context.Context, serverID string) ([]string, error)
	// Bus, when not nil, makes revocations reach every control plane
	// sharing the store (see Deliver), where they drop the agent's batched
	// heartbeats. With other control planes possible, agent tokens are
	// checked against the store on every call: a bus message is not
	// guaranteed to arrive before the revoked agent's next call reaches
	// another control plane, and a revocation takes effect at that call.
	Bus jobs.Bus
}

// NewService returns a server service and registers the job types of
// server actions with the job service.
func NewService(d Deps) *Service {
	if d.EnrollmentTTL <= 0 {
		d.EnrollmentTTL = time.Hour
	}
	registerActions(d.Jobs)
	s := &Service{store: d.Store, jobs: d.Jobs, audit: d.Audit, now: d.Now, publicURL: strings.TrimRight(d.PublicURL, "/"),
		enrollmentTTL: d.EnrollmentTTL, keptImages: d.KeptImages, bus: d.Bus, auth: newAuthCache(d.Now, AgentAuthTTL)}
	s.cacheOff.Store(d.Bus != nil)
	return s
}

// Enrollment is a new server's one-time token and how to use it.
type Enrollment struct {
	Server         Server    `json:"server"`
	Token          string    `json:"token" doc:"One-time enrollment token (ept_…); shown once"`
	InstallCommand string    `json:"install_command" doc:"Run as root on the server to install and enroll the agent"`
	ExpiresAt      time.Time `json:"expires_at"`
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// Limits on tags.
const (
	MaxTags   = 20
	MaxTagLen = 40
)

func validateNameTags(name string, tags []string) error {
	var errs fault.Fields
	if !namePattern.MatchString(name) {
		errs.Add("name", "must be 1 to 63 letters, digits, '.', '-' or '_'")
	}
	if len(tags) > MaxTags {
		errs.Add("tags", "at most %d tags", MaxTags)
	}
	seen := map[string]bool{}
	for i, t := range tags {
		n := utf8.RuneCountInString(t)
		field := fmt.Sprintf("tags[%d]", i)
		switch {
		case n < 1 || n > MaxTagLen:
			errs.Add(field, "must be 1 to %d characters", MaxTagLen)
		case strings.TrimSpace(t) != t || strings.ContainsFunc(t, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			errs.Add(field, "must not have control characters or surrounding spaces")
		case seen[t]:
			errs.Add(field, "is a duplicate")
		}
		seen[t] = true
	}
	return errs.Err()
}

// InstallCommand is the shell line that installs and enrolls an agent.
// The token travels in the environment (export is the shell's own, not a
// process), never in an argument, which every user of the host can read
// (ps) for as long as the installer runs.
func (s *Service) InstallCommand(token string) string {
	return fmt.Sprintf("export CAPSTAN_ENROLL_TOKEN=%s; curl -fsSL %s/agent/install.sh | sudo --preserve-env=CAPSTAN_ENROLL_TOKEN sh; unset CAPSTAN_ENROLL_TOKEN",
		token, s.publicURL)
}

func (s *Service) enrollment(srv Server, token string, expires time.Time) Enrollment {
	return Enrollment{Server: srv, Token: token, InstallCommand: s.InstallCommand(token), ExpiresAt: expires.UTC()}
}

// withStatus derives offline from the last heartbeat, counting the
// heartbeats not yet written.
func (s *Service) withStatus(srv Server) Server {
	if b := s.touches.Load(); b != nil && srv.Status == Online {
		if at, ok := b.seen(srv.ID); ok && (srv.LastSeenAt == nil || at.After(*srv.LastSeenAt)) {
			srv.LastSeenAt = &at
		}
	}
	if srv.Status == Online && srv.LastSeenAt != nil && s.now().Sub(*srv.LastSeenAt) > jobs.OfflineAfter {
		srv.Status = Offline
	}
	if srv.Tags == nil {
		srv.Tags = []string{}
	}
	return srv
}

// CreateEnrollment creates a pending server and its one-time token.
func (s *Service) CreateEnrollment(ctx context.Context, c audit.Caller, name string, tags []string) (Enrollment, error) {
	if tags == nil {
		tags = []string{}
	}
	if err := validateNameTags(name, tags); err != nil {
		return Enrollment{}, err
	}
	now := s.now().UTC()
	srv := Server{ID: ids.NewAt(ids.Server, now), Name: name, Tags: tags, Status: Pending, CreatedAt: now, UpdatedAt: now}
	token := ids.Token(strings.TrimSuffix(agentproto.EnrollmentTokenPrefix, "_"))
	expires := now.Add(s.enrollmentTTL)
	if err := s.store.CreateServer(ctx, srv, ids.Hash(token), expires); err != nil {
		return Enrollment{}, err
	}
	if err := s.audit.Record(ctx, c, ActionEnrollmentCreated, audit.Target{Type: "server", ID: srv.ID}, map[string]any{"name": name}); err != nil {
		return Enrollment{}, err
	}
	return s.enrollment(s.withStatus(srv), token, expires), nil
}

// ReissueEnrollment replaces the token of a server that has not enrolled.
func (s *Service) ReissueEnrollment(ctx context.Context, c audit.Caller, id string) (Enrollment, error) {
	now := s.now().UTC()
	token := ids.Token(strings.TrimSuffix(agentproto.EnrollmentTokenPrefix, "_"))
	expires := now.Add(s.enrollmentTTL)
	srv, err := s.store.ReplaceEnrollment(ctx, id, ids.Hash(token), expires, now)
	if err != nil {
		return Enrollment{}, err
	}
	if err := s.audit.Record(ctx, c, ActionEnrollmentCreated, audit.Target{Type: "server", ID: srv.ID}, map[string]any{"reissued": true}); err != nil {
		return Enrollment{}, err
	}
	return s.enrollment(s.withStatus(srv), token, expires), nil
}

// Getter reads a server: the Service is one, and so is what each
// capability keeps of it.
type Getter interface {
	Get(ctx context.Context, id string) (Server, error)
}

// HasAgent reports whether the server has an agent to run jobs: it is
// enrolled and not revoked.
func (s Server) HasAgent() bool { return s.Status != Pending && s.Status != Revoked }

// RequireAgent returns the server when it has an agent to run a job for
// purpose ("read logs"). An unknown server is a field error on field (or
// fault.NotFound when field is ""); a pending or revoked one is 409
// server-not-enrolled, saying what it cannot do.
func RequireAgent(ctx context.Context, g Getter, field, id, purpose string) (Server, error) {
	srv, err := g.Get(ctx, id)
	if fault.Is(err, fault.NotFound) && field != "" {
		return Server{}, fault.Invalidf(field, "no such server")
	}
	if err != nil {
		return Server{}, err
	}
	if !srv.HasAgent() {
		return Server{}, fault.Conflictf("server-not-enrolled", "The server is %s; it has no agent to %s.", srv.Status, purpose)
	}
	return srv, nil
}

// Get returns a server.
func (s *Service) Get(ctx context.Context, id string) (Server, error) {
	srv, err := s.store.Server(ctx, id)
	return s.withStatus(srv), err
}

// List returns every server.
// WithStatus derives the status of servers read straight from the store
// (online turns offline when the agent is silent), counting the heartbeats
// not yet written.
func (s *Service) WithStatus(list []Server) []Server {
	for i := range list {
		list[i] = s.withStatus(list[i])
	}
	return list
}

// ListStates lists every server with its derived status, its name and
// last heartbeat only (no tags or facts): what presence needs.
func (s *Service) ListStates(ctx context.Context) ([]Server, error) {
	list, err := s.store.ListServerStates(ctx)
	for i := range list {
		list[i] = s.withStatus(list[i])
	}
	return list, err
}

func (s *Service) List(ctx context.Context) ([]Server, error) {
	list, err := s.store.ListServers(ctx)
	for i := range list {
		list[i] = s.withStatus(list[i])
	}
	return list, err
}

// Revoke invalidates the server's agent credential at once, cancels its
// queued jobs and fails its running ones.
func (s *Service) Revoke(ctx context.Context, c audit.Caller, id string) (Server, error) {
	srv, err := s.store.RevokeServer(ctx, id, s.now())
	if err != nil {
		return Server{}, err
	}
	s.revoked(ctx, id)
	if err := s.jobs.EndServerJobs(ctx, id); err != nil {
		return Server{}, err
	}
	return s.withStatus(srv), s.audit.Record(ctx, c, ActionRevoked, audit.Target{Type: "server", ID: id}, nil)
}

// Delete revokes the server and deletes its record; its jobs stay readable.
func (s *Service) Delete(ctx context.Context, c audit.Caller, id string) error {
	if err := s.store.DeleteServer(ctx, id, s.now()); err != nil {
		return err
	}
	s.revoked(ctx, id)
	if err := s.jobs.EndServerJobs(ctx, id); err != nil {
		return err
	}
	return s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "server", ID: id}, nil)
}

// AgentConfig is the configuration every agent gets.
func AgentConfig() agentproto.Config {
	return agentproto.Config{HeartbeatSeconds: HeartbeatSeconds, MetricsSeconds: MetricsSeconds,
		ClaimWaitSeconds: ClaimWaitSeconds, MaxConcurrentJobs: MaxConcurrentJobs}
}

// Enroll redeems an enrollment token for an agent token.
func (s *Service) Enroll(ctx context.Context, c audit.Caller, req agentproto.EnrollRequest) (agentproto.EnrollResponse, error) {
	if !strings.HasPrefix(req.Token, agentproto.EnrollmentTokenPrefix) || len(req.Token) > 100 {
		return agentproto.EnrollResponse{}, errBadEnrollment
	}
	agentToken := ids.Token(strings.TrimSuffix(agentproto.AgentTokenPrefix, "_"))
	srv, err := s.store.RedeemEnrollment(ctx, ids.Hash(req.Token), ids.Hash(agentToken), req.Facts, s.now())
	if fault.Is(err, fault.Unauthenticated) || fault.Is(err, fault.NotFound) {
		return agentproto.EnrollResponse{}, errBadEnrollment
	}
	if err != nil {
		return agentproto.EnrollResponse{}, err
	}
	c.Actor = audit.Actor{Type: audit.ActorAgent, ID: srv.ID}
	if err := s.audit.Record(ctx, c, ActionEnrolled, audit.Target{Type: "server", ID: srv.ID}, map[string]any{"hostname": req.Facts.Hostname, "agent_version": req.Facts.AgentVersion}); err != nil {
		return agentproto.EnrollResponse{}, err
	}
	return agentproto.EnrollResponse{ServerID: srv.ID, ServerName: srv.Name, AgentToken: agentToken,
		HeartbeatSeconds: HeartbeatSeconds, MetricsSeconds: MetricsSeconds}, nil
}

var errBadEnrollment = fault.Unauthenticatedf("invalid-enrollment-token", "The enrollment token is unknown, already used or expired. Create a new enrollment.")

// forgetAgent drops what this process remembers of a server's agent once
// its credential is revoked: its cached token, so that the next request
// with it is refused, and its pending heartbeat.
func (s *Service) forgetAgent(id string) {
	s.auth.invalidate(id)
	if b := s.touches.Load(); b != nil {
		b.drop(id)
	}
}

// Authenticate resolves an agent token to its server. A token checked
// within AgentAuthTTL is accepted from memory. The server it returns has
// only its ID and status, as the store had them then.
func (s *Service) Authenticate(ctx context.Context, token string) (Server, error) {
	if !strings.HasPrefix(token, agentproto.AgentTokenPrefix) || len(token) > 100 {
		return Server{}, fault.Unauthenticatedf("invalid-agent-token", "The agent token is not valid.")
	}
	hash := ids.Hash(token)
	if srv, ok := s.auth.get(hash); ok && !s.cacheOff.Load() {
		return srv, nil
	}
	gen, checked := s.auth.generation(), s.now()
	srv, revoked, err := s.store.ServerByAgentToken(ctx, hash)
	if fault.Is(err, fault.NotFound) {
		s.auth.forget(hash)
		return Server{}, fault.Unauthenticatedf("invalid-agent-token", "The agent token is not valid.")
	}
	if err != nil {
		return Server{}, err
	}
	if revoked {
		s.auth.forget(hash)
		return Server{}, fault.Unauthenticatedf("agent-revoked", "This server's agent credential was revoked. The agent must stop.")
	}
	// Kept even when the cache is off: then it only makes the token known
	// (KnownAgent), and is never accepted without the store.
	s.auth.put(hash, srv, gen, checked)
	return srv, nil
}

// KnownAgent reports, from memory only, whether token is an agent token
// this process has confirmed before (in Authenticate, however long
// ago) and not seen revoked since, and whose server it is.
// It says nothing about whether the token is still valid: Authenticate
// decides that. It lets the API tell an enrolled agent's request from one
// with a token nobody here knows before it asks the store.
func (s *Service) KnownAgent(token string) (serverID string, ok bool) {
	if !strings.HasPrefix(token, agentproto.AgentTokenPrefix) || len(token) > 100 {
		return "", false
	}
	return s.auth.known(ids.Hash(token))
}

// Heartbeat records that the agent is alive and extends its jobs' leases.
func (s *Service) Heartbeat(ctx context.Context, srv Server, req agentproto.HeartbeatRequest) (agentproto.HeartbeatResponse, error) {
	if len(req.AgentVersion) > 64 {
		return agentproto.HeartbeatResponse{}, fault.Invalidf("agent_version", "at most 64 characters")
	}
	if err := s.jobs.Heartbeat(ctx, srv.ID, req.RunningJobIDs); err != nil {
		return agentproto.HeartbeatResponse{}, err
	}
	now := s.now().UTC()
	if b := s.touches.Load(); b != nil && req.Facts == nil {
		b.add(Touch{ServerID: srv.ID, AgentVersion: req.AgentVersion, At: now})
	} else if err := s.store.TouchServer(ctx, srv.ID, req.AgentVersion, req.Facts, now); err != nil {
		return agentproto.HeartbeatResponse{}, err
	}
	return agentproto.HeartbeatResponse{Config: AgentConfig(), ServerTime: now}, nil
}
