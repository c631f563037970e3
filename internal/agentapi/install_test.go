package agentapi_test

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentapi"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

const testPublicURL = "https://cp.example.test:8443"

// inCI reports whether missing tools must fail the test instead of skipping it.
func inCI() bool { return os.Getenv("CI") == "true" }

func TestInstallScriptShellcheck(t *testing.T) {
	bin, err := exec.LookPath("shellcheck")
	if err != nil {
		if inCI() {
			t.Fatal("shellcheck is not installed (CI=true: required; apt-get install shellcheck)")
		}
		t.Skip("shellcheck is not installed")
	}
	path := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(path, []byte(mustScript(t, agentapi.ScriptConfig{PublicURL: testPublicURL,
		PackageSHA256: map[string]string{"amd64": strings.Repeat("ab", 32)},
		CaddySHA256:   map[string]string{"amd64": strings.Repeat("cd", 32)}})), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-s", "sh", path).CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck -s sh install.sh: %v\n%s", err, out)
	}
}

func mustScript(t *testing.T, c agentapi.ScriptConfig) string {
	t.Helper()
	s, err := agentapi.InstallScript(c)
	if err != nil {
		t.Fatalf("InstallScript(%+v): %v", c, err)
	}
	return s
}

func TestInstallScriptPublicURL(t *testing.T) {
	for _, url := range []string{testPublicURL, testPublicURL + "/"} {
		s := mustScript(t, agentapi.ScriptConfig{PublicURL: url})
		if strings.Contains(s, "__CAPSTAN_") {
			t.Fatalf("InstallScript(%q) left a placeholder in", url)
		}
		if want := "\nSERVED_URL='" + testPublicURL + "'\n"; !strings.Contains(s, want) {
			t.Fatalf("InstallScript(%q) does not set %s", url, want)
		}
		if !strings.HasPrefix(s, "#!/bin/sh\n") {
			t.Fatalf("InstallScript(%q) does not start with #!/bin/sh", url)
		}
	}
}

// scriptHeader runs the assignments at the top of an installer (all that
// runs before main) in sh, then prints the named variables one per line.
func scriptHeader(t *testing.T, script string, dir string, vars ...string) []string {
	t.Helper()
	head, _, ok := strings.Cut(script, "\nmain() {\n")
	if !ok {
		t.Fatal("the installer has no main function")
	}
	for _, v := range vars {
		head += "\nprintf '%s\\0' \"$" + v + "\""
	}
	cmd := exec.Command("sh", "-c", head)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, head)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// TestInstallScriptHostileValues fills the installer with values made to
// break out of shell quoting: they reach the script's variables unchanged,
// run nothing, and values that cannot be carried safely (newlines, spaces,
// control characters, bad checksums) are refused.
func TestInstallScriptHostileValues(t *testing.T) {
	for _, u := range []string{
		"https://cp.example.test/a'b",
		"https://cp.example.test/'$(touch${IFS}pwned)'",
		"https://cp.example.test/$(touch${IFS}pwned)",
		"https://cp.example.test/`touch${IFS}pwned`",
		`https://cp.example.test/"$(touch${IFS}pwned)"\`,
		"https://cp.example.test/';touch${IFS}pwned;'",
		"https://cp.example.test/${HOME:?}x",
	} {
		dir := t.TempDir()
		sum := strings.Repeat("0f", 32)
		s := mustScript(t, agentapi.ScriptConfig{PublicURL: u, PackageSHA256: map[string]string{"amd64": sum}})
		got := scriptHeader(t, s, dir, "SERVED_URL", "CAPSTAN_URL", "SHA256_AMD64", "SHA256_ARM64")
		if want := []string{u, u, sum, ""}; !slices.Equal(got, want) {
			t.Errorf("public URL %q: the installer's variables are %q, want %q", u, got, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
			t.Errorf("public URL %q: the installer ran a command from it", u)
		}
	}
	for _, c := range []agentapi.ScriptConfig{
		{PublicURL: "https://cp.example.test/\ntouch pwned"},
		{PublicURL: "https://cp.example.test/a b"},
		{PublicURL: "https://cp.example.test/\x1b[2J"},
		{PublicURL: "https://cp.example.test/\r"},
		{PublicURL: "ftp://cp.example.test"},
		{PublicURL: "/agent"},
		{PublicURL: testPublicURL, PackageSHA256: map[string]string{"amd64": "'$(touch pwned)'"}},
		{PublicURL: testPublicURL, PackageSHA256: map[string]string{"arm64": strings.Repeat("AB", 32)}},
	} {
		if s, err := agentapi.InstallScript(c); err == nil {
			t.Errorf("InstallScript(%q) was accepted:\n%s", c, s)
		}
	}
}

// newServer serves the agent routes (only the public ones are used here)
// with agent binaries in agentDir.
func newServer(t *testing.T, agentDir string) *httptest.Server {
	t.Helper()
	return newServerWith(t, agentapi.Deps{PublicURL: testPublicURL, AgentDir: agentDir})
}

func newServerWith(t *testing.T, d agentapi.Deps) *httptest.Server {
	t.Helper()
	d.Version = "v9.9.9-test"
	api := httpapi.New(httpapi.Deps{Version: "test", PublicURL: d.PublicURL, Logger: slog.New(slog.DiscardHandler)}, agentapi.Mount(d))
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, ts *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp, b
}

func TestInstallScriptServed(t *testing.T) {
	dir := t.TempDir()
	ts := newServer(t, dir)
	resp, body := get(t, ts, "/agent/install.sh")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || (mt != "text/x-shellscript" && mt != "application/x-sh" && mt != "text/x-sh") {
		t.Fatalf("Content-Type %q is not a shell script type", resp.Header.Get("Content-Type"))
	}
	if got, want := string(body), mustScript(t, agentapi.ScriptConfig{PublicURL: testPublicURL}); got != want {
		t.Fatalf("body is not InstallScript(public URL) without packages:\n%s", got)
	}

	// With agent binaries, the script carries the SHA-256 of the very
	// packages served, and follows a binary that is replaced.
	writeAgent(t, dir, "capstan-agent-linux-amd64", "#!/bin/sh\necho amd64\n")
	writeAgent(t, dir, "capstan-agent-linux-arm64", "#!/bin/sh\necho arm64\n")
	for round := range 2 {
		_, script := get(t, ts, "/agent/install.sh")
		got := scriptHeader(t, string(script), t.TempDir(), "SHA256_AMD64", "SHA256_ARM64")
		for i, arch := range []string{"amd64", "arm64"} {
			_, pkg := get(t, ts, "/agent/package.tar.gz?arch="+arch)
			sum := sha256.Sum256(pkg)
			if want := hex.EncodeToString(sum[:]); got[i] != want {
				t.Errorf("round %d: the installer's SHA-256 for %s is %q, the package's is %q", round, arch, got[i], want)
			}
		}
		writeAgent(t, dir, "capstan-agent-linux-amd64", "#!/bin/sh\necho a newer, longer amd64 build\n")
	}
}

// TestInstallCaddyServed: a Caddy binary in the agent directory is served
// whole at /agent/caddy, and the installer carries its SHA-256; without
// one the installer carries none and /agent/caddy is 404.
func TestInstallCaddyServed(t *testing.T) {
	dir := t.TempDir()
	ts := newServer(t, dir)
	_, script := get(t, ts, "/agent/install.sh")
	if got := scriptHeader(t, string(script), t.TempDir(), "CADDY_SHA256_AMD64", "CADDY_SHA256_ARM64"); got[0] != "" || got[1] != "" {
		t.Fatalf("without Caddy binaries, the installer carries Caddy sums %q", got)
	}
	resp, body := get(t, ts, "/agent/caddy?arch=amd64")
	if p := expectProblem(t, resp, body, http.StatusNotFound, "not-found"); !strings.Contains(p.Detail, "caddy-linux-amd64") {
		t.Fatalf("detail %q does not name the missing binary", p.Detail)
	}

	bins := map[string]string{"amd64": "#!/bin/sh\necho caddy amd64\n", "arm64": "#!/bin/sh\necho caddy arm64\n"}
	for round := range 2 {
		for arch, bin := range bins {
			writeAgent(t, dir, "caddy-linux-"+arch, bin)
		}
		_, script := get(t, ts, "/agent/install.sh")
		got := scriptHeader(t, string(script), t.TempDir(), "CADDY_SHA256_AMD64", "CADDY_SHA256_ARM64")
		for i, arch := range []string{"amd64", "arm64"} {
			resp, body := get(t, ts, "/agent/caddy?arch="+arch)
			if resp.StatusCode != http.StatusOK || string(body) != bins[arch] {
				t.Fatalf("round %d: GET /agent/caddy?arch=%s: %d %q, want %q", round, arch, resp.StatusCode, body, bins[arch])
			}
			sum := sha256.Sum256(body)
			if want := hex.EncodeToString(sum[:]); got[i] != want {
				t.Errorf("round %d: the installer's Caddy SHA-256 for %s is %q, the binary's is %q", round, arch, got[i], want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/octet-stream" {
				t.Errorf("Content-Type %q", ct)
			}
			if d := resp.Header.Get("Repr-Digest"); d != httpapi.ContentDigest(got[i]) {
				t.Errorf("Repr-Digest %q, want the binary's SHA-256", d)
			}
		}
		// A newer build in place of the old one is served and summed anew.
		bins["amd64"] += "# a newer, longer build\n"
	}
	resp, body = get(t, ts, "/agent/caddy?arch=sparc")
	expectProblem(t, resp, body, http.StatusUnprocessableEntity, "validation-failed")
}

// The installer tells Caddy 2.8 and later, which read upstream files at
// every request, from older ones, by what caddy version says.
func TestInstallScriptCaddyVersion(t *testing.T) {
	head, _, _ := strings.Cut(mustScript(t, agentapi.ScriptConfig{PublicURL: testPublicURL}), "\nmain() {\n")
	for v, want := range map[string]bool{
		"v2.11.9": true, "v2.8.0": true, "2.8.4": true, "v3.0.0": true, "v2.10.0-beta.1": true,
		"2.6.2": false, "v2.7.6": false, "v1.0.4": false, "": false, "v2": false, "v20": false, "garbage": false, "2.x.1": false,
	} {
		cmd := exec.Command("sh", "-c", head+"\nif caddy_reads_upstream_files \"$1\"; then echo yes; else echo no; fi", "sh", v)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", v, err, out)
		}
		if got := strings.TrimSpace(string(out)) == "yes"; got != want {
			t.Errorf("caddy_reads_upstream_files %q: %s, want %v", v, out, want)
		}
	}
}

// The installer gives Caddy its admin API on a unix socket, with the file
// mode 0660 for Caddy 2.7 and later (which read it after "|"), and never
// on a TCP port.
func TestInstallScriptCaddyAdminSocket(t *testing.T) {
	script := mustScript(t, agentapi.ScriptConfig{PublicURL: testPublicURL})
	head, _, _ := strings.Cut(script, "\nmain() {\n")
	for v, want := range map[string]string{
		"v2.11.9": "unix//run/capstan-proxy/admin.sock|0660", "v2.7.0": "unix//run/capstan-proxy/admin.sock|0660",
		"2.6.2": "unix//run/capstan-proxy/admin.sock", "": "unix//run/capstan-proxy/admin.sock",
	} {
		cmd := exec.Command("sh", "-c", head+"\ncaddy_admin_listen \"$1\"", "sh", v)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", v, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("caddy_admin_listen %q: %q, want %q", v, got, want)
		}
	}
	// The configuration Caddy resumes, as an earlier installer left it:
	// its admin endpoint moves to the socket, and nothing else changes.
	saved := filepath.Join(t.TempDir(), "autosave.json")
	const old = `{"admin":{"listen":"127.0.0.1:2019"},"apps":{"http":{"servers":{"https":{"listen":["127.0.0.1:443"]}}}}}`
	if err := os.WriteFile(saved, []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", head+`
ADMIN_LISTEN=$(caddy_admin_listen v2.11.9)
caddy_autosave_on_tcp "$1" && echo tcp
caddy_autosave_to_socket "$1" >"$1.new" && mv "$1.new" "$1"
caddy_autosave_on_tcp "$1" && echo still tcp
cat "$1"`, "sh", saved)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if want := "tcp\n" + strings.Replace(old, `"127.0.0.1:2019"`, `"unix//run/capstan-proxy/admin.sock|0660","origins":["caddy"]`, 1) + "\n"; err != nil || string(out) != want {
		t.Errorf("migrating the saved configuration: %v\n%s\nwant:\n%s", err, out, want)
	}

	// Caddy's unit gets the socket as its default admin endpoint, in a
	// runtime directory of its own that only its group may enter, and the
	// agent is told the same address.
	for _, want := range []string{
		`Environment="CADDY_ADMIN=$ADMIN_LISTEN"`, "RuntimeDirectory=capstan-proxy\n", "RuntimeDirectoryMode=0750\n",
		`usermod -a -G caddy "$ACCOUNT"`, `AGENT_ADMIN_ENV="Environment=\"CAPSTAN_CADDY_ADMIN=$ADMIN_LISTEN\""`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("the installer lacks %s", want)
		}
	}
}

// The enrollment token reaches capstan-agent enroll through its
// environment: a command line is visible to every user of the host.
func TestInstallScriptTokenOffTheCommandLine(t *testing.T) {
	script := mustScript(t, agentapi.ScriptConfig{PublicURL: testPublicURL})
	var enroll []string
	lines := strings.Split(script, "\n")
	for i, l := range lines {
		if strings.Contains(l, "capstan-agent\" enroll") {
			// The command with its continuation lines.
			cmd := l
			for j := i; strings.HasSuffix(lines[j], "\\") && j+1 < len(lines); j++ {
				cmd += "\n" + lines[j+1]
			}
			enroll = append(enroll, cmd)
		}
	}
	if len(enroll) != 1 {
		t.Fatalf("the installer runs capstan-agent enroll %d times, want once:\n%s", len(enroll), strings.Join(enroll, "\n"))
	}
	cmd := enroll[0]
	prefix, args, _ := strings.Cut(cmd, "capstan-agent\" enroll")
	if strings.Contains(args, "TOKEN") || strings.Contains(args, "--token") {
		t.Errorf("the token is on enroll's command line:\n%s", cmd)
	}
	if !strings.Contains(prefix, `CAPSTAN_ENROLL_TOKEN="$TOKEN" `) {
		t.Errorf("enroll does not get the token in CAPSTAN_ENROLL_TOKEN:\n%s", cmd)
	}
}

// TestInstallScriptInsecureURL: a control plane reached over plain http://
// at an address other than loopback does not serve the installer unless
// told to; over https:// or on loopback it does.
func TestInstallScriptInsecureURL(t *testing.T) {
	for _, tc := range []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"http://cp.example.test:8080", false, false},
		{"http://192.0.2.10", false, false},
		{"http://[2001:db8::1]:8080", false, false},
		{"http://127.0.0.1.example.test", false, false},
		{"http://cp.example.test:8080", true, true},
		{"https://cp.example.test", false, true},
		{"http://127.0.0.1:8080", false, true},
		{"http://127.8.9.10:8080", false, true},
		{"http://localhost:8080", false, true},
		{"http://[::1]:8080", false, true},
	} {
		ts := newServerWith(t, agentapi.Deps{PublicURL: tc.url, AgentDir: t.TempDir(), AllowInsecureAgents: tc.allow})
		resp, body := get(t, ts, "/agent/install.sh")
		if tc.ok {
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s (allow %v): status %d, want 200: %s", tc.url, tc.allow, resp.StatusCode, body)
			}
			continue
		}
		p := expectProblem(t, resp, body, http.StatusConflict, "insecure-public-url")
		for _, want := range []string{tc.url, "--allow-insecure-agents", "CAPSTAN_ALLOW_INSECURE_AGENTS", "https://", "in clear"} {
			if !strings.Contains(p.Detail, want) {
				t.Errorf("%s: the problem's detail %q does not say %q", tc.url, p.Detail, want)
			}
		}
	}
}

// writeAgent puts a small fake agent binary at dir/name.
func writeAgent(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

type tarFile struct {
	mode int64
	data string
}

func readPackage(t *testing.T, body []byte) map[string]tarFile {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("package is not gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("package is not a tar: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Fatalf("%s: not a regular file (type %c)", h.Name, h.Typeflag)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		files[h.Name] = tarFile{mode: h.Mode, data: string(b)}
	}
	return files
}

func TestInstallPackage(t *testing.T) {
	for _, tc := range []struct {
		name, file string
	}{
		{"arch-specific", "capstan-agent-linux-amd64"},
		{"plain", "capstan-agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file == "capstan-agent" && runtime.GOARCH != "amd64" {
				t.Skip("capstan-agent stands for the control plane's own architecture only")
			}
			dir := t.TempDir()
			const bin = "#!/bin/sh\necho fake agent\n"
			writeAgent(t, dir, tc.file, bin)
			ts := newServer(t, dir)
			resp, body := get(t, ts, "/agent/package.tar.gz?arch=amd64")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/gzip" {
				t.Fatalf("Content-Type %q, want application/gzip", ct)
			}
			if cd := resp.Header.Get("Content-Disposition"); !strings.Contains(cd, "capstan-agent-linux-amd64.tar.gz") {
				t.Fatalf("Content-Disposition %q does not name the package", cd)
			}
			files := readPackage(t, body)
			agent, ok := files["capstan-agent"]
			if !ok {
				t.Fatalf("package has no capstan-agent; it has %v", files)
			}
			if agent.data != bin {
				t.Fatalf("capstan-agent in the package is %q, want %q", agent.data, bin)
			}
			if agent.mode&0o111 != 0o111 {
				t.Fatalf("capstan-agent mode %o is not executable", agent.mode)
			}
			if v := files["VERSION"].data; v != "v9.9.9-test\n" {
				t.Fatalf("VERSION is %q", v)
			}

			// A new binary in place of the old one is served, not the
			// cached package of the old one.
			writeAgent(t, dir, tc.file, bin+"# a longer, newer build\n")
			_, body = get(t, ts, "/agent/package.tar.gz?arch=amd64")
			if got := readPackage(t, body)["capstan-agent"].data; got != bin+"# a longer, newer build\n" {
				t.Fatalf("after replacing the binary, the package holds %q", got)
			}

			// Another file of the same size and time renamed over it (as
			// cp -p or an unpacked release can make) is new too.
			path := filepath.Join(dir, tc.file)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			same := bin + "# a longer, NEWER build\n"
			writeAgent(t, dir, "next", same)
			if err := os.Chtimes(filepath.Join(dir, "next"), st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "next"), path); err != nil {
				t.Fatal(err)
			}
			_, body = get(t, ts, "/agent/package.tar.gz?arch=amd64")
			if got := readPackage(t, body)["capstan-agent"].data; got != same {
				t.Fatalf("after renaming a same-size, same-time binary into place, the package holds %q", got)
			}
		})
	}
}

type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func expectProblem(t *testing.T, resp *http.Response, body []byte, status int, typ string) problem {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem is not JSON: %v: %s", err, body)
	}
	if p.Status != status || p.Type != "https://capstan.dev/problems/"+typ || p.Detail == "" {
		t.Fatalf("unexpected problem: %s", body)
	}
	return p
}

func TestInstallPackageMissingBinary(t *testing.T) {
	dir := t.TempDir()
	// Only an amd64 binary: arm64 has none (capstan-agent stands for the
	// control plane's own architecture, so it is not used here).
	writeAgent(t, dir, "capstan-agent-linux-amd64", "x")
	if runtime.GOARCH == "arm64" {
		t.Skip("on arm64, capstan-agent-linux-amd64 is not the missing case")
	}
	ts := newServer(t, dir)
	resp, body := get(t, ts, "/agent/package.tar.gz?arch=arm64")
	p := expectProblem(t, resp, body, http.StatusNotFound, "not-found")
	if !strings.Contains(p.Detail, "capstan-agent-linux-arm64") {
		t.Fatalf("detail %q does not name the missing binary", p.Detail)
	}

	// An empty agent dir has nothing for amd64 either.
	ts = newServer(t, t.TempDir())
	resp, body = get(t, ts, "/agent/package.tar.gz?arch=amd64")
	expectProblem(t, resp, body, http.StatusNotFound, "not-found")
}

func TestInstallPackageBadArch(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, "capstan-agent", "x")
	ts := newServer(t, dir)
	for _, q := range []string{"?arch=sparc", "", "?arch="} {
		resp, body := get(t, ts, "/agent/package.tar.gz"+q)
		expectProblem(t, resp, body, http.StatusUnprocessableEntity, "validation-failed")
	}
}
