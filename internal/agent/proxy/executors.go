package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Register adds proxy.apply and domain.check to r.
func (p *Proxy) Register(r agent.Registry) {
	agent.Handle(r, agentproto.ProxyApply, p.runApply)
	agent.Handle(r, agentproto.DomainCheck, p.runCheck)
}

// runApply runs proxy.apply: it applies the payload's
// configuration with every upstream found from the live containers. A
// payload older than a revision applied already is skipped, and the job
// succeeds: the proxy serves a newer state of the server.
func (p *Proxy) runApply(ctx context.Context, c agent.Call[agentproto.ProxyApplyPayload]) (agentproto.ProxyApplyResult, error) {
	pl, events := c.Payload, c.Events
	ups, err := p.apply(ctx, pl.Proxy, nil)
	var stale *StaleError
	if errors.As(err, &stale) {
		res := agentproto.ProxyApplyResult{Sites: len(pl.Proxy.Sites), Upstreams: map[string]string{}, Revision: stale.Revision,
			Skipped: true, AppliedRevision: stale.Applied}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("not applied: %v", err), res)
		return res, nil
	}
	if err != nil {
		return agentproto.ProxyApplyResult{}, err
	}
	res := agentproto.ProxyApplyResult{Sites: len(pl.Proxy.Sites), Upstreams: ups, Revision: pl.Proxy.Revision}
	for _, s := range pl.Proxy.Sites {
		if ups[s.AppID] == "" && !slices.Contains(res.NoUpstream, s.AppID) {
			res.NoUpstream = append(res.NoUpstream, s.AppID)
		}
	}
	slices.Sort(res.NoUpstream)
	if len(res.NoUpstream) > 0 {
		events.Emit(agentproto.LevelWarn, "no running container for "+strings.Join(res.NoUpstream, ", ")+"; their sites answer 503", nil)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("proxy configuration loaded: %d sites, %d upstreams (revision %d)", res.Sites, len(ups), res.Revision), res)
	return res, nil
}

// runCheck runs domain.check. Its result is the
// diagnosis: DNS and certificate problems are reported in it, and the job
// succeeds; only an invalid payload fails it.
func (p *Proxy) runCheck(ctx context.Context, c agent.Call[agentproto.DomainCheckPayload]) (agentproto.DomainCheckResult, error) {
	pl, events := c.Payload, c.Events
	host := strings.ToLower(pl.Hostname)
	if err := CheckHostname(host); err != nil {
		return agentproto.DomainCheckResult{}, fmt.Errorf("invalid domain.check payload: %w", err)
	}
	switch pl.TLSMode {
	case agentproto.TLSAuto, agentproto.TLSInternal, agentproto.TLSOff:
	default:
		return agentproto.DomainCheckResult{}, fmt.Errorf("invalid domain.check payload: tls_mode %q", pl.TLSMode)
	}
	res := p.CheckDomain(ctx, host, pl.TLSMode)
	level := agentproto.LevelInfo
	if res.DNSError != "" || res.CertError != "" {
		level = agentproto.LevelWarn
	}
	events.Emit(level, fmt.Sprintf("%s resolves to %v", host, res.Addresses), res)
	return res, nil
}
