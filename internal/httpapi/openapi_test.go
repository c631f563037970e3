package httpapi

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// oasSchemas are the OpenAPI 3.1 JSON Schemas in testdata, by $id.
var oasSchemas = map[string]string{
	"https://spec.openapis.org/oas/3.1/schema/2021-04-15": "testdata/oas3.1/schema.json",
	"https://spec.openapis.org/oas/3.1/meta/base":         "testdata/oas3.1/meta/base.schema.json",
	"https://spec.openapis.org/oas/3.1/dialect/base":      "testdata/oas3.1/dialect/base.schema.json",
}

// offline refuses to load anything: every schema must come from testdata
// or the library's embedded meta-schemas.
type offline struct{}

func (offline) Load(url string) (any, error) {
	return nil, fmt.Errorf("refusing to fetch %s: schemas must be registered from testdata", url)
}

func oasCompiler(t *testing.T) *jsonschema.Compiler {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.UseLoader(offline{})
	for id, path := range oasSchemas {
		f, err := os.Open(filepath.FromSlash(path))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := c.AddResource(id, doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return c
}

// openAPIDoc fetches /openapi.json and returns it raw and decoded.
func openAPIDoc(t *testing.T, e *testEnv) ([]byte, map[string]any) {
	t.Helper()
	r := e.request(t, http.MethodGet, "/openapi.json", "", nil)
	expectStatus(t, r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/") || !strings.Contains(ct, "json") {
		t.Fatalf("Content-Type: got %q, want JSON", ct)
	}
	var doc map[string]any
	r.decode(t, &doc)
	return r.body, doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	e := newTestEnv(t, envOptions{publicURL: "https://cp.example.com"}).serve(t)
	raw, doc := openAPIDoc(t, e)

	c := oasCompiler(t)
	sch, err := c.Compile("https://spec.openapis.org/oas/3.1/schema/2021-04-15")
	if err != nil {
		t.Fatalf("compile the OpenAPI 3.1 schema: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("/openapi.json is not a valid OpenAPI 3.1 document:\n%v", err)
	}

	// schema.json checks Schema Objects only for their type; check each
	// component schema against the OpenAPI 3.1 dialect as well.
	dialect, err := c.Compile("https://spec.openapis.org/oas/3.1/dialect/base")
	if err != nil {
		t.Fatalf("compile the OpenAPI 3.1 dialect: %v", err)
	}
	schemas := obj(inst, "components", "schemas")
	if len(schemas) == 0 {
		t.Fatal("no component schemas")
	}
	for name, s := range schemas {
		if err := dialect.Validate(s); err != nil {
			t.Fatalf("component schema %s is not a valid schema: %v", name, err)
		}
	}

	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi: got %q, want 3.1.x", v)
	}
	if got, want := str(doc, "info", "title"), "Capstan API"; got != want {
		t.Fatalf("info.title: got %q, want %q", got, want)
	}
	if got, want := str(doc, "info", "version"), "test"; got != want {
		t.Fatalf("info.version: got %q, want %q", got, want)
	}
	servers, _ := doc["servers"].([]any)
	if len(servers) != 1 || str(servers[0], "url") != "https://cp.example.com" {
		t.Fatalf("servers: got %v, want the public URL", doc["servers"])
	}
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, doc := openAPIDoc(t, e)

	if got, want := str(doc, "components", "securitySchemes", "bearer", "type"), "http"; got != want {
		t.Fatalf("bearer scheme type: got %q, want %q", got, want)
	}
	if got, want := str(doc, "components", "securitySchemes", "bearer", "scheme"), "bearer"; got != want {
		t.Fatalf("bearer scheme: got %q, want %q", got, want)
	}
	for _, d := range []string{str(doc, "components", "securitySchemes", "bearer", "description"), str(doc, "info", "description")} {
		if !strings.Contains(d, roleModel) {
			t.Fatalf("description %q does not state the role model", d)
		}
	}
	if got, want := str(doc, "info", "license", "identifier"), "Apache-2.0"; got != want {
		t.Fatalf("info.license.identifier: got %q, want %q", got, want)
	}
	problem := obj(doc, "components", "schemas", "Problem", "properties")
	for _, f := range []string{"type", "title", "status", "detail", "instance", "request_id", "errors"} {
		if _, ok := problem[f]; !ok {
			t.Fatalf("the Problem schema lacks %q", f)
		}
	}

	routes := e.srv.Routes()
	if len(routes) == 0 {
		t.Fatal("no routes")
	}
	access := map[string]Access{}
	for _, r := range routes {
		access[strings.ToLower(r.Method)+" "+r.Path] = r.Access
	}
	paths := obj(doc, "paths")
	for _, r := range routes {
		if obj(paths, r.Path, strings.ToLower(r.Method)) == nil {
			t.Fatalf("route %s %s is not in the document", r.Method, r.Path)
		}
	}

	ids := map[string]string{}
	for path, item := range paths {
		for method, o := range item.(map[string]any) {
			name := strings.ToUpper(method) + " " + path
			a, registered := access[method+" "+path]
			if !registered {
				t.Fatalf("%s is documented but not in Routes(): register it with op", name)
			}
			id := str(o, "operationId")
			if id == "" || str(o, "summary") == "" {
				t.Fatalf("%s lacks an operationId or a summary", name)
			}
			if prev, dup := ids[id]; dup {
				t.Fatalf("operationId %s is used by %s and %s", id, prev, name)
			}
			ids[id] = name

			// Security: exactly the bearer scheme on non-public operations,
			// and an explicit empty list on public ones.
			rawSec, declared := o.(map[string]any)["security"]
			sec, _ := rawSec.([]any)
			if a == Public {
				if !declared || sec == nil || len(sec) != 0 {
					t.Fatalf("%s is public but declares security %v (present %v), want an explicit []", name, rawSec, declared)
				}
			} else if req, _ := first(sec).(map[string]any); len(sec) != 1 || len(req) != 1 || req["bearer"] == nil {
				t.Fatalf("%s needs a token but declares security %v, want [{bearer: []}]", name, sec)
			}

			// Who may call it is said in its description.
			who := accessNote[a]
			if a != Public && a != Agent {
				who += " " + policyFor(strings.ToUpper(method), path, a).note()
			}
			if d := str(o, "description"); !strings.HasSuffix(d, who) {
				t.Fatalf("%s: description %q does not end with who may call it (%q)", name, d, who)
			}

			// Error responses: all as problems, and the ones every
			// operation of its kind can give.
			responses := obj(o, "responses")
			var errs []int
			for code, resp := range responses {
				if code == "default" {
					t.Fatalf("%s has a default response; list its errors instead", name)
				}
				n, err := strconv.Atoi(code)
				if err != nil {
					t.Fatalf("%s: response code %q", name, code)
				}
				if n < 400 {
					continue
				}
				errs = append(errs, n)
				content := obj(resp, "content")
				if len(content) != 1 || obj(content, "application/problem+json", "schema") == nil {
					t.Fatalf("%s: response %d content: got %v, want only application/problem+json", name, n, keys(content))
				}
				if ref := str(content, "application/problem+json", "schema", "$ref"); ref != "#/components/schemas/Problem" {
					t.Fatalf("%s: response %d schema: got %q, want the Problem schema", name, n, ref)
				}
			}
			want := []int{http.StatusInternalServerError}
			if a != Public {
				want = append(want, http.StatusUnauthorized)
			}
			if a == Admin {
				want = append(want, http.StatusForbidden)
			}
			if obj(o, "requestBody") != nil && obj(o, "requestBody", "content", "application/json") != nil {
				want = append(want, http.StatusBadRequest, http.StatusRequestEntityTooLarge,
					http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity)
			}
			if params, _ := o.(map[string]any)["parameters"].([]any); len(params) > 0 {
				want = append(want, http.StatusUnprocessableEntity)
			}
			for _, w := range want {
				if !slices.Contains(errs, w) {
					t.Fatalf("%s lists errors %v, lacks %d", name, errs, w)
				}
			}
		}
	}
}

func TestDocsUI(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	for _, path := range []string{"/docs", "/docs/"} {
		r := e.request(t, http.MethodGet, path, "", nil)
		expectStatus(t, r, http.StatusOK)
		if got, want := r.header.Get("Content-Type"), "text/html; charset=utf-8"; got != want {
			t.Fatalf("%s Content-Type: got %q, want %q", path, got, want)
		}
		csp := r.header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Fatalf("%s Content-Security-Policy %q lacks %q", path, csp, d)
			}
		}
		if strings.Contains(csp, "unsafe-eval") || strings.Contains(strings.Split(csp, "script-src")[1], "unsafe-inline;") {
			t.Fatalf("%s Content-Security-Policy allows unsafe scripts: %q", path, csp)
		}
		if regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).Match(r.body) {
			t.Fatalf("%s loads something from another origin:\n%s", path, r.body)
		}
		if bytes.Contains(r.body, []byte("<script>")) {
			t.Fatalf("%s has an inline script, which the CSP blocks", path)
		}
	}

	page := e.request(t, http.MethodGet, "/docs", "", nil)
	var assets []string
	for _, m := range regexp.MustCompile(`(?:src|href)="(/docs/[^"]+)"`).FindAllSubmatch(page.body, -1) {
		assets = append(assets, string(m[1]))
	}
	for _, want := range []string{"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/docs/init.js"} {
		if !slices.Contains(assets, want) {
			t.Fatalf("/docs does not reference %s; it references %v", want, assets)
		}
	}
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".png": "image/png"}
	for _, a := range assets {
		r := e.request(t, http.MethodGet, a, "", nil)
		expectStatus(t, r, http.StatusOK)
		embedded, err := fs.ReadFile(docsUI, "docsui/"+strings.TrimPrefix(a, "/docs/"))
		if err != nil {
			t.Fatalf("%s is not embedded: %v", a, err)
		}
		if len(r.body) == 0 || !bytes.Equal(r.body, embedded) {
			t.Fatalf("%s: body (%d bytes) differs from the embedded file (%d bytes)", a, len(r.body), len(embedded))
		}
		if got, want := r.header.Get("Content-Type"), types[filepath.Ext(a)]; got != want {
			t.Fatalf("%s Content-Type: got %q, want %q", a, got, want)
		}
		if r.header.Get("Content-Security-Policy") == "" {
			t.Fatalf("%s has no Content-Security-Policy", a)
		}
	}
	init := e.request(t, http.MethodGet, "/docs/init.js", "", nil)
	if !bytes.Contains(init.body, []byte(`"/openapi.json"`)) {
		t.Fatalf("init.js does not load /openapi.json:\n%s", init.body)
	}

	for _, path := range []string{"/docs/nope.js", "/docs/../server.go", "/docs/docsui"} {
		r := e.request(t, http.MethodGet, path, "", nil)
		if r.status == http.StatusOK {
			t.Fatalf("GET %s: got 200, want an error", path)
		}
	}
	expectProblem(t, e.request(t, http.MethodGet, "/docs/nope.js", "", nil), http.StatusNotFound, "not-found")
}

// obj walks v through nested objects by key; nil if any step is missing.
func obj(v any, path ...string) map[string]any {
	for _, k := range path {
		m, _ := v.(map[string]any)
		if m == nil {
			return nil
		}
		v = m[k]
	}
	m, _ := v.(map[string]any)
	return m
}

// str walks v like obj and returns the string at the end, or "".
func str(v any, path ...string) string {
	if len(path) == 0 {
		s, _ := v.(string)
		return s
	}
	m := obj(v, path[:len(path)-1]...)
	s, _ := m[path[len(path)-1]].(string)
	return s
}

func first(xs []any) any {
	if len(xs) == 0 {
		return nil
	}
	return xs[0]
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIClosedSetsHaveEnums checks that a request field whose echo
// in the operation's response is a closed set (an enum) declares that
// set too, so that generated clients and validators see the allowed
// values before the server refuses one. Nested objects and arrays are
// compared field by field.
func TestOpenAPIClosedSetsHaveEnums(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	_, doc := openAPIDoc(t, e)

	resolve := func(s map[string]any) map[string]any {
		for i := 0; s != nil && i < 8; i++ {
			ref, _ := s["$ref"].(string)
			if ref == "" {
				return s
			}
			s = obj(doc, "components", "schemas", strings.TrimPrefix(ref, "#/components/schemas/"))
		}
		return s
	}
	hasEnum := func(s map[string]any) bool {
		if _, ok := s["enum"]; ok {
			return true
		}
		items := resolve(obj(s, "items"))
		_, ok := items["enum"]
		return ok
	}
	var problems []string
	var compare func(where string, req, resp map[string]any, depth int)
	compare = func(where string, req, resp map[string]any, depth int) {
		req, resp = resolve(req), resolve(resp)
		if req == nil || resp == nil || depth > 6 {
			return
		}
		if items := obj(req, "items"); items != nil {
			compare(where+"[]", items, obj(resp, "items"), depth+1)
		}
		rprops := obj(resp, "properties")
		for name, p := range obj(req, "properties") {
			pm, _ := p.(map[string]any)
			rp := resolve(obj(rprops, name))
			pm = resolve(pm)
			if rp == nil || pm == nil {
				continue
			}
			if hasEnum(rp) && !hasEnum(pm) {
				problems = append(problems, fmt.Sprintf("%s.%s: the response's %s is an enum, the request's is not", where, name, name))
			}
			compare(where+"."+name, pm, rp, depth+1)
		}
	}
	checked := 0
	for path, item := range obj(doc, "paths") {
		ops, _ := item.(map[string]any)
		for method, op := range ops {
			req := obj(op, "requestBody", "content", "application/json", "schema")
			if req == nil {
				continue
			}
			for code, resp := range obj(op, "responses") {
				if !strings.HasPrefix(code, "2") {
					continue
				}
				if rs := obj(resp, "content", "application/json", "schema"); rs != nil {
					checked++
					compare(strings.ToUpper(method)+" "+path, req, rs, 0)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("compared %d request bodies with their responses; the document has more", checked)
	}
	slices.Sort(problems)
	for _, p := range problems {
		t.Error(p)
	}
}
