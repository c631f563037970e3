package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// docMarker is a secret written inline in application settings.
const docMarker = "inline-s3cret-0453"

// maskedDoc is a compose document with the marker in an environment map,
// an environment list, a command and an extension.
const maskedDoc = `# the token is ` + docMarker + `
x-shared: &shared
  SHARED_TOKEN: ` + docMarker + `
services:
  web:
    image: ghcr.io/acme/web:1.0
    environment:
      DATABASE_URL: postgres://app:` + docMarker + `@db/app
      <<: *shared
    expose: ["8080"]
  worker:
    image: ghcr.io/acme/web:1.0
    command: ["worker", "--password", "` + docMarker + `"]
    environment:
      - API_KEY=` + docMarker + `
      - MODE
`

// TestApplicationSecretsHiddenFromMembers writes a secret inline in a
// compose document and in a service application's commands, deploys
// both, and reads everything a member can read: the applications, their
// deployments, their jobs and the live stream hold neither. An
// administrator reads the document and the commands in full, audited,
// and masked with reveal=false, unaudited.
func TestApplicationSecretsHiddenFromMembers(t *testing.T) {
	host := testlab.StartGitHost(t)
	r := newAppRigWith(t, gitHostOptions(store.SQLite, host))
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	memberToken := signInUser(t, r.ControlPlane, member).AccessToken
	stream := openLiveStream(t, r.ControlPlane, memberToken)

	resp := r.Post(t, "/api/v1/applications", r.Token, map[string]any{"name": "stack", "server_id": r.serverID, "kind": "compose",
		"source": map[string]any{"type": "inline"}, "compose": maskedDoc, "web_service": "web", "container_port": 8080})
	var stack struct {
		AppInfo
		Compose       string `json:"compose"`
		ComposeMasked bool   `json:"compose_masked"`
	}
	expectJSON(t, resp, http.StatusCreated, &stack)
	if strings.Contains(string(resp.Body), docMarker) || !stack.ComposeMasked || !strings.Contains(stack.Compose, `DATABASE_URL: "********"`) ||
		!strings.Contains(stack.Compose, `- "API_KEY=********"`) || !strings.Contains(stack.Compose, "image: ghcr.io/acme/web:1.0") {
		t.Fatalf("the create reply, like env values, shows the masked document: %s", resp.Body)
	}

	head := strings.Repeat("b", 40)
	repo := host.AddRepo("acme", "svc", true, map[string]string{"main": head})
	host.UpdateRepo(repo, func(r *testlab.HostedRepo) { r.Commits[head] = testlab.HostedCommit{SHA: head, Message: "v1"} })
	inst := connectGitHost(t, r.ControlPlane, host, r.Token, "acme")
	start, build := "./run --token "+docMarker, "make TOKEN="+docMarker
	resp = r.Post(t, "/api/v1/applications", r.Token, map[string]any{"name": "svc", "server_id": r.serverID, "kind": "service",
		"source":        map[string]any{"type": "git", "installation_id": inst, "repo_id": repo.ID, "branch": "main"},
		"start_command": start, "build_command": build})
	var svc AppInfo
	expectJSON(t, resp, http.StatusCreated, &svc)
	if strings.Contains(string(resp.Body), docMarker) {
		t.Fatalf("the create reply shows the commands: %s", resp.Body)
	}

	// The agent runs both deployments: one succeeds, one fails.
	var jobIDs []string
	for range 2 {
		j := r.claimAs(t, agentproto.JobAppDeploy)
		jobIDs = append(jobIDs, j.ID)
		if p := deployPayloadOf(t, j); p.Compose != nil {
			if p.Compose.Document != maskedDoc {
				t.Fatalf("the agent gets the document %q, want it as written", p.Compose.Document)
			}
			r.completeJob(t, j.ID, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:1",
				Services: map[string]string{"web": "sha256:1", "worker": "sha256:1"}}, "")
		} else {
			if p.Service == nil || p.Service.StartCommand != start || p.Service.BuildCommand != build {
				t.Fatalf("the agent gets the service %+v, want the commands as written", p.Service)
			}
			r.completeJob(t, j.ID, agentproto.StatusFailed, nil, "build failed")
		}
	}

	// Everything a member reads of them.
	paths := []string{"/api/v1/applications", "/api/v1/deployments", "/api/v1/jobs", "/api/v1/servers/" + r.serverID}
	var latest []string
	for _, id := range []string{stack.ID, svc.ID} {
		paths = append(paths, "/api/v1/applications/"+id, "/api/v1/applications/"+id+"?reveal=true",
			"/api/v1/applications/"+id+"?reveal=false", "/api/v1/applications/"+id+"/deployments")
		var a AppInfo
		r.Get(t, "/api/v1/applications/"+id+"?reveal=false", r.Token).JSON(t, &a)
		if a.Latest == nil {
			t.Fatalf("application %s has no deployment", id)
		}
		paths = append(paths, "/api/v1/deployments/"+a.Latest.ID)
		latest = append(latest, a.Latest.ID)
	}
	for _, id := range jobIDs {
		paths = append(paths, "/api/v1/jobs/"+id)
	}
	for _, p := range paths {
		resp := r.Get(t, p, memberToken)
		expectStatus(t, resp, http.StatusOK)
		if strings.Contains(string(resp.Body), docMarker) {
			t.Errorf("a member reads the secret at %s: %s", p, resp.Body)
		}
	}
	var hidden struct {
		Service struct {
			StartCommand   string `json:"start_command"`
			CommandsHidden bool   `json:"commands_hidden"`
		} `json:"service"`
	}
	r.Get(t, "/api/v1/applications/"+svc.ID, memberToken).JSON(t, &hidden)
	if hidden.Service.StartCommand != "" || !hidden.Service.CommandsHidden {
		t.Errorf("a member's service settings: %+v, want the commands hidden", hidden.Service)
	}
	// The live stream told the member of both jobs' ends, without the
	// secrets.
	ended := map[string]bool{}
	for _, m := range stream.Until(t, 30*time.Second, func(m testlab.SSEMessage) bool {
		var j struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if m.Event == "job" && json.Unmarshal([]byte(m.Data), &j) == nil && (j.Status == "succeeded" || j.Status == "failed") {
			ended[j.ID] = true
		}
		return ended[jobIDs[0]] && ended[jobIDs[1]]
	}) {
		if strings.Contains(m.Data, docMarker) {
			t.Errorf("a member's stream carries the secret: %s %s", m.Event, m.Data)
		}
	}

	// An administrator: masked in lists and with reveal=false, unaudited.
	for _, p := range []string{"/api/v1/applications", "/api/v1/deployments", "/api/v1/applications/" + stack.ID + "?reveal=false",
		"/api/v1/applications/" + svc.ID + "?reveal=false", "/api/v1/applications/" + svc.ID + "/deployments"} {
		if resp := r.Get(t, p, r.Token); strings.Contains(string(resp.Body), docMarker) {
			t.Errorf("an administrator's %s shows the secret: %s", p, resp.Body)
		}
	}
	if n := len(auditEntries(t, r.ControlPlane, r.Token, "application.env.read")); n != 0 {
		t.Fatalf("application.env.read entries after reads without secrets: %d", n)
	}
	// In full with reveal, each read audited.
	var full struct {
		Compose string `json:"compose"`
		Masked  bool   `json:"compose_masked"`
		Current *struct {
			Spec struct {
				Compose struct {
					Document string `json:"document"`
				} `json:"compose"`
			} `json:"spec"`
		} `json:"current"`
	}
	r.Get(t, "/api/v1/applications/"+stack.ID, r.Token).JSON(t, &full)
	if full.Compose != maskedDoc || full.Masked || full.Current == nil || full.Current.Spec.Compose.Document != maskedDoc {
		t.Errorf("an administrator's read of the stack: %+v", full)
	}
	var fullSvc struct {
		Service struct {
			StartCommand   string `json:"start_command"`
			BuildCommand   string `json:"build_command"`
			CommandsHidden bool   `json:"commands_hidden"`
		} `json:"service"`
	}
	r.Get(t, "/api/v1/applications/"+svc.ID, r.Token).JSON(t, &fullSvc)
	if fullSvc.Service.StartCommand != start || fullSvc.Service.BuildCommand != build || fullSvc.Service.CommandsHidden {
		t.Errorf("an administrator's read of the service: %+v", fullSvc.Service)
	}
	entries := auditEntries(t, r.ControlPlane, r.Token, "application.env.read")
	if len(entries) != 2 {
		t.Fatalf("application.env.read entries after two reads with secrets: %+v", entries)
	}
	for _, e := range entries {
		want := map[string]string{stack.ID: "compose_document", svc.ID: "service_commands"}[e.Target.ID]
		if want == "" || e.Details[want] != true || e.Actor.ID != r.Admin.ID {
			t.Errorf("audit entry %+v, want %s for an application read", e, want)
		}
		if b, _ := json.Marshal(e); strings.Contains(string(b), docMarker) {
			t.Errorf("the audit entry holds the secret: %s", b)
		}
	}
	// A deployment's detail shows an administrator what it deployed.
	if resp := r.Get(t, "/api/v1/deployments/"+latest[1], r.Token); !strings.Contains(string(resp.Body), start) {
		t.Errorf("an administrator's deployment detail lacks the start command: %s", resp.Body)
	}
}
