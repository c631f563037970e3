package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/caddyadmin"
)

// SiteSource tells which hosts are the proxy's configured sites. The
// requests to any other host are counted in the server's "other" bucket,
// without their names: a scanner's IP literal or a random name must not
// become a row of its own at the control plane.
type SiteSource interface {
	// SiteHosts returns the configured hostnames, lowercased.
	SiteHosts(ctx context.Context) ([]string, error)
}

// maxCaddyConfig bounds the configuration read from Caddy.
const maxCaddyConfig = 64 << 20

// CaddySites reads the configured sites from the configuration Caddy
// runs: the host matchers of its HTTP servers' routes. That is the
// proxy's desired state as last loaded (Caddy keeps it across its own
// restarts with --resume), whichever job loaded it.
type CaddySites struct {
	// AdminURL is Caddy's admin API, as caddyadmin.Parse reads it.
	AdminURL string
	admin    caddyadmin.Endpoint
	err      error // the address does not parse
	hc       *http.Client
}

// NewCaddySites returns a site source reading Caddy's admin API at
// adminURL (a unix socket, unix//path|mode, or http://host:port).
func NewCaddySites(adminURL string) *CaddySites {
	adminURL = strings.TrimSuffix(adminURL, "/")
	admin, err := caddyadmin.Parse(adminURL)
	return &CaddySites{AdminURL: adminURL, admin: admin, err: err, hc: admin.Client(true, 15*time.Second)}
}

// caddyRoute is what is read of a Caddy route: its host matchers and the
// routes of its subroute handlers.
type caddyRoute struct {
	Match []struct {
		Host []string `json:"host"`
	} `json:"match"`
	Handle []struct {
		Routes []caddyRoute `json:"routes"`
	} `json:"handle"`
}

// SiteHosts implements SiteSource.
func (c *CaddySites) SiteHosts(ctx context.Context) ([]string, error) {
	if c.err != nil {
		return nil, c.err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.admin.BaseURL+"/config/", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("caddy admin API at %s: %w", c.AdminURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCaddyConfig))
	if err != nil {
		return nil, fmt.Errorf("reading caddy's configuration: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("caddy admin API: GET /config/: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	// A Caddy without configuration answers null: no sites.
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []caddyRoute `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		return nil, fmt.Errorf("decoding caddy's configuration: %w", err)
	}
	hosts := []string{}
	var walk func([]caddyRoute)
	walk = func(routes []caddyRoute) {
		for _, r := range routes {
			for _, m := range r.Match {
				for _, h := range m.Host {
					hosts = append(hosts, strings.ToLower(h))
				}
			}
			for _, h := range r.Handle {
				walk(h.Routes)
			}
		}
	}
	for _, s := range cfg.Apps.HTTP.Servers {
		walk(s.Routes)
	}
	return hosts, nil
}
