// Package caddyadmin reaches Caddy's admin API at the address the agent
// is configured with: a unix socket as Caddy's admin.listen names one
// ("unix//run/capstan-proxy/admin.sock|0660", the installer's), or
// http://host:port for an admin endpoint on TCP.
//
// A unix socket is what servers use: only the accounts that may open the
// socket file reach the API, whereas any process of the host (service
// applications included) can connect to a loopback port, and Caddy's
// admin API has no authentication of its own.
package caddyadmin

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Default is the admin endpoint the installer gives Caddy: a socket in
// a directory of Caddy's that the agent's account may enter, which only
// Caddy's account and group may open.
const Default = "unix//run/capstan-proxy/admin.sock|0660"

// unixPrefix starts Caddy's network address of a unix socket.
const unixPrefix = "unix/"

// SocketHost is the Host of requests on a unix socket. Caddy 2.7 and
// later check no Host there; an older one accepts it when admin.origins
// lists it.
const SocketHost = "caddy"

// Endpoint is a parsed admin address.
type Endpoint struct {
	// Address is the address as configured.
	Address string
	// Listen is Caddy's admin.listen for it: the unix address with its
	// file mode, or host:port.
	Listen string
	// Socket is the socket's path; empty for TCP.
	Socket string
	// BaseURL prefixes the API's paths ("http://host:port", or
	// "http://caddy" on a socket).
	BaseURL string
}

// Parse reads an admin address: "unix//ABSOLUTE/PATH" with an optional
// "|MODE" (octal; the owner must be able to write), or "http://host:port".
func Parse(addr string) (Endpoint, error) {
	if rest, ok := strings.CutPrefix(addr, unixPrefix); ok {
		path, mode, hasMode := strings.Cut(rest, "|")
		if !filepath.IsAbs(path) || filepath.Clean(path) != path ||
			strings.IndexFunc(path, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '{' || r == '}' }) >= 0 {
			return Endpoint{}, fmt.Errorf("caddy admin address %q: want unix//absolute/path[|mode] or http://host:port", addr)
		}
		if hasMode {
			m, err := strconv.ParseUint(mode, 8, 32)
			if err != nil || m > 0o777 || fs.FileMode(m)&0o200 == 0 {
				return Endpoint{}, fmt.Errorf("caddy admin address %q: the socket's mode must be octal, at most 0777, and writable by its owner", addr)
			}
		}
		return Endpoint{Address: addr, Listen: addr, Socket: path, BaseURL: "http://" + SocketHost}, nil
	}
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.User != nil {
		return Endpoint{}, fmt.Errorf("caddy admin address %q: want unix//absolute/path[|mode] or http://host:port", addr)
	}
	return Endpoint{Address: addr, Listen: u.Host, BaseURL: "http://" + u.Host}, nil
}

// dialTimeout bounds connecting to the API.
const dialTimeout = 5 * time.Second

// Client returns an HTTP client of the endpoint, with one connection per
// request when keepAlive is false (a load that changes Caddy's admin
// settings restarts its admin server, which resets kept-alive
// connections), and the given overall timeout (0: none).
func (e Endpoint) Client(keepAlive bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: dialTimeout}
	dial := d.DialContext
	if e.Socket != "" {
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", e.Socket)
		}
	}
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: !keepAlive, DialContext: dial},
		Timeout:   timeout,
	}
}
