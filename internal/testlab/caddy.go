package testlab

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Caddy is a running Caddy process with only its admin API configured
// when it starts; the agent's proxy (or the test) loads the rest.
type Caddy struct {
	// AdminURL is the admin API as the agent's --caddy-admin takes it: a
	// unix socket, unix//PATH|0666, as on a server (where only Caddy's
	// group may open it); AdminClient reaches it.
	AdminURL string
	// AdminSocket is the socket's path, in a directory of its own.
	AdminSocket string
	// HTTPPort and HTTPSPort are free ports on 127.0.0.1 for the sites.
	HTTPPort  int
	HTTPSPort int
	// DataDir is XDG_DATA_HOME; the local CA is under it.
	DataDir string
	// AccessLog is a path for the access log in the test's directory.
	AccessLog string
	// LogPath is Caddy's own output.
	LogPath string
	// UpstreamDir is a directory for the agent's upstream files (the
	// agent's --proxy-upstream-dir) when this Caddy reads them (2.8 and
	// later); empty otherwise.
	UpstreamDir string

	stop func() // ends the process, once
}

// caddyStartTimeout bounds the wait for Caddy's admin API.
const caddyStartTimeout = 30 * time.Second

// CaddyBinary returns the caddy binary to test with:
// CAPSTAN_TEST_CADDY (from scripts/testenv.sh), else caddy on PATH.
// Without one the test is skipped, or fails when CI=true.
func CaddyBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("CAPSTAN_TEST_CADDY")
	if bin == "" {
		bin, _ = exec.LookPath("caddy")
	}
	if bin == "" {
		Require(t, "caddy (set CAPSTAN_TEST_CADDY, e.g. from . .testenv/env after scripts/testenv.sh up)")
	}
	return bin
}

// CaddyVersion is the version the test's caddy binary reports, e.g.
// "v2.11.9" or "2.6.2".
func CaddyVersion(t testing.TB) string {
	t.Helper()
	return caddyVersionOf(t, CaddyBinary(t))
}

var caddyVersions sync.Map // binary path → version

func caddyVersionOf(t testing.TB, bin string) string {
	t.Helper()
	if v, ok := caddyVersions.Load(bin); ok {
		return v.(string)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy version: %v\n%s", err, out)
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	caddyVersions.Store(bin, v)
	return v
}

// CaddyAtLeast reports whether Caddy of version v (as CaddyVersion says
// it) is major.minor or later. Caddy 2.7 and later keep their certificate
// cache across configuration loads; 2.8 and later read placeholders of
// files ({file.*}) at every request, so that the agent switches an
// upstream without a configuration load.
func CaddyAtLeast(v string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// StartCaddy runs Caddy with its own data and config directories and its
// admin API on a unix socket of its own (AdminSocket), local CA trust
// installation off, and stops it when the test ends (logging its output
// if the test failed).
func StartCaddy(t testing.TB) *Caddy {
	t.Helper()
	c, exitLog, ok := startCaddy(t, CaddyBinary(t))
	if !ok {
		t.Fatalf("caddy exited while starting:\n%s", exitLog)
	}
	return c
}

func startCaddy(t testing.TB, bin string) (c *Caddy, exitLog string, ok bool) {
	t.Helper()
	dir := t.TempDir()
	c = &Caddy{
		HTTPPort:  FreePort(t),
		HTTPSPort: FreePort(t),
		DataDir:   filepath.Join(dir, "data"),
		AccessLog: filepath.Join(dir, "log", "access.log"),
		LogPath:   filepath.Join(dir, "caddy.log"),
	}
	// A short directory of its own: a socket's path has at most 107 bytes.
	// Anyone may open the socket (a systemd host's agent, running as its
	// own account, reaches it through a bind mount of the directory).
	sockDir, err := os.MkdirTemp(adminSocketBase(), "capstan-caddy-admin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.AdminSocket = filepath.Join(sockDir, "admin.sock")
	c.AdminURL = "unix/" + c.AdminSocket + "|0666"
	if CaddyAtLeast(caddyVersionOf(t, bin), 2, 8) {
		c.UpstreamDir = filepath.Join(dir, "upstreams")
		if err := os.Mkdir(c.UpstreamDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "caddy.json")
	cfg := fmt.Sprintf(`{"admin":{"listen":%q},"apps":{"pki":{"certificate_authorities":{"local":{"install_trust":false}}}}}`, c.AdminURL)
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
	output := func() string {
		b, _ := os.ReadFile(c.LogPath)
		return Tail(string(b), 60)
	}
	c.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("caddy output (%s):\n%s", c.AdminURL, output())
		}
	})
	hc := c.AdminClient()
	deadline := time.Now().Add(caddyStartTimeout)
	for {
		resp, err := hc.Get(adminBase + "/config/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, "", true
			}
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return nil, fmt.Sprintf("%v\n%s", err, output()), false
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy's admin API did not answer at %s within %s: %v\n%s", c.AdminURL, caddyStartTimeout, err, output())
		}
	}
}

// Stop ends Caddy before the test does, as a proxy that went down: its
// admin API and sites no longer answer.
func (c *Caddy) Stop() { c.stop() }

// adminBase prefixes the admin API's paths for AdminClient.
const adminBase = "http://caddy"

// AdminClient returns a client of the admin API: adminBase+"/config/" and
// the like reach it. Each request has a connection of its own, as a load
// that changes the admin settings restarts Caddy's admin server.
func (c *Caddy) AdminClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.AdminSocket)
		}}}
}

// AdminBind is the HostOptions bind mount ("DIR:DIR") that puts the admin
// socket at the same path inside a systemd host, for an agent there: the
// same path, since the agent writes its address into the configuration
// Caddy loads.
func (c *Caddy) AdminBind() string {
	d := filepath.Dir(c.AdminSocket)
	return d + ":" + d
}

// adminSocketBase is where the admin sockets' directories are made: under
// /run when this process may write there (as root, the only way systemd
// hosts run), which the agent's unit leaves shared, unlike /tmp (its
// PrivateTmp); the temporary directory otherwise.
func adminSocketBase() string {
	if os.Geteuid() == 0 {
		if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
			return "/run"
		}
	}
	return ""
}

// LoadedConfig is the configuration Caddy runs (GET /config/). A load
// that changes the admin settings restarts the admin server, which drops
// a request that arrives meanwhile: such a failure is tried again for a
// few seconds.
func (c *Caddy) LoadedConfig(t testing.TB) []byte {
	t.Helper()
	hc := c.AdminClient()
	deadline := time.Now().Add(10 * time.Second)
	resp, err := hc.Get(adminBase + "/config/")
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the admin server restarting
		resp, err = hc.Get(adminBase + "/config/")
	}
	if err != nil {
		t.Fatalf("caddy admin API GET /config/: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("caddy admin API GET /config/: %d %v\n%s", resp.StatusCode, err, b)
	}
	return b
}

// localCA is the directory of Caddy's local CA.
func (c *Caddy) localCA() string {
	return filepath.Join(c.DataDir, "caddy", "pki", "authorities", "local")
}

// RootPool is the local CA's root, once Caddy made it.
func (c *Caddy) RootPool(t testing.TB) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(c.caCert(t, "root.crt"))
	return pool
}

// Intermediate is the local CA's intermediate certificate, which signs
// the certificates of tls internal sites, once Caddy made it.
func (c *Caddy) Intermediate(t testing.TB) *x509.Certificate {
	t.Helper()
	return c.caCert(t, "intermediate.crt")
}

func (c *Caddy) caCert(t testing.TB, name string) *x509.Certificate {
	t.Helper()
	path := filepath.Join(c.localCA(), name)
	var (
		cert *x509.Certificate
		err  error
	)
	// Caddy writes the file when its PKI app starts: wait for a whole one.
	EventuallyReport(t, 30*time.Second, "Caddy's local CA certificate "+path, func() (bool, string) {
		var b []byte
		if b, err = os.ReadFile(path); err != nil {
			return false, err.Error()
		}
		block, _ := pem.Decode(b)
		if block == nil {
			err = errors.New("no PEM block")
			return false, err.Error()
		}
		cert, err = x509.ParseCertificate(block.Bytes)
		return err == nil, fmt.Sprint(err)
	})
	return cert
}

// Client returns an HTTP client that connects every request to Caddy's
// HTTP or HTTPS port (by the URL's port) whatever the host name, trusts
// roots for HTTPS (with the URL's host as server name), and does not
// follow redirects. Connections are kept alive, one per concurrent
// request, as a browser's are.
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
			DialContext:         dial,
			TLSClientConfig:     &tls.Config{RootCAs: roots},
			MaxIdleConns:        64,
			MaxIdleConnsPerHost: 64,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
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

// LoadBalance configures Caddy as a plain-HTTP load balancer on HTTPPort
// in front of upstreams (host:port): round robin, and a request that
// cannot reach one upstream is tried on the next for up to 10 seconds (an
// upstream that failed is left out for 2 seconds). It returns the load
// balancer's URL.
func (c *Caddy) LoadBalance(t testing.TB, upstreams ...string) string {
	t.Helper()
	ups := make([]map[string]string, len(upstreams))
	for i, u := range upstreams {
		ups[i] = map[string]string{"dial": u}
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.HTTPPort))
	cfg := map[string]any{
		"admin": map[string]any{"listen": c.AdminURL},
		"apps": map[string]any{
			"pki": map[string]any{"certificate_authorities": map[string]any{"local": map[string]any{"install_trust": false}}},
			"http": map[string]any{"servers": map[string]any{"lb": map[string]any{
				"listen":          []string{listen},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{map[string]any{"handle": []any{map[string]any{
					"handler":   "reverse_proxy",
					"upstreams": ups,
					"load_balancing": map[string]any{
						"selection_policy": map[string]any{"policy": "round_robin"},
						"try_duration":     "10s", "try_interval": "50ms",
					},
					"health_checks": map[string]any{"passive": map[string]any{"fail_duration": "2s", "max_fails": 1}},
					// Long polls answer when they answer: stream, never buffer.
					"flush_interval": -1,
				}}}},
			}}},
		},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.AdminClient().Post(adminBase+"/load", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("caddy /load: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("caddy /load: %d %s", resp.StatusCode, body)
	}
	return "http://" + listen
}
