package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// boundsEnv is a control plane with applications and domains, one
// enrolled server, one application and a signed-in administrator.
type boundsEnv struct {
	*testEnv
	ctx      context.Context
	token    string
	serverID string
	appID    string
}

func newBoundsEnv(t *testing.T) *boundsEnv {
	t.Helper()
	e := newTestEnv(t, envOptions{})
	d := e.srv.deps
	d.Apps = apps.NewService(apps.Deps{Store: e.store, Jobs: d.Jobs, Servers: d.Servers, Audit: d.Audit, Key: secrets.GenerateKey(), Now: e.clock.Now, Log: d.Logger})
	d.Domains = domains.NewService(domains.Deps{Store: e.store, Apps: d.Apps, Jobs: d.Jobs, Servers: d.Servers, Audit: d.Audit, Now: e.clock.Now, Log: d.Logger})
	d.Databases = databases.NewService(databases.Deps{Store: e.store, Jobs: d.Jobs, Servers: d.Servers, Audit: d.Audit,
		Key: secrets.GenerateKey(), Now: e.clock.Now, Log: d.Logger, Apps: d.Apps})
	e.srv = New(d)
	e.serve(t)
	b := &boundsEnv{testEnv: e, ctx: context.Background()}
	admin, secret := e.createUser(t, "admin@example.com", true)
	b.token, _ = e.signIn(t, admin.Email, secret)

	c := audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: admin.ID, Email: admin.Email}, IP: "127.0.0.1"}
	en, err := d.Servers.CreateEnrollment(b.ctx, c, "web-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Servers.Enroll(b.ctx, c, agentproto.EnrollRequest{Token: en.Token,
		Facts: agentproto.Facts{Hostname: "web-1", PublicAddresses: []string{"203.0.113.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	b.serverID = res.ServerID
	app, err := d.Apps.Create(b.ctx, c, apps.NewApp{Name: "web", ServerID: b.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx:1.27"}, ContainerPort: 8080})
	if err != nil {
		t.Fatal(err)
	}
	b.appID = app.ID
	return b
}

// state is everything a refused request must leave as it was: jobs,
// applications, deployments, domains, database instances and the audit
// log.
func (b *boundsEnv) state(t *testing.T) string {
	t.Helper()
	d := b.srv.deps
	js, err := d.Jobs.List(b.ctx, jobs.ListFilter{}, jobs.MaxListLimit, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	as, err := d.Apps.List(b.ctx, "", jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := d.Apps.ListDeployments(b.ctx, "", apps.MaxDeploymentLimit, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	doms, err := d.Domains.List(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := d.Audit.List(b.ctx, audit.MaxLimit, "", "")
	if err != nil {
		t.Fatal(err)
	}
	dbs, err := d.Databases.List(b.ctx, jobs.AdminReader)
	if err != nil {
		t.Fatal(err)
	}
	if len(js) == jobs.MaxListLimit || len(ds) == apps.MaxDeploymentLimit || len(entries) == audit.MaxLimit {
		t.Fatal("too many rows to compare them all")
	}
	raw, err := json.Marshal([]any{js, as, ds, doms, entries, dbs})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// send sends a raw JSON body (none when body is "").
func (b *boundsEnv) send(t *testing.T, method, path, body string) *response {
	t.Helper()
	var v any
	if body != "" {
		v = body
	}
	return b.request(t, method, path, b.token, v)
}

// TestExplicitOutOfRangeIsRefused sends every bounded input of the client
// API explicitly outside its bounds: each is a 422 naming the field and
// its bounds, and nothing is queued, written or audited.
func TestExplicitOutOfRangeIsRefused(t *testing.T) {
	b := newBoundsEnv(t)
	srvPath, appPath := "/api/v1/servers/"+b.serverID, "/api/v1/applications/"+b.appID
	logRead := func(extra string) string {
		return `{"server_id":"` + b.serverID + `","source":"journal","unit":"nginx.service",` + extra + `}`
	}
	action := func(typ, payload string) string { return `{"type":"` + typ + `","payload":` + payload + `}` }
	newApp := func(extra string) string {
		return `{"name":"api","server_id":"` + b.serverID + `","source":{"type":"image","image":"nginx"},` + extra + `}`
	}
	const lines1000, port = "between 1 and 1000", "between 1 and 65535"
	for _, tc := range []struct {
		method, path, body string
		field, message     string // message: a part of the field's message
	}{
		{"POST", "/api/v1/logs", logRead(`"lines":0`), "lines", lines1000},
		{"POST", "/api/v1/logs", logRead(`"lines":-1`), "lines", lines1000},
		{"POST", "/api/v1/logs", logRead(`"lines":1001`), "lines", lines1000},
		{"POST", "/api/v1/logs", logRead(`"lines":"200"`), "lines", lines1000},
		{"POST", "/api/v1/logs", logRead(`"priority":-1`), "priority", "between 0 and 7"},
		{"POST", "/api/v1/logs", logRead(`"priority":8`), "priority", "between 0 and 7"},
		{"POST", "/api/v1/logs", logRead(`"cursor":"` + strings.Repeat("c", 513) + `"`), "cursor", "512"},
		{"POST", srvPath + "/actions", action("service.logs", `{"unit":"nginx.service","lines":0}`), "payload.lines", "between 1 and 500"},
		{"POST", srvPath + "/actions", action("service.logs", `{"unit":"nginx.service","lines":-3}`), "payload.lines", "between 1 and 500"},
		{"POST", srvPath + "/actions", action("container.logs", `{"container":"web","lines":0}`), "payload.lines", "between 1 and 500"},
		{"POST", srvPath + "/actions", action("container.logs", `{"container":"web","lines":501}`), "payload.lines", "between 1 and 500"},
		{"POST", appPath + "/logs", `{"lines":0}`, "lines", lines1000},
		{"POST", appPath + "/logs", `{"lines":-1}`, "lines", lines1000},
		{"POST", appPath + "/logs", `{"lines":1001}`, "lines", lines1000},
		{"POST", "/api/v1/applications", newApp(`"container_port":0`), "container_port", port},
		{"POST", "/api/v1/applications", newApp(`"container_port":-80`), "container_port", port},
		{"POST", "/api/v1/applications", newApp(`"container_port":65536`), "container_port", port},
		{"POST", "/api/v1/applications", newApp(`"container_port":8080,"health_path":""`), "health_path", "/"},
		{"POST", "/api/v1/applications", newApp(`"container_port":8080,"env":[` + strings.Repeat(`{"key":"A","value":""},`, 200) + `{"key":"A","value":""}]`), "env", "200"},
		{"POST", "/api/v1/applications", `{"name":"api","server_id":"` + b.serverID + `","source":{"type":"image","image":"nginx","installation_id":0},"container_port":8080}`,
			"source.installation_id", "at least 1"},
		{"PATCH", appPath, `{"container_port":0}`, "container_port", port},
		{"PATCH", appPath, `{"container_port":65536}`, "container_port", port},
		{"POST", appPath + "/deployments", `{"ref":""}`, "ref", "1"},
		{"POST", "/api/v1/domains", `{"hostname":"example.org","application_id":"` + b.appID + `","tls_mode":""}`, "tls_mode", "auto"},
		{"GET", "/api/v1/jobs?limit=0", "", "limit", "between 1 and 100"},
		{"GET", "/api/v1/jobs?limit=-1", "", "limit", "between 1 and 100"},
		{"GET", "/api/v1/jobs?limit=101", "", "limit", "between 1 and 100"},
		{"GET", "/api/v1/jobs?limit=ten", "", "limit", "between 1 and 100"},
		{"GET", "/api/v1/audit-logs?limit=0", "", "limit", "between 1 and 200"},
		{"GET", "/api/v1/audit-logs?limit=201", "", "limit", "between 1 and 200"},
		{"GET", "/api/v1/deployments?limit=0", "", "limit", "between 1 and 100"},
		{"GET", "/api/v1/deployments?limit=101", "", "limit", "between 1 and 100"},
		{"GET", appPath + "/deployments?limit=0", "", "limit", "between 1 and 100"},
		{"GET", srvPath + "/metrics?range=2h", "", "range", "1h"},
		{"GET", "/api/v1/monitoring/fleet?range=0", "", "range", "1h"},
		{"GET", appPath + "/requests?range=30d", "", "range", "1h"},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.body[:min(len(tc.body), 120)], func(t *testing.T) {
			before := b.state(t)
			r := b.send(t, tc.method, tc.path, tc.body)
			p := expectProblem(t, r, http.StatusUnprocessableEntity, "validation-failed")
			i := slices.IndexFunc(p.Errors, func(e fault.FieldError) bool { return e.Field == tc.field })
			if i < 0 {
				t.Fatalf("errors %+v: none for %q", p.Errors, tc.field)
			}
			if !strings.Contains(p.Errors[i].Message, tc.message) {
				t.Fatalf("%s: message %q does not state its bounds (%q)", tc.field, p.Errors[i].Message, tc.message)
			}
			if after := b.state(t); after != before {
				t.Fatalf("a refused request changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestAbsentTakesDefault: an absent or null bounded input takes its
// default, and the edges of each range are accepted.
func TestAbsentTakesDefault(t *testing.T) {
	b := newBoundsEnv(t)
	srvPath, appPath := "/api/v1/servers/"+b.serverID, "/api/v1/applications/"+b.appID

	// queued returns the payload of the job a 202 reply names.
	queued := func(t *testing.T, r *response, v any) {
		t.Helper()
		expectStatus(t, r, http.StatusAccepted)
		var out struct {
			JobID string `json:"job_id"`
		}
		r.decode(t, &out)
		j, _, err := b.srv.deps.Jobs.Get(b.ctx, out.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(j.Payload, v); err != nil {
			t.Fatal(err)
		}
	}
	logRead := func(extra string) string {
		return `{"server_id":"` + b.serverID + `","source":"journal","unit":"nginx.service"` + extra + `}`
	}
	for _, tc := range []struct {
		extra string
		want  int
	}{{"", 200}, {`,"lines":null`, 200}, {`,"lines":1`, 1}, {`,"lines":1000`, 1000}} {
		var p agentproto.LogsReadPayload
		queued(t, b.send(t, "POST", "/api/v1/logs", logRead(tc.extra)), &p)
		if p.Lines != tc.want || p.Priority != nil {
			t.Fatalf("logs read %s: lines %d priority %v, want %d and every priority", tc.extra, p.Lines, p.Priority, tc.want)
		}
	}
	for _, pr := range []int{0, 7} {
		var p agentproto.LogsReadPayload
		queued(t, b.send(t, "POST", "/api/v1/logs", logRead(fmt.Sprintf(`,"priority":%d`, pr))), &p)
		if p.Priority == nil || *p.Priority != pr {
			t.Fatalf("priority %d: got %v", pr, p.Priority)
		}
	}
	for _, tc := range []struct {
		payload string
		want    int
	}{{`{"unit":"nginx.service"}`, 200}, {`{"unit":"nginx.service","lines":null}`, 200}, {`{"unit":"nginx.service","lines":1}`, 1},
		{`{"unit":"nginx.service","lines":500}`, 500}} {
		var p agentproto.ServiceLogsPayload
		queued(t, b.send(t, "POST", srvPath+"/actions", `{"type":"service.logs","payload":`+tc.payload+`}`), &p)
		if p.Lines != tc.want {
			t.Fatalf("service.logs %s: lines %d, want %d", tc.payload, p.Lines, tc.want)
		}
	}
	for _, tc := range []struct {
		body string
		want int
	}{{"", 200}, {`{}`, 200}, {`{"lines":null}`, 200}, {`{"lines":1}`, 1}, {`{"lines":1000}`, 1000}} {
		var p agentproto.AppLogsPayload
		queued(t, b.send(t, "POST", appPath+"/logs", tc.body), &p)
		if p.Lines != tc.want {
			t.Fatalf("application logs %q: lines %d, want %d", tc.body, p.Lines, tc.want)
		}
	}

	// Applications: the port's edges; an absent health path is /; a null
	// field of a patch leaves the setting as it is.
	for i, port := range []int{1, 65535} {
		r := b.send(t, "POST", "/api/v1/applications", fmt.Sprintf(`{"name":"edge-%d","server_id":%q,"source":{"type":"image","image":"nginx"},"container_port":%d,"deploy":false}`,
			i, b.serverID, port))
		expectStatus(t, r, http.StatusCreated)
		var a apps.ApplicationDetail
		r.decode(t, &a)
		if a.ContainerPort != port || a.HealthPath != apps.DefaultHealthPath {
			t.Fatalf("created with port %d: port %d, health path %q", port, a.ContainerPort, a.HealthPath)
		}
	}
	r := b.send(t, "PATCH", appPath, `{"container_port":null,"health_path":"/ready"}`)
	expectStatus(t, r, http.StatusOK)
	var a apps.ApplicationDetail
	r.decode(t, &a)
	if a.ContainerPort != 8080 || a.HealthPath != "/ready" {
		t.Fatalf("patched with a null port: port %d, health path %q", a.ContainerPort, a.HealthPath)
	}

	// Ranges: absent is 1h.
	for _, path := range []string{srvPath + "/metrics", "/api/v1/monitoring/fleet", appPath + "/requests"} {
		r := b.send(t, "GET", path, "")
		expectStatus(t, r, http.StatusOK)
		var out struct {
			Range string `json:"range"`
		}
		r.decode(t, &out)
		if out.Range != "1h" {
			t.Fatalf("%s: range %q, want 1h", path, out.Range)
		}
	}
}

// TestListLimits: an absent (or empty) limit takes the default; 1 and the
// maximum are accepted.
func TestListLimits(t *testing.T) {
	b := newBoundsEnv(t)
	d := b.srv.deps
	for range jobs.MaxListLimit + 1 {
		if _, _, err := d.Jobs.Enqueue(b.ctx, jobs.NewJob{ServerID: b.serverID, Work: jobs.Of(agentproto.AgentPing, agentproto.PingPayload{})}); err != nil {
			t.Fatal(err)
		}
	}
	for range audit.MaxLimit + 1 {
		if err := d.Audit.Append(b.ctx, audit.Entry{Actor: audit.Actor{Type: audit.ActorSystem}, Action: "test.bounds"}); err != nil {
			t.Fatal(err)
		}
	}
	actor := audit.Actor{Type: audit.ActorSystem}
	for range apps.DefaultDeploymentLimit + 1 {
		if _, err := d.Apps.Deploy(b.ctx, audit.Caller{Actor: actor}, b.appID, ""); err != nil {
			t.Fatal(err)
		}
	}
	count := func(path, key string) int {
		t.Helper()
		r := b.send(t, "GET", path, "")
		expectStatus(t, r, http.StatusOK)
		var out map[string]json.RawMessage
		r.decode(t, &out)
		var list []json.RawMessage
		if err := json.Unmarshal(out[key], &list); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return len(list)
	}
	appDeployments := "/api/v1/applications/" + b.appID + "/deployments"
	for _, tc := range []struct {
		path, key string
		want      int
	}{
		{"/api/v1/jobs", "jobs", jobs.DefaultListLimit},
		{"/api/v1/jobs?limit=", "jobs", jobs.DefaultListLimit},
		{"/api/v1/jobs?limit=1", "jobs", 1},
		{"/api/v1/jobs?limit=100", "jobs", 100},
		{"/api/v1/audit-logs", "entries", audit.DefaultLimit},
		{"/api/v1/audit-logs?limit=1", "entries", 1},
		{"/api/v1/audit-logs?limit=200", "entries", 200},
		{"/api/v1/deployments", "deployments", apps.DefaultDeploymentLimit},
		{"/api/v1/deployments?limit=1", "deployments", 1},
		{"/api/v1/deployments?limit=100", "deployments", apps.DefaultDeploymentLimit + 1},
		{appDeployments, "deployments", apps.DefaultDeploymentLimit},
		{appDeployments + "?limit=100", "deployments", apps.DefaultDeploymentLimit + 1},
	} {
		if got := count(tc.path, tc.key); got != tc.want {
			t.Fatalf("%s: %d %s, want %d", tc.path, got, tc.key, tc.want)
		}
	}
}

// TestNumericInputsDeclareBounds: the description of every integer input
// of the client API (query parameters and request body properties) states
// its range, and agrees with the schema's minimum and maximum where the
// schema declares them (the domain checks the others, such as ports).
func TestNumericInputsDeclareBounds(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, doc := openAPIDoc(t, e)
	schemas := obj(doc, "components", "schemas")
	statesRange := regexp.MustCompile(`\b-?[0-9]+ to -?[0-9]+\b|at least -?[0-9]+`)
	var check func(where string, s map[string]any, depth int)
	checkOne := func(where string, s map[string]any) {
		if s["type"] != "integer" {
			return
		}
		desc, _ := s["description"].(string)
		if !statesRange.MatchString(desc) {
			t.Errorf("%s: the description %q does not state the input's range", where, desc)
		}
		for _, k := range []string{"minimum", "maximum"} {
			if v, ok := s[k].(float64); ok && !strings.Contains(desc, fmt.Sprint(v)) {
				t.Errorf("%s: the description %q does not state the %s %v", where, desc, k, v)
			}
		}
	}
	check = func(where string, s map[string]any, depth int) {
		if depth > 8 || s == nil {
			return
		}
		if ref, ok := s["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			sub, _ := schemas[name].(map[string]any)
			check(where, sub, depth+1)
			return
		}
		checkOne(where, s)
		for name, p := range obj(s, "properties") {
			ps, _ := p.(map[string]any)
			check(where+"."+name, ps, depth+1)
		}
		if items, ok := s["items"].(map[string]any); ok {
			check(where+"[]", items, depth+1)
		}
	}
	checked := 0
	for path, item := range obj(doc, "paths") {
		if strings.HasPrefix(path, "/agent/") {
			continue // the agent protocol is lenient by design
		}
		for method, o := range item.(map[string]any) {
			op, _ := o.(map[string]any)
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				pm, _ := p.(map[string]any)
				s, _ := pm["schema"].(map[string]any)
				if s["type"] == "integer" {
					checked++
					// A parameter's description sits on the parameter.
					s = maps.Clone(s)
					s["description"] = pm["description"]
				}
				checkOne(fmt.Sprintf("%s %s ?%v", method, path, pm["name"]), s)
			}
			if body := obj(op, "requestBody", "content", "application/json", "schema"); body != nil {
				checked++
				check(method+" "+path+" body", body, 0)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no inputs checked")
	}
}
