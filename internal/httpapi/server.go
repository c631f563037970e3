// Package httpapi serves the client API under /api/v1, the OpenAPI document
// at /openapi.json and the interactive reference at /docs. Handlers are thin:
// they decode, call a domain service, and encode. This is the one place where
// domain errors become HTTP statuses, as RFC 9457 problems.
package httpapi

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/httpconn"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/logs"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/notify"
	"github.com/capstan-dev/capstan/internal/platform"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/stream"
)

// Deps are the services the API serves.
type Deps struct {
	Auth     *auth.Service
	Audit    *audit.Log
	Platform *platform.Service
	Servers  *servers.Service
	Jobs     *jobs.Service
	Metrics  *metrics.Service // optional; without it servers show no metrics and the metric views fail
	Logs     *logs.Service
	Apps     *apps.Service    // optional; without it the application endpoints fail
	Domains  *domains.Service // optional; without it the domain endpoints fail
	// Databases is optional; without it the database endpoints fail.
	Databases *databases.Service
	// Monitoring is optional; without it the rule and alert endpoints fail.
	Monitoring *monitoring.Service
	// Inbox is optional; without it the inbox endpoints fail.
	Inbox *notify.Inbox
	// Preferences is optional; without it the settings endpoints fail.
	Preferences *notify.Preferences
	// Channels is optional; without it the channel endpoints fail.
	Channels *notify.Channels
	// SMTP is how e-mail goes out; the zero value means no e-mail.
	SMTP notify.SMTP
	// Events is optional; without it the event list fails.
	Events EventReader
	// GitHost is optional; without it the git host endpoints fail.
	GitHost *githost.Service
	// Backups is optional; without it the backup endpoints fail.
	Backups *backups.Service
	Logger  *slog.Logger
	Version string
	// PublicURL decides the refresh cookie's name and Secure attribute.
	PublicURL string
	// TrustedProxy, when true, takes the client address from the last
	// X-Forwarded-For entry. Only set it behind a reverse proxy that sets it.
	TrustedProxy bool
	// Stream and StreamTickets are optional; without them the live
	// stream endpoints fail.
	Stream        *stream.Hub
	StreamTickets stream.TicketStore
	// Console is the built web console (index.html and assets/), served
	// at / for every path the API does not take. Without an index.html a
	// page says how to build it.
	Console fs.FS
	// Requests, when set, is told of every answered request.
	Requests RequestObserver
	// Conns, when set, takes the connections of detached requests (see
	// Detach) back to be served again; the http.Server must also Serve
	// it. Without it no request is detached.
	Conns *httpconn.Returns
	// AgentInFlight bounds how many agent requests are handled at once;
	// 0 means DefaultAgentInFlight. See agentSlots.
	AgentInFlight int
	// AgentInFlightPerServer bounds how many of them one server's agent
	// has at once; 0 means DefaultAgentInFlightPerServer.
	AgentInFlightPerServer int
	// WebhookInFlight bounds how many git host webhook deliveries are
	// read and verified at once; 0 means DefaultWebhookInFlight.
	WebhookInFlight int
}

// RequestObserver is told of every answered request: the route pattern
// that matched ("" when none did), the status and the time it took.
type RequestObserver interface {
	ObserveRequest(pattern string, status int, d time.Duration)
}

// Server is the HTTP handler of the control plane.
type Server struct {
	deps    Deps
	log     *slog.Logger
	mux     *http.ServeMux
	api     huma.API
	handler http.Handler
	cookie  cookieConfig
	console *console
	agents  *agentSlots
	// webhooks bounds the webhook deliveries being read and verified.
	webhooks *bodySlots
	// sessions closes the streams of sessions that ended.
	sessions *sessionWatch

	mu     sync.Mutex // guards routes
	routes []Route
}

// Route is one registered operation.
type Route struct {
	Method string
	Path   string
	Access Access
}

// Access says who may call an operation.
type Access int

// Access levels.
const (
	Public   Access = iota // no credentials
	SignedIn               // any signed-in user
	Admin                  // signed-in administrator
	Agent                  // an enrolled agent (Bearer agt_…)
)

// roleModel says what each role may do; the OpenAPI document carries it.
const roleModel = "Roles: an administrator may call every operation. A member may call the operations marked " +
	"\"Any signed-in user\": reading servers, metrics, applications, deployments, domains, traffic, database instances and jobs; every other " +
	"operation answers a member 403 (admin-required). A member never reads secrets (environment values, credentials) nor " +
	"what a job returned: its data, output, events, log lines and error text are withheld (the job's metadata and error " +
	"class remain, and redacted is true)."

// accessNote ends each operation's description with who may call it.
var accessNote = map[Access]string{
	Public:   "No credentials needed.",
	SignedIn: "Any signed-in user (administrator or member); members never get secrets or job output.",
	Admin:    "Administrators only (403 admin-required for members).",
	Agent:    "An enrolled agent, with its agent token.",
}

// Default request body limit for JSON endpoints.
const maxJSONBody = 64 << 10

// New builds the API. mounts register further routes (the agent protocol).
func New(d Deps, mounts ...func(*Server)) *Server {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	s := &Server{deps: d, log: d.Logger, mux: http.NewServeMux(), cookie: newCookieConfig(d.PublicURL),
		console: newConsole(d.Console, gitHostOrigin(d.GitHost)), agents: newAgentSlots(d.AgentInFlight, d.AgentInFlightPerServer),
		webhooks: newBodySlots(d.WebhookInFlight)}
	if d.Auth != nil {
		s.sessions = newSessionWatch(d.Auth.SessionsEnded, d.Logger)
	}

	cfg := huma.DefaultConfig(platform.Name+" API", d.Version)
	cfg.CreateHooks = nil // no $schema fields or Link headers in responses
	cfg.DocsPath = ""     // /docs is ours, served from embedded assets
	cfg.SchemasPath = ""
	cfg.OpenAPIPath = "/openapi"
	cfg.RejectUnknownQueryParameters = true
	cfg.Info.Description = "Control plane for a fleet of Linux servers. Every error is an RFC 9457 problem (application/problem+json). " +
		"A request that needs a secret sealed with another secret key than the control plane's fails with 500 `key-mismatch`: " +
		"the control plane must be restarted with the key of its store.\n\n" +
		roleModel
	cfg.Info.License = &huma.License{Name: "Apache-2.0", Identifier: "Apache-2.0"}
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "Access token from POST /api/v1/auth/2fa/verify or " +
			"/api/v1/auth/refresh (valid 900 s). " + roleModel},
		"agentToken": {Type: "http", Scheme: "bearer", Description: "Agent token (agt_…) from POST /agent/v1/enroll."},
	}
	if d.PublicURL != "" {
		cfg.Servers = []*huma.Server{{URL: d.PublicURL}}
	}
	s.api = humago.New(s.mux, cfg)
	s.api.UseMiddleware(s.authenticate, s.admitBodies)

	s.registerAuth()
	s.registerUsers()
	s.registerInvitations()
	s.registerTokens()
	s.registerPlatform()
	s.registerAudit()
	s.registerDocs()
	s.registerServers()
	s.registerFleetList()
	s.registerJobs()
	s.registerMetrics()
	s.registerLogs()
	s.registerApps()
	s.registerDomains()
	s.registerDatabases()
	s.registerDatabaseLogins()
	s.registerManagedDatabases()
	s.registerDatabaseMetrics()
	s.registerDatabaseExports()
	s.registerServerRequests()
	s.registerEvents()
	s.registerGitHost()
	s.registerLandings()
	s.registerMonitoring()
	s.registerNotifications()
	s.registerBackups()
	s.registerChannels()
	s.registerNotificationSettings()
	s.registerEmail()
	s.registerStream()
	for _, m := range mounts {
		m(s)
	}

	s.handler = s.withRequestContext(s.withRecover(s.withSecurityHeaders(s.withCompression(http.HandlerFunc(s.route)))))
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// API exposes the huma API, for the OpenAPI document.
func (s *Server) API() huma.API { return s.api }

// Routes lists the registered operations.
func (s *Server) Routes() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]Route(nil), s.routes...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path+out[i].Method < out[j].Path+out[j].Method })
	return out
}

// route dispatches to the mux, answering unknown paths and wrong methods
// with problems instead of the mux's plain-text replies.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		// Through the mux, not h: only ServeMux.ServeHTTP sets the
		// request's path values ({id}), which Handler does not.
		s.mux.ServeHTTP(w, r)
		return
	}
	// Let the mux decide between 404, 405 and a redirect, but keep its body.
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		p := newProblem(http.StatusMethodNotAllowed, "", fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path))
		p.GetHeaders().Set("Allow", rec.header.Get("Allow"))
		writeProblem(w, r, p)
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
	default:
		if s.console.serve(w, r) {
			return
		}
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "No resource at "+r.URL.Path+"."))
	}
}

type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }
func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}
func (h *headerRecorder) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}

// Register registers one operation with its access level, standard error
// responses, body limit and error mapping.
func Register[I, O any](s *Server, o huma.Operation, access Access, h func(context.Context, *I) (*O, error)) {
	op(s, o, access, h)
}

// Mux returns the underlying mux, for routes that are not JSON operations.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// Logger returns the server's logger.
func (s *Server) Logger() *slog.Logger { return s.log }

func op[I, O any](s *Server, o huma.Operation, access Access, h func(context.Context, *I) (*O, error)) {
	if o.Metadata == nil {
		o.Metadata = map[string]any{}
	}
	o.Metadata[accessKey] = access
	pol := policyFor(o.Method, o.Path, access)
	o.Metadata[policyKey] = pol
	if access != Public && access != Agent {
		if o.Extensions == nil {
			o.Extensions = map[string]any{}
		}
		o.Extensions["x-capstan-token"] = map[string]any{"scope": pol.Scope, "session_only": pol.SessionOnly, "resource": pol.Resource, "narrowed_list": pol.Narrowed}
	}
	o.Metadata[boundsKey] = boundsOf(reflect.TypeFor[I]())
	note := accessNote[access]
	if access != Public && access != Agent {
		note += " " + pol.note()
	}
	if o.Description == "" {
		o.Description = note
	} else {
		o.Description += "\n\n" + note
	}
	// Unknown query parameters are refused everywhere, so every operation
	// can answer 422.
	errs := []int{http.StatusInternalServerError, http.StatusUnprocessableEntity}
	if access == Agent {
		// Agents may be older or newer than this control plane: their
		// bodies are decoded leniently (unknown fields ignored, missing
		// ones zero) and checked by the domain, not by the schema.
		o.SkipValidateBody = true
		o.Security = []map[string][]string{{"agentToken": {}}}
		errs = append(errs, http.StatusUnauthorized)
	} else if access != Public {
		o.Security = []map[string][]string{{"bearer": {}}}
		errs = append(errs, http.StatusUnauthorized)
	} else {
		// An explicit empty list, not an absent one: the operation needs
		// no credentials (OpenAPI linters want this said).
		o.Security = []map[string][]string{}
	}
	if access == Admin || access == SignedIn {
		// Members are refused administrators' operations; tokens what
		// their scopes and resources do not cover.
		errs = append(errs, http.StatusForbidden)
	}
	if hasBody(reflect.TypeFor[I]()) {
		errs = append(errs, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity)
		if o.MaxBodyBytes == 0 {
			o.MaxBodyBytes = maxJSONBody
		}
	}
	for _, e := range errs {
		if !containsInt(o.Errors, e) {
			o.Errors = append(o.Errors, e)
		}
	}
	sort.Ints(o.Errors)
	s.mu.Lock()
	s.routes = append(s.routes, Route{Method: o.Method, Path: o.Path, Access: access})
	s.mu.Unlock()
	huma.Register(s.api, o, func(ctx context.Context, in *I) (*O, error) {
		out, err := h(ctx, in)
		if err != nil {
			return nil, problemFor(ctx, s.log, err)
		}
		return out, nil
	})
}

func hasBody(t reflect.Type) bool {
	f, ok := t.FieldByName("Body")
	return ok && f.Type.Kind() != reflect.Invalid
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

const accessKey = "capstan-access"

type principalKey struct{}

type agentKey struct{}

// AgentServer returns the server of the authenticated agent; only valid in
// operations registered as Agent.
func AgentServer(ctx context.Context) servers.Server {
	srv, _ := ctx.Value(agentKey{}).(servers.Server)
	return srv
}

// Client returns the address and user agent of the request's client.
func Client(ctx context.Context) audit.Caller { return clientOf(ctx) }

// principal returns the authenticated caller; only valid in operations
// registered as SignedIn or Admin.
func principal(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// reader says how much of a job the caller may read: all of it for an
// administrator, its metadata for a member. Every handler that shows a job,
// its result or its events passes this on to the domain.
func reader(ctx context.Context) jobs.Reader { return jobs.ReaderFor(canReadSecrets(ctx)) }

// authenticateAgent checks an agent token and takes one of its server's
// request slots, which release gives back; or it returns the problem to
// answer. The token is checked before a slot is taken, so that a request
// with a bogus token never holds one: a token this process confirmed
// before (servers.Service.KnownAgent) is checked within its server's
// slot, from memory or the store; any other among a few store lookups at
// once, and not at all while its address's tokens keep failing.
func (s *Server) authenticateAgent(ctx context.Context, token string) (servers.Server, func(), *Problem) {
	var srv servers.Server
	serverID, known := s.deps.Servers.KnownAgent(token)
	if !known {
		ip := clientOf(ctx).IP
		if wait := s.agents.failures.wait(ip); wait > 0 {
			return srv, nil, failuresProblem(wait)
		}
		if !s.agents.startLookup(ctx) {
			s.agents.refuse(s.log)
			return srv, nil, busyProblem()
		}
		var err error
		srv, err = s.deps.Servers.Authenticate(ctx, token)
		s.agents.endLookup()
		if err != nil {
			if fault.Is(err, fault.Unauthenticated) {
				s.agents.failures.fail(ip)
			}
			return srv, nil, problemFor(ctx, s.log, err)
		}
		serverID = srv.ID
	}
	if !s.agents.acquire(serverID) {
		s.agents.refuse(s.log)
		return srv, nil, busyProblem()
	}
	release := func() { s.agents.release(serverID) }
	if known {
		var err error
		if srv, err = s.deps.Servers.Authenticate(ctx, token); err != nil {
			release()
			return srv, nil, problemFor(ctx, s.log, err)
		}
	}
	return srv, release, nil
}

// writeHumaProblem answers a problem from huma middleware, before the
// operation's input is read.
func writeHumaProblem(ctx huma.Context, p *Problem) {
	p.RequestID = requestID(ctx.Context())
	for k, vs := range p.headers {
		for _, v := range vs {
			ctx.AppendHeader(k, v)
		}
	}
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(p.Status)
	p.Instance = requestFrom(ctx.Context()).URL.Path
	writeJSON(ctx.BodyWriter(), p)
}

// authenticate is huma middleware that enforces each operation's access
// level before its input is read.
func (s *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	access, _ := ctx.Operation().Metadata[accessKey].(Access)
	if access == Public {
		next(ctx)
		return
	}
	fail := func(p *Problem) {
		if p.Status == http.StatusUnauthorized {
			p.GetHeaders().Set("WWW-Authenticate", `Bearer realm="capstan"`)
		}
		writeHumaProblem(ctx, p)
	}
	h := ctx.Header("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		if access == Agent {
			fail(newProblem(http.StatusUnauthorized, "invalid-agent-token", "This endpoint needs an Authorization: Bearer agent token."))
			return
		}
		fail(newProblem(http.StatusUnauthorized, auth.CodeInvalidToken, "This endpoint needs an Authorization: Bearer access token."))
		return
	}
	if access == Agent {
		srv, release, p := s.authenticateAgent(ctx.Context(), strings.TrimSpace(token))
		if p != nil {
			fail(p)
			return
		}
		defer release()
		next(huma.WithValue(ctx, agentKey{}, srv))
		return
	}
	token = strings.TrimSpace(token)
	var p auth.Principal
	var err error
	if auth.IsAPIToken(token) {
		p, err = s.deps.Auth.AuthenticateToken(ctx.Context(), clientOf(ctx.Context()), token)
	} else {
		p, err = s.deps.Auth.Authenticate(ctx.Context(), token)
	}
	if err != nil {
		fail(problemFor(ctx.Context(), s.log, err))
		return
	}
	pol, _ := ctx.Operation().Metadata[policyKey].(policy)
	if prob := s.authorize(ctx, access, pol, p); prob != nil {
		fail(prob)
		return
	}
	ctx = huma.WithValue(ctx, principalKey{}, p)
	if p.Token != nil {
		ctx = huma.WithValue(ctx, secretsReadKey{}, &secretsRead{s: s})
	}
	next(ctx)
}

// bodyOutput is an answer that is only its body.
type bodyOutput[T any] struct {
	Body T
}

// reply answers v as the body, or err.
func reply[T any](v T, err error) (*bodyOutput[T], error) {
	if err != nil {
		return nil, err
	}
	return &bodyOutput[T]{Body: v}, nil
}
