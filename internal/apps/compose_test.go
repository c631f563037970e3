package apps_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/fault"
)

const stackDoc = `
services:
  web:
    image: ghcr.io/acme/web:v1
    env_file: .env
    depends_on:
      cache:
        condition: service_healthy
    expose: ["8080"]
  worker:
    image: ghcr.io/acme/web:v1
    command: ["worker"]
  cache:
    image: redis:7
    volumes: [data:/data]
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
volumes:
  data: {}
`

func (r *rig) createStack(name, doc string) (apps.ApplicationDetail, error) {
	return r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: name, ServerID: r.serverID, Kind: apps.KindCompose,
		Source: apps.Source{Type: apps.SourceInline}, ContainerPort: 8080, HealthPath: ptr("/healthz"),
		Env: []apps.EnvVar{{Key: "TOKEN", Value: "s3cret"}}, Compose: doc, WebService: "web", Deploy: true})
}

func TestComposeApplicationUnsupportedKeys(t *testing.T) {
	r := newRig(t)
	bad := strings.Replace(stackDoc, `    expose: ["8080"]`, "    expose: [\"8080\"]\n    ports: [\"80:8080\"]\n    privileged: true", 1) +
		"secrets:\n  key: {file: ./key}\n"
	_, err := r.createStack("shop", bad)
	wantInvalid(t, err, "compose")
	msg := fault.As(err).Fields[0].Message
	for _, k := range []string{"secrets", "services.web.ports", "services.web.privileged"} {
		if !strings.Contains(msg, k) {
			t.Fatalf("the problem %q does not name %s", msg, k)
		}
	}
	for _, tc := range []struct{ name, doc, web string }{
		{"bind mount", strings.Replace(stackDoc, "[data:/data]", "[./data:/data]", 1), "web"},
		{"no web service", stackDoc, "front"},
		{"not yaml", "services: [", "web"},
		{"no healthcheck for service_healthy", strings.Replace(stackDoc, "    healthcheck:\n      test: [\"CMD\", \"redis-cli\", \"ping\"]\n", "", 1), "web"},
		{"cycle", strings.Replace(stackDoc, "    command: [\"worker\"]", "    command: [\"worker\"]\n    depends_on: [web]\n", 1) +
			"", "web"},
	} {
		doc := tc.doc
		if tc.name == "cycle" {
			doc = strings.Replace(doc, "    image: redis:7", "    image: redis:7\n    depends_on: [worker]", 1)
			doc = strings.Replace(doc, "      cache:\n        condition: service_healthy", "      worker:\n        condition: service_started", 1)
		}
		_, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "shop", ServerID: r.serverID, Kind: apps.KindCompose,
			Source: apps.Source{Type: apps.SourceInline}, ContainerPort: 8080, Compose: doc, WebService: tc.web})
		if fe := fault.As(err); fe == nil || fe.Kind != fault.Invalid {
			t.Fatalf("%s: got %v, want 422", tc.name, err)
		}
	}
	// An image source, or compose fields on a container application.
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "shop", ServerID: r.serverID, Kind: apps.KindCompose,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 8080, Compose: stackDoc, WebService: "web"})
	wantInvalid(t, err, "source.type")
	_, err = r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "shop", ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "nginx"}, ContainerPort: 8080, Compose: stackDoc, WebService: "web"})
	wantInvalid(t, err, "compose")
	r.noJob()
}

func TestComposeDeployKeepsAReleaseAndRollsBackToIt(t *testing.T) {
	r := newRig(t)
	a, err := r.createStack("shop", stackDoc)
	if err != nil {
		t.Fatal(err)
	}
	// The reply masks the document, as it lists env keys without values.
	if a.Kind != apps.KindCompose || a.WebService != "web" || a.Compose != apps.MaskCompose(stackDoc) || !a.ComposeMasked {
		t.Fatalf("created %+v", a.Application)
	}
	j := r.claim(agentproto.JobAppDeploy)
	p := payloadOf(t, j)
	if p.Compose == nil || p.Compose.Document != stackDoc || p.Compose.WebService != "web" || len(p.Compose.ImageIDs) != 0 ||
		p.ContainerPort != 8080 || p.HealthPath != "/healthz" || len(p.PruneImageIDs) != 0 {
		t.Fatalf("payload %+v", p)
	}
	if sec := r.secrets(j); sec["TOKEN"] != "s3cret" {
		t.Fatalf("secrets %v", sec)
	}
	release := map[string]string{"web": "sha256:w1", "worker": "sha256:w1", "cache": "sha256:r1"}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:w1", Services: release}, "")
	first := a.Latest.ID
	if d := r.deployment(first); d.Status != apps.Succeeded {
		t.Fatalf("first deployment %s", d.Status)
	}

	// A new document deploys; a ref does not.
	doc2 := strings.ReplaceAll(stackDoc, "web:v1", "web:v2")
	if _, err := r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{Compose: &doc2}); err != nil {
		t.Fatal(err)
	}
	_, err = r.apps.Deploy(r.ctx, r.admin, a.ID, "ghcr.io/acme/web:v3")
	wantInvalid(t, err, "ref")
	second := r.deploy(a.ID, "")
	j = r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); p.Compose.Document != doc2 {
		t.Fatalf("second payload %+v", p.Compose)
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:w2",
		Services: map[string]string{"web": "sha256:w2", "worker": "sha256:w2", "cache": "sha256:r1"}}, "")
	wantStatus(t, r.deployment(second.ID), apps.Succeeded)

	// The rollback re-creates the first release: its document and every
	// service's image.
	rb, err := r.apps.Rollback(r.ctx, r.admin, first)
	if err != nil {
		t.Fatal(err)
	}
	j = r.claim(agentproto.JobAppDeploy)
	p = payloadOf(t, j)
	if p.Compose.Document != stackDoc || p.Compose.ImageIDs["web"] != "sha256:w1" || p.Compose.ImageIDs["cache"] != "sha256:r1" || len(p.Compose.ImageIDs) != 3 {
		t.Fatalf("rollback payload %+v", p.Compose)
	}
	if rb.Spec.Compose == nil || rb.Spec.Compose.ImageIDs["worker"] != "sha256:w1" {
		t.Fatalf("rollback spec %+v", rb.Spec.Compose)
	}

	// Logs of a service of the document; not of another.
	if _, err := r.apps.QueueServiceLogs(r.ctx, r.admin.Actor.ID, a.ID, "nope", nil, ""); err == nil {
		t.Fatal("logs of a service the document does not have")
	} else {
		wantInvalid(t, err, "service")
	}
	lj, err := r.apps.QueueServiceLogs(r.ctx, r.admin.Actor.ID, a.ID, "cache", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if lj.Type != agentproto.JobAppLogs || !strings.Contains(string(lj.Payload), `"service":"cache"`) {
		t.Fatalf("logs job %s %s", lj.Type, lj.Payload)
	}

	// The kind stays.
	kind := apps.KindContainer
	_, err = r.apps.Update(r.ctx, r.admin, a.ID, apps.Patch{Kind: &kind})
	wantInvalid(t, err, "kind")
	if got := r.app(a.ID); got.Kind != apps.KindCompose || got.Services == nil {
		t.Fatalf("detail %+v services %v", got.Application, got.Services)
	}
}

// A compose deploy keeps every service's image of the last five
// succeeded releases (and of the release a rollback re-creates), and names
// for pruning the images of older releases, never one a kept release or
// another application on the server runs.
func TestComposeDeployNamesImagesToPrune(t *testing.T) {
	r := newRig(t)
	a, err := r.createStack("shop", stackDoc)
	if err != nil {
		t.Fatal(err)
	}
	j := r.claim(agentproto.JobAppDeploy)
	release := func(i int) map[string]string {
		return map[string]string{"web": fmt.Sprintf("sha256:web%d", i), "worker": fmt.Sprintf("sha256:worker%d", i), "cache": "sha256:redis"}
	}
	r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:web0", Services: release(0)}, "")
	// Another application on the server ran the image worker ran second.
	r.createApp("api", nil, true)
	r.succeed(r.claim(agentproto.JobAppDeploy), "sha256:worker1")
	first := a.Latest.ID
	for i := 1; i <= 7; i++ {
		r.deploy(a.ID, "")
		j := r.claim(agentproto.JobAppDeploy)
		p := payloadOf(t, j)
		// Before this deploy, releases 0…i-1 succeeded: the newest five
		// are kept; of the older ones, worker1 is the api's too.
		var want []string
		switch i {
		case 6:
			want = []string{"sha256:web0", "sha256:worker0"}
		case 7:
			want = []string{"sha256:web0", "sha256:worker0", "sha256:web1"}
		}
		slices.Sort(want)
		got := slices.Clone(p.PruneImageIDs)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("deploy %d: prune %v, want %v (keep %v)", i, got, want, p.KeepImageIDs)
		}
		for k := max(0, i-apps.KeepImages); k < i; k++ {
			for _, id := range release(k) {
				if !slices.Contains(p.KeepImageIDs, id) {
					t.Fatalf("deploy %d: %s of release %d is not kept: %v", i, id, k, p.KeepImageIDs)
				}
			}
		}
		for _, id := range p.PruneImageIDs {
			if slices.Contains(p.KeepImageIDs, id) {
				t.Fatalf("deploy %d: %s is both kept and pruned", i, id)
			}
		}
		r.complete(j, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: release(i)["web"], Services: release(i)}, "")
	}

	// A rollback keeps the release it re-creates, and is refused once the
	// server's inventory no longer lists one of its images.
	r.clock.Advance(time.Minute)
	r.putImages("sha256:web0", "sha256:redis")
	_, err = r.apps.Rollback(r.ctx, r.admin, first)
	wantConflict(t, err, "image-gone")
	r.putImages("sha256:web0", "sha256:worker0", "sha256:redis")
	if _, err := r.apps.Rollback(r.ctx, r.admin, first); err != nil {
		t.Fatal(err)
	}
	p := payloadOf(t, r.claim(agentproto.JobAppDeploy))
	for _, id := range release(0) {
		if !slices.Contains(p.KeepImageIDs, id) || slices.Contains(p.PruneImageIDs, id) {
			t.Fatalf("rollback to release 0: keep %v, prune %v", p.KeepImageIDs, p.PruneImageIDs)
		}
	}
}
