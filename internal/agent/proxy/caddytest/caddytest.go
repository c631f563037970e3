// Package caddytest runs a real Caddy for tests: its own process with its
// own data and config directories, the admin API and the HTTP and HTTPS
// ports on 127.0.0.1, and clients that reach its sites by name.
//
// The binary is CAPSTAN_TEST_CADDY (from scripts/testenv.sh), else caddy
// on PATH. Without one the test is skipped, or fails when CI=true.
package caddytest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Caddy is a running Caddy process.
type Caddy struct {
	AdminURL  string
	HTTPPort  int
	HTTPSPort int
	// DataDir is XDG_DATA_HOME; the local CA's root is under it.
	DataDir string
	// AccessLog is a path for the access log in the test's directory.
	AccessLog string
	// LogPath is Caddy's own output.
	LogPath string
}

// Binary returns the caddy binary to test with, skipping or failing t when
// there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("CAPSTAN_TEST_CADDY")
	if bin == "" {
		bin, _ = exec.LookPath("caddy")
	}
	if bin == "" {
		msg := "caddy not found (set CAPSTAN_TEST_CADDY, e.g. from . .testenv/env after scripts/testenv.sh up)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so this is a failure rather than a skip")
		}
		t.Skip(msg)
	}
	return bin
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs Caddy with only its admin API configured, stopped by
// t.Cleanup.
func Start(t testing.TB) *Caddy {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	c := &Caddy{
		HTTPPort:  FreePort(t),
		HTTPSPort: FreePort(t),
		DataDir:   filepath.Join(dir, "data"),
		AccessLog: filepath.Join(dir, "log", "access.log"),
		LogPath:   filepath.Join(dir, "caddy.log"),
	}
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
	c.AdminURL = "http://" + admin
	cfgPath := filepath.Join(dir, "caddy.json")
	cfg := fmt.Sprintf(`{"admin":{"listen":%q},"apps":{"pki":{"certificate_authorities":{"local":{"install_trust":false}}}}}`, admin)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(c.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+c.DataDir, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "HOME="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting caddy: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			if b, err := os.ReadFile(c.LogPath); err == nil {
				t.Logf("caddy output:\n%s", tail(b, 8000))
			}
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(c.AdminURL + "/config/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(c.LogPath)
			t.Fatalf("caddy exited: %v\n%s", err, tail(b, 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy's admin API did not answer at %s: %v", c.AdminURL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// RootPool is the local CA's root, once Caddy made it.
func (c *Caddy) RootPool(t testing.TB) *x509.CertPool {
	t.Helper()
	path := filepath.Join(c.DataDir, "caddy", "pki", "authorities", "local", "root.crt")
	var pem []byte
	Eventually(t, 10*time.Second, "Caddy's local root certificate", func() bool {
		var err error
		pem, err = os.ReadFile(path)
		return err == nil && len(pem) > 0
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", path)
	}
	return pool
}

// Client returns an HTTP client that connects every request to Caddy's
// HTTP or HTTPS port (by the URL's scheme) whatever the host name, trusts
// roots for HTTPS, and does not follow redirects.
func (c *Caddy) Client(roots *x509.CertPool) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		target := "127.0.0.1:" + strconv.Itoa(c.HTTPPort)
		if port == strconv.Itoa(c.HTTPSPort) || port == "443" {
			target = "127.0.0.1:" + strconv.Itoa(c.HTTPSPort)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:     dial,
			TLSClientConfig: &tls.Config{RootCAs: roots},
			// Enough to keep one connection per concurrent client, as a
			// browser does, instead of closing and opening them.
			MaxIdleConns:        64,
			MaxIdleConnsPerHost: 64,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       15 * time.Second,
	}
}

// URL is the URL of path on host over scheme ("http" or "https"), with
// Caddy's port for that scheme.
func (c *Caddy) URL(scheme, host, path string) string {
	port := c.HTTPPort
	if scheme == "https" {
		port = c.HTTPSPort
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
}

// Eventually polls cond every 20 ms until it is true, failing t after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
