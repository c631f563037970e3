package httpapi

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"

	"github.com/capstan-dev/capstan/internal/githost"
)

// A landing page is where a provider sends the administrator's browser
// back to when the console is not built: it says what happened and which
// API call finishes the step, with the values the provider put in the
// address. It runs no script.
type landingPage struct {
	Title string
	Lines []string
	Call  string // the API call that finishes the step, to copy
	// Back, when set, links to the console page the step started from,
	// with BackText.
	Back, BackText string
}

const landingCSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var landingTemplate = template.Must(template.New("landing").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>{{.Title}} · Capstan</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;padding:0 1rem;color:#1b1f24}
pre{background:#f3f4f6;padding:1rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}</style></head>
<body><h1>{{.Title}}</h1>{{range .Lines}}<p>{{.}}</p>{{end}}{{if .Call}}<pre>{{.Call}}</pre>{{end}}{{if .Back}}<p><a href="{{.Back}}">{{.BackText}}</a></p>{{end}}</body></html>
`))

const landingType = "text/html; charset=utf-8"

func renderLanding(p landingPage) ([]byte, error) {
	var b bytes.Buffer
	err := landingTemplate.Execute(&b, p)
	return b.Bytes(), err
}

func writeLanding(w http.ResponseWriter, r *http.Request, status int, p landingPage) {
	page, err := renderLanding(p)
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusInternalServerError, "", "The page could not be rendered."))
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", landingCSP)
	h.Set("Content-Type", landingType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(page) //nolint:errcheck // the browser may have gone
}

// gitHostOrigin is the origin of the git host's web pages, or "" when no
// git host is configured.
func gitHostOrigin(gh *githost.Service) string {
	if gh == nil {
		return ""
	}
	return gh.WebOrigin()
}

// registerLandings serves the pages the git host sends the browser back
// to after creating the app and after installing it: the console's own
// routes, which finish each step with the signed-in administrator's
// session, or, when the console is not in this build, pages that say
// which API call finishes it.
func (s *Server) registerLandings() {
	s.mux.HandleFunc("GET "+githost.ManifestRedirectPath, func(w http.ResponseWriter, r *http.Request) {
		if s.console.built() {
			s.console.serveIndex(w, r)
			return
		}
		q := r.URL.Query()
		code, state := q.Get("code"), q.Get("state")
		if code == "" || state == "" {
			writeLanding(w, r, http.StatusBadRequest, landingPage{Title: "Git host app not created",
				Lines: []string{"The provider sent the browser back without a code and a state, so no app was created. Start again with POST /api/v1/githost/manifest."}})
			return
		}
		writeLanding(w, r, http.StatusOK, landingPage{Title: "Finish connecting the git host app",
			Lines: []string{"The provider created the app. Finish connecting it within the hour, as the administrator who started, with this call (the code works once):"},
			Call:  callText("/api/v1/githost/manifest/complete", map[string]any{"code": code, "state": state})})
	})
	s.mux.HandleFunc("GET "+githost.SetupPath, func(w http.ResponseWriter, r *http.Request) {
		if s.console.built() {
			s.console.serveIndex(w, r)
			return
		}
		q := r.URL.Query()
		id, err := strconv.ParseInt(q.Get("installation_id"), 10, 64)
		if err != nil || id < 1 {
			writeLanding(w, r, http.StatusBadRequest, landingPage{Title: "No installation",
				Lines: []string{"The provider sent the browser back without an installation id. Install the app on the provider's side, then come back."}})
			return
		}
		writeLanding(w, r, http.StatusOK, landingPage{Title: "Record the installation",
			Lines: []string{"The app was installed on the provider's side. Record the installation with this call; Capstan checks it with the provider first:"},
			Call:  callText("/api/v1/githost/installations", map[string]any{"installation_id": id, "setup_action": q.Get("setup_action")})})
	})
}

// callText is a POST of body to path, as a page shows it to copy.
func callText(path string, body map[string]any) string {
	b, _ := json.Marshal(body)
	return "POST " + path + "\n" + string(b)
}
