package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzRequestID is sent with every fuzz request, so that nothing random
// appears in responses.
const fuzzRequestID = "fuzz-request"

// FuzzAuthRequests sends arbitrary bodies (and refresh cookies) to the
// public sign-in endpoints. Whatever arrives, the answer is never a 5xx,
// every error is a well-formed problem whose status matches the response,
// and the password sent is never echoed.
//
// The server runs in-process on SQLite with a clock that stands still: once
// a few attempts have failed, the throttle answers further logins at once
// with 429 instead of spending ~30 ms on argon2id, so iterations stay fast
// and the run exercises decoding and validation, where the input matters.
func FuzzAuthRequests(f *testing.F) {
	e := newTestEnv(f, envOptions{})
	e.createUser(f, "fuzz@example.com", true)

	for _, body := range []string{
		`{"email":"fuzz@example.com","password":"` + testPassword + `"}`,
		`{"email":"fuzz@example.com","password":"wrong password, surely"}`,
		`{"email":"nobody@example.com","password":"hunter2hunter2"}`,
		`{"challenge_id":"chl_0123456789abcdefghjkmnpqrstvwxyz","code":"123456"}`,
		`{"challenge_id":"","code":"12345"}`,
		`{"email":"fuzz@example.com","password":"a secret value","remember":true}`,
		`{"email":"fuzz@example.com","password":"` + strings.Repeat("p", 1100) + `"}`,
		`{"email":"fuzz\u0000@example.com","password":"nul in the e-mail"}`,
		`{"email":1,"password":["x"]}`,
		`{"email":"fuzz@example.com","password":"x","password":"second value wins?"}`,
		`{"email":`,
		`{}`,
		`[]`,
		`null`,
		`"string"`,
		``,
		"\xff\xfe{}",
	} {
		f.Add([]byte(body), "crt_0123456789abcdefghjkmnpqrstvwxyz")
	}
	f.Add([]byte(`{}`), "")

	paths := []string{"/api/v1/auth/login", "/api/v1/auth/2fa/verify", "/api/v1/auth/refresh"}
	f.Fuzz(func(t *testing.T, body []byte, cookie string) {
		password := passwordOf(body)
		for _, path := range paths {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-ID", fuzzRequestID)
			req.AddCookie(&http.Cookie{Name: e.srv.cookie.prefix + refreshCookieBase, Value: cookie})
			rec := httptest.NewRecorder()
			e.srv.ServeHTTP(rec, req)
			checkFuzzResponse(t, path, rec, body, password)
		}
	})
}

func checkFuzzResponse(t *testing.T, path string, rec *httptest.ResponseRecorder, body []byte, password string) {
	t.Helper()
	status, resp := rec.Code, rec.Body.Bytes()
	if status >= 500 {
		t.Fatalf("POST %s: %d for body %q: %s", path, status, body, resp)
	}
	if status < 200 || (status >= 300 && status < 400) {
		t.Fatalf("POST %s: unexpected status %d", path, status)
	}
	if status >= 400 {
		if got, want := rec.Header().Get("Content-Type"), "application/problem+json"; got != want {
			t.Fatalf("POST %s: %d with Content-Type %q, want %q", path, status, got, want)
		}
		var p Problem
		dec := json.NewDecoder(bytes.NewReader(resp))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("POST %s: %d body is not a problem (%v): %s", path, status, err, resp)
		}
		if got, want := p.Status, status; got != want {
			t.Fatalf("POST %s: problem status %d in a %d response", path, got, want)
		}
		if !strings.HasPrefix(p.Type, ProblemTypeBase) || len(p.Type) == len(ProblemTypeBase) {
			t.Fatalf("POST %s: problem type %q", path, p.Type)
		}
		if got, want := p.Title, http.StatusText(status); got != want {
			t.Fatalf("POST %s: problem title: got %q, want %q", path, got, want)
		}
		if p.Detail == "" {
			t.Fatalf("POST %s: problem without detail: %s", path, resp)
		}
		if got, want := p.RequestID, fuzzRequestID; got != want {
			t.Fatalf("POST %s: problem request_id: got %q, want %q", path, got, want)
		}
		if got, want := p.Instance, path; got != want {
			t.Fatalf("POST %s: problem instance: got %q, want %q", path, got, want)
		}
	} else if !json.Valid(resp) {
		t.Fatalf("POST %s: %d body is not JSON: %s", path, status, resp)
	}
	if echoes(resp, body, password) {
		t.Fatalf("POST %s: the response echoes the password %q: %s", path, password, resp)
	}
}

// passwordOf returns the value of the body's top-level "password" field,
// if the body is a JSON object with a string there.
func passwordOf(body []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	var pw string
	if json.Unmarshal(m["password"], &pw) != nil {
		return ""
	}
	return pw
}

// echoes reports whether resp contains password. Short values, and values
// that appear in the request outside the password field (a key, the
// e-mail), are not telling: the response may rightly name those.
func echoes(resp, body []byte, password string) bool {
	if utf8.RuneCountInString(password) < 8 {
		return false
	}
	enc, _ := json.Marshal(password)
	rest := bytes.Replace(body, enc, nil, 1)
	if bytes.Contains(rest, []byte(password)) {
		return false
	}
	return bytes.Contains(resp, []byte(password)) || bytes.Contains(resp, enc[1:len(enc)-1])
}
