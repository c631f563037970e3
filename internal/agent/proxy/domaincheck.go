package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Time limits of a domain check's two parts.
const (
	dnsTimeout = 10 * time.Second
	tlsTimeout = 10 * time.Second
)

func netAddrPort(s string) (netip.AddrPort, error) { return netip.ParseAddrPort(s) }

// resolver is the host's resolver, or one that asks only the configured
// DNS server (over UDP, TCP for truncated answers).
func (p *Proxy) resolver() *net.Resolver {
	if p.settings.DNSServer == "" {
		return net.DefaultResolver
	}
	server := p.settings.DNSServer
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		},
	}
}

// CheckDomain diagnoses hostname: what the resolver answers for it and,
// unless tlsMode is off, the certificate the local proxy serves for it
// (the leaf is read, not verified). Failures are reported in the result.
func (p *Proxy) CheckDomain(ctx context.Context, hostname, tlsMode string) agentproto.DomainCheckResult {
	res := agentproto.DomainCheckResult{Addresses: []string{}}
	dctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	addrs, err := p.resolver().LookupIPAddr(dctx, hostname)
	cancel()
	if err != nil {
		res.DNSError = err.Error()
	}
	for _, a := range addrs {
		s := a.IP.String()
		if !slices.Contains(res.Addresses, s) {
			res.Addresses = append(res.Addresses, s)
		}
	}
	slices.Sort(res.Addresses)

	if tlsMode != agentproto.TLSOff {
		p.checkCert(ctx, hostname, &res)
	}
	res.CheckedAt = time.Now().UTC()
	return res
}

// checkCert reads the leaf certificate the proxy's HTTPS port serves for
// hostname (SNI).
func (p *Proxy) checkCert(ctx context.Context, hostname string, res *agentproto.DomainCheckResult) {
	host := p.settings.ListenHost
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(p.settings.HTTPSPort))
	ctx, cancel := context.WithTimeout(ctx, tlsTimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{
		ServerName: hostname,
		// Only the leaf's fields are read; trust is not the question.
		InsecureSkipVerify: true,
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		res.CertError = fmt.Sprintf("TLS handshake with the proxy at %s: %v", addr, err)
		return
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		res.CertError = "the proxy sent no certificate"
		return
	}
	leaf := certs[0]
	res.CertIssuer = leaf.Issuer.String()
	res.CertNotAfter = leaf.NotAfter.UTC()
	res.CertNotBefore = leaf.NotBefore.UTC()
	res.CertDNSNames = slices.Clone(leaf.DNSNames)
	var problems []string
	if err := leaf.VerifyHostname(hostname); err != nil {
		problems = append(problems, err.Error())
	}
	if now := time.Now(); now.After(leaf.NotAfter) {
		problems = append(problems, "certificate expired at "+leaf.NotAfter.UTC().Format(time.RFC3339))
	} else if now.Before(leaf.NotBefore) {
		problems = append(problems, "certificate not valid before "+leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	res.CertError = strings.Join(problems, "; ")
}
