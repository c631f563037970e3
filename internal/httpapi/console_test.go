package httpapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func consoleGet(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func bodyOf(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The console is served at / and at every path of its own routes (so a
// reload of /servers/srv_… works), with a strict CSP and an index that is
// never cached; its hashed assets are cached for a year; a missing asset
// and every unknown API path stay 404 problems.
func TestConsoleServing(t *testing.T) {
	files := fstest.MapFS{
		"index.html":              {Data: []byte(`<!doctype html><script type="module" src="/assets/index-abc123.js"></script>`)},
		"assets/index-abc123.js":  {Data: []byte(`console.log("capstan")`)},
		"assets/index-abc123.css": {Data: []byte(`body{}`)},
		"favicon.svg":             {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
	}
	s := New(Deps{Console: files, Logger: slog.New(slog.DiscardHandler)})

	for _, path := range []string{"/", "/servers", "/servers/srv_01hx7c9q3m8e4a0000000000", "/jobs?status=running", "/index.html"} {
		r := consoleGet(t, s, http.MethodGet, path)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, r.StatusCode)
		}
		if b := bodyOf(t, r); !strings.Contains(b, "/assets/index-abc123.js") {
			t.Errorf("GET %s: not the console's page: %q", path, b)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
		if cc := r.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", path, cc)
		}
		csp := r.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "http") {
			t.Errorf("GET %s: CSP %q allows inline code or another host", path, csp)
		}
	}

	r := consoleGet(t, s, http.MethodGet, "/assets/index-abc123.js")
	if r.StatusCode != http.StatusOK || bodyOf(t, r) != `console.log("capstan")` {
		t.Fatalf("asset: %d", r.StatusCode)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
		t.Errorf("asset Cache-Control %q", cc)
	}
	if ct := r.Header.Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("asset Content-Type %q", ct)
	}
	if r := consoleGet(t, s, http.MethodHead, "/servers/srv_x"); r.StatusCode != http.StatusOK {
		t.Errorf("HEAD of a console route: %d", r.StatusCode)
	}

	// Never the page where a script, an API answer or a problem is expected.
	for _, path := range []string{"/assets/index-old999.js", "/robots.txt", "/api/v1/nothing", "/api/v1/servers/srv_x/nothing", "/agent/v1/nothing", "/docs/missing.js"} {
		r := consoleGet(t, s, http.MethodGet, path)
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, r.StatusCode)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("GET %s: Content-Type %q, want a problem", path, ct)
		}
	}
	// Other methods on console paths are not the console's.
	if r := consoleGet(t, s, http.MethodPost, "/servers"); r.StatusCode != http.StatusNotFound {
		t.Errorf("POST /servers: %d, want 404", r.StatusCode)
	}
	// The API still answers at its own paths.
	if r := consoleGet(t, s, http.MethodGet, "/openapi.json"); r.StatusCode != http.StatusOK || !strings.Contains(r.Header.Get("Content-Type"), "json") {
		t.Errorf("GET /openapi.json: %d %s", r.StatusCode, r.Header.Get("Content-Type"))
	}
}

// A control plane built without the console (no Node.js at build time)
// says at / how to build it, and runs no script.
func TestConsoleNotBuilt(t *testing.T) {
	for name, files := range map[string]fstest.MapFS{"empty": {".keep": {}}, "absent": nil} {
		var deps Deps
		if files != nil {
			deps.Console = files
		}
		deps.Logger = slog.New(slog.DiscardHandler)
		s := New(deps)
		for _, path := range []string{"/", "/servers/srv_x", "/index.html"} {
			r := consoleGet(t, s, http.MethodGet, path)
			if r.StatusCode != http.StatusOK {
				t.Fatalf("%s: GET %s: %d", name, path, r.StatusCode)
			}
			b := bodyOf(t, r)
			if !strings.Contains(b, "npm ci") || !strings.Contains(b, "make build") {
				t.Errorf("%s: GET %s: page does not say how to build the console: %q", name, path, b)
			}
			if csp := r.Header.Get("Content-Security-Policy"); strings.Contains(csp, "script-src") || !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("%s: CSP %q", name, csp)
			}
		}
		if r := consoleGet(t, s, http.MethodGet, "/server.go"); r.StatusCode != http.StatusNotFound {
			t.Errorf("%s: GET /server.go: %d, want 404", name, r.StatusCode)
		}
	}
}
