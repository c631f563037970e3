package agentapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

//go:embed install.sh.tmpl
var installTemplate string

// Architectures are the CPU architectures agents are packaged for.
var Architectures = []string{"amd64", "arm64"}

// ScriptConfig is what the installer is rendered with.
type ScriptConfig struct {
	// PublicURL is the control plane's URL: an absolute http:// or
	// https:// URL without spaces or control characters.
	PublicURL string
	// PackageSHA256 maps an architecture to the SHA-256 (lowercase hex)
	// of the agent package served for it. The installer refuses an
	// architecture without one, and a package whose sum differs.
	PackageSHA256 map[string]string
	// CaddySHA256 maps an architecture to the SHA-256 (lowercase hex) of
	// the Caddy binary served for it (GET /agent/caddy). The installer
	// installs that Caddy in place of the host's unless it already is;
	// without one it keeps the host's Caddy.
	CaddySHA256 map[string]string
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// InstallScript returns the installer with the public URL and package
// checksums filled in. Every value is checked and single-quoted: nothing
// in it is expanded or run by the shell.
func InstallScript(c ScriptConfig) (string, error) {
	u := strings.TrimRight(c.PublicURL, "/")
	if err := checkPublicURL(u); err != nil {
		return "", err
	}
	vals := []string{"__CAPSTAN_PUBLIC_URL__", shellQuote(u)}
	for _, arch := range Architectures {
		sum, caddy := c.PackageSHA256[arch], c.CaddySHA256[arch]
		if sum != "" && !sha256Hex.MatchString(sum) {
			return "", fmt.Errorf("agentapi: package checksum for %s is not a SHA-256 in hex: %q", arch, sum)
		}
		if caddy != "" && !sha256Hex.MatchString(caddy) {
			return "", fmt.Errorf("agentapi: Caddy checksum for %s is not a SHA-256 in hex: %q", arch, caddy)
		}
		vals = append(vals, "__CAPSTAN_SHA256_"+strings.ToUpper(arch)+"__", shellQuote(sum),
			"__CAPSTAN_CADDY_SHA256_"+strings.ToUpper(arch)+"__", shellQuote(caddy))
	}
	return strings.NewReplacer(vals...).Replace(installTemplate), nil
}

// checkPublicURL accepts an absolute http(s) URL with a host and nothing
// a shell, a systemd unit file or a log line would take for a separator.
func checkPublicURL(s string) error {
	for _, r := range s {
		if r <= ' ' || r == 0x7f || !unicode.IsPrint(r) {
			return fmt.Errorf("agentapi: the public URL %q has spaces or control characters", s)
		}
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("agentapi: the public URL %q is not an absolute http:// or https:// URL", s)
	}
	return nil
}

// shellQuote quotes s for a POSIX shell: inside single quotes nothing is
// special but the single quote, written as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// InsecurePublicURL reports whether agents of a control plane at publicURL
// would talk to it in clear over the network: plain http:// to a host that
// is not loopback (localhost, 127.0.0.0/8, ::1).
func InsecurePublicURL(publicURL string) bool {
	u, err := url.Parse(publicURL)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

type scriptOutput struct {
	ContentType string `header:"Content-Type"`
	Body        []byte `contentType:"text/x-shellscript"`
}

type packageInput struct {
	Arch string `query:"arch" enum:"amd64,arm64" required:"true" doc:"CPU architecture of the server"`
}

type packageOutput struct {
	ContentType        string `header:"Content-Type"`
	ContentDisposition string `header:"Content-Disposition"`
	Body               []byte `contentType:"application/gzip"`
}

// BinaryPath returns where the agent binary for arch is looked up in dir:
// capstan-agent-linux-<arch>, or capstan-agent for the control plane's own
// architecture.
func BinaryPath(dir, arch string) (string, error) {
	candidates := []string{filepath.Join(dir, "capstan-agent-linux-"+arch)}
	if arch == runtime.GOARCH {
		candidates = append(candidates, filepath.Join(dir, "capstan-agent"))
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", fault.NotFoundf("No agent binary for linux/%s on this control plane (looked for %s).", arch, filepath.Base(candidates[0]))
}

// CaddyPath returns where the Caddy binary for arch is looked up in dir:
// caddy-linux-<arch> (make dist builds it with scripts/caddy-build.sh).
func CaddyPath(dir, arch string) (string, error) {
	p := filepath.Join(dir, "caddy-linux-"+arch)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return "", fault.NotFoundf("No Caddy binary for linux/%s on this control plane (looked for %s).", arch, filepath.Base(p))
	}
	return p, nil
}

// fileSums keeps the SHA-256 of served files, computed once for each
// version of a file (the same inode, size and modification time).
type fileSums struct {
	mu sync.Mutex // guards m
	m  map[string]fileSum
}

type fileSum struct {
	info os.FileInfo
	sum  string // hex
}

// of returns the SHA-256 (hex) of f, whose Stat is st, opened from path;
// f is read from its start and left there.
func (fs *fileSums) of(path string, f *os.File, st os.FileInfo) (string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if c, ok := fs.m[path]; ok && os.SameFile(c.info, st) && c.info.ModTime().Equal(st.ModTime()) && c.info.Size() == st.Size() {
		return c.sum, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if fs.m == nil {
		fs.m = map[string]fileSum{}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	fs.m[path] = fileSum{info: st, sum: sum}
	return sum, nil
}

// caddySums returns the SHA-256 of the Caddy binary of every
// architecture this control plane serves one for.
func (fs *fileSums) caddySums(dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, arch := range Architectures {
		path, err := CaddyPath(dir, arch)
		if fault.Is(err, fault.NotFound) {
			continue
		}
		f, st, err := openRegular(path)
		if err != nil {
			return nil, err
		}
		sum, err := fs.of(path, f, st)
		f.Close()
		if err != nil {
			return nil, err
		}
		out[arch] = sum
	}
	return out, nil
}

func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, st, nil
}

// packager builds agent packages and keeps the last one per file.
type packager struct {
	mu    sync.Mutex // guards cache
	cache map[string]cachedPackage
}

type cachedPackage struct {
	info os.FileInfo // of the binary packaged
	mod  time.Time
	size int64
	data []byte
	sum  string // SHA-256 of data, hex
}

// build returns the package of the binary at path and its SHA-256 (hex).
func (p *packager) build(path, version string) ([]byte, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A binary replaced by another file (a new inode) with the same size
	// and modification time, as a copy that keeps times can make, is still
	// a new binary.
	if c, ok := p.cache[path]; ok && os.SameFile(c.info, st) && c.mod.Equal(st.ModTime()) && c.size == st.Size() {
		return c.data, c.sum, nil
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"capstan-agent", 0o755, bin},
		{"VERSION", 0o644, []byte(version + "\n")},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	if p.cache == nil {
		p.cache = map[string]cachedPackage{}
	}
	h := sha256.Sum256(buf.Bytes())
	c := cachedPackage{info: st, mod: st.ModTime(), size: st.Size(), data: buf.Bytes(), sum: hex.EncodeToString(h[:])}
	p.cache[path] = c
	return c.data, c.sum, nil
}

// sums returns the SHA-256 of the package of every architecture this
// control plane has an agent binary for.
func (p *packager) sums(dir, version string) (map[string]string, error) {
	out := map[string]string{}
	for _, arch := range Architectures {
		path, err := BinaryPath(dir, arch)
		if fault.Is(err, fault.NotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		_, sum, err := p.build(path, version)
		if err != nil {
			return nil, err
		}
		out[arch] = sum
	}
	return out, nil
}

func registerInstall(s *httpapi.Server, d Deps) {
	tags := []string{"Agent protocol"}
	pk := &packager{}
	caddySums := &fileSums{}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-install-script", Method: http.MethodGet, Path: "/agent/install.sh", Tags: tags,
		Summary: "The agent installer (POSIX sh) with this control plane's URL and the agent packages' SHA-256 filled in",
		Description: "The installer downloads the agent package for the host's architecture and checks its SHA-256 against the one " +
			"filled in here before it installs anything. A control plane whose public URL is plain http:// to an address other " +
			"than loopback answers 409 (…/insecure-public-url) unless it was started with --allow-insecure-agents: its agents " +
			"would send their tokens, and receive job secrets, in clear over the network.",
		Errors: []int{http.StatusConflict},
	}, httpapi.Public, func(ctx context.Context, _ *struct{}) (*scriptOutput, error) {
		if !d.AllowInsecureAgents && InsecurePublicURL(d.PublicURL) {
			return nil, fault.Conflictf("insecure-public-url", "This control plane's public URL (%s) is plain http:// to an address "+
				"other than loopback: agents would send their tokens, and receive job secrets such as environment values, in clear "+
				"over the network. Serve the control plane over https:// and set --public-url (CAPSTAN_PUBLIC_URL) to that URL, or, "+
				"on a network you trust, start it with --allow-insecure-agents (CAPSTAN_ALLOW_INSECURE_AGENTS=true).", d.PublicURL)
		}
		sums, err := pk.sums(d.AgentDir, d.Version)
		if err != nil {
			return nil, err
		}
		caddy, err := caddySums.caddySums(d.AgentDir)
		if err != nil {
			return nil, err
		}
		script, err := InstallScript(ScriptConfig{PublicURL: d.PublicURL, PackageSHA256: sums, CaddySHA256: caddy})
		if err != nil {
			return nil, err
		}
		return &scriptOutput{ContentType: "text/x-shellscript; charset=utf-8", Body: []byte(script)}, nil
	})
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-package", Method: http.MethodGet, Path: "/agent/package.tar.gz", Tags: tags,
		Summary: "The agent package (tar.gz with the capstan-agent binary) for an architecture",
		Errors:  []int{http.StatusNotFound},
	}, httpapi.Public, func(ctx context.Context, in *packageInput) (*packageOutput, error) {
		path, err := BinaryPath(d.AgentDir, in.Arch)
		if err != nil {
			return nil, err
		}
		data, _, err := pk.build(path, d.Version)
		if err != nil {
			return nil, err
		}
		return &packageOutput{ContentType: "application/gzip",
			ContentDisposition: fmt.Sprintf(`attachment; filename="capstan-agent-linux-%s.tar.gz"`, in.Arch), Body: data}, nil
	})
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-caddy", Method: http.MethodGet, Path: "/agent/caddy", Tags: tags,
		Summary: "The Caddy binary servers run as their reverse proxy, for an architecture",
		Description: "The control plane serves the Caddy found as caddy-linux-<arch> in its agent directory (--agent-dir; " +
			"make dist builds it from Caddy's source at the version Capstan pins). The installer downloads it, checks its SHA-256 " +
			"against the one filled into the installer (also sent here as Repr-Digest) and installs it in place of the host's " +
			"Caddy: from Caddy 2.8 on, a release switches an application's upstream without reloading Caddy, so that no " +
			"connection opened in that instant is dropped. 404 when the control plane has none for that architecture.",
		Errors: []int{http.StatusNotFound},
		Responses: map[string]*huma.Response{"200": {Description: "The caddy executable (linux/<arch>)",
			Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}}},
	}, httpapi.Public, func(ctx context.Context, in *packageInput) (*huma.StreamResponse, error) {
		path, err := CaddyPath(d.AgentDir, in.Arch)
		if err != nil {
			return nil, err
		}
		f, st, err := openRegular(path)
		if err != nil {
			return nil, err
		}
		sum, err := caddySums.of(path, f, st)
		if err != nil {
			f.Close()
			return nil, err
		}
		log := s.Logger()
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			defer f.Close()
			hctx.SetHeader("Content-Type", "application/octet-stream")
			hctx.SetHeader("Content-Disposition", fmt.Sprintf(`attachment; filename="caddy-linux-%s"`, in.Arch))
			hctx.SetHeader("Content-Length", strconv.FormatInt(st.Size(), 10))
			hctx.SetHeader("Repr-Digest", httpapi.ContentDigest(sum))
			hctx.SetStatus(http.StatusOK)
			httpapi.StreamBody(hctx, f, func(msg string, args ...any) { log.WarnContext(ctx, msg, args...) })
		}}, nil
	})
}
