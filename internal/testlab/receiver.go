package testlab

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Received is one request a Receiver got.
type Received struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	At           time.Time
}

// Receiver is an HTTPS server on 127.0.0.1 that records every request, a
// stand-in for webhook and chat endpoints. Its certificate comes from a
// CA of the test, written to CAFile for the control plane's SSL_CERT_FILE.
type Receiver struct {
	URL    string // https://127.0.0.1:PORT
	CAFile string

	mu   sync.Mutex // guards reqs
	reqs []Received
}

// StartReceiver starts a receiver. answer gives the status of the i-th
// request (0-based); it may block (until the request's context ends, when
// the client hangs up) to hold a request open. It is stopped when the test
// ends.
func StartReceiver(t testing.TB, answer func(i int, r *http.Request) int) *Receiver {
	t.Helper()
	hs := newHTTPSStandIn(t, "receiver")
	rc := &Receiver{URL: "https://" + hs.Addr(), CAFile: hs.CAFile}
	hs.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		rc.mu.Lock()
		i := len(rc.reqs)
		rc.reqs = append(rc.reqs, Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()})
		rc.mu.Unlock()
		w.WriteHeader(answer(i, r))
	}))
	return rc
}

// Requests returns the requests received so far, oldest first.
func (rc *Receiver) Requests() []Received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Received(nil), rc.reqs...)
}
