package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent/atomicfile"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// DefaultConfigPath is where the agent keeps its configuration unless told
// otherwise (flag --config or env CAPSTAN_AGENT_CONFIG).
const DefaultConfigPath = "/etc/capstan/agent.json"

// Config is the agent's configuration file, written by enroll and read by
// run. It holds the agent's credential, so it is written 0600.
type Config struct {
	APIURL           string `json:"api_url"`
	ServerID         string `json:"server_id"`
	ServerName       string `json:"server_name"`
	AgentToken       string `json:"agent_token"`
	HeartbeatSeconds int    `json:"heartbeat_seconds"`
	MetricsSeconds   int    `json:"metrics_seconds"`
}

// ErrNotEnrolled is returned by LoadConfig when there is no configuration
// file or it holds no credential.
var ErrNotEnrolled = errors.New("not enrolled")

// Enrolled reports whether c holds a credential.
func (c Config) Enrolled() bool { return c.AgentToken != "" }

// Validate checks that c is complete enough to run the agent.
func (c Config) Validate() error {
	if _, err := ParseAPIURL(c.APIURL); err != nil {
		return fmt.Errorf("api_url: %w", err)
	}
	if c.ServerID == "" {
		return errors.New("server_id is empty")
	}
	if !strings.HasPrefix(c.AgentToken, agentproto.AgentTokenPrefix) {
		return fmt.Errorf("agent_token does not start with %q", agentproto.AgentTokenPrefix)
	}
	if c.HeartbeatSeconds < 0 || c.MetricsSeconds < 0 {
		return errors.New("heartbeat_seconds and metrics_seconds must not be negative")
	}
	return nil
}

// LoadConfig reads the configuration at path. A missing file, or one without
// an agent token, is ErrNotEnrolled (wrapped with the path).
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("%w: no agent configuration at %s", ErrNotEnrolled, path)
	}
	if err != nil {
		return c, fmt.Errorf("reading agent configuration: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parsing agent configuration %s: %w", path, err)
	}
	if !c.Enrolled() {
		return c, fmt.Errorf("%w: %s holds no agent token", ErrNotEnrolled, path)
	}
	return c, nil
}

// SaveConfig writes c to path atomically (a temporary file in the same
// directory, synced, then renamed over path) with mode 0600. A missing
// parent directory is created with mode 0700.
func SaveConfig(path string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating config directory: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing agent configuration: %w", err)
	}
	return nil
}

// CheckWritable verifies that a configuration can be written at path
// (creating the directory 0700 if missing) without touching path itself, so
// that enroll fails before it spends a one-time token.
func CheckWritable(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating config directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".probe-*")
	if err != nil {
		return fmt.Errorf("config directory is not writable: %w", err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// ParseAPIURL validates the control plane's base URL: absolute http or
// https, with a host, without credentials, query or fragment. The result
// has no trailing slash.
func ParseAPIURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("URL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("URL %q must start with http:// or https://", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("URL %q has no host", raw)
	}
	if u.User != nil {
		return "", fmt.Errorf("URL %q must not contain credentials", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("URL %q must not have a query or fragment", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
