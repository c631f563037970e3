package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Guard refuses outbound deliveries to addresses inside the operator's
// network: loopback, private, link-local (cloud metadata services live
// there), carrier-grade NAT, unspecified and multicast addresses. It checks
// the address actually dialled, after DNS resolution, on every connection
// (so every redirect too). Allowed prefixes are let through.
type Guard struct {
	Allowed []netip.Prefix
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// ErrRefusedAddress is returned (wrapped) for a destination the guard
// refuses.
var ErrRefusedAddress = errors.New("refused destination address")

// Check reports whether ip may be dialled.
func (g Guard) Check(ip netip.Addr) error {
	ip = ip.Unmap()
	for _, p := range g.Allowed {
		if p.Contains(ip) {
			return nil
		}
	}
	var what string
	switch {
	case ip.IsLoopback():
		what = "loopback"
	case ip.IsPrivate(), cgnat.Contains(ip):
		what = "private"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		what = "link-local (metadata)"
	case ip.IsUnspecified(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		what = "unroutable"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s is a %s address (an operator may allow it with --notify-allow-destinations)", ErrRefusedAddress, ip, what)
}

// Client returns an HTTP client whose every connection the guard checks.
// It uses no proxy from the environment (a proxy would dial for it).
func (g Guard) Client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, Control: func(network, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("%w: %q is not an address", ErrRefusedAddress, host)
		}
		return g.Check(ip)
	}}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, ForceAttemptHTTP2: true, MaxIdleConns: 20,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: timeout},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 3 {
				return errors.New("more than 3 redirects")
			}
			return nil
		},
	}
}

// cleanError describes a failed request without its URL, which may hold
// a secret (a chat webhook's path, a bot token).
func cleanError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}
