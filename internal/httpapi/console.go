package httpapi

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
)

// consolePolicy is the web console's policy: its own scripts, styles,
// images and API only, nothing inline, nothing from another host. Forms
// post to the console itself and, when a git host is configured, to the
// git host's web origin (formOrigin), where the console posts the app
// manifest that creates the git host app.
func consolePolicy(formOrigin string) string {
	formAction := "'self'"
	if formOrigin != "" {
		formAction += " " + formOrigin
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action " + formAction + "; frame-ancestors 'none'"
}

// originPattern is an origin that can stand in a policy as it is: a
// scheme, a host name or address, and a port.
var originPattern = regexp.MustCompile(`^https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$`)

// consoleMissingCSP is the policy of the page served when the console was
// not built: it has an inline style and no script.
const consoleMissingCSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleMissingPage says how to build the console into the binary.
var consoleMissingPage = []byte(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Capstan · console not built</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;padding:0 1rem}
pre{background:#f3f4f6;padding:1rem;overflow-x:auto}@media (prefers-color-scheme:dark){body{background:#111418;color:#e6e8eb}pre{background:#1d2127}}</style>
</head><body><h1>The web console is not in this build</h1>
<p>This control plane was built without its web console, so only the API is served here
(<a href="/docs">API reference</a>, <a href="/openapi.json">OpenAPI document</a>).</p>
<p>To build the console into the binary you need Node.js 20 or later with npm. From the source tree, run:</p>
<pre>make build</pre>
<p>or, by hand:</p>
<pre>cd web &amp;&amp; npm ci &amp;&amp; npm run build &amp;&amp; cd .. &amp;&amp; go build ./cmd/capstan</pre>
</body></html>
`)

// console serves the single-page web console from its built files: the
// hashed assets under /assets/ for a year, any other file as it is, and
// index.html (never cached) for every other path, the console's own
// routes, so that a reload or a link to /servers/srv_… opens the page.
type console struct {
	files fs.FS
	index []byte // nil when the console was not built
	mod   time.Time
	csp   string
}

// newConsole serves files; formOrigin is the git host's web origin, or
// "" when none is configured. An origin that cannot stand in a policy
// is left out of it.
func newConsole(files fs.FS, formOrigin string) *console {
	if !originPattern.MatchString(formOrigin) {
		formOrigin = ""
	}
	c := &console{files: files, mod: time.Now(), csp: consolePolicy(formOrigin)}
	if files != nil {
		if b, err := fs.ReadFile(files, "index.html"); err == nil {
			c.index = b
		}
	}
	return c
}

// reserved reports whether a path belongs to the API rather than the
// console: those paths answer problems, never the console's page.
func reserved(p string) bool {
	for _, prefix := range []string{"/api/", "/agent/", "/docs/", "/openapi"} {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return p == "/api" || p == "/agent" || p == "/docs"
}

// serve answers a GET or HEAD for a path no API route took. It reports
// false when the path is not the console's.
func (c *console) serve(w http.ResponseWriter, r *http.Request) bool {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || reserved(r.URL.Path) {
		return false
	}
	h := w.Header()
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
	if name != "" && name != "index.html" && c.index != nil {
		if st, err := fs.Stat(c.files, name); err == nil && !st.IsDir() {
			if strings.HasPrefix(name, "assets/") {
				// Vite puts a hash of the content in every asset's name.
				h.Set("Cache-Control", "public, max-age=31536000, immutable")
			} else {
				h.Set("Cache-Control", "no-cache")
			}
			h.Set("Content-Security-Policy", c.csp)
			http.ServeFileFS(w, r, c.files, name)
			return true
		}
	}
	// A missing file (an old asset, a typo) is a 404, not the page: a
	// script tag must never receive HTML.
	if name != "index.html" && (strings.HasPrefix(name, "assets/") || path.Ext(name) != "") {
		return false
	}
	if c.index == nil {
		h.Set("Content-Security-Policy", consoleMissingCSP)
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "index.html", c.mod, bytes.NewReader(consoleMissingPage))
		return true
	}
	c.serveIndex(w, r)
	return true
}

// built reports whether the console is in this build.
func (c *console) built() bool { return c.index != nil }

// serveIndex answers with the console's page, for one of its routes.
func (c *console) serveIndex(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", c.csp)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "index.html", c.mod, bytes.NewReader(c.index))
}
