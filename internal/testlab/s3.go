package testlab

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an S3-protocol server on 127.0.0.1 over HTTPS, with a
// certificate of a CA the test made (or over plain HTTP: StartPlainS3). Objects live in memory (gofakes3).
// Every request must carry a valid AWS Signature Version 4 made with
// the server's access key and secret, as on AWS: a wrong key id answers
// 403 InvalidAccessKeyId, a wrong secret 403 SignatureDoesNotMatch. The
// signature is in the Authorization header or, for a presigned request,
// in the query (X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date,
// X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature, over an unsigned
// payload); a presigned request past its expiry answers 403
// AccessDenied. HeaderSigned and QuerySigned count the requests of each
// form that were served.
//
// A test can make it fail: uploads cut off mid-body (FailUploadsAfter),
// every request refused (SetUnavailable), an object's bytes altered in
// place (Corrupt).
type S3 struct {
	// Endpoint is host:port, as S3 clients take it.
	Endpoint string
	// Bucket exists from the start.
	Bucket          string
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	// CA signed the certificate; CAFile holds it in PEM (SSL_CERT_FILE).
	CA     *TestCA
	CAFile string

	https   *httpsStandIn
	backend *s3mem.Backend
	fake    http.Handler

	failAfter   atomic.Int64 // < 0: uploads are not cut off
	cutNext     atomic.Int64 // how many more uploads to cut off at once
	unavailable atomic.Bool
	cuts        atomic.Int64
	denied      atomic.Int64
	headerSeen  atomic.Int64
	querySeen   atomic.Int64
	skew        atomic.Int64 // how far the server's clock runs ahead, in ns

	mu       sync.Mutex // guards requests
	requests map[string]int
}

// StartS3 starts the server with its bucket.
func StartS3(t testing.TB) *S3 { return startS3(t, true) }

// StartPlainS3 starts the server with its bucket on plain HTTP, as an
// S3-compatible service on a private network often is; CA and CAFile
// are empty.
func StartPlainS3(t testing.TB) *S3 { return startS3(t, false) }

func startS3(t testing.TB, tls bool) *S3 {
	t.Helper()
	hs := newHTTPSStandIn(t, "s3")
	s := &S3{Endpoint: hs.Addr(), Bucket: "capstan-backups", Region: "us-east-1", AccessKeyID: "AK" + randomHex(9),
		SecretAccessKey: randomHex(20), https: hs, backend: s3mem.New(), requests: map[string]int{}}
	if tls {
		s.CA, s.CAFile = hs.CA, hs.CAFile
	}
	s.failAfter.Store(-1)
	if err := s.backend.CreateBucket(s.Bucket); err != nil {
		t.Fatal(err)
	}
	s.fake = gofakes3.New(s.backend, gofakes3.WithoutVersioning(), gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	if tls {
		hs.Serve(t, s)
	} else {
		hs.ServePlain(t, s)
	}
	return s
}

// FailUploadsAfter cuts every upload (a PUT with a body) off after n
// bytes of its body, closing the connection; n < 0 stops that.
func (s *S3) FailUploadsAfter(n int64) { s.failAfter.Store(n) }

// CutNextUploads cuts the next n uploads (PUTs with a body) off at their
// start, closing the connection; the ones after go through.
func (s *S3) CutNextUploads(n int64) { s.cutNext.Store(n) }

// Cuts is how many uploads were cut off.
func (s *S3) Cuts() int64 { return s.cuts.Load() }

// Denied is how many requests were refused for their signature.
func (s *S3) Denied() int64 { return s.denied.Load() }

// Client is an HTTP client that trusts the server's certificate, for
// tests that send it requests of their own (a presigned URL).
func (s *S3) Client() *http.Client { return s.https.Client() }

// HeaderSigned is how many requests signed in the Authorization header
// were served (a holder of the key pair made them).
func (s *S3) HeaderSigned() int64 { return s.headerSeen.Load() }

// QuerySigned is how many presigned requests were served.
func (s *S3) QuerySigned() int64 { return s.querySeen.Load() }

// Skew makes the server's clock run d ahead of the machine's, to expire
// presigned requests.
func (s *S3) Skew(d time.Duration) { s.skew.Store(int64(d)) }

func (s *S3) now() time.Time { return time.Now().Add(time.Duration(s.skew.Load())) }

// SetUnavailable makes every request answer 503 SlowDown (true) or be
// served again (false).
func (s *S3) SetUnavailable(v bool) { s.unavailable.Store(v) }

// Requests is how many requests of method (GET, PUT, DELETE, HEAD,
// POST) were served.
func (s *S3) Requests(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[method]
}

// Object returns the content of the bucket's object key, or nil when it
// does not exist.
func (s *S3) Object(t testing.TB, key string) []byte {
	t.Helper()
	o, err := s.backend.GetObject(s.Bucket, key, nil)
	if err != nil {
		if gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
			return nil
		}
		t.Fatal(err)
	}
	defer o.Contents.Close()
	b, err := io.ReadAll(o.Contents)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Put stores content as the object key, directly in the bucket.
func (s *S3) Put(t testing.TB, key string, content []byte) {
	t.Helper()
	if _, err := s.backend.PutObject(s.Bucket, key, map[string]string{}, bytes.NewReader(content), int64(len(content)), nil); err != nil {
		t.Fatal(err)
	}
}

// Corrupt replaces the object key's content with what alter makes of it.
func (s *S3) Corrupt(t testing.TB, key string, alter func([]byte) []byte) {
	t.Helper()
	b := s.Object(t, key)
	if b == nil {
		t.Fatalf("no object %s to corrupt", key)
	}
	s.Put(t, key, alter(b))
}

// Keys lists the bucket's keys that start with prefix, in order.
func (s *S3) Keys(t testing.TB, prefix string) []string {
	t.Helper()
	p := gofakes3.NewPrefix(&prefix, nil)
	res, err := s.backend.ListBucket(s.Bucket, &p, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range res.Contents {
		keys = append(keys, c.Key)
	}
	sort.Strings(keys)
	return keys
}

func (s *S3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[r.Method]++
	s.mu.Unlock()
	if s.unavailable.Load() {
		s3Problem(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		return
	}
	verify, seen := s.verify, &s.headerSeen
	if r.URL.Query().Has("X-Amz-Signature") || r.URL.Query().Has("X-Amz-Algorithm") {
		verify, seen = s.verifyQuery, &s.querySeen
	}
	sig, code, msg := verify(r)
	if code == "" && r.Header.Get("X-Amz-Content-Sha256") == streamingPayload {
		code, msg = sig.decodeChunks(r)
	}
	if code != "" {
		s.denied.Add(1)
		s3Problem(w, http.StatusForbidden, code, msg)
		return
	}
	seen.Add(1)
	if r.Method == http.MethodPut && r.ContentLength != 0 && s.cutNext.Add(-1) >= 0 {
		s.cuts.Add(1)
		panic(http.ErrAbortHandler)
	}
	if n := s.failAfter.Load(); n >= 0 && r.Method == http.MethodPut && r.ContentLength != 0 {
		_, _ = io.CopyN(io.Discard, r.Body, n)
		s.cuts.Add(1)
		panic(http.ErrAbortHandler) // the connection closes mid-upload
	}
	s.fake.ServeHTTP(w, r)
}

func s3Problem(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName xml.Name `xml:"Error"`
		Code    string
		Message string
	}{Code: code, Message: msg})
}

// signature is what a request's verified signature chains its body's
// chunk signatures to.
type signature struct {
	key       []byte // the signing key of the request's date, region and service
	amzDate   string
	scope     string
	signature string
}

// streamingPayload marks a body sent in aws-chunked encoding, each chunk
// signed (as S3 clients send uploads over plain HTTP).
const streamingPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"

// decodeChunks reads an aws-chunked body, checks each chunk's signature
// against the chain that starts at the request's own, and replaces the
// body with the decoded bytes, as S3 does before storing them.
func (sig signature) decodeChunks(r *http.Request) (code, msg string) {
	const malformed = "IncompleteBody"
	br := bufio.NewReader(r.Body)
	prev := sig.signature
	emptySum := sha256.Sum256(nil)
	var out bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return malformed, "The request body ended before its last chunk."
		}
		size, chunkSig, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ";chunk-signature=")
		n, perr := strconv.ParseInt(size, 16, 64)
		if !ok || perr != nil || n < 0 || n > 1<<30 {
			return malformed, "A chunk header is malformed."
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(br, data); err != nil || string(data[n:]) != "\r\n" {
			return malformed, "A chunk is shorter than its header says."
		}
		sum := sha256.Sum256(data[:n])
		sts := strings.Join([]string{"AWS4-HMAC-SHA256-PAYLOAD", sig.amzDate, sig.scope, prev,
			hex.EncodeToString(emptySum[:]), hex.EncodeToString(sum[:])}, "\n")
		want := hex.EncodeToString(hmacSHA256(sig.key, sts))
		if !hmac.Equal([]byte(want), []byte(chunkSig)) {
			return "SignatureDoesNotMatch", "A chunk's signature does not match."
		}
		if n == 0 {
			break
		}
		out.Write(data[:n])
		prev = chunkSig
	}
	if d := r.Header.Get("X-Amz-Decoded-Content-Length"); d != strconv.Itoa(out.Len()) {
		return malformed, "The decoded body is not X-Amz-Decoded-Content-Length long."
	}
	r.Body = io.NopCloser(&out)
	r.ContentLength = int64(out.Len())
	r.Header.Set("Content-Length", strconv.Itoa(out.Len()))
	r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	r.Header.Del("X-Amz-Decoded-Content-Length")
	if enc := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Content-Encoding"), "aws-chunked"), ","); enc == "" {
		r.Header.Del("Content-Encoding")
	} else {
		r.Header.Set("Content-Encoding", enc)
	}
	return "", ""
}

// verify checks the request's AWS Signature Version 4 (header form) and
// returns the S3 error code and message when it does not hold.
func (s *S3) verify(r *http.Request) (sig signature, code, msg string) {
	const algo = "AWS4-HMAC-SHA256 "
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, algo) {
		return sig, "AccessDenied", "Anonymous access is forbidden."
	}
	fields := map[string]string{}
	for _, f := range strings.Split(auth[len(algo):], ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if ts, err := time.Parse("20060102T150405Z", amzDate); err != nil || s.now().Sub(ts).Abs() > 15*time.Minute {
		return sig, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."
	}
	return s.check(r, sigV4{credential: fields["Credential"], date: amzDate, signedHeaders: fields["SignedHeaders"],
		signature: fields["Signature"], query: r.URL.Query(), payload: r.Header.Get("X-Amz-Content-Sha256")})
}

// verifyQuery checks a presigned request: SigV4 in the query, over an
// unsigned payload, not past its expiry.
func (s *S3) verifyQuery(r *http.Request) (sig signature, code, msg string) {
	q := r.URL.Query()
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"} {
		if q.Get(k) == "" {
			return sig, "AuthorizationQueryParametersError", "Query-string authentication version 4 requires the " + k + " parameter."
		}
	}
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
		return sig, "AuthorizationQueryParametersError", "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"."
	}
	ts, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return sig, "AuthorizationQueryParametersError", "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"."
	}
	expires, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || expires < 1 || expires > 7*24*3600 {
		return sig, "AuthorizationQueryParametersError", "X-Amz-Expires must be a number of seconds from 1 to 604800."
	}
	now := s.now()
	if ts.After(now.Add(15 * time.Minute)) {
		return sig, "AccessDenied", "Request is not valid yet."
	}
	if now.After(ts.Add(time.Duration(expires) * time.Second)) {
		return sig, "AccessDenied", "Request has expired."
	}
	if r.Header.Get("X-Amz-Content-Sha256") == streamingPayload {
		return sig, "AccessDenied", "A presigned request's body is not signed in chunks."
	}
	v := sigV4{credential: q.Get("X-Amz-Credential"), date: q.Get("X-Amz-Date"), signedHeaders: q.Get("X-Amz-SignedHeaders"),
		signature: q.Get("X-Amz-Signature"), payload: "UNSIGNED-PAYLOAD"}
	q.Del("X-Amz-Signature")
	v.query = q
	return s.check(r, v)
}

// sigV4 is a request's signature and what it says it covers.
type sigV4 struct {
	credential, date, signedHeaders, signature string
	// query is the canonical query's parameters (without the signature).
	query url.Values
	// payload is the payload's hash as signed: hex SHA-256,
	// UNSIGNED-PAYLOAD or streamingPayload.
	payload string
}

// check recomputes the signature of r with the server's secret.
func (s *S3) check(r *http.Request, v sigV4) (sig signature, code, msg string) {
	cred := strings.Split(v.credential, "/")
	if len(cred) != 5 || cred[3] != "s3" || cred[4] != "aws4_request" {
		return sig, "AuthorizationHeaderMalformed", "The authorization header is malformed."
	}
	if cred[0] != s.AccessKeyID {
		return sig, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
	}
	if !strings.HasPrefix(v.date, cred[1]) {
		return sig, "AuthorizationHeaderMalformed", "The credential's date is not the request's."
	}
	if !slices.Contains(strings.Split(v.signedHeaders, ";"), "host") {
		return sig, "AccessDenied", "The host header must be signed."
	}
	var hdrs strings.Builder
	for _, h := range strings.Split(v.signedHeaders, ";") {
		var val string
		switch h {
		case "host":
			val = r.Host
		case "content-length":
			val = strconv.FormatInt(r.ContentLength, 10)
		default:
			vals := r.Header.Values(h)
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			val = strings.Join(vals, ",")
		}
		hdrs.WriteString(h + ":" + val + "\n")
	}
	path := r.RequestURI
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	creq := strings.Join([]string{r.Method, path, canonicalQuery(v.query), hdrs.String(), v.signedHeaders, v.payload}, "\n")
	sum := sha256.Sum256([]byte(creq))
	scope := strings.Join(cred[1:], "/")
	sts := "AWS4-HMAC-SHA256\n" + v.date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := []byte("AWS4" + s.SecretAccessKey)
	for _, part := range cred[1:] {
		key = hmacSHA256(key, part)
	}
	want := hex.EncodeToString(hmacSHA256(key, sts))
	if !hmac.Equal([]byte(want), []byte(v.signature)) {
		return sig, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method."
	}
	return signature{key: key, amzDate: v.date, scope: scope, signature: want}, "", ""
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalQuery is SigV4's canonical query string: names and values
// URI-encoded, sorted by name, then value.
func canonicalQuery(q url.Values) string {
	type pair struct{ k, v string }
	var pairs []pair
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, pair{awsEscape(k), awsEscape(v)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p.k + "=" + p.v
	}
	return strings.Join(out, "&")
}

func awsEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(url.QueryEscape(s), "+", "%20"), "%7E", "~")
}
