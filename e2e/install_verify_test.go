package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// tarGz makes a well-formed agent package holding files (name → content).
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestInstallerRefusesTamperedPackage runs the served installer on a booted
// Debian (systemd-nspawn) whose package download goes through a
// man-in-the-middle that swaps the agent package for another well-formed
// one. The installer checks the package against the SHA-256 it was served
// with and stops before it creates the account, installs a file or runs
// the package's binary; the enrollment token stays unused.
func TestInstallerRefusesTamperedPackage(t *testing.T) {
	t.Parallel()
	requireNspawnHost(t)
	root := debianRootfs(t)

	agentDir := t.TempDir()
	genuine := "#!/bin/sh\necho genuine agent\n"
	if err := os.WriteFile(filepath.Join(agentDir, "capstan-agent-linux-"+runtime.GOARCH), []byte(genuine), 0o755); err != nil {
		t.Fatal(err)
	}
	cp := startControlPlane(t, Options{Args: []string{"--agent-dir", agentDir}})
	admin := signInUser(t, cp, newAdmin(t, cp, "admin@example.com"))
	r := cp.Post(t, "/api/v1/servers/enrollments", admin.AccessToken, map[string]any{"name": "tampered"})
	var enr struct {
		Server apiServer `json:"server"`
		Token  string    `json:"token"`
	}
	expectJSON(t, r, http.StatusCreated, &enr)

	// The man in the middle: everything passes through but the package,
	// which is replaced by one whose binary leaves a mark when run.
	evil := tarGz(t, map[string]string{
		"capstan-agent": "#!/bin/sh\ntouch /tmp/tampered-agent-ran\n",
		"VERSION":       "v6.6.6\n",
	})
	target, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var swapped atomic.Int32
	mitm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/agent/package.tar.gz" {
			swapped.Add(1)
			w.Header().Set("Content-Type", "application/gzip")
			w.Write(evil) //nolint:errcheck // the installer reports a short read
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(mitm.Close)

	c := bootContainer(t, root)
	res := c.Exec(t, "curl -fsSL "+cp.URL+"/agent/install.sh | sh -s -- --token "+enr.Token+" --url "+mitm.URL)
	if swapped.Load() == 0 {
		t.Fatalf("the installer never downloaded the package: exit %d\n%s", res.ExitCode, res.Stderr)
	}
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "does not match this installer") || !strings.Contains(res.Stderr, "nothing was installed") {
		t.Fatalf("installer with a swapped package: exit %d, want a refusal\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, check := range []struct{ what, cmd string }{
		{"the capstan account", "id capstan"},
		{"/opt/capstan-agent", "test -e /opt/capstan-agent"},
		{"/etc/capstan", "test -e /etc/capstan"},
		{"the unit file", "test -e /etc/systemd/system/capstan-agent.service"},
		{"the polkit rule", "test -e /etc/polkit-1/rules.d/50-capstan-agent.rules"},
		{"the swapped binary's mark", "test -e /tmp/tampered-agent-ran"},
	} {
		if got := c.Exec(t, check.cmd); got.ExitCode == 0 {
			t.Errorf("%s exists after the refused install (%s)", check.what, check.cmd)
		}
	}
	if s := getServer(t, cp, admin.AccessToken, enr.Server.ID); s.Status != "pending" {
		t.Errorf("server status %q after the refused install, want pending (token unused)", s.Status)
	}
}
