// Package planetest is the one test rig of the control plane's domains: a
// real store, a fake clock, the secret key, the audit log, and the job and
// server services every domain is built on, with an administrator to act
// as and servers enrolled as an agent would. A domain's tests build their
// own service on a Plane and play the agent through its job service.
package planetest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// PublicURL is the control plane's URL in install commands.
const PublicURL = "http://capstan.test"

// Plane is the core of one control plane on a store.
type Plane struct {
	T     testing.TB
	Ctx   context.Context
	Store *store.Store
	// Clock is the plane's fake clock; nil when Options.Now gave the
	// time.
	Clock *testlab.Clock
	// Now is the time every service reads.
	Now     func() time.Time
	Key     *secrets.Key
	Audit   *audit.Log
	Log     *slog.Logger
	Jobs    *jobs.Service
	Servers *servers.Service
	// Admin is an administrator's caller.
	Admin audit.Caller
}

// Options change what New makes; the zero Options are the defaults.
type Options struct {
	// Clock is the plane's clock; nil is a new one at the current second.
	Clock *testlab.Clock
	// Now, when not nil, gives the time instead of a fake clock (for
	// tests that wait in real time).
	Now func() time.Time
	// Key is the secret key; nil is a new one.
	Key *secrets.Key
	// Servers, when not nil, changes the server service's deps before it
	// is made.
	Servers func(*servers.Deps)
}

// New makes a plane on st.
func New(t testing.TB, st *store.Store, o Options) *Plane {
	t.Helper()
	if o.Clock == nil && o.Now == nil {
		o.Clock = testlab.NewClock(time.Now().UTC().Truncate(time.Second))
	}
	now := o.Now
	if now == nil {
		now = o.Clock.Now
	}
	if o.Key == nil {
		o.Key = secrets.GenerateKey()
	}
	p := &Plane{T: t, Ctx: context.Background(), Store: st, Clock: o.Clock, Now: now, Key: o.Key,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Admin: audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: "usr_admin", Email: "admin@example.com"}, IP: "192.0.2.9", UserAgent: "test"}}
	p.Audit = audit.NewLog(st, now)
	p.Jobs = jobs.NewService(jobs.Deps{Store: st, Key: p.Key, Now: now, Log: p.Log})
	d := servers.Deps{Store: st, Jobs: p.Jobs, Audit: p.Audit, Now: now, PublicURL: PublicURL, EnrollmentTTL: time.Hour}
	if o.Servers != nil {
		o.Servers(&d)
	}
	p.Servers = servers.NewService(d)
	return p
}

// Enroll creates a server named name and enrolls it with facts, as its
// agent would; it returns the server's id.
func (p *Plane) Enroll(name string, facts agentproto.Facts) string {
	p.T.Helper()
	id, _ := p.EnrollAgent(name, facts)
	return id
}

// EnrollAgent is Enroll that also returns the agent's token.
func (p *Plane) EnrollAgent(name string, facts agentproto.Facts) (serverID, token string) {
	p.T.Helper()
	e, err := p.Servers.CreateEnrollment(p.Ctx, p.Admin, name, nil)
	if err != nil {
		p.T.Fatal(err)
	}
	if facts.Hostname == "" {
		facts.Hostname = name
	}
	res, err := p.Servers.Enroll(p.Ctx, p.Admin, agentproto.EnrollRequest{Token: e.Token, Facts: facts})
	if err != nil {
		p.T.Fatal(err)
	}
	return res.ServerID, res.AgentToken
}
