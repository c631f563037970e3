package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The pages the git host sends the browser back to show the call that
// finishes the step with the values from the address, escaped, and run
// no script.
func TestGitHostLandingPages(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	r := e.request(t, http.MethodGet, "/githost/manifest/callback?code=c0de&state="+url.QueryEscape(`st"<script>x</script>`), "", nil)
	expectStatus(t, r, http.StatusOK)
	body := string(r.body)
	if !strings.Contains(body, "POST /api/v1/githost/manifest/complete") || !strings.Contains(body, "c0de") {
		t.Errorf("callback page lacks the call: %s", body)
	}
	if strings.Contains(body, "<script>") {
		t.Errorf("callback page carries the state unescaped: %s", body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP = %q", csp)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store (the page holds a one-time code)", cc)
	}
	expectStatus(t, e.request(t, http.MethodGet, "/githost/manifest/callback?state=s", "", nil), http.StatusBadRequest)

	r = e.request(t, http.MethodGet, "/githost/setup?installation_id=42&setup_action=install", "", nil)
	expectStatus(t, r, http.StatusOK)
	if body := string(r.body); !strings.Contains(body, "POST /api/v1/githost/installations") || !strings.Contains(body, `&#34;installation_id&#34;:42`) {
		t.Errorf("setup page lacks the call: %s", body)
	}
	for _, bad := range []string{"", "0", "x1", "-3"} {
		expectStatus(t, e.request(t, http.MethodGet, "/githost/setup?installation_id="+bad, "", nil), http.StatusBadRequest)
	}
}
