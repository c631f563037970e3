package apps

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestMaskCompose(t *testing.T) {
	const secret = "s3cret-value"
	doc := `# a comment naming ` + secret + `
x-common: &common
  TOKEN: ` + secret + `
services:
  web:
    image: ghcr.io/acme/web:1 # ` + secret + `
    environment:
      DATABASE_URL: postgres://app:` + secret + `@db/app
      EMPTY:
      <<: *common
    command: ["serve", "--password", "` + secret + `"]
    labels:
      - dev.acme.token=` + secret + `
    healthcheck:
      test: ["CMD", "check", "` + secret + `"]
    build:
      context: .
      args:
        - NPM_TOKEN=` + secret + `
        - BARE
    x-note: ` + secret + `
  worker:
    image: ghcr.io/acme/worker:1
    environment:
      - API_KEY=` + secret + `
      - PLAIN
    labels:
      dev.acme.owner: ` + secret + `
    entrypoint: /bin/run ` + secret + `
volumes:
  data:
    driver_opts:
      o: password=` + secret + `
networks:
  test:
    labels: {k: ` + secret + `}
`
	got := MaskCompose(doc)
	if strings.Contains(got, secret) {
		t.Fatalf("the masked document holds the secret:\n%s", got)
	}
	var m struct {
		Services map[string]struct {
			Image       string         `yaml:"image"`
			Environment yaml.Node      `yaml:"environment"`
			Build       map[string]any `yaml:"build"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("the masked document does not parse: %v\n%s", err, got)
	}
	if m.Services["web"].Image != "ghcr.io/acme/web:1" || m.Services["web"].Build["context"] != "." {
		t.Errorf("the values that are not secret changed:\n%s", got)
	}
	for _, want := range []string{`DATABASE_URL: "********"`, `EMPTY:`, `- "API_KEY=********"`, `- PLAIN`, `- BARE`,
		`- "NPM_TOKEN=********"`, `- "dev.acme.token=********"`, `dev.acme.owner: "********"`, `TOKEN: "********"`,
		`x-note: "********"`, `entrypoint: "********"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the masked document lacks %q:\n%s", want, got)
		}
	}
	if MaskCompose("") != "" || MaskCompose("services: [unclosed") != Masked {
		t.Error("an empty or unreadable document")
	}
}
