package apps

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/capstan-dev/capstan/internal/fault"
)

// DefaultPublishBind is the address a published port listens on unless
// told: the server's loopback, reachable from the server only.
const DefaultPublishBind = "127.0.0.1"

// reservedPorts are ports the server's own programs take: the proxy's
// HTTP and HTTPS ports and Caddy's default TCP admin port (Capstan's
// proxy answers its admin API on a unix socket, but a server may run a
// Caddy of its own configured so).
var reservedPorts = map[int]string{80: "the proxy's HTTP port", 443: "the proxy's HTTPS port", 2019: "Caddy's admin port"}

// Publish is a port of the application's server on which the server's
// proxy serves the application over plain HTTP, whatever the Host:
// bind:host_port, proxied to the live release like its domains, switched
// with every release and rollback.
type Publish struct {
	HostPort int    `json:"host_port" doc:"The server's port, 1 to 65535, except 80, 443 (the proxy's) and 2019 (Caddy's admin port); one application per port on a server, whatever the bind"`
	Bind     string `json:"bind,omitempty" doc:"The IP address to listen on (an IP literal such as 127.0.0.1, 0.0.0.0, ::1 or ::); default 127.0.0.1, reachable from the server only"`
}

// Address is bind:host_port ([bind]:host_port for IPv6).
func (p Publish) Address() string {
	return net.JoinHostPort(p.Bind, strconv.Itoa(p.HostPort))
}

// normalizePublish fills the default bind and writes the address in its
// canonical form; p is returned as it is when its bind does not parse
// (PublishProblem says so).
func normalizePublish(p Publish) Publish {
	if p.Bind == "" {
		p.Bind = DefaultPublishBind
		return p
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(p.Bind, "["), "]")); err == nil && a.Zone() == "" {
		p.Bind = a.Unmap().String()
	}
	return p
}

// PublishProblems says what is wrong with a published port, by field
// ("host_port", "bind"); none when nothing is.
func PublishProblems(p Publish) map[string]string {
	out := map[string]string{}
	switch {
	case p.HostPort < 1 || p.HostPort > 65535:
		out["host_port"] = "must be between 1 and 65535"
	case reservedPorts[p.HostPort] != "":
		out["host_port"] = fmt.Sprintf("%d is %s on every server", p.HostPort, reservedPorts[p.HostPort])
	}
	if p.Bind != "" {
		a, err := netip.ParseAddr(p.Bind)
		switch {
		case err != nil:
			out["bind"] = "must be an IP address such as 127.0.0.1, 0.0.0.0 or ::1 (no host name, no port)"
		case a.Zone() != "":
			out["bind"] = "must not have a zone"
		}
	}
	return out
}

// Address kinds of an application.
const (
	AddressDomain = "domain"
	AddressPort   = "port"
)

// Address is where an application answers.
type Address struct {
	Kind    string `json:"kind" enum:"domain,port" doc:"domain: one of its domains, through the proxy's HTTP(S) servers; port: its published port"`
	Address string `json:"address" doc:"The hostname, or bind:port"`
	URL     string `json:"url" doc:"A URL to reach it: https:// for a domain with TLS, http:// otherwise (for a port bound to 0.0.0.0 or ::, the server's loopback)"`
}

// portURL is a URL of a published port: a wildcard bind is reached on
// the server's loopback.
func portURL(p Publish) string {
	host := p.Bind
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		host = "127.0.0.1"
		if a.Is6() {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(p.HostPort)) + "/"
}

// addPublishProblems adds p's problems under publish.<field>.
func addPublishProblems(p Publish, errs *fault.Fields) {
	for _, f := range []string{"host_port", "bind"} {
		if pr, ok := PublishProblems(p)[f]; ok {
			errs.Add("publish."+f, "%s", pr)
		}
	}
}

func samePublish(a, b *Publish) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
