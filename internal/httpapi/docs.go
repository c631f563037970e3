package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// docsUI holds Swagger UI (swagger-ui-dist, Apache-2.0) and our page around
// it, so /docs works with no network.
//
//go:embed docsui
var docsUI embed.FS

const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (s *Server) registerDocs() {
	sub, _ := fs.Sub(docsUI, "docsui")
	files := http.StripPrefix("/docs/", http.FileServerFS(sub))
	page, _ := fs.ReadFile(sub, "index.html")
	serve := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", docsCSP)
		if r.URL.Path == "/docs" || r.URL.Path == "/docs/" || r.URL.Path == "/docs/index.html" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(page) //nolint:errcheck
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/docs/")
		if st, err := fs.Stat(sub, name); err != nil || st.IsDir() {
			writeProblem(w, r, newProblem(http.StatusNotFound, "", "No resource at "+r.URL.Path+"."))
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		files.ServeHTTP(w, r)
	}
	s.mux.HandleFunc("GET /docs", serve)
	s.mux.HandleFunc("GET /docs/", serve)
}
