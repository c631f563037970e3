package proxy_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// startDNS runs a DNS server on 127.0.0.1 (UDP) that answers A queries
// for the names of records, NOERROR with no answer for their other types,
// and NXDOMAIN for every other name. It returns its ip:port.
func startDNS(t *testing.T, records map[string]netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], records); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	})
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	return pc.LocalAddr().String()
}

// dnsAnswer answers one query (RFC 1035 §4.1), or returns nil to drop it.
func dnsAnswer(q []byte, records map[string]netip.Addr) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	i := 12
	var labels []string
	for {
		if i >= len(q) {
			return nil
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l&0xC0 != 0 || i+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i : i+2])
	question := q[12 : i+4]
	addr, known := records[strings.ToLower(strings.Join(labels, "."))]

	resp := make([]byte, 12, 64)
	copy(resp, q[:2])                        // id
	resp[2] = 0x84 | q[2]&0x01               // QR, AA, RD as asked
	resp[3] = 0x80                           // RA
	binary.BigEndian.PutUint16(resp[4:6], 1) // one question
	if !known {
		resp[3] |= 3 // NXDOMAIN
	}
	resp = append(resp, question...)
	if known && qtype == 1 && addr.Is4() {
		binary.BigEndian.PutUint16(resp[6:8], 1) // one answer
		a := addr.As4()
		resp = append(resp, 0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
		resp = append(resp, a[:]...)
	}
	return resp
}

type sink struct {
	mu     sync.Mutex
	events []string
}

func (s *sink) Emit(level, message string, _ any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, level+": "+message)
}

func TestDomainCheck(t *testing.T) {
	c := testlab.StartCaddy(t)
	dns := startDNS(t, map[string]netip.Addr{
		"app.test":   netip.MustParseAddr("127.0.0.1"),
		"plain.test": netip.MustParseAddr("127.0.0.1"),
	})
	p := newProxy(c, dns)
	ctx := context.Background()
	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "app.test", AppID: "app_1", TLSMode: agentproto.TLSInternal},
		{Hostname: "plain.test", AppID: "app_2", TLSMode: agentproto.TLSOff},
	}}
	if err := p.Apply(ctx, cfg, map[string]string{"app_1": upstream(t, "one"), "app_2": upstream(t, "two")}); err != nil {
		t.Fatal(err)
	}

	check := executor(p, agentproto.JobDomainCheck)
	run := func(host, mode string) agentproto.DomainCheckResult {
		t.Helper()
		payload, _ := json.Marshal(agentproto.DomainCheckPayload{Hostname: host, TLSMode: mode})
		data, _, err := check.Run(ctx, agentproto.Job{ID: "job_1", Type: agentproto.JobDomainCheck, Payload: payload}, nil, &sink{})
		if err != nil {
			t.Fatalf("domain.check %s failed: %v", host, err)
		}
		return data.(agentproto.DomainCheckResult)
	}

	var res agentproto.DomainCheckResult
	// The certificate is issued in the background after the load.
	testlab.Eventually(t, time.Minute, "a certificate for app.test", func() bool {
		res = run("app.test", agentproto.TLSInternal)
		return res.CertIssuer != ""
	})
	if !slices.Equal(res.Addresses, []string{"127.0.0.1"}) || res.DNSError != "" {
		t.Errorf("addresses %v, dns error %q; want [127.0.0.1]", res.Addresses, res.DNSError)
	}
	if !strings.Contains(res.CertIssuer, "Caddy Local Authority") {
		t.Errorf("issuer %q, want Caddy's local authority", res.CertIssuer)
	}
	if !res.CertNotAfter.After(time.Now()) {
		t.Errorf("not after %s is not in the future", res.CertNotAfter)
	}
	// Caddy's local CA issues certificates of 12 hours.
	if life := res.CertNotAfter.Sub(res.CertNotBefore); res.CertNotBefore.After(time.Now()) || life < 11*time.Hour || life > 13*time.Hour {
		t.Errorf("not before %s, not after %s: want a 12-hour certificate valid now", res.CertNotBefore, res.CertNotAfter)
	}
	if !slices.Contains(res.CertDNSNames, "app.test") || res.CertError != "" {
		t.Errorf("names %v, cert error %q", res.CertDNSNames, res.CertError)
	}
	if res.CheckedAt.IsZero() {
		t.Error("no checked_at")
	}
	t.Logf("app.test: %+v", res)

	// tls off: DNS only.
	res = run("plain.test", agentproto.TLSOff)
	if !slices.Equal(res.Addresses, []string{"127.0.0.1"}) || res.CertIssuer != "" || res.CertError != "" {
		t.Errorf("plain.test: %+v", res)
	}

	// Unknown name: the job succeeds, the result says what is wrong.
	res = run("missing.test", agentproto.TLSInternal)
	if res.DNSError == "" || len(res.Addresses) != 0 {
		t.Errorf("missing.test: dns error %q, addresses %v", res.DNSError, res.Addresses)
	}
	if res.CertError == "" || res.CertIssuer != "" {
		t.Errorf("missing.test: cert error %q, issuer %q (no certificate is served for it)", res.CertError, res.CertIssuer)
	}

	// An invalid payload fails the job.
	payload, _ := json.Marshal(agentproto.DomainCheckPayload{Hostname: "{env.HOME}", TLSMode: agentproto.TLSOff})
	if _, _, err := check.Run(ctx, agentproto.Job{Type: agentproto.JobDomainCheck, Payload: payload}, nil, &sink{}); err == nil {
		t.Error("invalid hostname accepted")
	}
}

func TestApplyExecutor(t *testing.T) {
	c := testlab.StartCaddy(t)
	// No Docker: sites of apps without an upstream answer 503.
	p := newProxy(c, "")
	payload, _ := json.Marshal(agentproto.ProxyApplyPayload{Proxy: agentproto.ProxyConfig{Sites: []agentproto.ProxySite{
		{Hostname: "a.test", AppID: "app_1", TLSMode: agentproto.TLSOff},
		{Hostname: "b.test", AppID: "app_1", TLSMode: agentproto.TLSInternal},
	}}})
	ev := &sink{}
	data, _, err := executor(p, agentproto.JobProxyApply).Run(context.Background(), agentproto.Job{Type: agentproto.JobProxyApply, Payload: payload}, nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(data)
	if string(b) != `{"sites":2,"upstreams":{},"no_upstream":["app_1"]}` {
		t.Errorf("data %s", b)
	}
	hc := c.Client(nil)
	waitFor(t, hc, c.URL("http", "a.test", "/"), 503, "This application has no running container")
	if len(ev.events) != 2 || !strings.HasPrefix(ev.events[0], "warn: no running container for app_1") {
		t.Errorf("events %q", ev.events)
	}
}
