package agentapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

//go:embed install.sh.tmpl
var installTemplate string

// InstallScript returns the installer with the public URL filled in.
func InstallScript(publicURL string) string {
	return strings.ReplaceAll(installTemplate, "__CAPSTAN_PUBLIC_URL__", strings.TrimRight(publicURL, "/"))
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
}

func (p *packager) build(path, version string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A binary replaced by another file (a new inode) with the same size
	// and modification time, as a copy that keeps times can make, is still
	// a new binary.
	if c, ok := p.cache[path]; ok && os.SameFile(c.info, st) && c.mod.Equal(st.ModTime()) && c.size == st.Size() {
		return c.data, nil
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
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
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if p.cache == nil {
		p.cache = map[string]cachedPackage{}
	}
	p.cache[path] = cachedPackage{info: st, mod: st.ModTime(), size: st.Size(), data: buf.Bytes()}
	return buf.Bytes(), nil
}

func registerInstall(s *httpapi.Server, d Deps) {
	tags := []string{"Agent protocol"}
	script := []byte(InstallScript(d.PublicURL))
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-install-script", Method: http.MethodGet, Path: "/agent/install.sh", Tags: tags,
		Summary: "The agent installer (POSIX sh) with this control plane's URL filled in",
	}, httpapi.Public, func(ctx context.Context, _ *struct{}) (*scriptOutput, error) {
		return &scriptOutput{ContentType: "text/x-shellscript; charset=utf-8", Body: script}, nil
	})
	pk := &packager{}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-package", Method: http.MethodGet, Path: "/agent/package.tar.gz", Tags: tags,
		Summary: "The agent package (tar.gz with the capstan-agent binary) for an architecture",
		Errors:  []int{http.StatusNotFound},
	}, httpapi.Public, func(ctx context.Context, in *packageInput) (*packageOutput, error) {
		path, err := BinaryPath(d.AgentDir, in.Arch)
		if err != nil {
			return nil, err
		}
		data, err := pk.build(path, d.Version)
		if err != nil {
			return nil, err
		}
		return &packageOutput{ContentType: "application/gzip",
			ContentDisposition: fmt.Sprintf(`attachment; filename="capstan-agent-linux-%s.tar.gz"`, in.Arch), Body: data}, nil
	})
}
