package httpapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/capstan-dev/capstan/internal/githost"
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

// consoleFiles is a built console: an index and one asset.
func consoleFiles() fstest.MapFS {
	return fstest.MapFS{
		"index.html":             {Data: []byte(`<!doctype html><script type="module" src="/assets/index-abc123.js"></script>`)},
		"assets/index-abc123.js": {Data: []byte(`console.log("capstan")`)},
	}
}

// formAction returns the form-action directive of a policy.
func formAction(t *testing.T, csp string) string {
	t.Helper()
	for _, d := range strings.Split(csp, ";") {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "form-action ") {
			return d
		}
	}
	t.Fatalf("CSP %q has no form-action", csp)
	return ""
}

// The console posts the git host app's manifest from the browser to the
// git host's web pages: its policy lets forms go to the console itself
// and to exactly that origin, on every console path and asset; without a
// git host, to the console alone.
func TestConsoleFormActionGitHost(t *testing.T) {
	provider, err := githost.NewGitHub("https://git.example.com:8443/api/v3", "https://git.example.com:8443/", nil)
	if err != nil {
		t.Fatal(err)
	}
	gh := githost.NewService(nil, provider, nil, nil, "https://capstan.example.com", time.Now, slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		name string
		gh   *githost.Service
		want string
	}{
		{"git host", gh, "form-action 'self' https://git.example.com:8443"},
		{"none", nil, "form-action 'self'"},
	} {
		s := New(Deps{Console: consoleFiles(), GitHost: c.gh, Logger: slog.New(slog.DiscardHandler)})
		for _, path := range []string{"/", "/applications", "/githost/manifest/callback?code=c&state=s", "/assets/index-abc123.js"} {
			r := consoleGet(t, s, http.MethodGet, path)
			if r.StatusCode != http.StatusOK {
				t.Fatalf("%s: GET %s: %d", c.name, path, r.StatusCode)
			}
			csp := r.Header.Get("Content-Security-Policy")
			if got := formAction(t, csp); got != c.want {
				t.Errorf("%s: GET %s: %q, want %q", c.name, path, got, c.want)
			}
			// The git host's origin is named in form-action and nowhere else.
			if n := strings.Count(csp, "git.example.com"); c.gh != nil && n != 1 {
				t.Errorf("%s: GET %s: CSP %q names the git host %d times, want once", c.name, path, csp, n)
			}
			if rest := strings.Replace(csp, c.want, "", 1); strings.Contains(rest, "http") || strings.Contains(rest, "unsafe-inline") {
				t.Errorf("%s: GET %s: CSP %q allows another host or inline code", c.name, path, csp)
			}
		}
	}
}

// Where the git host sends the browser back to (after creating the app,
// after installing it) are console routes when the console is built: the
// console's page with the headers of every other console route, which
// finishes the step with the administrator's session.
func TestConsoleGitHostReturnRoutes(t *testing.T) {
	s := New(Deps{Console: consoleFiles(), Logger: slog.New(slog.DiscardHandler)})
	other := consoleGet(t, s, http.MethodGet, "/applications")
	for _, path := range []string{
		githost.ManifestRedirectPath + "?code=c0de&state=" + strings.Repeat("s", 43),
		githost.ManifestRedirectPath, // without a code the console says so
		githost.SetupPath + "?installation_id=42&setup_action=install",
		githost.SetupPath + "?setup_action=request",
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			r := consoleGet(t, s, method, path)
			if r.StatusCode != http.StatusOK {
				t.Fatalf("%s %s: %d", method, path, r.StatusCode)
			}
			if b := bodyOf(t, r); method == http.MethodGet && !strings.Contains(b, "/assets/index-abc123.js") {
				t.Errorf("GET %s: not the console's page: %q", path, b)
			}
			for _, h := range []string{"Content-Security-Policy", "Content-Type", "Cache-Control", "Referrer-Policy", "X-Frame-Options"} {
				if got, want := r.Header.Get(h), other.Header.Get(h); got != want || got == "" {
					t.Errorf("%s %s: %s %q, want %q as on other console routes", method, path, h, got, want)
				}
			}
		}
	}
}
