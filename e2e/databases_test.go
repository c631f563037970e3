package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// EngineInfo is an engine as GET /api/v1/databases/engines shows it.
type EngineInfo struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	DefaultPort int    `json:"default_port"`
	Versions    []struct {
		Version string `json:"version"`
		Default bool   `json:"default"`
		Image   string `json:"image"`
	} `json:"versions"`
}

// TestDatabaseImagesFile: serve takes engine images from
// --database-images (the engines listing shows them; versions not named
// keep the official image), and a bad file stops it at start with a
// message that says what is wrong.
func TestDatabaseImagesFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ name, content, want string }{
		{"unknown-version.json", `{"postgres": {"9": "registry.example.com/postgres:9"}}`, `postgres: unknown version "9"`},
		{"unknown-engine.json", `{"mongodb": {"7": "mongo:7"}}`, `unknown engine "mongodb"`},
		{"bad-image.json", `{"redis": {"7.4": "not an image"}}`, `redis 7.4: image "not an image"`},
		{"not-json.json", `postgres 17 = registry.example.com/postgres:17`, "not a JSON object"},
	} {
		res := runCLI(t, childEnv(nil), "", "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--database-images", write(c.name, c.content))
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, c.want) || !strings.Contains(res.Stderr, c.name) {
			t.Errorf("%s: exit %d, stderr %q; want a failure naming the file and saying %q", c.name, res.ExitCode, res.Stderr, c.want)
		}
	}
	res := runCLI(t, childEnv([]string{"CAPSTAN_DATABASE_IMAGES=" + filepath.Join(dir, "missing.json")}), "", "serve",
		"--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "missing.json") {
		t.Errorf("a missing file from the environment: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}

	good := write("images.json", `{"postgres": {"16": "registry.example.com/pg:16-local"}, "valkey": {"8": "registry.example.com/valkey:8"}}`)
	f := newFleet(t, Options{Args: []string{"--database-images", good}})
	resp := f.Get(t, "/api/v1/databases/engines", f.Token)
	expectStatus(t, resp, http.StatusOK)
	var out struct {
		Engines []EngineInfo `json:"engines"`
	}
	resp.JSON(t, &out)
	images := map[string]string{}
	var names []string
	for _, e := range out.Engines {
		names = append(names, e.Name)
		if !e.Versions[0].Default {
			t.Errorf("%s: the newest version is not the default", e.Name)
		}
		for _, v := range e.Versions {
			images[e.Name+" "+v.Version] = v.Image
		}
	}
	if got, want := strings.Join(names, ","), "postgres,mysql,mariadb,redis,valkey"; got != want {
		t.Fatalf("engines: got %s, want %s", got, want)
	}
	for k, want := range map[string]string{
		"postgres 16": "registry.example.com/pg:16-local", "postgres 17": "postgres:17", "valkey 8": "registry.example.com/valkey:8",
		"mariadb 11.4": "mariadb:11.4", "mysql 8.4": "mysql:8.4", "redis 7.4": "redis:7.4",
	} {
		if images[k] != want {
			t.Errorf("%s: image %q, want %q", k, images[k], want)
		}
	}
}
