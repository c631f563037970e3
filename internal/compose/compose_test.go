package compose

import (
	"context"
	"slices"
	"strings"
	"testing"
)

const stack = `
services:
  web:
    image: ghcr.io/acme/web:v1
    environment:
      GREETING: hello ${NOT_INTERPOLATED}
    env_file: .env
    command: ["serve", "--port", "8080"]
    depends_on:
      cache:
        condition: service_healthy
    expose: ["8080"]
    restart: always
    mem_limit: 128m
    networks: [default]
  worker:
    image: ghcr.io/acme/web:v1
    depends_on: [cache]
  cache:
    image: redis:7
    volumes: [data:/data]
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
volumes:
  data: {}
networks:
  default: {}
`

func TestLoadTheSupportedSubset(t *testing.T) {
	p, err := Load(context.Background(), "shop", []byte(stack), Options{WebService: "web"})
	if err != nil {
		t.Fatal(err)
	}
	web := p.Services["web"]
	if v := web.Environment["GREETING"]; v == nil || *v != "hello ${NOT_INTERPOLATED}" {
		t.Fatalf("environment is taken literally: %v", v)
	}
	if len(web.EnvFiles) != 1 || int64(web.MemLimit) != 128<<20 || web.Restart != "always" || len(web.Command) != 3 {
		t.Fatalf("web %+v", web)
	}
	order, err := Order(p)
	if err != nil || !slices.Equal(order, []string{"cache", "web", "worker"}) {
		t.Fatalf("order %v, %v", order, err)
	}
}

func TestLoadNamesUnsupportedKeys(t *testing.T) {
	doc := strings.Replace(stack, "    expose: [\"8080\"]", "    expose: [\"8080\"]\n    ports: [\"80:8080\"]\n    privileged: true\n    healthcheck:\n      test: [CMD, \"true\"]\n      start_interval: 1s\n    cap_add: [NET_ADMIN]", 1) +
		"secrets:\n  key: {file: ./key}\nx-extension: {fine: true}\n"
	_, err := Load(context.Background(), "shop", []byte(doc), Options{WebService: "web"})
	p := AsProblem(err)
	if p == nil {
		t.Fatalf("got %v, want a problem", err)
	}
	want := []string{"secrets", "services.web.cap_add", "services.web.ports", "services.web.privileged"}
	if !slices.Equal(p.Unsupported, want) {
		t.Fatalf("unsupported %v, want %v", p.Unsupported, want)
	}
}

func TestLoadRefusesWhatCapstanDoesNotRun(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"bind mount", strings.Replace(stack, "[data:/data]", "[./data:/data]", 1), "services.cache.volumes.[].bind"},
		{"undeclared volume", strings.Replace(stack, "[data:/data]", "[other:/data]", 1), "undefined volume"},
		{"build without git", strings.Replace(stack, "    image: redis:7", "    build: .", 1), "only applications from git"},
		{"no image", strings.Replace(stack, "    image: redis:7\n", "", 1), "neither an image nor a build"},
		{"unknown dependency", strings.Replace(stack, "depends_on: [cache]", "depends_on: [db]", 1), ""},
		{"healthy without healthcheck", strings.Replace(stack, "    healthcheck:\n      test: [\"CMD\", \"redis-cli\", \"ping\"]\n      interval: 1s\n", "", 1), "needs a healthcheck"},
		{"cycle", strings.Replace(stack, "    image: redis:7", "    image: redis:7\n    depends_on: [worker]", 1), "cycle"},
		{"external volume", strings.Replace(stack, "  data: {}", "  data: {external: true}", 1), "volumes.data.external"},
		{"bad service name", strings.Replace(stack, "  worker:", "  Worker_1:", 1), "service name"},
		{"empty", "services: {}\n", "no services"},
	} {
		_, err := Load(context.Background(), "shop", []byte(tc.doc), Options{WebService: "web"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load(context.Background(), "shop", []byte(stack), Options{WebService: "front"}); err == nil || !strings.Contains(err.Error(), "web_service") {
		t.Errorf("a web service the document does not have: %v", err)
	}
	if _, err := Load(context.Background(), "shop", []byte(strings.Replace(stack, "    image: redis:7", "    build: {context: ., dockerfile: Dockerfile.cache}", 1)),
		Options{WebService: "web", AllowBuild: true}); err != nil {
		t.Errorf("a build from git: %v", err)
	}
	if _, err := Load(context.Background(), "shop", []byte(strings.Replace(stack, "    image: redis:7", "    build: ../outside", 1)),
		Options{WebService: "web", AllowBuild: true}); err == nil {
		t.Error("a build context outside the repository was accepted")
	}
	if _, err := Load(context.Background(), "shop", []byte(strings.Repeat("#", MaxDocumentBytes+1)), Options{}); AsProblem(err) == nil {
		t.Errorf("a document too large: %v", err)
	}
}
