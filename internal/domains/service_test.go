package domains_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/notify"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
	"github.com/capstan-dev/capstan/internal/testlab/planetest"
)

type rig struct {
	t       *testing.T
	ctx     context.Context
	clock   *testlab.Clock
	jobs    *jobs.Service
	servers *servers.Service
	apps    *apps.Service
	domains *domains.Service
	admin   audit.Caller
	st      *store.Store
	plane   *planetest.Plane
}

func newRig(t *testing.T) *rig {
	t.Helper()
	p := planetest.New(t, storetest.Open(t, store.SQLite), planetest.Options{Clock: testlab.NewClock(time.Date(2030, 6, 1, 12, 30, 15, 0, time.UTC))})
	as := apps.NewService(apps.Deps{Store: p.Store, Jobs: p.Jobs, Servers: p.Servers, Audit: p.Audit, Key: p.Key, Now: p.Clock.Now, Log: p.Log})
	ds := domains.NewService(domains.Deps{Store: p.Store, Apps: as, Jobs: p.Jobs, Servers: p.Servers, Audit: p.Audit, Now: p.Clock.Now, Log: p.Log})
	return &rig{t: t, ctx: p.Ctx, clock: p.Clock, jobs: p.Jobs, servers: p.Servers, apps: as, domains: ds, admin: p.Admin, st: p.Store, plane: p}
}

func (r *rig) enroll(name string, facts agentproto.Facts) string {
	r.t.Helper()
	return r.plane.Enroll(name, facts)
}

func (r *rig) app(serverID, name string) string {
	r.t.Helper()
	a, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: name, ServerID: serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx:1.27"}, ContainerPort: 80, Deploy: true})
	if err != nil {
		r.t.Fatal(err)
	}
	return a.ID
}

func (r *rig) create(host, appID, mode string, www bool) (domains.DomainChange, error) {
	return r.domains.Create(r.ctx, r.admin, domains.NewDomain{Hostname: host, ApplicationID: appID, TLSMode: mode, RedirectWWW: www})
}

// claim takes the server's next job, which must be of type typ.
func (r *rig) claim(serverID, typ string) jobs.Job {
	r.t.Helper()
	j, ok, err := r.jobs.Claim(r.ctx, serverID, 0)
	if err != nil || !ok || j.Type != typ {
		r.t.Fatalf("claim: %s %v %v, want a %s job", j.Type, ok, err, typ)
	}
	return j
}

func proxyOf(t *testing.T, j jobs.Job) []agentproto.ProxySite {
	t.Helper()
	var p agentproto.ProxyApplyPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p.Proxy.Sites
}

func hostnames(sites []agentproto.ProxySite) string {
	var h []string
	for _, s := range sites {
		h = append(h, s.Hostname)
	}
	return strings.Join(h, ",")
}

func wantCode(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != kind || (code != "" && fe.Code != code) {
		t.Fatalf("got %v, want kind %d code %q", err, kind, code)
	}
}

func TestDomainsQueueTheServersWholeProxyState(t *testing.T) {
	r := newRig(t)
	srv := r.enroll("web-1", agentproto.Facts{PublicAddresses: []string{"203.0.113.10"}})
	web, api := r.app(srv, "web"), r.app(srv, "api")
	r.claim(srv, agentproto.JobAppDeploy)
	r.claim(srv, agentproto.JobAppDeploy)

	ch, err := r.create("example.com", web, "auto", true)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Domain.ServerID != srv || ch.Job == nil || ch.JobID != ch.Job.ID || ch.Job.Type != agentproto.JobProxyApply {
		t.Fatalf("create: %+v", ch)
	}
	if ch.Job.TimeoutSeconds != 120 {
		t.Fatalf("proxy.apply timeout %d", ch.Job.TimeoutSeconds)
	}
	if got := proxyOf(t, r.claim(srv, agentproto.JobProxyApply)); len(got) != 1 ||
		got[0] != (agentproto.ProxySite{Hostname: "example.com", AppID: web, TLSMode: "auto", RedirectWWW: true}) {
		t.Fatalf("sites: %+v", got)
	}
	if _, err := r.create("api.example.com", api, "internal", false); err != nil {
		t.Fatal(err)
	}
	if got := proxyOf(t, r.claim(srv, agentproto.JobProxyApply)); hostnames(got) != "api.example.com,example.com" {
		t.Fatalf("sites after the second domain: %s", hostnames(got))
	}

	// Uniqueness, counting the www. names of redirect_www domains.
	_, err = r.create("example.com", api, "auto", false)
	wantCode(t, err, fault.Conflict, "hostname-taken")
	_, err = r.create("www.example.com", api, "auto", false)
	wantCode(t, err, fault.Conflict, "hostname-taken")
	if !strings.Contains(err.Error(), "redirects www") {
		t.Fatalf("message %q", err)
	}
	_, err = r.create("example.com", api, "auto", true)
	wantCode(t, err, fault.Conflict, "hostname-taken")
	// api.example.com exists: a redirect_www domain whose www. name is
	// taken is refused.
	if _, err := r.create("www.shop.example.com", api, "auto", false); err != nil {
		t.Fatal(err)
	}
	r.claim(srv, agentproto.JobProxyApply)
	_, err = r.create("shop.example.com", api, "auto", true)
	wantCode(t, err, fault.Conflict, "hostname-taken")

	// Bad input: 422 and no job.
	for _, tc := range []struct {
		host, app, mode string
		www             bool
		field           string
	}{
		{"Example.org", web, "auto", false, "hostname"},
		{"*.example.org", web, "auto", false, "hostname"},
		{"10.0.0.1", web, "auto", false, "hostname"},
		{"www.example.org", web, "auto", true, "hostname"},
		{"example.org", web, "on", false, "tls_mode"},
		{"example.org", "app_nope", "auto", false, "application_id"},
		{"example.org", "", "auto", false, "application_id"},
	} {
		_, err := r.create(tc.host, tc.app, tc.mode, tc.www)
		fe := fault.As(err)
		if fe == nil || fe.Kind != fault.Invalid || len(fe.Fields) != 1 || fe.Fields[0].Field != tc.field {
			t.Fatalf("create %+v: %v, want 422 on %s", tc, err, tc.field)
		}
	}
	if j, ok, _ := r.jobs.Claim(r.ctx, srv, 0); ok {
		t.Fatalf("bad input queued %s", j.Type)
	}

	// TLS mode changes and deletes queue the whole state too.
	up, err := r.domains.UpdateTLS(r.ctx, r.admin, ch.Domain.ID, "off")
	if err != nil || up.Domain.TLSMode != "off" {
		t.Fatalf("update: %+v %v", up, err)
	}
	sites := proxyOf(t, r.claim(srv, agentproto.JobProxyApply))
	if hostnames(sites) != "api.example.com,example.com,www.shop.example.com" || sites[1].TLSMode != "off" {
		t.Fatalf("after update: %+v", sites)
	}
	_, err = r.domains.UpdateTLS(r.ctx, r.admin, ch.Domain.ID, "manual")
	wantCode(t, err, fault.Invalid, "")
	if _, err := r.domains.Delete(r.ctx, r.admin, ch.Domain.ID); err != nil {
		t.Fatal(err)
	}
	if got := hostnames(proxyOf(t, r.claim(srv, agentproto.JobProxyApply))); got != "api.example.com,www.shop.example.com" {
		t.Fatalf("after delete: %s", got)
	}
	if _, err := r.domains.Get(r.ctx, ch.Domain.ID); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("deleted domain: %v", err)
	}
	// Its names are free again, www. included.
	if _, err := r.create("www.example.com", api, "auto", false); err != nil {
		t.Fatalf("reuse www name: %v", err)
	}
	r.claim(srv, agentproto.JobProxyApply)

	// Another server's domains are not in this server's state.
	other := r.enroll("web-2", agentproto.Facts{})
	o := r.app(other, "web")
	r.claim(other, agentproto.JobAppDeploy)
	if _, err := r.create("other.example.net", o, "auto", false); err != nil {
		t.Fatal(err)
	}
	if got := hostnames(proxyOf(t, r.claim(other, agentproto.JobProxyApply))); got != "other.example.net" {
		t.Fatalf("other server's state: %s", got)
	}
	j, err := r.domains.Apply(r.ctx, r.admin, srv)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostnames(proxyOf(t, j)); got != "api.example.com,www.example.com,www.shop.example.com" {
		t.Fatalf("apply: %s", got)
	}
	if _, err := r.domains.Apply(r.ctx, r.admin, "srv_nope"); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("apply on an unknown server: %v", err)
	}

	list, err := r.domains.List(r.ctx, api)
	if err != nil || len(list) != 3 {
		t.Fatalf("list by app: %+v %v", list, err)
	}
	if _, err := r.domains.List(r.ctx, "app_nope"); fault.KindOf(err) != fault.Invalid {
		t.Fatalf("list of an unknown app: %v", err)
	}
}

func TestDomainCheckStoresTheResult(t *testing.T) {
	r := newRig(t)
	pub := r.enroll("pub", agentproto.Facts{PublicAddresses: []string{"203.0.113.10", "2001:db8::10"}, PrivateAddresses: []string{"10.0.0.5"}})
	priv := r.enroll("priv", agentproto.Facts{PrivateAddresses: []string{"10.0.0.6/24"}})
	a, b := r.app(pub, "web"), r.app(priv, "web")
	r.claim(pub, agentproto.JobAppDeploy)
	r.claim(priv, agentproto.JobAppDeploy)
	da, err := r.create("example.com", a, "auto", false)
	if err != nil {
		t.Fatal(err)
	}
	db, err := r.create("intranet.example.com", b, "internal", false)
	if err != nil {
		t.Fatal(err)
	}
	r.claim(pub, agentproto.JobProxyApply)
	r.claim(priv, agentproto.JobProxyApply)

	check := func(server, domainID string, res agentproto.DomainCheckResult) domains.Domain {
		t.Helper()
		q, err := r.domains.QueueCheck(r.ctx, r.admin, domainID)
		if err != nil {
			t.Fatal(err)
		}
		j := r.claim(server, agentproto.JobDomainCheck)
		if j.ID != q.ID {
			t.Fatalf("claimed %s, want %s", j.ID, q.ID)
		}
		var p agentproto.DomainCheckPayload
		if err := json.Unmarshal(j.Payload, &p); err != nil || p.Hostname == "" || p.TLSMode == "" {
			t.Fatalf("payload %s", j.Payload)
		}
		raw, _ := json.Marshal(res)
		if _, err := r.jobs.Complete(r.ctx, server, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Data: raw}); err != nil {
			t.Fatal(err)
		}
		d, err := r.domains.Get(r.ctx, domainID)
		if err != nil || d.Check == nil || d.Check.JobID != j.ID || *d.CheckJobID != j.ID {
			t.Fatalf("domain after check: %+v %v", d, err)
		}
		return d
	}
	exp := time.Date(2030, 9, 1, 0, 0, 0, 0, time.UTC)
	d := check(pub, da.Domain.ID, agentproto.DomainCheckResult{Addresses: []string{"203.0.113.10", "2001:db8:0::10"},
		CertIssuer: "Let's Encrypt R11", CertNotAfter: exp, CertNotBefore: exp.Add(-90 * 24 * time.Hour), CertDNSNames: []string{"example.com"},
		CheckedAt: r.clock.Now()})
	c := d.Check
	if !c.PointsToServer || c.ComparedWith != domains.ComparedPublic || c.CertIssuer != "Let's Encrypt R11" ||
		c.CertNotAfter == nil || !c.CertNotAfter.Equal(exp) || c.CertNotBefore == nil || !c.CertNotBefore.Equal(exp.Add(-90*24*time.Hour)) ||
		len(c.Errors) != 0 || c.Status != "succeeded" {
		t.Fatalf("check: %+v", c)
	}
	d = check(pub, da.Domain.ID, agentproto.DomainCheckResult{Addresses: []string{"203.0.113.10", "198.51.100.7"}, CertError: "no certificate yet"})
	if d.Check.PointsToServer || len(d.Check.Errors) != 1 || d.Check.CertNotAfter != nil || d.Check.CertNotBefore != nil {
		t.Fatalf("check with a foreign address: %+v", d.Check)
	}
	d = check(pub, da.Domain.ID, agentproto.DomainCheckResult{DNSError: "NXDOMAIN"})
	if d.Check.PointsToServer || len(d.Check.Errors) != 1 || !strings.Contains(d.Check.Errors[0], "NXDOMAIN") {
		t.Fatalf("check without addresses: %+v", d.Check)
	}
	d = check(priv, db.Domain.ID, agentproto.DomainCheckResult{Addresses: []string{"10.0.0.6"}})
	if !d.Check.PointsToServer || d.Check.ComparedWith != domains.ComparedPrivate || len(d.Check.Notes) != 1 {
		t.Fatalf("check against private addresses: %+v", d.Check)
	}

	// A failed check job is stored as such.
	q, err := r.domains.QueueCheck(r.ctx, r.admin, da.Domain.ID)
	if err != nil {
		t.Fatal(err)
	}
	r.claim(pub, agentproto.JobDomainCheck)
	if _, err := r.jobs.Complete(r.ctx, pub, q.ID, agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: "resolver unreachable"}); err != nil {
		t.Fatal(err)
	}
	d, _ = r.domains.Get(r.ctx, da.Domain.ID)
	if d.Check.Status != "failed" || len(d.Check.Errors) != 1 || !strings.Contains(d.Check.Errors[0], "resolver unreachable") {
		t.Fatalf("failed check: %+v", d.Check)
	}
}

func TestDomainsOfARemovingApplication(t *testing.T) {
	r := newRig(t)
	srv := r.enroll("web-1", agentproto.Facts{})
	a := r.app(srv, "web")
	r.claim(srv, agentproto.JobAppDeploy)
	if _, err := r.jobs.Complete(r.ctx, srv, r.mustLatestJob(a), agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apps.Delete(r.ctx, r.admin, a); err != nil {
		t.Fatal(err)
	}
	_, err := r.create("example.com", a, "auto", false)
	wantCode(t, err, fault.Conflict, "application-removing")
}

func (r *rig) mustLatestJob(appID string) string {
	r.t.Helper()
	d, err := r.apps.Get(r.ctx, appID, apps.Reading{})
	if err != nil || d.Latest == nil || d.Latest.JobID == nil {
		r.t.Fatalf("latest deployment: %+v %v", d.Latest, err)
	}
	return *d.Latest.JobID
}

func TestRequestTraffic(t *testing.T) {
	r := newRig(t)
	srv := r.enroll("web-1", agentproto.Facts{})
	other := r.enroll("web-2", agentproto.Facts{})
	a, b := r.app(srv, "web"), r.app(srv, "api")
	if _, err := r.create("example.com", a, "auto", true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.create("api.example.com", b, "auto", false); err != nil {
		t.Fatal(err)
	}
	now := r.clock.Now() // 12:30:15
	m := now.Truncate(time.Minute)
	min := func(host string, at time.Time, count, s2, s5 int64, p95 float64) agentproto.RequestMinute {
		return agentproto.RequestMinute{Host: host, Minute: at, Count: count, Status2xx: s2, Status5xx: s5, BytesOut: count * 100, P50Ms: p95 / 2, P95Ms: p95}
	}
	report := agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{
		min("example.com", m, 5, 5, 0, 10),
		min("www.example.com", m, 2, 0, 0, 1), // redirects
		min("example.com", m.Add(-time.Minute), 10, 8, 2, 50),
		min("example.com", m.Add(-3*time.Hour), 7, 7, 0, 20),
		min("api.example.com", m, 100, 100, 0, 5), // another app
	}}
	if _, err := r.domains.IngestRequests(r.ctx, srv, report); err != nil {
		t.Fatal(err)
	}
	// The same host on another server is not this app's traffic.
	if _, err := r.domains.IngestRequests(r.ctx, other, agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{min("example.com", m, 1000, 1000, 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	// A later report of the current minute replaces it (cumulative).
	if _, err := r.domains.IngestRequests(r.ctx, srv, agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{min("example.com", m, 6, 6, 0, 12)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.domains.IngestRequests(r.ctx, srv, agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{min("example.com", m, 6, 6, 0, 12)}}); err != nil {
		t.Fatal(err)
	}
	// A minute in the future is skipped, named, and nothing is stored.
	res, err := r.domains.IngestRequests(r.ctx, srv, agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{min("example.com", m.Add(time.Hour), 1, 1, 0, 1)}})
	if err != nil || res.Stored != 0 || res.SkippedCount != 1 || len(res.Skipped) != 1 || res.Skipped[0].Field != "minutes[0].minute" {
		t.Fatalf("future minute: %+v, %v", res, err)
	}

	tr, err := r.domains.Traffic(r.ctx, a, "1h")
	if err != nil {
		t.Fatal(err)
	}
	if tr.BucketSeconds != 60 || len(tr.Points) != 60 || !tr.Points[59].T.Equal(m) || strings.Join(tr.Hosts, ",") != "example.com,www.example.com" {
		t.Fatalf("1h: %d points, bucket %d, last %v, hosts %v", len(tr.Points), tr.BucketSeconds, tr.Points[len(tr.Points)-1].T, tr.Hosts)
	}
	last, prev := tr.Points[59], tr.Points[58]
	if last.Count != 8 || last.Status2xx != 6 || last.BytesOut != 800 || last.P95Ms == nil || *last.P95Ms != 12 {
		t.Fatalf("current minute: %+v", last)
	}
	if prev.Count != 10 || prev.Status5xx != 2 || *prev.P95Ms != 50 {
		t.Fatalf("previous minute: %+v", prev)
	}
	if tr.Points[0].Count != 0 || tr.Points[0].P95Ms != nil {
		t.Fatalf("empty minute: %+v", tr.Points[0])
	}
	if tr.Totals.Count != 18 || tr.Totals.Status5xx != 2 || tr.Totals.P95Ms == nil || *tr.Totals.P95Ms != 50 {
		t.Fatalf("1h totals: %+v", tr.Totals)
	}

	tr, err = r.domains.Traffic(r.ctx, a, "24h")
	if err != nil {
		t.Fatal(err)
	}
	if tr.BucketSeconds != 300 || len(tr.Points) != 288 || !tr.Points[287].T.Equal(now.Truncate(5*time.Minute)) {
		t.Fatalf("24h: %d points, bucket %d", len(tr.Points), tr.BucketSeconds)
	}
	if p := tr.Points[287]; p.Count != 8 || *p.P95Ms != 12 {
		t.Fatalf("24h current bucket: %+v", p)
	}
	if p := tr.Points[286]; p.Count != 10 || *p.P95Ms != 50 {
		t.Fatalf("24h previous bucket: %+v", p)
	}
	if tr.Totals.Count != 25 {
		t.Fatalf("24h totals: %+v", tr.Totals)
	}
	tr, err = r.domains.Traffic(r.ctx, a, "7d")
	if err != nil || tr.BucketSeconds != 3600 || len(tr.Points) != 168 || tr.Totals.Count != 25 {
		t.Fatalf("7d: %d points %+v %v", len(tr.Points), tr.Totals, err)
	}
	if _, err := r.domains.Traffic(r.ctx, a, "30d"); fault.KindOf(err) != fault.Invalid {
		t.Fatalf("range 30d: %v", err)
	}
	if _, err := r.domains.Traffic(r.ctx, "app_nope", "1h"); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("unknown app: %v", err)
	}

	// Retention: 8 days.
	r.clock.Advance(8*24*time.Hour - 2*time.Hour)
	n, err := r.domains.PruneTraffic(r.ctx, r.clock.Now())
	if err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want the minute from 3 hours before", n, err)
	}
	r.clock.Advance(3 * time.Hour)
	if n, err := r.domains.PruneTraffic(r.ctx, r.clock.Now()); err != nil || n != 5 {
		t.Fatalf("pruned %d (%v), want the rest", n, err)
	}
}

// One bad host in a report (a scanner's IP literal) costs only its own
// entry: the application's counts are exact, the junk hosts have no rows,
// and the server's other bucket is readable.
func TestIngestSkipsInvalidEntries(t *testing.T) {
	r := newRig(t)
	srv := r.enroll("web-1", agentproto.Facts{})
	a := r.app(srv, "web")
	if _, err := r.create("example.com", a, "auto", false); err != nil {
		t.Fatal(err)
	}
	m := r.clock.Now().Truncate(time.Minute)
	res, err := r.domains.IngestRequests(r.ctx, srv, agentproto.RequestsReport{
		Minutes: []agentproto.RequestMinute{
			{Host: "203.0.113.9", Minute: m, Count: 40, Status4xx: 40},
			{Host: "example.com", Minute: m, Count: 7, Status2xx: 7},
			{Host: "Bad_Name.example", Minute: m, Count: 3},
			{Host: "example.com", Minute: m.Add(-time.Minute), Count: 5, Status2xx: 5},
		},
		Other: []agentproto.RequestMinute{{Minute: m, Count: 12, Status4xx: 12}},
	})
	if err != nil {
		t.Fatalf("the report was refused: %v", err)
	}
	if res.Stored != 3 || res.SkippedCount != 2 || len(res.Skipped) != 2 || res.Skipped[0].Field != "minutes[0].host" ||
		res.Skipped[0].Host != "203.0.113.9" || res.Skipped[1].Field != "minutes[2].host" {
		t.Fatalf("result: %+v", res)
	}
	tr, err := r.domains.Traffic(r.ctx, a, "1h")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Totals.Count != 12 || tr.Totals.Status2xx != 12 || tr.Totals.Status4xx != 0 {
		t.Fatalf("app totals: %+v, want 12 requests, all 2xx", tr.Totals)
	}
	rows, err := r.st.RequestBuckets(r.ctx, srv, []string{"203.0.113.9", "bad_name.example", "Bad_Name.example"},
		m.Add(-time.Hour), m.Add(time.Hour), time.Minute)
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows of the junk hosts: %+v, %v", rows, err)
	}
	o, err := r.domains.ServerOtherTraffic(r.ctx, srv, "1h")
	if err != nil {
		t.Fatal(err)
	}
	if o.Totals.Count != 12 || o.Totals.Status4xx != 12 || len(o.Points) != 60 || o.Points[59].Count != 12 {
		t.Fatalf("other: %+v", o.Totals)
	}
	if _, err := r.domains.ServerOtherTraffic(r.ctx, "srv_nope", "1h"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("unknown server: %v", err)
	}
	if _, err := r.domains.ServerOtherTraffic(r.ctx, srv, "30d"); !fault.Is(err, fault.Invalid) {
		t.Fatalf("bad range: %v", err)
	}
}

// TestDomainProxyFailureIsShownAndRaised: a domain whose proxy.apply job
// fails shows the failure and raises proxy.failed (an inbox item), instead
// of sitting unchecked; a later apply that succeeds settles it.
func TestDomainProxyFailureIsShownAndRaised(t *testing.T) {
	r := newRig(t)
	srv := r.enroll("web-1", agentproto.Facts{})
	a := r.app(srv, "shop")
	r.claim(srv, agentproto.JobAppDeploy) // the first deployment, left running
	ch, err := r.create("shop.example.com", a, "auto", false)
	if err != nil || ch.Domain.Proxy.Status != domains.ProxyApplying || ch.Domain.Proxy.JobID == nil || *ch.Domain.Proxy.JobID != ch.JobID {
		t.Fatalf("created: %+v %v, want applying with its job", ch.Domain.Proxy, err)
	}
	const cause = "caddy admin API at unix//run/capstan-proxy/admin.sock: connect: no such file or directory"
	j := r.claim(srv, agentproto.JobProxyApply)
	if _, err := r.jobs.Complete(r.ctx, srv, j.ID, agentproto.CompleteRequest{Status: agentproto.StatusFailed, Error: cause}); err != nil {
		t.Fatal(err)
	}
	d, err := r.domains.Get(r.ctx, ch.Domain.ID)
	if err != nil || d.Proxy.Status != domains.ProxyFailed || d.Proxy.Error == nil || *d.Proxy.Error != cause {
		t.Fatalf("after the failed apply: %+v %v, want failed with the job's error", d.Proxy, err)
	}
	evs, err := r.st.UnroutedEvents(r.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var raised []events.ProxyFailedPayload
	for _, ev := range evs {
		if ev.Type == events.ProxyFailed {
			var p events.ProxyFailedPayload
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			raised = append(raised, p)
		}
	}
	if len(raised) != 1 || raised[0].ServerName != "web-1" || raised[0].JobID != j.ID || raised[0].Error != cause ||
		len(raised[0].Domains) != 1 || raised[0].Domains[0].Hostname != "shop.example.com" || raised[0].Domains[0].ApplicationID != a {
		t.Fatalf("proxy.failed events: %+v", raised)
	}
	if m := notify.Describe(evs[len(evs)-1], false); !strings.Contains(m.Body, "shop.example.com") || strings.Contains(m.Body, "admin.sock") {
		t.Fatalf("a member's inbox item: %+v", m)
	}

	// The next change's apply succeeds: it carries the whole state, so the
	// failed domain is served as set too.
	ch2, err := r.create("api.example.com", a, "auto", false)
	if err != nil {
		t.Fatal(err)
	}
	j2 := r.claim(srv, agentproto.JobProxyApply)
	if _, err := r.jobs.Complete(r.ctx, srv, j2.ID, agentproto.CompleteRequest{Status: agentproto.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ch.Domain.ID, ch2.Domain.ID} {
		if d, err := r.domains.Get(r.ctx, id); err != nil || d.Proxy.Status != domains.ProxyApplied || d.Proxy.Error != nil {
			t.Errorf("%s after the successful apply: %+v %v, want applied", id, d.Proxy, err)
		}
	}
}
