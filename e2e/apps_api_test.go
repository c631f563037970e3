package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
)

// The application API is tested here against the real capstan serve, with
// the test playing the agent by hand over the agent protocol. Real
// deployments with Docker and Caddy are tested with the agent.

// AppDeployment is a deployment as the API shows it.
type AppDeployment struct {
	ID            string  `json:"id"`
	ApplicationID string  `json:"application_id"`
	Status        string  `json:"status"`
	JobID         *string `json:"job_id"`
	Ref           string  `json:"ref"`
	RollbackOf    *string `json:"rollback_of"`
	ImageID       string  `json:"image_id"`
	Error         *string `json:"error"`
	Spec          struct {
		AppName       string   `json:"app_name"`
		Image         string   `json:"image"`
		PinnedImageID string   `json:"pinned_image_id"`
		ContainerPort int      `json:"container_port"`
		HealthPath    string   `json:"health_path"`
		EnvKeys       []string `json:"env_keys"`
		MemoryLimit   string   `json:"memory_limit"`
		Git           *struct {
			Repository    string `json:"repository"`
			Ref           string `json:"ref"`
			CommitSHA     string `json:"commit_sha"`
			CommitMessage string `json:"commit_message"`
			CommitAuthor  string `json:"commit_author"`
		} `json:"git"`
	} `json:"spec"`
	Result     *agentproto.DeployResult `json:"result"`
	StartedAt  *time.Time               `json:"started_at"`
	FinishedAt *time.Time               `json:"finished_at"`
	Job        *JobInfo                 `json:"job"`
	Events     []JobEvent               `json:"events"`
}

// AppInfo is an application's detail as the API shows it.
type AppInfo struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	ServerID      string `json:"server_id"`
	Kind          string `json:"kind"`
	Status        string `json:"status"`
	ContainerPort int    `json:"container_port"`
	HealthPath    string `json:"health_path"`
	MemoryLimit   string `json:"memory_limit"`
	Source        struct {
		Type  string `json:"type"`
		Image string `json:"image"`
	} `json:"source"`
	EnvKeys []string `json:"env_keys"`
	Env     []struct {
		Key      string  `json:"key"`
		Value    *string `json:"value"`
		ValueSet bool    `json:"value_set"`
	} `json:"env"`
	RemoveError *string        `json:"remove_error"`
	Current     *AppDeployment `json:"current"`
	Latest      *AppDeployment `json:"latest"`
}

// appRig is a fleet with one server enrolled over HTTP, whose agent the
// test plays.
type appRig struct {
	*Fleet
	serverID string
	agent    string // agent token
}

func newAppRig(t *testing.T, d store.Dialect) *appRig {
	t.Helper()
	f := newFleet(t, Options{Dialect: d})
	e := f.createEnrollment(t, "app-host")
	res := f.enrollHTTP(t, e.Token)
	return &appRig{Fleet: f, serverID: res.ServerID, agent: res.AgentToken}
}

func (r *appRig) patch(t *testing.T, path string, body any) *Response {
	t.Helper()
	return r.Do(t, Req{Method: http.MethodPatch, Path: path, Token: r.Token, JSON: body})
}

func (r *appRig) del(t *testing.T, path string) *Response {
	t.Helper()
	return r.Do(t, Req{Method: http.MethodDelete, Path: path, Token: r.Token})
}

func (r *appRig) appInfo(t *testing.T, id string) AppInfo {
	t.Helper()
	var a AppInfo
	expectJSON(t, r.Get(t, "/api/v1/applications/"+id, r.Token), http.StatusOK, &a)
	return a
}

func (r *appRig) deploymentInfo(t *testing.T, id string) AppDeployment {
	t.Helper()
	var d AppDeployment
	expectJSON(t, r.Get(t, "/api/v1/deployments/"+id, r.Token), http.StatusOK, &d)
	return d
}

// claimAs claims the next job as the agent; it must be of type typ.
func (r *appRig) claimAs(t *testing.T, typ string) *agentproto.Job {
	t.Helper()
	j := r.claim(t, r.agent, 5)
	if j == nil {
		t.Fatalf("no job claimed, want %s", typ)
	}
	if j.Type != typ {
		t.Fatalf("claimed a %s job (%s), want %s", j.Type, j.Payload, typ)
	}
	return j
}

// noClaim checks that the agent has nothing to claim.
func (r *appRig) noClaim(t *testing.T) {
	t.Helper()
	if j := r.claim(t, r.agent, 0); j != nil {
		t.Fatalf("claimed %s %s, want nothing queued", j.Type, j.Payload)
	}
}

func (r *appRig) secretsOf(t *testing.T, jobID string) map[string]string {
	t.Helper()
	var s agentproto.SecretsResponse
	expectJSON(t, r.agentCall(t, r.agent, http.MethodGet, "/jobs/"+jobID+"/secrets", nil), http.StatusOK, &s)
	return s.Secrets
}

func (r *appRig) completeJob(t *testing.T, jobID, status string, data any, errText string) {
	t.Helper()
	req := agentproto.CompleteRequest{Status: status, Error: errText}
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		req.Data = b
	}
	resp := r.agentCall(t, r.agent, http.MethodPost, "/jobs/"+jobID+"/complete", req)
	expectStatus(t, resp, http.StatusOK)
}

func deployPayloadOf(t *testing.T, j *agentproto.Job) agentproto.DeployPayload {
	t.Helper()
	var p agentproto.DeployPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatalf("app.deploy payload: %v: %s", err, j.Payload)
	}
	return p
}

type deployAccepted struct {
	DeploymentID string        `json:"deployment_id"`
	JobID        string        `json:"job_id"`
	Status       string        `json:"status"`
	Deployment   AppDeployment `json:"deployment"`
}

func (r *appRig) deployApp(t *testing.T, appID string, body any) deployAccepted {
	t.Helper()
	resp := r.Post(t, "/api/v1/applications/"+appID+"/deployments", r.Token, body) // nil: no body at all
	expectStatus(t, resp, http.StatusAccepted)
	var a deployAccepted
	resp.JSON(t, &a)
	if a.DeploymentID == "" || resp.Header.Get("Location") != "/api/v1/deployments/"+a.DeploymentID {
		t.Fatalf("deploy reply: %s (Location %q)", resp.Body, resp.Header.Get("Location"))
	}
	return a
}

const secretOne, secretTwo = "postgres://app:s3cret-one@db/app", "postgres://app:s3cret-two@db/app"

// TestApplicationDeployFlow creates an application and plays its agent:
// the deploy job's payload and secrets, one deployment at a time, the
// current deployment, settings for the next deployment, rollback, domains
// and the proxy state, logs, checks, traffic and removal.
func TestApplicationDeployFlow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		r := newAppRig(t, d)
		resp := r.Post(t, "/api/v1/applications", r.Token, map[string]any{
			"name": "web", "server_id": r.serverID, "source": map[string]any{"type": "image", "image": "ghcr.io/acme/web:1.0"},
			"container_port": 8080, "health_path": "/healthz", "memory_limit": "256M",
			"env": []map[string]string{{"key": "DATABASE_URL", "value": secretOne}, {"key": "MODE", "value": "production"}},
		})
		var app AppInfo
		expectJSON(t, resp, http.StatusCreated, &app)
		if resp.Header.Get("Location") != "/api/v1/applications/"+app.ID || app.Status != "deploying" || app.MemoryLimit != "256m" ||
			app.Latest == nil || app.Latest.JobID == nil || app.Latest.Status != "queued" || len(app.Env) != 2 || app.Env[0].Value != nil || !app.Env[0].ValueSet {
			t.Fatalf("create reply: %s", resp.Body)
		}
		first := app.Latest

		// The agent's side of the first deployment.
		j1 := r.claimAs(t, agentproto.JobAppDeploy)
		if j1.ID != *first.JobID || !j1.HasSecrets || j1.TimeoutSeconds != 900 {
			t.Fatalf("claimed job: %+v", j1)
		}
		p := deployPayloadOf(t, j1)
		if p.AppID != app.ID || p.AppName != "web" || p.DeploymentID != first.ID || p.Image != "ghcr.io/acme/web:1.0" || p.ContainerPort != 8080 ||
			p.HealthPath != "/healthz" || p.MemoryLimitBytes != 256<<20 || !slices.Equal(p.EnvKeys, []string{"DATABASE_URL", "MODE"}) ||
			p.HealthTimeoutSeconds <= 0 || p.KeepImageIDs == nil || p.Proxy.Sites == nil {
			t.Fatalf("deploy payload: %s", j1.Payload)
		}
		if s := r.secretsOf(t, j1.ID); s["DATABASE_URL"] != secretOne || s["MODE"] != "production" {
			t.Fatalf("secrets: %v", s)
		}
		// Env values are in no job, list, or log.
		for _, path := range []string{"/api/v1/jobs/" + j1.ID, "/api/v1/jobs?server_id=" + r.serverID, "/api/v1/applications",
			"/api/v1/deployments", "/api/v1/deployments/" + first.ID, "/api/v1/applications/" + app.ID + "/deployments",
			"/api/v1/audit-logs?limit=200"} {
			resp := r.Get(t, path, r.Token)
			expectStatus(t, resp, http.StatusOK)
			if strings.Contains(string(resp.Body), "s3cret") {
				t.Fatalf("GET %s shows an env value: %s", path, resp.Body)
			}
		}
		if d := r.deploymentInfo(t, first.ID); d.Status != "running" || d.Job == nil || d.Job.Status != "running" {
			t.Fatalf("first deployment after the claim: %+v", d)
		}

		// A second deployment waits for the first.
		second := r.deployApp(t, app.ID, nil)
		if second.JobID != "" || second.Status != "queued" || second.Deployment.JobID != nil {
			t.Fatalf("second deployment while the first runs: %+v", second)
		}
		r.noClaim(t)

		resp = r.agentCall(t, r.agent, http.MethodPost, "/jobs/"+j1.ID+"/events", agentproto.EventsRequest{Events: []agentproto.Event{
			{At: time.Now(), Level: "info", Message: "pulled ghcr.io/acme/web:1.0"}}})
		expectStatus(t, resp, http.StatusNoContent)
		r.completeJob(t, j1.ID, agentproto.StatusSucceeded, agentproto.DeployResult{ContainerID: "c1", ContainerName: "capstan-web-1",
			ImageID: "sha256:aaa", HostPort: 32768, Pulled: true, HealthStatus: 200}, "")
		got := r.appInfo(t, app.ID)
		if got.Current == nil || got.Current.ID != first.ID || got.Current.ImageID != "sha256:aaa" || got.Current.Status != "succeeded" {
			t.Fatalf("current after the first succeeded: %+v", got.Current)
		}
		if got.Latest == nil || got.Latest.ID != second.DeploymentID || got.Latest.JobID == nil {
			t.Fatalf("the second deployment was not dispatched: %+v", got.Latest)
		}
		fd := r.deploymentInfo(t, first.ID)
		if fd.Result == nil || fd.Result.HostPort != 32768 || len(fd.Events) != 1 || fd.Events[0].Message != "pulled ghcr.io/acme/web:1.0" {
			t.Fatalf("first deployment detail: %+v", fd)
		}

		j2 := r.claimAs(t, agentproto.JobAppDeploy)
		if p := deployPayloadOf(t, j2); p.DeploymentID != second.DeploymentID || !slices.Equal(p.KeepImageIDs, []string{"sha256:aaa"}) {
			t.Fatalf("second payload: %s", j2.Payload)
		}
		if s := r.secretsOf(t, j2.ID); s["DATABASE_URL"] != secretOne {
			t.Fatalf("second secrets: %v", s)
		}
		r.completeJob(t, j2.ID, agentproto.StatusFailed, nil, "health check: /healthz answered 503 for 60 s")
		got = r.appInfo(t, app.ID)
		if got.Status != "running" || got.Current.ID != first.ID || got.Latest.Status != "failed" ||
			!strings.Contains(deref(got.Latest.Error), "503") {
			t.Fatalf("after a failed deployment: %+v / %+v", got.Current, got.Latest)
		}

		// Settings change for the next deployment only.
		resp = r.patch(t, "/api/v1/applications/"+app.ID, map[string]any{"env": []map[string]string{{"key": "DATABASE_URL", "value": secretTwo}},
			"image": "ghcr.io/acme/web:1.1", "container_port": 9090})
		expectStatus(t, resp, http.StatusOK)
		got = AppInfo{}
		resp.JSON(t, &got)
		if got.ContainerPort != 9090 || got.Source.Image != "ghcr.io/acme/web:1.1" || len(got.Env) != 1 || got.Env[0].Value != nil ||
			got.Current.Spec.ContainerPort != 8080 {
			t.Fatalf("patched: %s", resp.Body)
		}
		if a := r.appInfo(t, app.ID); len(a.Env) != 1 || deref(a.Env[0].Value) != secretTwo {
			t.Fatalf("patched env, revealed: %+v", a.Env)
		}
		third := r.deployApp(t, app.ID, nil)
		j3 := r.claimAs(t, agentproto.JobAppDeploy)
		if p := deployPayloadOf(t, j3); p.DeploymentID != third.DeploymentID || p.Image != "ghcr.io/acme/web:1.1" || p.ContainerPort != 9090 ||
			!slices.Equal(p.EnvKeys, []string{"DATABASE_URL"}) {
			t.Fatalf("third payload: %s", j3.Payload)
		}
		if s := r.secretsOf(t, j3.ID); s["DATABASE_URL"] != secretTwo || len(s) != 1 {
			t.Fatalf("third secrets: %v", s)
		}
		r.completeJob(t, j3.ID, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:bbb"}, "")

		// A ref overrides the image for one deployment; a cancel of the
		// waiting deployment, then of the dispatched one.
		withRef := r.deployApp(t, app.ID, map[string]any{"ref": "ghcr.io/acme/web@sha256:" + strings.Repeat("c", 64)})
		if withRef.Deployment.Spec.Image != "ghcr.io/acme/web@sha256:"+strings.Repeat("c", 64) || withRef.JobID == "" {
			t.Fatalf("deployment with a ref: %+v", withRef)
		}
		waiting := r.deployApp(t, app.ID, nil)
		resp = r.Post(t, "/api/v1/deployments/"+waiting.DeploymentID+"/cancel", r.Token, nil)
		expectStatus(t, resp, http.StatusOK)
		if d := r.deploymentInfo(t, waiting.DeploymentID); d.Status != "cancelled" {
			t.Fatalf("cancelled deployment: %+v", d)
		}
		expectProblem(t, r.Post(t, "/api/v1/deployments/"+waiting.DeploymentID+"/cancel", r.Token, nil), http.StatusConflict, "deployment-not-queued")
		resp = r.Post(t, "/api/v1/jobs/"+withRef.JobID+"/cancel", r.Token, nil)
		expectStatus(t, resp, http.StatusOK)
		if d := r.deploymentInfo(t, withRef.DeploymentID); d.Status != "cancelled" {
			t.Fatalf("deployment whose job was cancelled: %+v", d)
		}
		r.noClaim(t)

		// Rollback to the first deployment: a new deployment with its
		// frozen spec and image id, through the same queue.
		resp = r.Post(t, "/api/v1/deployments/"+second.DeploymentID+"/rollback", r.Token, nil)
		expectProblem(t, resp, http.StatusConflict, "deployment-not-succeeded")
		resp = r.Post(t, "/api/v1/deployments/"+first.ID+"/rollback", r.Token, nil)
		var rb deployAccepted
		expectJSON(t, resp, http.StatusAccepted, &rb)
		if rb.DeploymentID == first.ID || deref(rb.Deployment.RollbackOf) != first.ID || rb.Deployment.Spec.PinnedImageID != "sha256:aaa" {
			t.Fatalf("rollback: %s", resp.Body)
		}
		jr := r.claimAs(t, agentproto.JobAppDeploy)
		if p := deployPayloadOf(t, jr); p.ImageID != "sha256:aaa" || p.Image != "ghcr.io/acme/web:1.0" || p.ContainerPort != 8080 ||
			!slices.Contains(p.KeepImageIDs, "sha256:bbb") {
			t.Fatalf("rollback payload: %s", jr.Payload)
		}
		if s := r.secretsOf(t, jr.ID); s["DATABASE_URL"] != secretOne {
			t.Fatalf("rollback secrets: %v", s)
		}
		r.completeJob(t, jr.ID, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:aaa"}, "")
		if got := r.appInfo(t, app.ID); got.Current.ID != rb.DeploymentID {
			t.Fatalf("current after rollback: %+v", got.Current)
		}

		// Recent deployments across applications, newest first.
		resp = r.Get(t, "/api/v1/deployments?limit=2", r.Token)
		var recent struct {
			Deployments []AppDeployment `json:"deployments"`
		}
		expectJSON(t, resp, http.StatusOK, &recent)
		if len(recent.Deployments) != 2 || recent.Deployments[0].ID != rb.DeploymentID || recent.Deployments[1].ID != waiting.DeploymentID {
			t.Fatalf("recent deployments: %s", resp.Body)
		}

		// Domains: every change queues proxy.apply with the whole state.
		resp = r.Post(t, "/api/v1/domains", r.Token, map[string]any{"hostname": "example.com", "application_id": app.ID, "tls_mode": "auto", "redirect_www": true})
		var dom struct {
			Domain struct {
				ID string `json:"id"`
			} `json:"domain"`
			JobID string  `json:"job_id"`
			Job   JobInfo `json:"job"`
		}
		expectJSON(t, resp, http.StatusCreated, &dom)
		if dom.JobID == "" || dom.Job.Type != agentproto.JobProxyApply || resp.Header.Get("Location") != "/api/v1/domains/"+dom.Domain.ID {
			t.Fatalf("domain create: %s", resp.Body)
		}
		pj := r.claimAs(t, agentproto.JobProxyApply)
		var pp agentproto.ProxyApplyPayload
		if err := json.Unmarshal(pj.Payload, &pp); err != nil || len(pp.Proxy.Sites) != 1 ||
			pp.Proxy.Sites[0] != (agentproto.ProxySite{Hostname: "example.com", AppID: app.ID, TLSMode: "auto", RedirectWWW: true}) {
			t.Fatalf("proxy.apply payload: %s", pj.Payload)
		}
		r.completeJob(t, pj.ID, agentproto.StatusSucceeded, nil, "")
		expectProblem(t, r.Post(t, "/api/v1/domains", r.Token, map[string]any{"hostname": "www.example.com", "application_id": app.ID}),
			http.StatusConflict, "hostname-taken")

		resp = r.Post(t, "/api/v1/applications", r.Token, map[string]any{"name": "api", "server_id": r.serverID, "deploy": false,
			"source": map[string]any{"type": "image", "image": "ghcr.io/acme/api:2"}, "container_port": 3000})
		var api AppInfo
		expectJSON(t, resp, http.StatusCreated, &api)
		if api.Latest != nil || api.Status != "new" || api.HealthPath != "/" {
			t.Fatalf("deploy false: %s", resp.Body)
		}
		resp = r.Post(t, "/api/v1/domains", r.Token, map[string]any{"hostname": "api.example.com", "application_id": api.ID, "tls_mode": "internal"})
		expectStatus(t, resp, http.StatusCreated)
		pj = r.claimAs(t, agentproto.JobProxyApply)
		if err := json.Unmarshal(pj.Payload, &pp); err != nil || len(pp.Proxy.Sites) != 2 || pp.Proxy.Sites[0].Hostname != "api.example.com" ||
			pp.Proxy.Sites[1].Hostname != "example.com" {
			t.Fatalf("proxy state with two domains: %s", pj.Payload)
		}
		// A deployment carries the whole proxy state too.
		r.deployApp(t, api.ID, nil)
		if p := deployPayloadOf(t, r.claimAs(t, agentproto.JobAppDeploy)); len(p.Proxy.Sites) != 2 {
			t.Fatalf("deploy proxy state: %+v", p.Proxy)
		}
		resp = r.patch(t, "/api/v1/domains/"+dom.Domain.ID, map[string]any{"tls_mode": "off"})
		expectStatus(t, resp, http.StatusOK)
		pj = r.claimAs(t, agentproto.JobProxyApply)
		if err := json.Unmarshal(pj.Payload, &pp); err != nil || pp.Proxy.Sites[1].TLSMode != "off" {
			t.Fatalf("proxy state after the TLS change: %s", pj.Payload)
		}
		resp = r.Post(t, "/api/v1/domains/servers/"+r.serverID+"/apply", r.Token, nil)
		expectStatus(t, resp, http.StatusAccepted)
		r.claimAs(t, agentproto.JobProxyApply)

		// Domain check.
		resp = r.Post(t, "/api/v1/domains/"+dom.Domain.ID+"/check", r.Token, nil)
		expectStatus(t, resp, http.StatusAccepted)
		cj := r.claimAs(t, agentproto.JobDomainCheck)
		r.completeJob(t, cj.ID, agentproto.StatusSucceeded, agentproto.DomainCheckResult{Addresses: []string{"198.51.100.1"},
			CertError: "no certificate: TLS is off", CheckedAt: time.Now()}, "")
		resp = r.Get(t, "/api/v1/domains/"+dom.Domain.ID, r.Token)
		var checked struct {
			Check *struct {
				Addresses      []string `json:"addresses"`
				PointsToServer bool     `json:"points_to_server"`
				ComparedWith   string   `json:"compared_with"`
				Errors         []string `json:"errors"`
			} `json:"check"`
		}
		expectJSON(t, resp, http.StatusOK, &checked)
		if checked.Check == nil || checked.Check.PointsToServer || checked.Check.ComparedWith != "none" || len(checked.Check.Errors) != 1 {
			t.Fatalf("checked domain: %s", resp.Body)
		}

		// Application logs.
		var la Accepted
		expectJSON(t, r.Post(t, "/api/v1/applications/"+app.ID+"/logs", r.Token, map[string]any{"lines": 20}), http.StatusAccepted, &la)
		lj := r.claimAs(t, agentproto.JobAppLogs)
		r.completeJob(t, lj.ID, agentproto.StatusSucceeded, agentproto.AppLogsResult{State: "running", RestartCount: 1,
			StartedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Lines: []agentproto.LogLine{{At: time.Now(), Priority: 6, Message: "listening on :8080", Stream: "stdout"}}}, "")
		resp = r.Get(t, "/api/v1/applications/"+app.ID+"/logs/"+la.JobID, r.Token)
		var logs struct {
			Status       string `json:"status"`
			State        string `json:"state"`
			RestartCount int    `json:"restart_count"`
			Lines        []struct {
				Message string `json:"message"`
			} `json:"lines"`
		}
		expectJSON(t, resp, http.StatusOK, &logs)
		if logs.Status != "succeeded" || logs.State != "running" || logs.RestartCount != 1 || len(logs.Lines) != 1 {
			t.Fatalf("logs: %s", resp.Body)
		}
		expectProblem(t, r.Get(t, "/api/v1/applications/"+api.ID+"/logs/"+la.JobID, r.Token), http.StatusNotFound, "not-found")

		// Request traffic.
		minute := time.Now().UTC().Truncate(time.Minute)
		resp = r.agentCall(t, r.agent, http.MethodPost, "/requests", agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{
			{Host: "example.com", Minute: minute, Count: 10, Status2xx: 9, Status5xx: 1, BytesOut: 5000, P50Ms: 3, P95Ms: 40},
			{Host: "www.example.com", Minute: minute, Count: 2, Status3xx: 2, BytesOut: 100, P95Ms: 1},
			{Host: "api.example.com", Minute: minute, Count: 7, Status2xx: 7},
		}})
		expectStatus(t, resp, http.StatusOK)
		resp = r.Get(t, "/api/v1/applications/"+app.ID+"/requests?range=24h", r.Token)
		var traffic struct {
			BucketSeconds int `json:"bucket_seconds"`
			Points        []struct {
				Count int64 `json:"count"`
			} `json:"points"`
			Totals struct {
				Count     int64    `json:"count"`
				Status5xx int64    `json:"status_5xx"`
				P95Ms     *float64 `json:"p95_ms"`
			} `json:"totals"`
		}
		expectJSON(t, resp, http.StatusOK, &traffic)
		if traffic.BucketSeconds != 300 || len(traffic.Points) != 288 || traffic.Totals.Count != 12 || traffic.Totals.Status5xx != 1 ||
			traffic.Totals.P95Ms == nil || *traffic.Totals.P95Ms != 40 {
			t.Fatalf("traffic: %s", resp.Body)
		}

		// A non-administrator sees no env values and may not write.
		viewer := createUser(t, r.ControlPlane, "viewer@example.com", testPassword, false)
		vs := signInUser(t, r.ControlPlane, viewer)
		resp = r.Get(t, "/api/v1/applications/"+app.ID, vs.AccessToken)
		expectStatus(t, resp, http.StatusOK)
		if strings.Contains(string(resp.Body), "s3cret") {
			t.Fatalf("a non-admin sees env values: %s", resp.Body)
		}
		expectProblem(t, r.Post(t, "/api/v1/applications/"+app.ID+"/deployments", vs.AccessToken, map[string]any{}), http.StatusForbidden, "admin-required")

		// Audit.
		for _, action := range []string{"application.created", "application.updated", "deployment.created", "deployment.rollback",
			"deployment.cancelled", "domain.created", "domain.updated"} {
			if len(auditEntries(t, r.ControlPlane, r.Token, action)) == 0 {
				t.Errorf("no %s audit entry", action)
			}
		}

		// Removal: refused while a deployment runs.
		last := r.deployApp(t, app.ID, nil)
		lastJob := r.claimAs(t, agentproto.JobAppDeploy)
		expectProblem(t, r.del(t, "/api/v1/applications/"+app.ID), http.StatusConflict, "deployment-running")
		r.completeJob(t, lastJob.ID, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:ddd"}, "")
		if d := r.deploymentInfo(t, last.DeploymentID); d.Status != "succeeded" {
			t.Fatalf("last deployment: %+v", d)
		}
		resp = r.del(t, "/api/v1/applications/"+app.ID)
		expectStatus(t, resp, http.StatusAccepted)
		rj := r.claimAs(t, agentproto.JobAppRemove)
		var rp agentproto.RemovePayload
		if err := json.Unmarshal(rj.Payload, &rp); err != nil || rp.AppID != app.ID || len(rp.Proxy.Sites) != 1 || rp.Proxy.Sites[0].Hostname != "api.example.com" {
			t.Fatalf("app.remove payload: %s", rj.Payload)
		}
		if a := r.appInfo(t, app.ID); a.Status != "removing" {
			t.Fatalf("status while removing: %s", a.Status)
		}
		r.completeJob(t, rj.ID, agentproto.StatusFailed, nil, "container busy")
		if a := r.appInfo(t, app.ID); a.Status != "removal_failed" || deref(a.RemoveError) != "container busy" {
			t.Fatalf("after a failed removal: %+v", a)
		}
		resp = r.del(t, "/api/v1/applications/"+app.ID)
		expectStatus(t, resp, http.StatusAccepted)
		r.completeJob(t, r.claimAs(t, agentproto.JobAppRemove).ID, agentproto.StatusSucceeded, nil, "")
		expectProblem(t, r.Get(t, "/api/v1/applications/"+app.ID, r.Token), http.StatusNotFound, "not-found")
		expectProblem(t, r.Get(t, "/api/v1/domains/"+dom.Domain.ID, r.Token), http.StatusNotFound, "not-found")
		if len(auditEntries(t, r.ControlPlane, r.Token, "application.removed")) != 1 {
			t.Errorf("no application.removed audit entry")
		}
		if strings.Contains(r.Logs(), "s3cret") {
			t.Fatalf("the server log shows an env value")
		}
	})
}

// TestApplicationAPIRefusesBadInput sends bad input to every write
// endpoint: each is a 422 naming the field, and no job is queued.
func TestApplicationAPIRefusesBadInput(t *testing.T) {
	t.Parallel()
	r := newAppRig(t, store.SQLite)
	resp := r.Post(t, "/api/v1/applications", r.Token, map[string]any{"name": "web", "server_id": r.serverID, "deploy": false,
		"source": map[string]any{"type": "image", "image": "nginx:1.27"}, "container_port": 80})
	var app AppInfo
	expectJSON(t, resp, http.StatusCreated, &app)
	if app.Kind != "container" {
		t.Fatalf("default kind: %s", resp.Body)
	}
	resp = r.Post(t, "/api/v1/domains", r.Token, map[string]any{"hostname": "example.com", "application_id": app.ID})
	var dom struct {
		Domain struct {
			ID      string `json:"id"`
			TLSMode string `json:"tls_mode"`
		} `json:"domain"`
	}
	expectJSON(t, resp, http.StatusCreated, &dom)
	if dom.Domain.TLSMode != "auto" {
		t.Fatalf("default tls_mode: %s", resp.Body)
	}
	r.claimAs(t, agentproto.JobProxyApply)
	pending := r.createEnrollment(t, "pending-host")

	good := func(edit map[string]any) map[string]any {
		b := map[string]any{"name": "api", "server_id": r.serverID, "source": map[string]any{"type": "image", "image": "nginx:1.27"}, "container_port": 80}
		for k, v := range edit {
			b[k] = v
		}
		return b
	}
	appPath := "/api/v1/applications/" + app.ID
	for _, tc := range []struct {
		name, method, path string
		body               any
		fields             []string
	}{
		{"name not a DNS label", "POST", "/api/v1/applications", good(map[string]any{"name": "API_1"}), []string{"name"}},
		{"name too long", "POST", "/api/v1/applications", good(map[string]any{"name": strings.Repeat("a", 64)}), []string{"name"}},
		{"uppercase image", "POST", "/api/v1/applications", good(map[string]any{"source": map[string]any{"type": "image", "image": "Nginx"}}), []string{"source.image"}},
		{"long tag", "POST", "/api/v1/applications", good(map[string]any{"source": map[string]any{"type": "image", "image": "nginx:" + strings.Repeat("t", 129)}}), []string{"source.image"}},
		{"git source", "POST", "/api/v1/applications", good(map[string]any{"source": map[string]any{"type": "git", "installation_id": 1, "repo_id": 2, "branch": "main"}}), []string{"source.type"}},
		{"port 0", "POST", "/api/v1/applications", good(map[string]any{"container_port": 0}), []string{"container_port"}},
		{"port 65536", "POST", "/api/v1/applications", good(map[string]any{"container_port": 65536}), []string{"container_port"}},
		{"health path", "POST", "/api/v1/applications", good(map[string]any{"health_path": "health z"}), []string{"health_path"}},
		{"env keys", "POST", "/api/v1/applications", good(map[string]any{"env": []map[string]string{{"key": "A", "value": "1"}, {"key": "A", "value": "2"}, {"key": "1X", "value": ""}}}),
			[]string{"env[1].key", "env[2].key"}},
		{"env value too big", "POST", "/api/v1/applications", good(map[string]any{"env": []map[string]string{{"key": "BIG", "value": strings.Repeat("x", 32<<10+1)}}}), []string{"env[0].value"}},
		{"memory", "POST", "/api/v1/applications", good(map[string]any{"memory_limit": "5m"}), []string{"memory_limit"}},
		{"memory unit", "POST", "/api/v1/applications", good(map[string]any{"memory_limit": "512"}), []string{"memory_limit"}},
		{"unknown server", "POST", "/api/v1/applications", good(map[string]any{"server_id": "srv_nope"}), []string{"server_id"}},
		{"pending server", "POST", "/api/v1/applications", good(map[string]any{"server_id": pending.Server.ID}), []string{"server_id"}},
		{"unknown kind", "POST", "/api/v1/applications", good(map[string]any{"kind": "vm"}), []string{"kind"}},
		{"patch kind", "PATCH", appPath, map[string]any{"kind": "compose"}, []string{"kind"}},
		{"patch name", "PATCH", appPath, map[string]any{"name": "-web"}, []string{"name"}},
		{"patch image", "PATCH", appPath, map[string]any{"image": "nginx@sha256:abc"}, []string{"image"}},
		{"patch port and env", "PATCH", appPath, map[string]any{"container_port": 99999, "env": []map[string]string{{"key": "A B", "value": ""}}}, []string{"container_port", "env[0].key"}},
		{"patch memory", "PATCH", appPath, map[string]any{"memory_limit": "1t"}, []string{"memory_limit"}},
		{"deploy ref", "POST", appPath + "/deployments", map[string]any{"ref": "not a ref"}, []string{"ref"}},
		{"logs lines", "POST", appPath + "/logs", map[string]any{"lines": 1001}, []string{"lines"}},
		{"logs since", "POST", appPath + "/logs", map[string]any{"since": "yesterday"}, []string{"since"}},
		{"domain uppercase", "POST", "/api/v1/domains", map[string]any{"hostname": "Example.org", "application_id": app.ID}, []string{"hostname"}},
		{"domain wildcard", "POST", "/api/v1/domains", map[string]any{"hostname": "*.example.org", "application_id": app.ID}, []string{"hostname"}},
		{"domain ip", "POST", "/api/v1/domains", map[string]any{"hostname": "192.0.2.1", "application_id": app.ID}, []string{"hostname"}},
		{"domain one label", "POST", "/api/v1/domains", map[string]any{"hostname": "intranet", "application_id": app.ID}, []string{"hostname"}},
		{"domain www with redirect", "POST", "/api/v1/domains", map[string]any{"hostname": "www.example.org", "application_id": app.ID, "redirect_www": true}, []string{"hostname"}},
		{"domain tls mode", "POST", "/api/v1/domains", map[string]any{"hostname": "example.org", "application_id": app.ID, "tls_mode": "on"}, []string{"tls_mode"}},
		{"domain app", "POST", "/api/v1/domains", map[string]any{"hostname": "example.org", "application_id": "app_nope"}, []string{"application_id"}},
		{"domain patch tls", "PATCH", "/api/v1/domains/" + dom.Domain.ID, map[string]any{"tls_mode": "manual"}, []string{"tls_mode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.Do(t, Req{Method: tc.method, Path: tc.path, Token: r.Token, JSON: tc.body})
			p := expectProblem(t, resp, http.StatusUnprocessableEntity, "validation-failed")
			for _, f := range tc.fields {
				if !slices.Contains(problemFields(p), f) {
					t.Fatalf("fields %v, want %s: %s", problemFields(p), f, resp.Body)
				}
			}
			if strings.Contains(string(resp.Body), strings.Repeat("x", 100)) {
				t.Fatalf("the problem echoes an env value")
			}
		})
	}
	for _, path := range []string{appPath + "/requests?range=30d", "/api/v1/deployments?limit=0", "/api/v1/deployments?limit=101",
		appPath + "/deployments?limit=500"} {
		expectProblem(t, r.Get(t, path, r.Token), http.StatusUnprocessableEntity, "validation-failed")
	}
	minute := time.Now().UTC().Truncate(time.Minute)
	for _, m := range []agentproto.RequestMinute{
		{Host: "Example.com", Minute: minute, Count: 1},
		{Host: "example.com", Minute: minute.Add(30 * time.Second), Count: 1},
		{Host: "example.com", Minute: minute.Add(-8 * 24 * time.Hour), Count: 1},
		{Host: "example.com", Minute: minute.Add(time.Hour), Count: 1},
		{Host: "example.com", Minute: minute, Count: 1, Status2xx: 2},
		{Host: "example.com", Minute: minute, Count: -1},
	} {
		// An invalid entry is skipped and named; the report is not refused.
		resp := r.agentCall(t, r.agent, http.MethodPost, "/requests", agentproto.RequestsReport{Minutes: []agentproto.RequestMinute{m}})
		var res agentproto.RequestsResult
		expectJSON(t, resp, http.StatusOK, &res)
		if res.Stored != 0 || res.SkippedCount != 1 || len(res.Skipped) != 1 || !strings.HasPrefix(res.Skipped[0].Field, "minutes[0].") {
			t.Fatalf("invalid entry %+v: %s", m, resp.Body)
		}
	}
	r.noClaim(t)
	if jobs := r.listJobs(t, "?server_id="+r.serverID); len(jobs) != 1 {
		t.Fatalf("bad input queued jobs: %d", len(jobs))
	}
	if list := r.Get(t, "/api/v1/applications", r.Token); !strings.Contains(string(list.Body), `"name":"web"`) || strings.Contains(string(list.Body), `"name":"api"`) {
		t.Fatalf("bad input created applications: %s", list.Body)
	}

	// Conflicts and unknown resources.
	expectProblem(t, r.Post(t, "/api/v1/applications", r.Token, good(map[string]any{"name": "web"})), http.StatusConflict, "application-name-taken")
	expectProblem(t, r.Post(t, "/api/v1/applications/app_nope/deployments", r.Token, map[string]any{}), http.StatusNotFound, "not-found")
	expectProblem(t, r.Post(t, "/api/v1/deployments/dep_nope/rollback", r.Token, nil), http.StatusNotFound, "not-found")
	expectProblem(t, r.Post(t, "/api/v1/domains/servers/srv_nope/apply", r.Token, nil), http.StatusNotFound, "not-found")
	expectProblem(t, r.Post(t, "/api/v1/domains/servers/"+pending.Server.ID+"/apply", r.Token, nil), http.StatusConflict, "server-not-enrolled")
}
