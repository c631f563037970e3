package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// policy is what an operation asks of its caller beyond its access level:
// the scope an API token needs, whether a token may call it at all, and
// where its resource is, for tokens narrowed to resources.
type policy struct {
	Scope       string
	SessionOnly bool
	// Resource is the kind of the resource the operation acts on (an
	// application, server, database instance, deployment or job) and
	// Param the path parameter naming it; "" when it acts on none.
	Resource, Param string
	// Global: tokens narrowed to resources may call it too (it reads
	// nothing of any resource: the caller itself, the platform).
	Global bool
	// Narrowed: a list that a token narrowed to resources may read; it
	// answers only what the token's resources cover (see narrowingOf).
	Narrowed bool
}

const policyKey = "capstan-policy"

// Resource kinds of operations, besides auth's (app, server, db).
const (
	resourceDeployment = "deployment"
	resourceJob        = "job"
	resourceBackup     = "backup"
)

// Problem codes of the token checks.
const (
	codeTokenScope    = "token-scope"
	codeTokenResource = "token-resource"
)

// sessionOnly are the operations a token may never call: a person signs
// in for them. Everything about who may sign in and act (users,
// invitations, tokens, passwords, sessions, the recovery kit), a user's
// own inbox (an administrator's holds error texts, which are job output),
// and the integrations whose consent runs in a browser.
var sessionOnly = map[string]bool{
	"POST /api/v1/auth/logout":                     true,
	"GET /api/v1/auth/sessions":                    true,
	"DELETE /api/v1/auth/sessions/{id}":            true,
	"POST /api/v1/auth/password":                   true,
	"GET /api/v1/users":                            true,
	"PATCH /api/v1/users/{id}":                     true,
	"POST /api/v1/users/{id}/reset-2fa":            true,
	"DELETE /api/v1/users/{id}":                    true,
	"GET /api/v1/users/invitations":                true,
	"POST /api/v1/users/invitations":               true,
	"DELETE /api/v1/users/invitations/{id}":        true,
	"POST /api/v1/platform/recovery-kit":           true,
	"GET /api/v1/tokens":                           true,
	"POST /api/v1/tokens":                          true,
	"DELETE /api/v1/tokens/{id}":                   true,
	"GET /api/v1/notifications":                    true,
	"PUT /api/v1/notifications/settings":           true,
	"POST /api/v1/notifications/read":              true,
	"POST /api/v1/githost/manifest":                true,
	"POST /api/v1/githost/manifest/complete":       true,
	"POST /api/v1/githost/installations":           true,
	"DELETE /api/v1/githost/app":                   true,
	"POST /api/v1/backups/clouddrive/connect":      true,
	"DELETE /api/v1/backups/clouddrive/connection": true,
}

// scopeOf names the operations whose scope is not the default one:
// read for what any signed-in user may call, write for an
// administrator's changes, admin for what only administrators read.
var scopeOf = map[string]string{
	"POST /api/v1/applications/{id}/deployments": auth.ScopeDeploy,
	"POST /api/v1/deployments/{id}/rollback":     auth.ScopeDeploy,
	"POST /api/v1/deployments/{id}/cancel":       auth.ScopeDeploy,

	"POST /api/v1/servers/{id}/actions":               auth.ScopeOperate,
	"POST /api/v1/jobs/{id}/cancel":                   auth.ScopeOperate,
	"POST /api/v1/databases/{id}/control":             auth.ScopeOperate,
	"POST /api/v1/databases/{id}/query":               auth.ScopeOperate,
	"POST /api/v1/databases/{id}/explore":             auth.ScopeOperate,
	"POST /api/v1/databases/{id}/kv":                  auth.ScopeOperate,
	"POST /api/v1/databases/{id}/export":              auth.ScopeOperate,
	"POST /api/v1/databases/{id}/import":              auth.ScopeOperate,
	"POST /api/v1/backups/run":                        auth.ScopeOperate,
	"POST /api/v1/backups/{run_id}/verify":            auth.ScopeOperate,
	"POST /api/v1/backups/{run_id}/restore":           auth.ScopeOperate,
	"POST /api/v1/backups/settings/test":              auth.ScopeOperate,
	"POST /api/v1/monitoring/alerts/{id}/acknowledge": auth.ScopeOperate,
	"POST /api/v1/monitoring/evaluate":                auth.ScopeOperate,
	"POST /api/v1/domains/{id}/check":                 auth.ScopeOperate,
	"POST /api/v1/domains/servers/{server_id}/apply":  auth.ScopeOperate,

	// Reading logs runs a job whose output is the log; an export is a
	// database's contents; a connection holds the password.
	"POST /api/v1/logs":                           auth.ScopeReadSecrets,
	"POST /api/v1/applications/{id}/logs":         auth.ScopeReadSecrets,
	"GET /api/v1/databases/{id}/connection":       auth.ScopeReadSecrets,
	"GET /api/v1/databases/{id}/exports/{job_id}": auth.ScopeReadSecrets,
}

// global are the operations a token narrowed to resources may call.
var global = map[string]bool{
	"GET /api/v1/auth/me":           true,
	"GET /api/v1/tokens/current":    true,
	"GET /api/v1/platform":          true,
	"GET /api/v1/databases/engines": true,
	// The stream of a narrowed token carries only its resources' jobs.
	"POST /api/v1/stream/tickets": true,
}

// narrowedLists are the lists a token narrowed to resources reads: each
// keeps the items its resources cover.
var narrowedLists = map[string]bool{
	"GET /api/v1/servers":           true,
	"GET /api/v1/applications":      true,
	"GET /api/v1/deployments":       true,
	"GET /api/v1/jobs":              true,
	"GET /api/v1/databases":         true,
	"GET /api/v1/backups":           true,
	"GET /api/v1/monitoring/alerts": true,
}

// resourcePaths say where an operation's resource is in its path.
var resourcePaths = []struct{ prefix, kind, param string }{
	{"/api/v1/applications/{id}", auth.ResourceApp, "id"},
	{"/api/v1/servers/{id}", auth.ResourceServer, "id"},
	{"/api/v1/databases/{id}", auth.ResourceDatabase, "id"},
	{"/api/v1/backups/policies/{instance_id}", auth.ResourceDatabase, "instance_id"},
	{"/api/v1/domains/servers/{server_id}", auth.ResourceServer, "server_id"},
	{"/api/v1/deployments/{id}", resourceDeployment, "id"},
	{"/api/v1/jobs/{id}", resourceJob, "id"},
	{"/api/v1/logs/{job_id}", resourceJob, "job_id"},
	{"/api/v1/backups/jobs/{job_id}", resourceJob, "job_id"},
	{"/api/v1/backups/{run_id}", resourceBackup, "run_id"},
}

// policyFor decides an operation's policy from its method, path and
// access level.
func policyFor(method, path string, access Access) policy {
	name := method + " " + path
	p := policy{Scope: auth.ScopeRead, SessionOnly: sessionOnly[name], Global: global[name], Narrowed: narrowedLists[name]}
	if access == Admin {
		p.Scope = auth.ScopeWrite
		if method == http.MethodGet {
			p.Scope = auth.ScopeAdmin
		}
	}
	if s, ok := scopeOf[name]; ok {
		p.Scope = s
	}
	for _, r := range resourcePaths {
		if path == r.prefix || strings.HasPrefix(path, r.prefix+"/") {
			p.Resource, p.Param = r.kind, r.param
			break
		}
	}
	return p
}

// policyNote is the sentence the operation's description ends with.
func (p policy) note() string {
	if p.SessionOnly {
		return "Not with an API token: a signed-in session only (403 session-required)."
	}
	n := "With an API token: scope `" + p.Scope + "` (403 token-scope without it)."
	if p.Narrowed {
		n += " A token narrowed to resources lists only what they cover (the items of its applications, database instances and servers); a page may then hold fewer items than the limit."
	}
	return n
}

// authorize decides whether p may call the operation: the one decision
// for sessions and tokens. A session may do what its user's role allows;
// a token what its scopes allow within its owner's role now, on the
// resources it is narrowed to.
func (s *Server) authorize(ctx huma.Context, access Access, pol policy, p auth.Principal) *Problem {
	if access == Admin && !p.User.Admin {
		return newProblem(http.StatusForbidden, auth.CodeAdminRequired, "This endpoint needs an administrator account.")
	}
	if p.Token == nil {
		return nil
	}
	if pol.SessionOnly {
		return newProblem(http.StatusForbidden, auth.CodeSessionRequired, "This endpoint needs a signed-in session: an API token cannot call it.")
	}
	if !p.Allows(pol.Scope) {
		detail := "This token lacks the scope " + pol.Scope + "."
		if !p.User.Admin && pol.Scope != auth.ScopeRead {
			detail = "This token's owner is a member: a member's token can only read."
		}
		return newProblem(http.StatusForbidden, codeTokenScope, detail)
	}
	if len(p.Token.Resources) == 0 || pol.Global || pol.Narrowed {
		return nil
	}
	if pol.Resource == "" {
		return newProblem(http.StatusForbidden, codeTokenResource,
			"This token is narrowed to "+strings.Join(p.Token.Resources, ", ")+": this endpoint acts on none of them.")
	}
	ok, err := s.coversResource(ctx.Context(), p.Token.Resources, pol.Resource, ctx.Param(pol.Param))
	if err != nil && !fault.Is(err, fault.NotFound) {
		return problemFor(ctx.Context(), s.log, err)
	}
	if !ok {
		return newProblem(http.StatusForbidden, codeTokenResource,
			"This token is narrowed to "+strings.Join(p.Token.Resources, ", ")+": not to this "+resourceNoun[pol.Resource]+".")
	}
	return nil
}

var resourceNoun = map[string]string{
	auth.ResourceApp: "application", auth.ResourceServer: "server", auth.ResourceDatabase: "database instance",
	resourceDeployment: "deployment", resourceJob: "job", resourceBackup: "backup",
}

// target is what an operation acts on: an application, a database
// instance and the server they are on, or a server.
type target struct{ app, db, server string }

// coversResource reports whether resources (a token's) cover the
// resource of kind named id: by its own id, or by the server it is on,
// or by that server's tags.
func (s *Server) coversResource(ctx context.Context, resources []string, kind, id string) (bool, error) {
	t, err := s.targetOf(ctx, kind, id)
	if err != nil {
		return false, err
	}
	var tags []string
	for _, r := range resources {
		k, v := auth.ParseResource(r)
		switch {
		case k == auth.ResourceApp && v == t.app && v != "",
			k == auth.ResourceDatabase && v == t.db && v != "",
			k == auth.ResourceServer && v == t.server && v != "":
			return true, nil
		case k == auth.ResourceServerTag && t.server != "":
			if tags == nil {
				srv, err := s.deps.Servers.Get(ctx, t.server)
				if err != nil {
					return false, err
				}
				tags = append(srv.Tags, "") // not nil: looked up once
			}
			if slices.Contains(tags, v) {
				return true, nil
			}
		}
	}
	return false, nil
}

func (s *Server) targetOf(ctx context.Context, kind, id string) (target, error) {
	switch kind {
	case auth.ResourceServer:
		return target{server: id}, nil
	case auth.ResourceApp:
		if s.deps.Apps == nil {
			return target{}, errNoApps
		}
		a, err := s.deps.Apps.App(ctx, id)
		return target{app: a.ID, server: a.ServerID}, err
	case auth.ResourceDatabase:
		if s.deps.Databases == nil {
			return target{}, errNoDatabases
		}
		d, err := s.deps.Databases.Instance(ctx, id)
		return target{db: d.ID, server: d.ServerID}, err
	case resourceDeployment:
		if s.deps.Apps == nil {
			return target{}, errNoApps
		}
		d, err := s.deps.Apps.GetDeployment(ctx, id, jobs.MemberReader)
		if err != nil {
			return target{}, err
		}
		return s.targetOf(ctx, auth.ResourceApp, d.ApplicationID)
	case resourceJob:
		j, _, err := s.deps.Jobs.Get(ctx, id)
		return target{app: j.AppID, server: j.ServerID}, err
	case resourceBackup:
		if s.deps.Backups == nil {
			return target{}, errNoBackups
		}
		r, err := s.deps.Backups.Run(ctx, id, jobs.MemberReader)
		return target{db: r.InstanceID, server: r.ServerID}, err
	}
	return target{}, nil
}

// secretsRead audits, once per request, that a token read with its
// read:secrets scope; ok is whether the record was kept (no record, no
// secrets).
type secretsRead struct {
	s    *Server
	once sync.Once
	ok   bool
}

type secretsReadKey struct{}

// canReadSecrets reports whether the caller may read secrets and job
// output: an administrator's session, or a token with read:secrets of an
// administrator. A token's use of it is audited.
func canReadSecrets(ctx context.Context) bool {
	p := principal(ctx)
	if !p.Allows(auth.ScopeReadSecrets) {
		return false
	}
	if p.Token == nil {
		return true
	}
	sr, _ := ctx.Value(secretsReadKey{}).(*secretsRead)
	if sr == nil {
		return false
	}
	sr.once.Do(func() {
		r := requestFrom(ctx)
		err := sr.s.deps.Audit.Record(ctx, caller(ctx), audit.TokenSecretsRead, audit.Target{Type: "token", ID: p.Token.ID},
			map[string]any{"operation": r.Method + " " + r.URL.Path})
		if err != nil {
			sr.s.log.Error("recording a token's secret read", "err", err)
		}
		sr.ok = err == nil
	})
	return sr.ok
}

// narrowing is what a token narrowed to resources covers: its
// applications, its database instances, and its servers (by id, or by a
// tag they have now) with everything on them.
type narrowing struct{ apps, dbs, servers map[string]bool }

// covers reports whether t is one of the resources, or on one of the
// servers. A nil narrowing (every caller but a narrowed token) covers
// everything.
func (n *narrowing) covers(t target) bool {
	return n == nil || (t.app != "" && n.apps[t.app]) || (t.db != "" && n.dbs[t.db]) || (t.server != "" && n.servers[t.server])
}

// narrowingOf is the caller's narrowing: nil unless it is a token
// narrowed to resources.
func (s *Server) narrowingOf(ctx context.Context) (*narrowing, error) {
	p := principal(ctx)
	if p.Token == nil || len(p.Token.Resources) == 0 {
		return nil, nil
	}
	return s.narrowingFor(ctx, p.Token.Resources)
}

func (s *Server) narrowingFor(ctx context.Context, resources []string) (*narrowing, error) {
	n := &narrowing{apps: map[string]bool{}, dbs: map[string]bool{}, servers: map[string]bool{}}
	var tags []string
	for _, r := range resources {
		switch k, v := auth.ParseResource(r); k {
		case auth.ResourceApp:
			n.apps[v] = true
		case auth.ResourceDatabase:
			n.dbs[v] = true
		case auth.ResourceServer:
			n.servers[v] = true
		case auth.ResourceServerTag:
			tags = append(tags, v)
		}
	}
	if len(tags) > 0 {
		list, err := s.deps.Servers.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, srv := range list {
			if slices.ContainsFunc(srv.Tags, func(t string) bool { return slices.Contains(tags, t) }) {
				n.servers[srv.ID] = true
			}
		}
	}
	return n, nil
}

// narrowList keeps the items of list that the caller's narrowing covers:
// all of them for every caller but a narrowed token.
func narrowList[T any](ctx context.Context, s *Server, list []T, of func(T) target) ([]T, error) {
	n, err := s.narrowingOf(ctx)
	if err != nil || n == nil {
		return list, err
	}
	return slices.DeleteFunc(list, func(v T) bool { return !n.covers(of(v)) }), nil
}

// streamCovers is what a narrowed token's stream carries: the jobs of its
// applications, and every job of its servers (by id, or by a tag they
// have when the stream opens). A database instance's jobs name only its
// server, so db: resources open none.
func (s *Server) streamCovers(ctx context.Context, resources []string) (func(serverID, appID string) bool, error) {
	n, err := s.narrowingFor(ctx, resources)
	if err != nil {
		return nil, err
	}
	return func(serverID, appID string) bool { return n.covers(target{app: appID, server: serverID}) }, nil
}
