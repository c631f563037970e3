package testlab

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// httpsStandIn is what every HTTPS stand-in (and the SMTP server, for
// STARTTLS) starts from: a CA made for the test, that CA as a PEM file
// (for the SSL_CERT_FILE of a process under test), and a loopback
// listener with a certificate from the CA.
type httpsStandIn struct {
	CA     *TestCA
	CAFile string
	ln     net.Listener
	cert   tls.Certificate
}

func newHTTPSStandIn(t testing.TB, name string) *httpsStandIn {
	t.Helper()
	ca := NewTestCA(t)
	certPEM, keyPEM := ca.Leaf(t, "127.0.0.1", "localhost")
	cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), name+"-ca.pem")
	if err := os.WriteFile(caFile, []byte(ca.PEM), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &httpsStandIn{CA: ca, CAFile: caFile, ln: ln, cert: cert}
}

// Addr is the listener's host:port.
func (s *httpsStandIn) Addr() string { return s.ln.Addr().String() }

// Client is an HTTP client that trusts the CA and does not follow
// redirects.
func (s *httpsStandIn) Client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(s.CA.PEM))
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Serve serves h until the test ends; the server's own log is discarded.
func (s *httpsStandIn) Serve(t testing.TB, h http.Handler) {
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{s.cert}},
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(s.ln, "", "") //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
}

// ServePlain serves h over plain HTTP until the test ends, for a
// stand-in of a service that runs without TLS.
func (s *httpsStandIn) ServePlain(t testing.TB, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(s.ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
}
