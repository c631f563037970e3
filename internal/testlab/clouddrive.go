package testlab

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// CloudDrive is a stand-in for Google's OAuth 2.0 endpoints and the parts
// of the Drive v3 REST API a backup store uses, served over HTTPS on
// 127.0.0.1 with a certificate of a CA the test made:
//
//   - GET /o/oauth2/v2/auth, the consent page, which consents at once and
//     redirects to the redirect URI with a code and the state (or with
//     error=access_denied after Deny);
//   - POST /token: grant_type authorization_code (client credentials in
//     the body or by Basic auth, the PKCE S256 verifier checked against
//     the challenge, the redirect URI against the authorization's; a
//     code works once) and refresh_token;
//   - POST /revoke: revokes a refresh token's grant with its access tokens;
//   - GET /drive/v3/about, files list (q with "in parents", "name =",
//     "mimeType =", "trashed = false"; pageSize and pageToken), files get
//     (alt=media for the content), create (metadata only), delete;
//   - resumable uploads: POST /upload/drive/v3/files and PATCH
//     /upload/drive/v3/files/{id} with uploadType=resumable open a session
//     (its URI in Location); PUTs to it with Content-Range send chunks
//     (each but the last a multiple of 256 KiB, starting where the
//     received bytes end), answered 308 with Range until the last, which
//     answers 200 with the file; a PUT of "bytes */N" asks how much
//     arrived. The session URI is its own authorization: its PUTs need
//     no token.
//
// Answers have the shapes of Google's documentation: token responses as
// RFC 6749 with expires_in; Drive errors {"error":{"code","message",
// "errors":[{"domain","reason","message"}]}}; files with kind "drive#file"
// and size as a string.
type CloudDrive struct {
	// URL is the base of every endpoint (https://127.0.0.1:PORT); the
	// control plane's auth, token, revoke and API URLs are derived from it.
	URL string
	// CA signed the server's certificate; CAFile holds it in PEM, for
	// SSL_CERT_FILE.
	CA     *TestCA
	CAFile string
	// Client trusts CA and does not follow redirects.
	Client *http.Client
	// ClientID and ClientSecret are the OAuth client's credentials.
	ClientID, ClientSecret string
	// Email is the signed-in account's address.
	Email string

	mu          sync.Mutex // guards what follows
	codes       map[string]*driveCode
	grants      map[string]*driveGrant // refresh token → grant
	access      map[string]driveAccess // access token → grant
	files       map[string]*driveFile
	sessions    map[string]*driveSession
	nextID      int
	tokenTTL    time.Duration
	deny        bool
	revokeFail  int // answer this status to revocations; 0: none
	dropAt      int64
	drops       int
	revocations int
	lastAuth    url.Values
	requests    []string
	tokenless   []string // the requests that carried no Authorization
}

type driveCode struct {
	challenge, redirectURI, scope string
	used                          bool
}

type driveGrant struct {
	refresh string
	scope   string
	revoked bool
}

type driveAccess struct {
	grant   *driveGrant
	expires time.Time
}

type driveFile struct {
	id, name, mimeType string
	parents            []string
	content            []byte
	created, modified  time.Time
}

type driveSession struct {
	fileID   string // "" creates a file
	name     string
	parents  []string
	mimeType string
	total    int64 // -1 until known
	data     []byte
}

// StartCloudDrive starts the stand-in on a loopback port; it stops when
// the test ends.
func StartCloudDrive(t testing.TB) *CloudDrive {
	t.Helper()
	hs := newHTTPSStandIn(t, "clouddrive")
	d := &CloudDrive{
		URL: "https://" + hs.Addr(), CA: hs.CA, CAFile: hs.CAFile, Client: hs.Client(),
		ClientID: fmt.Sprintf("%012d-%s.apps.googleusercontent.com", time.Now().UnixNano()%1e12, strings.ToLower(hex.EncodeToString([]byte(randomToken(6))))), ClientSecret: "GOCSPX-" + randomToken(18),
		Email: "backups@example.com", codes: map[string]*driveCode{}, grants: map[string]*driveGrant{},
		access: map[string]driveAccess{}, files: map[string]*driveFile{}, sessions: map[string]*driveSession{},
		tokenTTL: time.Hour,
	}
	hs.Serve(t, d)
	return d
}

// Endpoints of the stand-in.
func (d *CloudDrive) AuthURL() string   { return d.URL + "/o/oauth2/v2/auth" }
func (d *CloudDrive) TokenURL() string  { return d.URL + "/token" }
func (d *CloudDrive) RevokeURL() string { return d.URL + "/revoke" }

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Deny makes the consent page decline (error=access_denied) while on.
func (d *CloudDrive) Deny(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deny = on
}

// FailRevocations makes revocations answer status (0: answer normally).
func (d *CloudDrive) FailRevocations(status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.revokeFail = status
}

// SetTokenTTL sets the lifetime of access tokens issued from now on.
func (d *CloudDrive) SetTokenTTL(ttl time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tokenTTL = ttl
}

// DropUploadAt makes the connection of the upload request that carries
// the byte at offset n of its session drop in the middle, once: the bytes
// before n that complete a multiple of 256 KiB of the session are kept, as
// Google keeps what it had persisted.
func (d *CloudDrive) DropUploadAt(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropAt = n
}

// Drops is how many upload connections were dropped.
func (d *CloudDrive) Drops() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drops
}

// Revocations is how many grants were revoked.
func (d *CloudDrive) Revocations() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.revocations
}

// LiveGrants is how many grants are not revoked.
func (d *CloudDrive) LiveGrants() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, g := range d.grants {
		if !g.revoked {
			n++
		}
	}
	return n
}

// RefreshTokens returns every refresh token issued, for tests that search
// answers and logs for them.
func (d *CloudDrive) RefreshTokens() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for r := range d.grants {
		out = append(out, r)
	}
	return out
}

// LastAuthorization returns the query of the last consent page request.
func (d *CloudDrive) LastAuthorization() url.Values {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastAuth
}

// TokenlessRequests returns "METHOD /path" of every request so far that
// carried no Authorization header (an upload session's chunks, from
// whoever holds its URI).
func (d *CloudDrive) TokenlessRequests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.tokenless...)
}

// Requests returns "METHOD /path" of every request so far.
func (d *CloudDrive) Requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.requests...)
}

// AccessToken issues an access token of a new grant directly, for tests of
// a Drive client that need no sign-in.
func (d *CloudDrive) AccessToken() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := &driveGrant{refresh: "1//" + randomToken(24), scope: "https://www.googleapis.com/auth/drive.file"}
	d.grants[g.refresh] = g
	return d.issueLocked(g)
}

// FileContent returns the content of the file named name in folder
// parent, or ok false.
func (d *CloudDrive) FileContent(parent, name string) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.files {
		if f.name == name && len(f.parents) == 1 && f.parents[0] == parent {
			return append([]byte(nil), f.content...), true
		}
	}
	return nil, false
}

// CorruptFile replaces the content of the file named name in folder
// parent, keeping its recorded size and checksum as the content's new
// ones (as Drive would).
func (d *CloudDrive) CorruptFile(parent, name string, content []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.files {
		if f.name == name && len(f.parents) == 1 && f.parents[0] == parent {
			f.content = append([]byte(nil), content...)
			return true
		}
	}
	return false
}

func (d *CloudDrive) issueLocked(g *driveGrant) string {
	tok := "ya29." + randomToken(32)
	d.access[tok] = driveAccess{grant: g, expires: time.Now().Add(d.tokenTTL)}
	return tok
}

// ServeHTTP routes the stand-in's endpoints.
func (d *CloudDrive) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.requests = append(d.requests, r.Method+" "+r.URL.Path)
	if r.Header.Get("Authorization") == "" {
		d.tokenless = append(d.tokenless, r.Method+" "+r.URL.Path)
	}
	d.mu.Unlock()
	p := r.URL.Path
	switch {
	case p == "/o/oauth2/v2/auth" && r.Method == http.MethodGet:
		d.authorize(w, r)
	case p == "/token" && r.Method == http.MethodPost:
		d.token(w, r)
	case p == "/revoke" && r.Method == http.MethodPost:
		d.revoke(w, r)
	case strings.HasPrefix(p, "/upload/drive/v3/files") && r.Method == http.MethodPut && r.URL.Query().Has("upload_id"):
		// A session URI carries its own authorization, as Google's do:
		// whoever holds it may send the content of that one upload.
		d.uploadChunk(w, r)
	case strings.HasPrefix(p, "/drive/v3/") || strings.HasPrefix(p, "/upload/drive/v3/"):
		if !d.authorized(w, r) {
			return
		}
		d.drive(w, r)
	default:
		driveError(w, http.StatusNotFound, "notFound", "Not Found")
	}
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc}) //nolint:errcheck // a test server
}

func driveError(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{ //nolint:errcheck // a test server
		"code": status, "message": msg,
		"errors": []map[string]string{{"domain": "global", "reason": reason, "message": msg}},
	}})
}

func writeDrive(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // a test server
}

func (d *CloudDrive) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastAuth = q
	switch {
	case q.Get("client_id") != d.ClientID:
		http.Error(w, "Error 401: invalid_client. The OAuth client was not found.", http.StatusUnauthorized)
		return
	case q.Get("response_type") != "code":
		http.Error(w, "Error 400: invalid_request. response_type must be code", http.StatusBadRequest)
		return
	case q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43:
		http.Error(w, "Error 400: invalid_request. code_challenge_method S256 with a code_challenge is required", http.StatusBadRequest)
		return
	case q.Get("redirect_uri") == "":
		http.Error(w, "Error 400: redirect_uri_mismatch", http.StatusBadRequest)
		return
	}
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "Error 400: redirect_uri_mismatch", http.StatusBadRequest)
		return
	}
	v := url.Values{}
	if q.Has("state") {
		v.Set("state", q.Get("state"))
	}
	if d.deny {
		v.Set("error", "access_denied")
	} else {
		code := "4/0A" + randomToken(32)
		d.codes[code] = &driveCode{challenge: q.Get("code_challenge"), redirectURI: q.Get("redirect_uri"), scope: q.Get("scope")}
		v.Set("code", code)
		v.Set("scope", q.Get("scope"))
	}
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// clientOK checks the client's credentials, in the body or by Basic auth.
func (d *CloudDrive) clientOK(r *http.Request) bool {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	return id == d.ClientID && subtle.ConstantTimeCompare([]byte(secret), []byte(d.ClientSecret)) == 1
}

func (d *CloudDrive) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "malformed body")
		return
	}
	if !d.clientOK(r) {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "Unauthorized")
		return
	}
	f := r.PostForm
	d.mu.Lock()
	defer d.mu.Unlock()
	switch f.Get("grant_type") {
	case "authorization_code":
		c := d.codes[f.Get("code")]
		if c == nil || c.used {
			oauthError(w, http.StatusBadRequest, "invalid_grant", "Malformed auth code.")
			return
		}
		c.used = true
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if f.Get("code_verifier") == "" || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
			oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid code verifier.")
			return
		}
		if f.Get("redirect_uri") != c.redirectURI {
			oauthError(w, http.StatusBadRequest, "redirect_uri_mismatch", "Bad Request")
			return
		}
		g := &driveGrant{refresh: "1//" + randomToken(40), scope: c.scope}
		d.grants[g.refresh] = g
		writeDrive(w, http.StatusOK, map[string]any{"access_token": d.issueLocked(g), "expires_in": int(d.tokenTTL.Seconds()),
			"refresh_token": g.refresh, "scope": g.scope, "token_type": "Bearer"})
	case "refresh_token":
		g := d.grants[f.Get("refresh_token")]
		if g == nil || g.revoked {
			oauthError(w, http.StatusBadRequest, "invalid_grant", "Token has been expired or revoked.")
			return
		}
		writeDrive(w, http.StatusOK, map[string]any{"access_token": d.issueLocked(g), "expires_in": int(d.tokenTTL.Seconds()),
			"scope": g.scope, "token_type": "Bearer"})
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+f.Get("grant_type"))
	}
}

func (d *CloudDrive) revoke(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "malformed body")
		return
	}
	tok := r.PostForm.Get("token")
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.revokeFail != 0 {
		oauthError(w, d.revokeFail, "internal_failure", "Backend Error")
		return
	}
	g := d.grants[tok]
	if g == nil {
		if a, ok := d.access[tok]; ok {
			g = a.grant
		}
	}
	if g == nil || g.revoked {
		oauthError(w, http.StatusBadRequest, "invalid_token", "Token expired or revoked")
		return
	}
	g.revoked = true
	d.revocations++
	writeDrive(w, http.StatusOK, map[string]any{})
}

func (d *CloudDrive) authorized(w http.ResponseWriter, r *http.Request) bool {
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	d.mu.Lock()
	a, ok := d.access[tok]
	d.mu.Unlock()
	if !strings.EqualFold(scheme, "Bearer") || !ok || a.grant.revoked || time.Now().After(a.expires) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
		driveError(w, http.StatusUnauthorized, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, "+
			"login cookie or other valid authentication credential.")
		return false
	}
	return true
}

const folderMime = "application/vnd.google-apps.folder"

func (f *driveFile) json() map[string]any {
	m := map[string]any{"kind": "drive#file", "id": f.id, "name": f.name, "mimeType": f.mimeType, "parents": f.parents,
		"createdTime": f.created.Format(time.RFC3339Nano), "modifiedTime": f.modified.Format(time.RFC3339Nano), "trashed": false}
	if f.mimeType != folderMime {
		s := sha256.Sum256(f.content)
		m5 := md5.Sum(f.content)
		m["size"] = strconv.Itoa(len(f.content))
		m["sha256Checksum"] = hex.EncodeToString(s[:])
		m["md5Checksum"] = hex.EncodeToString(m5[:])
	}
	return m
}

func (d *CloudDrive) newIDLocked() string {
	d.nextID++
	return fmt.Sprintf("1%s%05d", randomToken(12), d.nextID)
}

func (d *CloudDrive) drive(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/drive/v3/about" && r.Method == http.MethodGet:
		writeDrive(w, http.StatusOK, map[string]any{"kind": "drive#about",
			"user": map[string]any{"kind": "drive#user", "displayName": "Backups", "emailAddress": d.Email, "me": true}})
	case p == "/drive/v3/files" && r.Method == http.MethodGet:
		d.list(w, r)
	case p == "/drive/v3/files" && r.Method == http.MethodPost:
		d.create(w, r)
	case strings.HasPrefix(p, "/drive/v3/files/") && r.Method == http.MethodGet:
		d.get(w, r, strings.TrimPrefix(p, "/drive/v3/files/"))
	case strings.HasPrefix(p, "/drive/v3/files/") && r.Method == http.MethodDelete:
		d.mu.Lock()
		_, ok := d.files[strings.TrimPrefix(p, "/drive/v3/files/")]
		delete(d.files, strings.TrimPrefix(p, "/drive/v3/files/"))
		d.mu.Unlock()
		if !ok {
			driveError(w, http.StatusNotFound, "notFound", "File not found: "+strings.TrimPrefix(p, "/drive/v3/files/")+".")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case p == "/upload/drive/v3/files" && r.Method == http.MethodPost && !r.URL.Query().Has("upload_id"):
		d.startUpload(w, r, "")
	case strings.HasPrefix(p, "/upload/drive/v3/files/") && r.Method == http.MethodPatch && !r.URL.Query().Has("upload_id"):
		d.startUpload(w, r, strings.TrimPrefix(p, "/upload/drive/v3/files/"))
	default:
		driveError(w, http.StatusNotFound, "notFound", "Not Found")
	}
}

var (
	qParent = regexp.MustCompile(`^'((?:[^'\\]|\\.)*)' in parents$`)
	qEquals = regexp.MustCompile(`^(name|mimeType) = '((?:[^'\\]|\\.)*)'$`)
)

func unquote(s string) string {
	return strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(s)
}

// matcher compiles the subset of Drive's query language the stand-in
// knows: terms joined by " and ".
func matcher(q string) (func(*driveFile) bool, error) {
	var conds []func(*driveFile) bool
	if strings.TrimSpace(q) == "" {
		return func(*driveFile) bool { return true }, nil
	}
	for _, term := range strings.Split(q, " and ") {
		term = strings.TrimSpace(term)
		if m := qParent.FindStringSubmatch(term); m != nil {
			parent := unquote(m[1])
			conds = append(conds, func(f *driveFile) bool {
				for _, p := range f.parents {
					if p == parent {
						return true
					}
				}
				return false
			})
		} else if m := qEquals.FindStringSubmatch(term); m != nil {
			field, v := m[1], unquote(m[2])
			conds = append(conds, func(f *driveFile) bool {
				if field == "name" {
					return f.name == v
				}
				return f.mimeType == v
			})
		} else if term == "trashed = false" {
			continue
		} else {
			return nil, fmt.Errorf("invalid value")
		}
	}
	return func(f *driveFile) bool {
		for _, c := range conds {
			if !c(f) {
				return false
			}
		}
		return true
	}, nil
}

func (d *CloudDrive) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	match, err := matcher(q.Get("q"))
	if err != nil {
		driveError(w, http.StatusBadRequest, "invalid", "Invalid Value")
		return
	}
	size := 100
	if v := q.Get("pageSize"); v != "" {
		if size, err = strconv.Atoi(v); err != nil || size < 1 || size > 1000 {
			driveError(w, http.StatusBadRequest, "invalid", "Invalid value for pageSize")
			return
		}
	}
	start := 0
	if v := q.Get("pageToken"); v != "" {
		if start, err = strconv.Atoi(v); err != nil || start < 0 {
			driveError(w, http.StatusBadRequest, "invalid", "Invalid Value")
			return
		}
	}
	d.mu.Lock()
	var all []*driveFile
	for _, f := range d.files {
		if match(f) {
			all = append(all, f)
		}
	}
	d.mu.Unlock()
	switch q.Get("orderBy") {
	case "", "name":
		sort.Slice(all, func(i, j int) bool {
			return all[i].name < all[j].name || all[i].name == all[j].name && all[i].id < all[j].id
		})
	case "createdTime":
		sort.Slice(all, func(i, j int) bool { return all[i].created.Before(all[j].created) })
	case "modifiedTime desc":
		sort.Slice(all, func(i, j int) bool { return all[i].modified.After(all[j].modified) })
	default:
		driveError(w, http.StatusBadRequest, "invalid", "Invalid Value")
		return
	}
	out := map[string]any{"kind": "drive#fileList", "incompleteSearch": false}
	files := []map[string]any{}
	d.mu.Lock()
	for i := start; i < len(all) && i < start+size; i++ {
		files = append(files, all[i].json())
	}
	d.mu.Unlock()
	if start+size < len(all) {
		out["nextPageToken"] = strconv.Itoa(start + size)
	}
	out["files"] = files
	writeDrive(w, http.StatusOK, out)
}

func (d *CloudDrive) get(w http.ResponseWriter, r *http.Request, id string) {
	d.mu.Lock()
	f := d.files[id]
	var body []byte
	var meta map[string]any
	if f != nil {
		body, meta = f.content, f.json()
	}
	d.mu.Unlock()
	if f == nil {
		driveError(w, http.StatusNotFound, "notFound", "File not found: "+id+".")
		return
	}
	if r.URL.Query().Get("alt") == "media" {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body) //nolint:errcheck // a test server
		return
	}
	writeDrive(w, http.StatusOK, meta)
}

type driveMeta struct {
	Name     string   `json:"name"`
	MimeType string   `json:"mimeType"`
	Parents  []string `json:"parents"`
}

func readMeta(r *http.Request) (driveMeta, error) {
	var m driveMeta
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return m, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return m, nil
	}
	return m, json.Unmarshal(body, &m)
}

func (d *CloudDrive) create(w http.ResponseWriter, r *http.Request) {
	m, err := readMeta(r)
	if err != nil || m.Name == "" {
		driveError(w, http.StatusBadRequest, "invalid", "Invalid metadata")
		return
	}
	if m.MimeType == "" {
		m.MimeType = "application/octet-stream"
	}
	if len(m.Parents) == 0 {
		m.Parents = []string{"root"}
	}
	now := time.Now().UTC()
	d.mu.Lock()
	f := &driveFile{id: d.newIDLocked(), name: m.Name, mimeType: m.MimeType, parents: m.Parents, created: now, modified: now}
	d.files[f.id] = f
	meta := f.json()
	d.mu.Unlock()
	writeDrive(w, http.StatusOK, meta)
}

func (d *CloudDrive) startUpload(w http.ResponseWriter, r *http.Request, fileID string) {
	if r.URL.Query().Get("uploadType") != "resumable" {
		driveError(w, http.StatusBadRequest, "invalid", "uploadType must be resumable here")
		return
	}
	m, err := readMeta(r)
	if err != nil {
		driveError(w, http.StatusBadRequest, "parseError", "Parse Error")
		return
	}
	total := int64(-1)
	if v := r.Header.Get("X-Upload-Content-Length"); v != "" {
		if total, err = strconv.ParseInt(v, 10, 64); err != nil || total < 0 {
			driveError(w, http.StatusBadRequest, "invalid", "Invalid X-Upload-Content-Length")
			return
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if fileID != "" {
		if d.files[fileID] == nil {
			driveError(w, http.StatusNotFound, "notFound", "File not found: "+fileID+".")
			return
		}
	} else if m.Name == "" {
		m.Name = "Untitled"
	}
	id := randomToken(24)
	mime := r.Header.Get("X-Upload-Content-Type")
	if mime == "" {
		mime = "application/octet-stream"
	}
	d.sessions[id] = &driveSession{fileID: fileID, name: m.Name, parents: m.Parents, mimeType: mime, total: total}
	path := "/upload/drive/v3/files"
	if fileID != "" {
		path += "/" + fileID
	}
	w.Header().Set("Location", d.URL+path+"?uploadType=resumable&upload_id="+id)
	w.Header().Set("X-GUploader-UploadID", id)
	w.WriteHeader(http.StatusOK)
}

var contentRange = regexp.MustCompile(`^bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)$`)

const chunkUnit = 256 << 10

func (d *CloudDrive) uploadChunk(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("upload_id")
	d.mu.Lock()
	s := d.sessions[id]
	d.mu.Unlock()
	if s == nil {
		driveError(w, http.StatusNotFound, "notFound", "No such upload session.")
		return
	}
	cr := r.Header.Get("Content-Range")
	m := contentRange.FindStringSubmatch(cr)
	if m == nil {
		driveError(w, http.StatusBadRequest, "badContent", "Invalid Content-Range: "+cr)
		return
	}
	total := int64(-1)
	if m[3] != "*" {
		total, _ = strconv.ParseInt(m[3], 10, 64)
	}
	d.mu.Lock()
	received := int64(len(s.data))
	if total >= 0 && s.total >= 0 && total != s.total {
		d.mu.Unlock()
		driveError(w, http.StatusBadRequest, "badContent", "Content-Range total differs from the upload's length")
		return
	}
	if total >= 0 {
		s.total = total
	}
	d.mu.Unlock()
	if m[1] == "" { // a status query
		io.Copy(io.Discard, r.Body) //nolint:errcheck // a test server
		d.answerUpload(w, s, id)
		return
	}
	first, _ := strconv.ParseInt(m[1], 10, 64)
	last, _ := strconv.ParseInt(m[2], 10, 64)
	n := last - first + 1
	final := total >= 0 && last+1 == total
	switch {
	case first != received:
		driveError(w, http.StatusBadRequest, "badContent", fmt.Sprintf("Content-Range starts at %d; %d bytes were received", first, received))
		return
	case n < 1 || r.ContentLength != n:
		driveError(w, http.StatusBadRequest, "badContent", "Content-Length does not match Content-Range")
		return
	case !final && n%chunkUnit != 0:
		driveError(w, http.StatusBadRequest, "badContent", "Chunk size must be a multiple of 256 KiB except for the last chunk")
		return
	case total >= 0 && last >= total:
		driveError(w, http.StatusBadRequest, "badContent", "Content-Range beyond the upload's length")
		return
	}
	d.mu.Lock()
	dropAt := d.dropAt
	d.mu.Unlock()
	if dropAt > first && dropAt <= last {
		// Read up to the drop point, keep what completes whole units, and
		// cut the connection in the middle of the request.
		part := make([]byte, dropAt-first)
		got, _ := io.ReadFull(r.Body, part)
		keep := (first+int64(got))/chunkUnit*chunkUnit - first
		d.mu.Lock()
		if keep > 0 {
			s.data = append(s.data, part[:keep]...)
		}
		d.dropAt = 0
		d.drops++
		d.mu.Unlock()
		panic(http.ErrAbortHandler)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, n+1))
	if err != nil || int64(len(body)) != n {
		driveError(w, http.StatusBadRequest, "badContent", "Incomplete chunk")
		return
	}
	d.mu.Lock()
	if int64(len(s.data)) != first {
		d.mu.Unlock()
		driveError(w, http.StatusBadRequest, "badContent", "Concurrent chunk")
		return
	}
	s.data = append(s.data, body...)
	d.mu.Unlock()
	d.answerUpload(w, s, id)
}

// answerUpload answers 308 with the received range, or, when every byte
// arrived, stores the file and answers it.
func (d *CloudDrive) answerUpload(w http.ResponseWriter, s *driveSession, id string) {
	d.mu.Lock()
	if s.total < 0 || int64(len(s.data)) < s.total {
		if len(s.data) > 0 {
			w.Header().Set("Range", fmt.Sprintf("bytes=0-%d", len(s.data)-1))
		}
		d.mu.Unlock()
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusPermanentRedirect)
		return
	}
	now := time.Now().UTC()
	f := d.files[s.fileID]
	if f == nil {
		parents := s.parents
		if len(parents) == 0 {
			parents = []string{"root"}
		}
		f = &driveFile{id: d.newIDLocked(), name: s.name, mimeType: s.mimeType, parents: parents, created: now}
		d.files[f.id] = f
		s.fileID = f.id
	}
	f.content, f.modified = s.data, now
	meta := f.json()
	d.mu.Unlock()
	writeDrive(w, http.StatusOK, meta)
}
